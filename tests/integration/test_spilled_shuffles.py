"""Local runs whose shuffles spill to disk write what runs in memory write, byte for byte."""

from __future__ import annotations

import os
import tempfile

import apache_beam as beam
import pytest
from apache_beam.runners.portability.fn_api_runner import execution
from apache_beam.testing.util import assert_that, equal_to
from lanes import one_in_make_test

from recordbeam.local import shuffle as local_shuffle
from recordbeam.local.runner import pipeline_options

IN_MEMORY = ("--direct_running_mode=in_memory", "--direct_num_workers=1")
MULTI_PROCESS = ("--direct_running_mode=multi_processing", "--direct_num_workers=2")
BEAMS_BUFFER = execution.GroupingBuffer


@pytest.fixture
def spill_everything(monkeypatch, tmp_path):
    """Every shuffle spills; yields a function listing what the spilled shuffles logged."""
    monkeypatch.setattr(local_shuffle, "SHUFFLE_MEMORY", 0)
    temp = tmp_path / "system-temp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    messages: list[str] = []

    class Recorder:
        def info(self, message: str, *args) -> None:
            messages.append(message % args)

    monkeypatch.setattr(local_shuffle, "_LOG", Recorder())

    def spilled() -> list[str]:
        return [m for m in messages if "spilled" in m]

    yield spilled
    assert not [n for n in os.listdir(temp) if n.startswith("recordbeam-shuffle-")]


@pytest.mark.parametrize("beam_args", one_in_make_test(
    [pytest.param(IN_MEMORY, id="in_memory"), pytest.param(MULTI_PROCESS, id="multi")], keep=1))
def test_a_conversion_that_spills_writes_the_same_bytes(
        three_shards, convert, tmp_path, spill_everything, beam_args, fast_path):
    spilled = convert(tmp_path / "out", shards=3, beam_args=beam_args)
    if fast_path:
        # The joins by name and by id, the shard grouping, and the sums of sizes and counts.
        assert len(spill_everything()) >= 5
    else:  # Beam's plain FnApiRunner: its shuffles stay in memory
        assert spill_everything() == []
    assert spilled.snapshot() == three_shards.snapshot()


@pytest.mark.fast_path
def test_a_grouping_that_spills_keeps_every_value(spill_everything):
    # cloudpickle (Beam 2.77's default): Beam 2.60's dill would send the lambda below by
    # reference to this test module, which the worker processes cannot import.
    options = pipeline_options([*MULTI_PROCESS, "--pickle_library=cloudpickle"])
    pairs = [(f"k{i % 37}", i) for i in range(2_000)]
    with beam.Pipeline(options=options) as p:
        grouped = (p | beam.Create(pairs) | beam.GroupByKey()
                   | beam.MapTuple(lambda key, values: (key, sorted(values))))
        expected = {}
        for key, value in pairs:
            expected.setdefault(key, []).append(value)
        assert_that(grouped, equal_to(list(expected.items())))
    assert any(m.startswith("A shuffle of 37 keys") for m in spill_everything())
    assert execution.GroupingBuffer is BEAMS_BUFFER  # Beam's again


@pytest.mark.fast_path
def test_a_failed_run_leaves_no_spill_files(spill_everything):
    def fail(pair):
        raise ValueError("a failing stage")

    with pytest.raises(Exception, match="a failing stage"), \
            beam.Pipeline(options=pipeline_options(list(IN_MEMORY))) as p:
        _ = p | beam.Create([("a", 1), ("a", 2)]) | beam.GroupByKey() | beam.Map(fail)
    assert len(spill_everything()) == 1
    assert execution.GroupingBuffer is BEAMS_BUFFER  # Beam's again


@pytest.mark.fast_path
def test_a_manifest_whose_waiting_rows_spill_writes_the_same_bytes(tmp_path, spill_everything,
                                                                   monkeypatch):
    # The manifest's rows wait for every range's line count, its records for the shard
    # plan: collections the runner materializes whole, in the launcher unless they spill.
    from recordbeam import pipeline
    from recordbeam.images.transcode import ImageFixes
    from recordbeam.sources.manifest.reader import ReadTable, TableOptions, to_tfrecord
    from recordbeam.testing.samples import make_manifest_sample
    from recordbeam.write.image_encoder import ImageChecks
    from recordbeam.write.sink import ShardOptions

    sample = make_manifest_sample(tmp_path / "in", fmt="csv", num_rows=40)
    table = TableOptions(sample.manifest, split_column="split", range_bytes=512)
    assert len(ReadTable(table).ranges) > 2

    def convert(output, beam_args) -> dict[str, bytes]:
        out = os.fspath(output)
        pipeline.run(lambda p: to_tfrecord(
            p, out, table, ShardOptions(num_shards=3, max_reject_fraction=0.5), ImageChecks(),
            ImageFixes()), out, beam_args=list(beam_args), show_progress=False)
        return {str(path.relative_to(output)): path.read_bytes()
                for path in sorted(output.rglob("*")) if path.is_file()}

    spilled = convert(tmp_path / "spilled", MULTI_PROCESS)
    assert [m for m in spill_everything() if m.startswith("A materialized collection")]
    monkeypatch.setattr(local_shuffle, "SHUFFLE_MEMORY", 1 << 40)
    before = len(spill_everything())
    # Unspilled, in this process: the runner's modes write the same bytes.
    in_memory = convert(tmp_path / "in_memory", IN_MEMORY)
    assert len(spill_everything()) == before  # nothing spilled the second time
    assert len(spilled) > 4 and spilled == in_memory
