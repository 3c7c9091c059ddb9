"""A finished output folder damaged after its commit: a shard deleted, cut short, emptied,
its records doubled, its index lines swapped. What skips work (``--if-changed``) and what
reads (``inspect``, ``report``, ``reshard``, ``read``, ``verify``, ``recordbeam.read``, the
PyTorch dataset) compare what they find with the manifest and say what is wrong.

The folder layout and manifest are the sink's, the same for every input format; the
``--if-changed`` cases run three formats whose inputs the test can generate (COCO, class
folders, a CSV manifest), every convert command sharing that check.
"""

from __future__ import annotations

import json

import pytest
from reliability_data import IN_MEMORY, snapshot

from recordbeam.cli import main as cli
from recordbeam.testing.samples import (
    make_coco_sample,
    make_image_folder_sample,
    make_manifest_sample,
)

CASE = pytest.mark.case


def _coco(root, out) -> list[str]:
    sample = make_coco_sample(root, num_images=12, include_bad=False)
    return ["convert", "coco", "--images", sample.images_dir, "--annotations",
            sample.annotations, "--output", str(out)]


def _imagefolder(root, out) -> list[str]:
    sample = make_image_folder_sample(root, include_bad=False)
    return ["convert", "imagefolder", "--root", sample.root, "--output", str(out)]


def _table(root, out) -> list[str]:
    sample = make_manifest_sample(root, include_bad=False)
    return ["convert", "manifest", "--manifest", sample.manifest, "--output", str(out)]


def _first_shard(out) -> str:
    manifest = json.loads((out / "manifest.json").read_text())
    entry = next(iter(manifest["splits"].values()))
    return entry["shards"][0]["file"]


@pytest.mark.parametrize("inputs", [_coco, _imagefolder, _table], ids=["coco", "imagefolder",
                                                                        "manifest"])
@pytest.mark.parametrize(
    "damage",
    [
        pytest.param("deleted", marks=CASE(
            "`--if-changed` over a folder whose shard was deleted (COCO, class folders, CSV "
            "manifest)",
            "not up to date: the conversion runs again and the folder is whole")),
        pytest.param("cut", marks=CASE(
            "`--if-changed` over a folder whose shard was cut in half (COCO, class folders, "
            "CSV manifest)",
            "not up to date (its size is not the one committed): converted again, whole")),
    ],
)
def test_if_changed_converts_a_damaged_folder_again(tmp_path, capsys, inputs, damage):
    out = tmp_path / "out"
    argv = [*inputs(tmp_path / "in", out), "--shards", "2", "--quiet", "--if-changed",
            "--max-reject-fraction", "1", *IN_MEMORY]
    assert cli.main(argv) == 0
    whole = snapshot(out)
    assert cli.main(argv) == 0
    assert "is up to date" in capsys.readouterr().out
    shard = out / _first_shard(out)
    if damage == "deleted":
        shard.unlink()
    else:
        data = shard.read_bytes()
        shard.write_bytes(data[: len(data) // 2])
    assert cli.main(argv) == 0
    assert "is up to date" not in capsys.readouterr().out
    assert snapshot(out) == whole
