"""A CSV/JSONL manifest column named like a feature the image writes (``image/height``,
``image/encoded``): refused before the job, never written over the image's own feature."""

from __future__ import annotations

import json

import pytest
from reliability_data import IN_MEMORY, jpeg

from recordbeam.cli import main as cli

CASE = pytest.mark.case


def _manifest(tmp_path, rows: list[dict], suffix: str) -> str:
    (tmp_path / "img").mkdir()
    for name in ("a.jpg", "b.jpg"):
        (tmp_path / "img" / name).write_bytes(jpeg())
    path = tmp_path / f"rows{suffix}"
    if suffix == ".csv":
        columns = list(rows[0])
        lines = [",".join(columns)] + [",".join(str(r[c]) for c in columns) for r in rows]
        path.write_text("\n".join(lines) + "\n")
    else:
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


@CASE("CSV/JSONL manifest column named like a feature its image writes (`image/height`, "
      "`image/encoded`; `<column>/width` with several image columns)",
      "usage error (exit 2) naming the columns and the features they would replace; nothing "
      "written")
@pytest.mark.parametrize("suffix", [".csv", ".jsonl"])
@pytest.mark.parametrize("columns", [
    ("image", "image/height"),
    ("image", "image/encoded"),
    ("photo", "photo/width", "depth"),
])
def test_columns_named_like_image_features_are_refused(tmp_path, capsys, suffix, columns):
    image, clash, *others = columns
    rows = [{image: f"img/{n}", clash: 7, **{c: f"img/{n}" for c in others}}
            for n in ("a.jpg", "b.jpg")]
    out = tmp_path / "out"
    argv = ["convert", "manifest", "--manifest", _manifest(tmp_path, rows, suffix),
            "--output", str(out), "--quiet", *IN_MEMORY]
    if others:
        argv += ["--image-columns", ",".join((image, *others))]

    code = cli.main(argv)

    assert code == 2
    err = capsys.readouterr().err
    assert repr(clash) in err and "rename" in err
    assert not out.exists()
