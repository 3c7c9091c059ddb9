"""The per-shard writer (``_WriteShard``) called directly, outside a pipeline."""

from __future__ import annotations

import apache_beam as beam

from recordbeam.tfrecord.example import encode_example
from recordbeam.tfrecord.framing import read_records
from recordbeam.write.encoder import ExampleEncoder
from recordbeam.write.planning import ShardOptions, order_key
from recordbeam.write.sink import (
    ShardResult,
    _decoded_in_key_order,
    _in_key_order,
    _pack_keyed,
    _WriteShard,
)


class _RecordingCounter:
    def __init__(self) -> None:
        self.increments: list[int] = []

    def inc(self, n: int = 1) -> None:
        self.increments.append(n)


def test_a_shard_counts_its_examples_once_with_every_example_written(tmp_path):
    # Beam counters cost microseconds per call: the writer adds its examples up itself.
    coder = beam.coders.BytesCoder()
    encoder = ExampleEncoder()
    examples = [encode_example({"x": [i]}) for i in range(5)]
    packed = [_pack_keyed(order_key(encoder.identity(e), ""), e, coder) for e in examples]
    writer = _WriteShard(encoder, ShardOptions(), str(tmp_path), coder)
    writer._examples = counter = _RecordingCounter()
    writer.setup()
    outputs = list(writer.process((("train", 0, 1), packed)))
    [result] = [o for o in outputs if isinstance(o, ShardResult)]
    assert counter.increments == [5]
    with open(result.temp_path, "rb") as f:
        assert sorted(read_records(f)) == sorted(examples)


class _CountingCoder(beam.coders.BytesCoder):
    def __init__(self) -> None:
        self.decoded = 0

    def decode(self, encoded: bytes) -> bytes:
        self.decoded += 1
        return super().decode(encoded)


class _WatchingEncoder(ExampleEncoder):
    """Notes how many elements the coder had decoded when each one is encoded."""

    def __init__(self, coder: _CountingCoder) -> None:
        super().__init__()
        self.coder = coder
        self.decoded_when_encoding: list[int] = []

    def encode(self, element):
        self.decoded_when_encoding.append(self.coder.decoded)
        return super().encode(element)


def test_a_shard_decodes_its_elements_one_at_a_time_as_it_writes_them(tmp_path):
    # A shard waits as bytes, not as records the garbage collector scans over and over.
    coder = _CountingCoder()
    encoder = _WatchingEncoder(coder)
    examples = [encode_example({"x": [i]}) for i in range(4)]
    packed = [_pack_keyed(order_key(encoder.identity(e), ""), e, coder) for e in examples]
    writer = _WriteShard(encoder, ShardOptions(), str(tmp_path), coder)
    list(writer.process((("train", 0, 1), packed)))
    assert encoder.decoded_when_encoding == [1, 2, 3, 4]


def test_elements_sharing_a_key_keep_the_order_by_identity_then_content():
    # Shared keys are rare (a 64-bit hash), but their order must not depend on arrival.
    coder = beam.coders.BytesCoder()
    encoder = ExampleEncoder()
    elements = [b"a", b"b", b"c", b"d", b"e", b"e"]
    keyed = [(7, e) for e in elements[:3]] + [(3, elements[3]), (7, elements[4]),
                                              (7, elements[5])]
    expected = _in_key_order(keyed, encoder)
    for arrival in (keyed, keyed[::-1], keyed[2:] + keyed[:2]):
        packed = [_pack_keyed(key, element, coder) for key, element in arrival]
        assert list(_decoded_in_key_order(packed, coder, encoder)) == expected
    assert [key for key, _ in expected] == [3, 7, 7, 7, 7, 7]


def test_the_failure_example_names_its_source_once():
    from recordbeam.records import Reject
    from recordbeam.write.commit import _example

    with_source = Reject("annotation", "t.csv:4", "malformed_row",
                         "t.csv:4: row 'x' has 2 fields; fix it.", "train")
    assert _example([with_source], "train", "annotation") == (
        "The most frequent, malformed_row, e.g. t.csv:4: row 'x' has 2 fields; fix it. ")
    without = Reject("image", "a.jpg", "truncated", "the JPEG ends before its EOI marker",
                     "train")
    assert _example([without], "train", "image") == (
        "The most frequent, truncated, e.g. a.jpg: the JPEG ends before its EOI marker. ")


def test_source_counts_of_one_split_are_filed_under_it():
    from recordbeam.write.commit import counts_by_split

    counts = {"tables_not_read": 1, ("val", "without_rows"): 2, ("train", "without_rows"): 3,
              ("val", "tables_not_read"): 4}
    assert counts_by_split(counts, "train") == {
        "train": {"tables_not_read": 1, "without_rows": 3},
        "val": {"without_rows": 2, "tables_not_read": 4}}
