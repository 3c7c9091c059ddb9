"""The steps of an incremental run, called directly: classifying old and new elements,
compaction groups, rewriting a shard from its surviving records, shard numbers, and the
TFDS lengths of numbered shards."""

from __future__ import annotations

import json
import os

import apache_beam as beam
import pytest
from apache_beam.pvalue import TaggedOutput

from recordbeam.dataset import tfds
from recordbeam.dataset.names import keys_file_name
from recordbeam.dataset.shard_keys import decode_keys
from recordbeam.tfrecord.example import encode_example
from recordbeam.tfrecord.framing import open_records
from recordbeam.write.encoder import ExampleEncoder
from recordbeam.write.incremental import (
    OldShard,
    ShardSummary,
    _Classify,
    _PackedSize,
    _RewriteShards,
    compaction_groups,
    join_key,
    read_shard_keys,
)
from recordbeam.write.incremental_commit import _free_numbers
from recordbeam.write.input_keys import STAT, element_input_key
from recordbeam.write.planning import ShardOptions, order_key, pack_keyed
from recordbeam.write.sink import ShardResult, _WriteShard


def _new(order: int, input_key: bytes, size: int = 10) -> bytes:
    """A packed element whose planned size is ``size``."""
    return pack_keyed(order, b"e" * size, beam.coders.BytesCoder(), input_key)


def _classify(old, new, order=7):
    size_of = _PackedSize(ExampleEncoder(), beam.coders.BytesCoder())
    grouped = {"old": old, "new": new}
    outputs = list(_Classify(size_of).process((join_key("train", order), grouped)))
    encode = [o for o in outputs if not isinstance(o, TaggedOutput)]
    drops = [o.value for o in outputs if isinstance(o, TaggedOutput) and o.tag == "drops"]
    classes = dict(o.value for o in outputs if isinstance(o, TaggedOutput) and o.tag == "classes")
    return encode, drops, classes


K1, K2 = b"\x01" * 16, b"\x02" * 16


def test_an_unchanged_element_is_neither_encoded_nor_dropped():
    encode, drops, classes = _classify([("train-00003.tfrecord", K1)], [_new(7, K1)])
    assert (encode, drops, classes) == ([], [], {("train", "unchanged"): 1})


def test_a_changed_element_is_dropped_from_its_shard_and_encoded():
    encode, drops, classes = _classify([("train-00003.tfrecord", K1)], [_new(7, K2, 99)])
    assert drops == [("train-00003.tfrecord", 7)]
    # Sized as the encoder plans it (ExampleEncoder: the bytes and their framing).
    assert [(split, order, size) for split, order, size, _packed in encode] == [
        ("train", 7, 99 + 16)]
    assert classes == {("train", "changed"): 1}


def test_added_and_removed_elements():
    encode, drops, classes = _classify([], [_new(7, K1)])
    assert len(encode) == 1 and drops == [] and classes == {("train", "added"): 1}
    encode, drops, classes = _classify([("train-00001.tfrecord", K1)], [])
    assert encode == [] and drops == [("train-00001.tfrecord", 7)]
    assert classes == {("train", "removed"): 1}


def test_an_identity_given_twice_is_kept_only_if_both_are_unchanged():
    """Two elements sharing an order key (one identity twice, or a 64-bit collision) are
    compared as a whole: any difference encodes them all again, as a rebuild would."""
    old = [("train-00001.tfrecord", K1), ("train-00002.tfrecord", K2)]
    encode, drops, classes = _classify(old, [_new(7, K2), _new(7, K1)])
    assert (encode, drops) == ([], [])
    encode, drops, classes = _classify(old, [_new(7, K2)])
    assert len(encode) == 1
    assert sorted(drops) == [("train-00001.tfrecord", 7), ("train-00002.tfrecord", 7)]
    assert classes == {("train", "changed"): 1, ("train", "removed"): 1}


def test_small_shards_are_grouped_in_name_order_up_to_the_target_size():
    shards = [{"file": f"train-{i:05d}.tfrecord", "examples": 1, "bytes": size}
              for i, size in enumerate([100, 30, 40, 35, 90, 10, 5])]
    groups = {s.name: s.group for s in compaction_groups("train", shards, below=50, target=80)}
    one, two = (f"folded into one with train-0000{n}.tfrecord" for n in (1, 3))
    assert groups == {
        "train-00000.tfrecord": "train-00000.tfrecord",  # not small: alone
        "train-00001.tfrecord": one,  # 30 + 40 = 70 (+35 > 80)
        "train-00002.tfrecord": one,
        "train-00003.tfrecord": two,  # 35 + 10 + 5 = 50
        "train-00004.tfrecord": "train-00004.tfrecord",
        "train-00005.tfrecord": two,
        "train-00006.tfrecord": two,
    }
    alone = compaction_groups("train", shards[:2], below=50, target=80)
    assert [s.group for s in alone] == [s.name for s in alone]  # one small shard stays


def _written_shard(folder, examples, number, options):
    """A shard of ``examples`` with its key file, as an incremental run writes it, in place
    under ``train-<number>.tfrecord``; returns its ShardSummary and the elements' order keys."""
    coder, encoder = beam.coders.BytesCoder(), ExampleEncoder()
    packed = [pack_keyed(order_key(encoder.identity(e)), e, coder,
                         element_input_key(encoder, e, STAT)) for e in examples]
    writer = _WriteShard(encoder, options, str(folder), coder, keys=True)
    writer.setup()
    [result] = [o for o in writer.process((("train", 0, 1), packed)) if isinstance(o, ShardResult)]
    name = f"train-{number:05d}.tfrecord"
    os.replace(result.temp_path, folder / name)
    os.replace(result.temp_keys_path, folder / keys_file_name(name))
    if result.temp_index_path:
        os.replace(result.temp_index_path, folder / (name + ".idx"))
    old = OldShard("train", name, result.examples, result.bytes, name)
    keys = read_shard_keys(str(folder), old)
    summary = ShardSummary("train", name, name, result.examples, result.bytes, keys.spec,
                           keys.list_spec, {}, ())
    return summary, {order_key(encoder.identity(e)): e for e in examples}


@pytest.mark.parametrize("index", [False, True])
def test_rewritten_shards_copy_the_surviving_records_in_order(tmp_path, index):
    options = ShardOptions(index=index)
    first = [encode_example({"n": [i], "text": f"a{i}"}) for i in range(6)]
    second = [encode_example({"n": [i], "other": [0.5]}) for i in range(6, 9)]
    one, by_key_one = _written_shard(tmp_path, first, 3, options)
    two, by_key_two = _written_shard(tmp_path, second, 5, options)
    dropped = sorted(by_key_one)[1:3] + sorted(by_key_two)[:1]
    temp = tmp_path / "temp"
    temp.mkdir()
    rewrite = _RewriteShards(str(tmp_path), str(temp), options)
    [done] = rewrite.process(("train-00003.tfrecord", [
        (two, tuple(k for k in dropped if k in by_key_two)),
        (one, tuple(k for k in dropped if k in by_key_one)),
    ]))
    assert done.replaces == ("train-00003.tfrecord", "train-00005.tfrecord")
    survivors = {k: e for k, e in {**by_key_one, **by_key_two}.items() if k not in dropped}
    records = list(open_records(done.result.temp_path))
    assert records == [survivors[k] for k in sorted(survivors)]  # merged in order-key order
    keys = decode_keys(open(done.result.temp_keys_path, "rb").read(), "k")
    assert [e.order_key for e in keys.entries] == sorted(survivors)
    # The spec is the survivors' own: "text" is in 4 of 6 examples, "other" in 2.
    spec = done.result.spec.to_json()
    assert (spec["text"]["present_in"], spec["other"]["present_in"], spec["n"]["present_in"]) == (
        4, 2, 6)
    assert done.result.bytes == os.path.getsize(done.result.temp_path)
    if index:
        lines = open(done.result.temp_index_path).read().splitlines()
        assert len(lines) == len(records) and lines[0].startswith("0 ")


def test_new_shards_take_numbers_the_version_in_force_does_not_use(tmp_path):
    current = {"splits": {"train": {"shards": [
        {"file": name} for name in ("train-00000.tfrecord", "train-00002.tfrecord",
                                    "train-00003.tfrecord")]}}}
    free = _free_numbers(current, "train", str(tmp_path))
    assert [next(free) for _ in range(3)] == [1, 4, 5]
    assert next(_free_numbers(current, "val", str(tmp_path))) == 0
    # Files we did not write take their numbers too: never replaced by a new shard.
    (tmp_path / "train-00004.tfrecord.keys").write_bytes(b"theirs")
    (tmp_path / "val-00000.tfrecord").write_bytes(b"theirs")
    free = _free_numbers(current, "train", str(tmp_path))
    assert [next(free) for _ in range(3)] == [1, 5, 6]
    assert next(_free_numbers(current, "val", str(tmp_path))) == 1


def test_tfds_lengths_of_numbered_shards_are_zero_where_no_file_is():
    manifest = {"splits": {"train": {"bytes": 30, "shards": [
        {"file": "train-00001.tfrecord", "examples": 2, "bytes": 10},
        {"file": "train-00004.tfrecord", "examples": 5, "bytes": 20}]}},
        "features": {"n": {"dtype": "int64", "fixed_length": 1, "list": False,
                           "min_length": 1, "max_length": 1, "present_in": 7}}}
    [split] = json.loads(tfds.files_for(manifest)[tfds.DATASET_INFO])["splits"]
    assert split["filepathTemplate"] == "{SPLIT}-{SHARD_INDEX}.{FILEFORMAT}"
    assert split["shardLengths"] == ["0", "2", "0", "0", "5"]
