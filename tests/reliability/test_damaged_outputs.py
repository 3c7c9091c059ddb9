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
import shutil

import pytest
from lanes import one_in_make_test
from reliability_data import IN_MEMORY, snapshot

import recordbeam
from recordbeam.cli import main as cli
from recordbeam.dataset.wholeness import ShardChanged
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


@pytest.mark.parametrize("inputs", one_in_make_test([_coco, _imagefolder, _table]), ids=["coco", "imagefolder",
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


# --- reading a damaged folder ------------------------------------------------------------


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A finished folder with index files, two shards."""
    root = tmp_path_factory.mktemp("finished")
    out = root / "out"
    argv = [*_coco(root / "in", out), "--shards", "2", "--index", "--quiet", *IN_MEMORY]
    assert cli.main(argv) == 0
    return out


def _damaged(finished, tmp_path, damage: str):
    out = tmp_path / "out"
    shutil.copytree(finished, out)
    shard = out / _first_shard(out)
    data = shard.read_bytes()
    if damage == "cut at a record boundary":
        last = (out / (shard.name + ".idx")).read_text().splitlines()[-1]
        data = data[: int(last.split()[0])]
    elif damage == "emptied":
        data = b""
    else:  # records doubled
        data = data + data
    shard.write_bytes(data)
    return out, shard


def _read_all(out) -> int:
    return sum(1 for _ in recordbeam.read(str(out)))


def _torch_all(out) -> int:
    torch_dataset = pytest.importorskip("recordbeam.dataset.torch_dataset")
    return sum(1 for _ in torch_dataset.RecordIterableDataset(str(out)))


@pytest.mark.parametrize("damage", [
    pytest.param("cut at a record boundary", marks=CASE(
        "A shard cut at a record boundary after its commit; `inspect`, `verify`, `index`, "
        "`report`, `reshard`, `recordbeam.read` and the PyTorch dataset over the folder",
        "each fails (exit 1, or ShardChanged from Python) naming the shard and the size the "
        "manifest lists; `reshard` writes nothing")),
    pytest.param("emptied", marks=CASE(
        "A shard emptied after its commit; the same commands and readers",
        "each fails (exit 1, or ShardChanged) naming the shard; nothing is written from it")),
    pytest.param("records doubled", marks=CASE(
        "A shard whose records were doubled after its commit; the same commands and readers",
        "each fails (exit 1, or ShardChanged) naming the shard; `reshard` never writes more "
        "examples than the manifest lists")),
])
def test_every_reader_compares_a_shard_with_the_manifest(finished, tmp_path, capsys, damage):
    out, shard = _damaged(finished, tmp_path, damage)
    for argv in (["inspect", str(out)], ["verify", str(out)], ["index", str(out)],
                 ["report", str(out), "--html", str(tmp_path / "report.html")],
                 ["reshard", str(out), str(tmp_path / "resharded"), "--quiet", *IN_MEMORY]):
        assert cli.main(argv) == 1, argv
        err = capsys.readouterr()
        said = err.err + err.out
        assert str(shard) in said and "manifest.json lists" in said, (argv, said)
    assert not (tmp_path / "report.html").exists()
    assert not (tmp_path / "resharded" / "manifest.json").exists()
    for reading in (_read_all, _torch_all):
        with pytest.raises(ShardChanged, match="manifest.json lists"):
            reading(out)


@CASE(
    "An `.idx` whose lines were swapped",
    "random access (`recordbeam.read(OUT)[i]`) fails naming the index: it does not match "
    "its shard; never a silently reordered read",
)
def test_an_index_with_swapped_lines_is_refused(finished, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(finished, out)
    index = out / (_first_shard(out) + ".idx")
    lines = index.read_text().splitlines()
    lines[0], lines[1] = lines[1], lines[0]
    index.write_text("\n".join(lines) + "\n")
    with pytest.raises(ShardChanged, match="does not match the shard"):
        recordbeam.read(str(out))[0]


@pytest.mark.parametrize("splits", [[], {}, {"train": {"shards": []}}])
@CASE(
    "A manifest listing no splits (`\"splits\": []`) or a split without shards",
    "`verify`, `inspect`, `report` fail (exit 1) naming manifest.json as damaged; never "
    "'0 clean records' and exit 0",
)
def test_a_manifest_without_shards_is_damaged(finished, tmp_path, capsys, splits):
    out = tmp_path / "out"
    shutil.copytree(finished, out)
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["splits"] = splits
    (out / "manifest.json").write_text(json.dumps(manifest))
    for argv in (["verify", str(out)], ["inspect", str(out)],
                 ["report", str(out), "--html", str(tmp_path / "r.html")]):
        assert cli.main(argv) == 1, argv
        assert "manifest.json" in capsys.readouterr().err
