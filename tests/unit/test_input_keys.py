"""Input keys: what makes an example "changed" for an incremental run, and what does not."""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import numpy as np
import pytest

from recordbeam.records import ImageRecord
from recordbeam.sources.coco.encoder import CocoEncoder
from recordbeam.sources.coco.records import ObjectLabel, pack_annotations
from recordbeam.write.image_encoder import ImageExampleEncoder
from recordbeam.write.input_keys import (
    CONTENT,
    STAT,
    canonical_bytes,
    element_input_key,
    example_settings,
    settings_change,
    settings_key,
)


class _Box(NamedTuple):
    x: float
    label: int


@dataclasses.dataclass(frozen=True)
class _Note:
    text: str


def test_canonical_bytes_depend_on_content_not_on_order_or_identity():
    a = {"objects": ((1.0, 2), (3.5, 4)), "name": "x", "tags": {"b", "a"}}
    b = {"tags": {"a", "b"}, "name": "x", "objects": [[1.0, 2], [3.5, 4]]}
    assert canonical_bytes(a) == canonical_bytes(b)  # lists and tuples alike, sets sorted
    assert canonical_bytes(_Box(1.0, 2)) == canonical_bytes((1.0, 2))
    assert canonical_bytes(np.float32(1.5)) == canonical_bytes(1.5)
    assert canonical_bytes(np.arange(3)) != canonical_bytes(np.arange(3, dtype=np.int32))
    assert canonical_bytes(float("nan")) == canonical_bytes(float("nan"))
    assert canonical_bytes(_Note("a")) != canonical_bytes(_Note("b"))


def test_subclasses_of_plain_types_give_the_plain_values_bytes():
    import collections
    import enum

    class _Level(enum.IntEnum):
        HIGH = 3

    class _Name(str):
        pass

    pairs = [(np.float64(2.5), 2.5), (np.int64(7), 7), (np.bool_(True), True),
             (_Level.HIGH, 3), (_Name("car"), "car"), (bytearray(b"ab"), b"ab"),
             (collections.OrderedDict(b=1, a=2), {"a": 2, "b": 1})]
    for subclassed, plain in pairs:
        assert canonical_bytes(subclassed) == canonical_bytes(plain), subclassed


@pytest.mark.parametrize(("one", "other"), [
    (1, 1.0), (1, True), (1, "1"), ("1", b"1"), (None, 0), (0.0, -0.0), ((), {}),
    ([1, 2], [2, 1]), ({"a": 1}, {"a": 2}), ("ab", ("a", "b")), ([[1], 2], [1, [2]]),
])
def test_values_that_differ_never_share_bytes(one, other):
    assert canonical_bytes(one) != canonical_bytes(other)


def test_an_object_without_a_value_of_its_own_is_refused():
    with pytest.raises(TypeError, match="cannot make an input key of a object value"):
        canonical_bytes({"a": object()})


def _record(**changes) -> ImageRecord:
    base = ImageRecord("img-1", "/data/a.jpg", 1000, "train",
                       {"objects": ((0.1, 0.2, 0.3, 0.4, 1, "cat"),), "width": 4},
                       (1_700_000_000.5,))
    return dataclasses.replace(base, **changes)


def test_the_key_changes_with_the_image_file_or_its_own_labels():
    encoder = ImageExampleEncoder()
    key = element_input_key(encoder, _record(), STAT)
    assert element_input_key(encoder, _record(), STAT) == key
    for changed in (
        _record(modified=(1_700_000_000.6,)),  # touched or replaced
        _record(size=1001),
        _record(path="/data/b.jpg"),
        _record(identity="img-2"),
        _record(split="val"),
        _record(labels={"objects": ((0.1, 0.2, 0.3, 0.5, 1, "cat"),), "width": 4}),
        _record(labels={"objects": (), "width": 4}),
    ):
        assert element_input_key(encoder, changed, STAT) != key, changed


def test_labels_in_another_order_are_the_same_labels():
    encoder = ImageExampleEncoder()
    labels = {"width": 4, "objects": ((0.1, 0.2, 0.3, 0.4, 1, "cat"),)}
    assert element_input_key(encoder, _record(labels=labels), STAT) == element_input_key(
        encoder, _record(), STAT)


def test_coco_objects_are_compared_by_what_they_hold_not_their_pickled_bytes():
    name = "person"
    shared = [ObjectLabel(1, 1, name, (0.0, 0.0, 2.0, 2.0), 4.0, 0),
              ObjectLabel(2, 1, name, (1.0, 1.0, 2.0, 2.0), 4.0, 0)]
    # Equal strings that are distinct objects pickle differently (pickle's memo).
    apart = [ObjectLabel(1, 1, "".join(["per", "son"]), (0.0, 0.0, 2.0, 2.0), 4.0, 0),
             ObjectLabel(2, 1, "".join(["pers", "on"]), (1.0, 1.0, 2.0, 2.0), 4.0, 0)]
    assert pack_annotations(shared) != pack_annotations(apart)
    encoder = CocoEncoder()
    first = _record(labels={"objects": pack_annotations(shared)})
    second = _record(labels={"objects": pack_annotations(apart)})
    assert element_input_key(encoder, first, STAT) == element_input_key(encoder, second, STAT)


def test_content_keys_read_the_bytes_and_ignore_the_modification_time(tmp_path):
    image = tmp_path / "a.jpg"
    image.write_bytes(b"\xff\xd8first")
    encoder = ImageExampleEncoder()
    record = _record(path=str(image), size=7)
    key = element_input_key(encoder, record, CONTENT)
    assert element_input_key(encoder, _record(path=str(image), size=7, modified=(5.0,)),
                             CONTENT) == key
    image.write_bytes(b"\xff\xd8other")  # same size, other bytes
    assert element_input_key(encoder, record, CONTENT) != key
    assert element_input_key(encoder, record, STAT) != key  # the kinds never meet


def test_a_record_without_listed_times_is_looked_up(tmp_path):
    image = tmp_path / "a.jpg"
    image.write_bytes(b"x")
    encoder = ImageExampleEncoder()
    bare = _record(path=str(image), modified=())
    listed = _record(path=str(image), modified=(image.stat().st_mtime,))
    assert element_input_key(encoder, bare, STAT) == element_input_key(encoder, listed, STAT)


def _settings(**shards):
    return {"command": "convert coco", "recordbeam_version": "1.0",
            "coco": {"contiguous_labels": False},
            "shards": {"num_shards": None, "shard_size": 1 << 27, "compression": "none",
                       "index": False, "max_reject_fraction": 0.01,
                       "incremental": {"input_key": "stat", "compact_below": 0.0}, **shards}}


def test_shard_sizes_reject_limits_and_compaction_never_rebuild():
    base = _settings()
    for same in (_settings(shard_size=1 << 20), _settings(max_reject_fraction=0.5),
                 _settings(incremental={"input_key": "stat", "compact_below": 0.5})):
        assert settings_key(same) == settings_key(base)
        assert settings_change(base, same) is None
    assert "shards" in example_settings(base) and "shard_size" not in example_settings(base)["shards"]


def test_other_options_or_another_version_rebuild_and_say_why():
    base = _settings()
    compressed = _settings(compression="gzip")
    assert settings_key(compressed) != settings_key(base)
    assert settings_change(base, compressed) == "the options changed (shards.compression)"
    newer = {**base, "recordbeam_version": "1.1"}
    assert settings_change(base, newer) == "the recordbeam version changed (1.0 to 1.1)"
    labels = {**base, "coco": {"contiguous_labels": True}}
    assert settings_change(base, labels) == "the options changed (coco.contiguous_labels)"
