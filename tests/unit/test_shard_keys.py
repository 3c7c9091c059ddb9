"""The key file beside each shard incremental runs keep: what it holds survives a round
trip, and a file cut, changed or of another kind is refused naming it."""

from __future__ import annotations

import pytest

from recordbeam.dataset.manifest import split_of_shard_file
from recordbeam.dataset.names import (
    indexed_shard_name,
    indexed_shard_number,
    is_shard_file,
    keys_file_name,
)
from recordbeam.dataset.shard_keys import (
    INPUT_KEY_BYTES,
    MAGIC,
    DamagedKeys,
    KeyEntry,
    ShardKeys,
    decode_keys,
    encode_keys,
)
from recordbeam.records import Reject
from recordbeam.tfrecord.example import Example, encode_example
from recordbeam.tfrecord.feature_spec import FeatureSpec
from recordbeam.tfrecord.framing import Compression


def _spec() -> FeatureSpec:
    spec = FeatureSpec(lists=frozenset({"image/object/bbox/xmin"}))
    spec.observe(Example.FromString(encode_example({"a": [1, 2], "image/object/bbox/xmin": []},
                                                   {"image/object/bbox/xmin": "float"})))
    spec.observe(Example.FromString(encode_example({"a": [3], "b": b"x"})))
    return spec


def _keys() -> ShardKeys:
    reject = Reject("image", "/in/c.jpg", "truncated", "cut short", "train")
    warning = Reject("warning", "/in/a.jpg", "size_mismatch", "annotations say 2x2 — é", "train")
    entries = (
        KeyEntry(3, b"\x01" * INPUT_KEY_BYTES, True, {"boxes_written": 7, "images_written": 1},
                 (warning,)),
        KeyEntry(2**64 - 1, b"\x02" * INPUT_KEY_BYTES, False, {}, (reject,)),
        KeyEntry(2**64 - 1, b"\x03" * INPUT_KEY_BYTES, True, {"fix_odd": -2}),
    )
    return ShardKeys(entries, _spec(), None, False)


def test_a_key_file_holds_entries_counts_rejects_and_the_feature_spec():
    keys = _keys()
    back = decode_keys(encode_keys(keys), "train-00000.tfrecord.keys")
    assert back.entries == keys.entries
    assert back.written == 2
    assert back.spec.to_state() == keys.spec.to_state()
    assert back.spec.to_json() == keys.spec.to_json()
    assert back.list_spec is None and back.sequence is False


def test_a_saved_spec_merges_as_the_live_one_would():
    """A feature seen only as an empty list without a kind has no dtype yet: saved as the
    manifest shows it ("float32"), it would clash with an int64 elsewhere."""
    empty, typed = FeatureSpec(), FeatureSpec()
    empty.observe_lengths({"n": (None, 0)})
    typed.observe_lengths({"n": ("int64", 2)})
    saved = FeatureSpec.from_state(empty.to_state())
    assert saved.merge(typed).to_json() == empty.merge(typed).to_json()
    assert saved.merge(typed).to_json()["n"]["dtype"] == "int64"


def test_sequence_shards_keep_their_list_spec():
    lists = FeatureSpec()
    lists.observe_lengths({"frames": ("string", 1)})
    keys = ShardKeys((), FeatureSpec(), lists, True)
    back = decode_keys(encode_keys(keys), "k")
    assert back.sequence and back.list_spec.to_state() == lists.to_state()


@pytest.mark.parametrize("damage", ["cut", "flip", "magic", "grow", "empty"])
def test_a_damaged_key_file_is_refused_naming_it(damage):
    data = bytearray(encode_keys(_keys()))
    if damage == "cut":
        data = data[:-7]
    elif damage == "flip":
        data[len(data) // 2] ^= 0x40
    elif damage == "magic":
        data[:len(MAGIC)] = b"PK\x03\x04abcd"
    elif damage == "grow":
        data += b"\0"
    else:
        data = bytearray()
    with pytest.raises(DamagedKeys, match=r"out/train-00003\.tfrecord\.keys: not a whole"):
        decode_keys(bytes(data), "out/train-00003.tfrecord.keys")


def test_an_input_key_of_another_length_is_refused_when_written():
    with pytest.raises(ValueError, match="16 bytes"):
        encode_keys(ShardKeys((KeyEntry(1, b"short", True),), FeatureSpec()))


def test_numbered_shard_names_and_their_key_files():
    name = indexed_shard_name("train", 12, Compression.NONE)
    assert name == "train-00012.tfrecord"
    assert indexed_shard_name("val_2", 3, Compression.GZIP) == "val_2-00003.tfrecord.gz"
    assert keys_file_name(name) == "train-00012.tfrecord.keys"
    assert indexed_shard_number(name) == 12
    assert indexed_shard_number("train-00000-of-00004.tfrecord") is None
    assert indexed_shard_number("train-00012.tfrecord.keys") is None
    for file in (name, keys_file_name(name), name + ".idx", "val_2-00003.tfrecord.gz"):
        assert is_shard_file(file)
        assert split_of_shard_file(file) in ("train", "val_2")
    assert split_of_shard_file("train-00000-of-00004.tfrecord.keys") == "train"
    assert not is_shard_file("train-0012.tfrecord")
