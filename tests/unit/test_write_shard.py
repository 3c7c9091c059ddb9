"""The per-shard writer (``_WriteShard``) called directly, outside a pipeline."""

from __future__ import annotations

import apache_beam as beam

from recordbeam.tfrecord.example import encode_example
from recordbeam.tfrecord.framing import read_records
from recordbeam.write.encoder import ExampleEncoder
from recordbeam.write.planning import ShardOptions, order_key
from recordbeam.write.sink import ShardResult, _pack_keyed, _WriteShard


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
