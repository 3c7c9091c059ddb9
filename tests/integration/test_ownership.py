"""Which files a run may replace, and what survives a commit that was cut short."""

from __future__ import annotations

import hashlib
import json
import logging
import os

import apache_beam as beam
import pytest
from apache_beam.runners.portability.fn_api_runner import FnApiRunner

from recordbeam import pipeline
from recordbeam.cli import main as cli
from recordbeam.sources.coco.reader import CocoOptions
from recordbeam.sources.coco.reader import to_tfrecord as coco_to_tfrecord
from recordbeam.tfrecord.example import encode_example
from recordbeam.write import commit
from recordbeam.write.image_encoder import ImageChecks
from recordbeam.write.sink import ExampleEncoder, ShardOptions, WriteShards

IN_MEMORY = ["--direct_running_mode=in_memory", "--direct_num_workers=1"]
LENIENT = ShardOptions(max_reject_fraction=0.5)


def _convert(sample, out, split):
    coco = CocoOptions(sample.images_dir, sample.annotations, split)
    return pipeline.run(
        lambda p: coco_to_tfrecord(p, str(out), coco, LENIENT, ImageChecks()),
        str(out), beam_args=IN_MEMORY, show_progress=False,
    ).manifest


def test_shards_written_by_another_tool_are_never_deleted(coco_sample, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    for i in range(3):  # what Beam's WriteToTFRecord(out + "/train", ".tfrecord") writes
        (out / f"train-{i:05d}-of-00003.tfrecord").write_bytes(b"precious")
    argv = ["convert", "coco", "--images", coco_sample.images_dir, "--annotations",
            coco_sample.annotations, "--output", str(out), "--quiet",
            "--max-reject-fraction", "0.5", *IN_MEMORY]
    assert cli.main(argv) == 2
    assert cli.main([*argv, "--overwrite"]) == 0
    for i in range(3):
        assert (out / f"train-{i:05d}-of-00003.tfrecord").read_bytes() == b"precious"
    assert (out / "train-00000-of-00001.tfrecord").exists()


def test_a_commit_cut_short_keeps_the_other_splits_listed(coco_sample, tmp_path, monkeypatch):
    out = tmp_path / "out"
    _convert(coco_sample, out, "train")
    _convert(coco_sample, out, "val")
    real_rename = commit.filesystems.rename

    def broken_rename(sources, targets):
        raise OSError("the object store went away mid-commit")

    monkeypatch.setattr(commit.filesystems, "rename", broken_rename)
    with pytest.raises(Exception, match="went away"):
        _convert(coco_sample, out, "val")
    assert not (out / "manifest.json").exists()  # nothing looks finished
    monkeypatch.setattr(commit.filesystems, "rename", real_rename)
    manifest = _convert(coco_sample, out, "val")
    assert sorted(manifest["splits"]) == ["train", "val"]
    assert (out / "train-00000-of-00001.tfrecord").exists()
    assert not [p for p in os.listdir(out) if p.startswith(".recordbeam-tmp-")]


class _SameIdentity(ExampleEncoder):
    def identity(self, element):
        return "one identity for all"


def _shard_digest(elements, out):
    with beam.Pipeline(runner=FnApiRunner()) as p:  # Beam 2.60 knows it by class only
        _ = (p | beam.Create(elements)
             | WriteShards(str(out), _SameIdentity(), options=ShardOptions(num_shards=1)))
    return hashlib.sha256((out / "train-00000-of-00001.tfrecord").read_bytes()).hexdigest()


def test_elements_sharing_an_identity_are_written_in_content_order(tmp_path):
    a, b = encode_example({"x": [1]}), encode_example({"x": [2]})
    assert _shard_digest([a, b], tmp_path / "ab") == _shard_digest([b, a], tmp_path / "ba")


def test_a_category_id_that_is_not_an_id_is_a_reject_not_a_crash(coco_sample, tmp_path):
    data = json.loads(open(coco_sample.annotations, encoding="utf-8").read())
    bad_id = data["annotations"][0]["id"]
    data["annotations"][0]["category_id"] = {"a": 1}
    path = tmp_path / "instances.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    code = cli.main(["convert", "coco", "--images", coco_sample.images_dir, "--annotations",
                     str(path), "--output", str(tmp_path / "out"), "--quiet",
                     "--max-reject-fraction", "0.5", *IN_MEMORY])
    assert code == 0
    rejects = [json.loads(line) for line in
               (tmp_path / "out" / "rejects.jsonl").read_text().splitlines()]
    found = [r for r in rejects if r["reason"] == "missing_field" and "annotations[0]" in r["source"]]
    assert found and "category_id" in found[0]["detail"], bad_id


def test_a_commit_cut_short_before_the_manifest_leaves_nothing_foreign(
        coco_sample, tmp_path, monkeypatch):
    out = tmp_path / "out"
    real_rename = commit.filesystems.rename

    def fail_on_manifest(sources, targets):
        if any(t.endswith("/manifest.json") for t in targets):
            raise OSError("killed just before the manifest")
        return real_rename(sources, targets)

    monkeypatch.setattr(commit.filesystems, "rename", fail_on_manifest)
    with pytest.raises(Exception, match="killed just before"):
        _convert(coco_sample, out, "train")
    assert (out / "dataset_info.json").exists() and not (out / "manifest.json").exists()
    monkeypatch.setattr(commit.filesystems, "rename", real_rename)
    argv = ["convert", "coco", "--images", coco_sample.images_dir, "--annotations",
            coco_sample.annotations, "--output", str(out), "--quiet",
            "--max-reject-fraction", "0.5", *IN_MEMORY]
    assert cli.main(argv) == 0  # every file the cut-short commit placed is ours


def _write_numbers(out, num_shards: int) -> None:
    with beam.Pipeline(runner=FnApiRunner()) as p:  # Beam 2.60 knows it by class only
        _ = (p | beam.Create([encode_example({"x": [i]}) for i in range(4)])
             | WriteShards(str(out), options=ShardOptions(num_shards=num_shards)))


def test_the_commit_logs_what_it_deletes_and_renames(tmp_path, caplog):
    out = tmp_path / "out"
    _write_numbers(out, 3)
    with caplog.at_level(logging.INFO, logger="recordbeam.write.commit"):
        _write_numbers(out, 2)  # replaces the three shards of the first run
    said = [r.getMessage() for r in caplog.records if r.name == "recordbeam.write.commit"]
    stale = ", ".join(f"train-0000{i}-of-00003.tfrecord" for i in range(3))
    assert f"{out}: removing manifest.json until the commit is done" in said
    assert f"{out}: deleting 3 stale files of an earlier run: {stale}" in said
    # Two shards; labels-free numbers: rejects.jsonl and TFDS's dataset_info.json and
    # features.json are the metadata files staged.
    assert f"{out}: renaming 5 new files (shards, indexes, metadata) into place" in said
    assert f"{out}: renaming manifest.json (last: the folder is finished) into place" in said
