"""An output folder placed inside an input folder is left out of every listing: a rerun
finds the same inputs (no ``out`` class, no unlisted shards) and ``--if-changed`` sees
the same fingerprint."""

from __future__ import annotations

import json
import os
import shutil

import pytest
from format_inputs import INPUTS
from lanes import exhaustive

from recordbeam.cli import main as cli
from recordbeam.testing.samples import make_image_folder_sample, make_manifest_sample

IN_MEMORY = ("--direct_running_mode=in_memory", "--direct_num_workers=1")
LENIENT = ("--max-reject-fraction", "0.5", "--quiet")


def _manifest(out) -> dict:
    return json.loads((out / "manifest.json").read_text())


def _run_twice_then_if_changed(argv: list[str], out, capsys) -> tuple[dict, dict]:
    """The manifests of a first and a second run, and checks that a third run with
    --if-changed finds nothing to do."""
    assert cli.main([*argv, *LENIENT, *IN_MEMORY]) == 0, capsys.readouterr().err
    first = _manifest(out)
    assert cli.main([*argv, *LENIENT, *IN_MEMORY]) == 0, capsys.readouterr().err
    second = _manifest(out)
    capsys.readouterr()
    assert cli.main([*argv, *LENIENT, "--if-changed", *IN_MEMORY]) == 0
    assert "is up to date" in capsys.readouterr().out
    return first, second


def _same_inputs(first: dict, second: dict) -> None:
    for name, entry in first["splits"].items():
        again = second["splits"][name]
        assert again["input_files"] == entry["input_files"]
        assert again["inputs_fingerprint"] == entry["inputs_fingerprint"]
        assert again["examples"] == entry["examples"]
        assert again["rejects"] == entry["rejects"]
        assert again["counts"] == entry["counts"]


@pytest.mark.case(
    'Output folder inside the class-folder root',
    'its shards are not listed as inputs (no `out` class); `--if-changed` sees the same inputs',
)
def test_imagefolder_output_inside_the_root(tmp_path, capsys):
    sample = make_image_folder_sample(tmp_path / "in", include_bad=False)
    out = tmp_path / "in" / "out"
    first, second = _run_twice_then_if_changed(
        ["convert", "imagefolder", "--root", sample.root, "--output", str(out)], out, capsys)
    _same_inputs(first, second)
    assert second["label_names"] == list(sample.classes)  # no "out" class
    assert second["splits"]["train"]["rejects"]["total"] == 0


@pytest.mark.case(
    'Output folder inside the COCO images folder',
    'its shards are neither inputs nor unlisted files; the fingerprint is unchanged',
)
def test_coco_output_inside_the_images_folder(coco_sample, tmp_path, capsys):
    images = tmp_path / "images"
    shutil.copytree(coco_sample.images_dir, images, symlinks=True)
    out = images / "tfrecords"
    # Spelled differently from --images (relative to the working directory): still inside.
    os.chdir(tmp_path)
    first, second = _run_twice_then_if_changed(
        ["convert", "coco", "--images", str(images), "--annotations", coco_sample.annotations,
         "--output", "images/tfrecords"], out, capsys)
    _same_inputs(first, second)
    files = len([n for _, _, names in os.walk(images) for n in names])
    shards = len(second["splits"]["train"]["shards"])
    assert second["splits"]["train"]["input_files"] < files - shards  # our files not counted


@pytest.mark.case(
    "Output folder inside a manifest's folder",
    'left out of the listing and fingerprint',
)
def test_manifest_output_inside_the_manifest_folder(tmp_path, capsys):
    sample = make_manifest_sample(tmp_path / "data", include_bad=False)
    out = tmp_path / "data" / "out"
    first, second = _run_twice_then_if_changed(
        ["convert", "manifest", "--manifest", sample.manifest, "--output", str(out)], out, capsys)
    _same_inputs(first, second)


@pytest.mark.case(
    "Output folder inside Label Studio's --images folder (the media folder)",
    "left out of the listing and fingerprint: its shards are no images of tasks",
)
@exhaustive  # the export formats' listing (sources.exports); class folders prove it in make test
def test_labelstudio_output_inside_the_images_folder(tmp_path, capsys):
    options = INPUTS["labelstudio"](tmp_path / "in")
    out = tmp_path / "in" / "media" / "tfrecords"
    first, second = _run_twice_then_if_changed(
        ["convert", "labelstudio", "--input", options["input"], "--images", options["images"],
         "--output", str(out)], out, capsys)
    _same_inputs(first, second)
    assert second["splits"]["train"]["examples"] == 2
    assert "labelstudio_non_image_files_skipped" not in second["splits"]["train"]["counts"]
