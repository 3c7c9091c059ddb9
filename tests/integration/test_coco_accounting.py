"""Reject accounting pieces, called directly: which annotation ids repeat, what an image
lost while encoding takes with it, and the annotation reject fraction."""

from __future__ import annotations

import random
import tempfile

import pytest

from recordbeam.dataset import manifest
from recordbeam.records import ImageRecord, Reject
from recordbeam.sources.coco.encoder import CocoEncoder
from recordbeam.sources.coco.input_tasks import IdTally
from recordbeam.sources.coco.records import ObjectLabel, pack_annotations
from recordbeam.write.sink import _encode_guarded


def test_repeated_ids_are_equal_in_value_and_type():
    tally = IdTally()
    for value in (3, 1, 2**70, "a", 3, "1", 2**70, "a", 3, 5):
        tally.add(value)
    assert tally.repeated() == [3, 2**70, "a"]  # 1 and "1" differ; each repeat named once
    assert IdTally().repeated() == []


def test_ids_dealt_out_to_files_give_the_repeats_an_unspilled_tally_gives(tmp_path,
                                                                        monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    rng = random.Random(3)
    values = [rng.randrange(-2**63, 2**63) for _ in range(3000)] + list(range(-50, 2000))
    values += rng.sample(values, 1000) + [2**70, 2**70, "x", "x"]  # repeats in every file
    rng.shuffle(values)
    whole, spilled = IdTally(), IdTally(spill_ids=256)
    for i, value in enumerate(values):
        whole.add(value)
        spilled.add(value)
        if i % 100 == 0:
            spilled.spill_if_full()
            assert len(spilled._integers) < 256 + 100
    assert len(list(tmp_path.iterdir())) == 1  # the tally's folder, while it counts
    assert spilled.repeated() == whole.repeated()
    assert len(whole.repeated()) >= 900
    assert list(tmp_path.iterdir()) == []  # the folder is gone once the repeats are known


def test_tallies_of_parts_merged_by_bucket_give_the_repeats_of_one_tally():
    """How the ranged read finds repeated ids: each range's tally split into buckets by
    value, the parts of a bucket merged from every range, each bucket checked alone."""
    rng = random.Random(5)
    values = [rng.randrange(-2**63, 2**63) for _ in range(2000)] + list(range(500))
    values += rng.sample(values, 300) + [2**70, 2**70, "x", "x", "y"]
    rng.shuffle(values)
    whole, ranges = IdTally(), [IdTally() for _ in range(4)]
    for i, value in enumerate(values):
        whole.add(value)
        ranges[i % 4].add(value)
    buckets: dict[int, list] = {}
    for tally in ranges:
        for bucket, part in tally.parts(3):
            buckets.setdefault(bucket, []).append(part)
    found = [v for parts in buckets.values() for v in IdTally.merged(parts).repeated()]
    assert sorted(found, key=repr) == sorted(whole.repeated(), key=repr)
    assert len(found) >= 290


def test_a_tally_that_spilled_has_no_parts(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    tally = IdTally(spill_ids=2)
    for value in range(5):
        tally.add(value)
    tally.spill_if_full()
    with pytest.raises(RuntimeError, match="spilled"):
        list(tally.parts(2))
    tally.repeated()  # removes its folder


def _record(objects: list[tuple]) -> ImageRecord:
    packed = pack_annotations([ObjectLabel(*fields) for fields in objects])
    return ImageRecord(identity="7", path="/data/7.jpg", size=10,
                       labels={"source_id": "7", "filename": "7.jpg", "width": 4, "height": 3,
                               "objects": packed})


class _FailingEncoder(CocoEncoder):
    def label_features(self, record, info):
        raise RuntimeError("boom")

    def read_image(self, path, size, name):
        return {"encoded": b"", "format": "jpeg", "height": 3, "width": 4,
                "key/sha256": ""}, None, {}


def test_objects_of_an_image_that_fails_to_encode_are_listed():
    objects = [(11, 1, "a", (0, 0, 1, 1), 1.0, 0), (12, 1, "a", (0, 0, 2, 2), 4.0, 0)]
    encoded = _encode_guarded(_FailingEncoder(), _record(objects))
    kinds = [(r.kind, r.source, r.reason) for r in encoded.rejects]
    assert kinds == [("image", "/data/7.jpg", "encode_error"),
                     ("annotation", "annotation 11", "image_rejected"),
                     ("annotation", "annotation 12", "image_rejected")]
    assert "(encode_error;" in encoded.rejects[1].detail


def test_objects_of_a_missing_file_are_image_missing():
    rejects = CocoEncoder().encode(_record([(11, 1, "a", (0, 0, 1, 1), 1.0, 0)])).rejects
    assert [(r.kind, r.reason) for r in rejects] == [("image", "missing"),
                                                     ("annotation", "image_missing")]


def test_annotation_fraction_leaves_out_annotations_lost_with_their_image():
    rejects = [Reject("annotation", "annotation 1", "unknown_category", "x"),
               Reject("annotation", "annotation 2", "image_rejected", "x"),
               Reject("annotation", "annotation 3", "image_missing", "x"),
               Reject("image", "a.jpg", "truncated", "x"),
               Reject("warning", "b.jpg", "size_mismatch", "x")]
    summary = manifest.reject_summary(rejects, examples=3, objects_written=7)
    assert summary["annotations_dropped"] == 1
    assert summary["annotations_seen"] == 10  # 7 written + 3 rejected
    assert summary["annotation_fraction"] == 0.1
    assert summary["image_fraction"] == 0.25
    assert manifest.reject_summary([], 0)["annotation_fraction"] == 0.0
