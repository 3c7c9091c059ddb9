"""report: the HTML page of a pipeline's output, rendered by headless Chromium."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections import Counter

import numpy as np
import pytest
from PIL import Image

import recordbeam
from recordbeam.cli import main as cli
from recordbeam.dataset.report import collect_stats, write_report

CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def test_stats_count_what_the_records_hold(converted):
    reader = recordbeam.read(converted.output)
    stats = collect_stats(reader)
    examples = list(reader)
    want = Counter(int(v) for e in examples for v in e["image/object/class/label"])
    assert stats.classes == want
    assert sum(stats.boxes_per_image.values()) == len(examples)
    assert sum(k * n for k, n in stats.boxes_per_image.items()) == sum(want.values())
    assert sum(stats.formats.values()) == len(examples)
    assert len(stats.box_widths) == sum(want.values())


@pytest.mark.case(
    "`report --html` below a file, or naming a folder",
    "usage error (exit 2) naming --html and the path, before the folder is read",
)
@pytest.mark.parametrize("where", ["below a file", "a folder"])
def test_html_at_a_path_that_cannot_be_a_file_is_a_usage_error(where, converted, tmp_path, capsys):
    (tmp_path / "a-file").write_text("x")
    page = str(tmp_path / "a-file" / "r.html") if where == "below a file" else str(tmp_path)
    assert cli.main(["report", converted.output, "--html", page]) == cli.EXIT_USAGE
    err = capsys.readouterr().err
    assert err.startswith(f"recordbeam: --html {page}")
    if where == "a folder":
        assert f"is a folder; give a file path, e.g. --html {tmp_path}/report.html" in err
    else:
        assert f"{tmp_path / 'a-file'} is a file, not a folder" in err
    assert "Not a directory" not in err and "Is a directory" not in err


def test_html_in_a_missing_folder_creates_it_as_convert_creates_output(converted, tmp_path):
    page = tmp_path / "reports" / "today" / "r.html"
    assert cli.main(["report", converted.output, "--html", str(page)]) == cli.EXIT_OK
    assert "Examples per shard" in page.read_text()


def test_report_has_tables_and_charts(converted, tmp_path, capsys):
    page = tmp_path / "report.html"
    assert cli.main(["report", converted.output, "--html", str(page)]) == cli.EXIT_OK
    text = page.read_text()
    for heading in (
        "Examples per shard",
        "Rejects by reason",
        "Classes",
        "Boxes per image",
        "Box sizes",
        "Image sizes and formats",
    ):
        assert heading in text
    for reason in converted.manifest["splits"]["train"]["rejects"]["by_reason"]:
        assert reason in text
    for name in converted.manifest["label_names"]:
        assert name in text
    pytest.importorskip("matplotlib")
    assert text.count("<svg") >= 5


def test_report_without_matplotlib_still_has_tables(converted, tmp_path):
    page = tmp_path / "tables.html"
    _, charts = write_report(converted.output, str(page), charts=False)
    text = page.read_text()
    assert not charts and "<svg" not in text and "Boxes per image" in text


def test_report_renders_in_headless_chromium(converted, tmp_path):
    binary = chromium()
    if binary is None:
        pytest.skip("no chromium binary on PATH (CI installs Debian's chromium package)")
    page, png = tmp_path / "report.html", tmp_path / "shot.png"
    write_report(converted.output, str(page))
    subprocess.run(
        [
            binary,
            *CHROMIUM_FLAGS,
            f"--user-data-dir={tmp_path / 'profile'}",
            f"--screenshot={png}",
            "--window-size=1200,2000",
            page.as_uri(),
        ],
        check=True,
        capture_output=True,
        timeout=120,
    )
    assert png.exists()
    pixels = np.asarray(Image.open(png).convert("L"))
    assert pixels.shape == (2000, 1200)
    dark = (pixels < 128).mean()
    assert 0.005 < dark < 0.5, f"screenshot looks blank or broken ({dark:.1%} dark pixels)"
    assert len(np.unique(pixels)) > 20  # text and charts, not one flat colour
    keep = os.environ.get("RECORDBEAM_KEEP_SCREENSHOT")  # to look at it by eye
    if keep:
        shutil.copy(png, keep)


def test_overview_counts_have_the_right_number(tmp_path):
    from recordbeam.dataset.report import _count

    assert _count(1, "shard") == "1 shard"
    assert _count(12000, "example") == "12,000 examples"
