"""How WriteShards plans shard counts: from the elements' sizes, or from sizes given upfront."""

from __future__ import annotations

import json

import apache_beam as beam
import pytest
from apache_beam.runners.portability.fn_api_runner import FnApiRunner

from recordbeam.tfrecord.example import encode_example
from recordbeam.tfrecord.framing import read_records
from recordbeam.write.sink import ShardOptions, WriteShards

EXAMPLES = [encode_example({"x": [i]}) for i in range(10)]
SMALL_SHARDS = ShardOptions(shard_size=1000)


def _write(out, sizes=None) -> dict:
    with beam.Pipeline(runner=FnApiRunner()) as p:  # Beam 2.60 knows it by class only
        planned = None if sizes is None else p | "Sizes" >> beam.Create(sizes)
        _ = p | beam.Create(EXAMPLES) | WriteShards(str(out), options=SMALL_SHARDS, sizes=planned)
    return json.loads((out / "manifest.json").read_text())


def _written(out, manifest) -> list[bytes]:
    records = []
    for shard in manifest["splits"]["train"]["shards"]:
        with (out / shard["file"]).open("rb") as f:
            records.extend(read_records(f))
    return sorted(records)


def test_without_planned_sizes_the_elements_sizes_decide(tmp_path):
    manifest = _write(tmp_path)
    assert len(manifest["splits"]["train"]["shards"]) == 1  # 10 tiny examples, 1000-byte shards
    assert _written(tmp_path, manifest) == sorted(EXAMPLES)


def test_planned_sizes_decide_the_shard_count(tmp_path):
    # Two elements of one split add up, each with its 16 bytes of framing: 3,000 planned
    # bytes over 1,000-byte shards.
    manifest = _write(tmp_path, sizes=[("train", 984), ("train", 1984)])
    shards = manifest["splits"]["train"]["shards"]
    assert [s["file"] for s in shards] == [f"train-0000{i}-of-00003.tfrecord" for i in range(3)]
    assert _written(tmp_path, manifest) == sorted(EXAMPLES)


def test_an_element_of_a_split_without_planned_sizes_fails_the_run(tmp_path):
    with pytest.raises(Exception, match="planned sizes have no such split"):
        _write(tmp_path, sizes=[("val", 1000)])
    assert not (tmp_path / "manifest.json").exists()
