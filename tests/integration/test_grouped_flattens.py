"""A Flatten that feeds a GroupByKey is written into the grouping on the local runner: no
stage of its own, the same groups."""

from __future__ import annotations

import apache_beam as beam
import pytest
from apache_beam.testing.util import assert_that, equal_to

from recordbeam.local.grouped_flattens import grouping_flattens
from recordbeam.local.runner import LocalRunner, pipeline_options

pytestmark = pytest.mark.fast_path  # the phase is installed only where the runner may change Beam's


def _join(p: beam.Pipeline):
    left = p | "Left" >> beam.Create([("a", 1), ("b", 2), ("a", 3)])
    right = p | "Right" >> beam.Create([("a", "x"), ("c", "y")])
    also = p | "Also" >> beam.Create([("b", 9)]) | "Twice" >> beam.Map(lambda kv: (kv[0], kv[1] * 2))
    joined = {"left": left, "right": right} | "Join" >> beam.CoGroupByKey()
    flat = (left, also) | "Both" >> beam.Flatten()
    grouped = flat | "Group" >> beam.GroupByKey()
    # A flatten read by something else besides its grouping stays materialized.
    shared = (right, right | "Again" >> beam.Map(lambda kv: kv)) | "Shared" >> beam.Flatten()
    shared_grouped = shared | "GroupShared" >> beam.GroupByKey()
    shared_count = shared | "Count" >> beam.combiners.Count.Globally()
    return joined, grouped, shared_grouped, shared_count


def _stage_names(runner: LocalRunner) -> list[str]:
    p = beam.Pipeline()
    _join(p)
    _context, stages = runner.create_stages(p.to_runner_api())
    return [stage.name for stage in stages]


def test_a_flatten_read_only_by_a_grouping_has_no_stage_of_its_own():
    runner = LocalRunner()
    plain = _stage_names(runner)
    with grouping_flattens():
        grouped = _stage_names(runner)
    assert any("Join/CoGroupByKeyImpl/Flatten/Read" in name for name in plain)
    assert any("Both/Read" in name for name in plain)
    assert not any("Join/CoGroupByKeyImpl/Flatten/Read" in name for name in grouped)
    assert not any("Both/Read" in name for name in grouped)
    assert any("Shared/Read" in name for name in grouped)  # also read by Count


def test_groups_are_the_same():
    options = pipeline_options(["--direct_num_workers=2", "--pickle_library=cloudpickle"])
    with beam.Pipeline(options=options) as p:
        joined, grouped, shared_grouped, shared_count = _join(p)
        assert_that(joined | "SortJoined" >> beam.MapTuple(
            lambda k, v: (k, sorted(v["left"]), sorted(v["right"]))),
            equal_to([("a", [1, 3], ["x"]), ("b", [2], []), ("c", [], ["y"])]),
            label="joined")
        assert_that(grouped | "SortGrouped" >> beam.MapTuple(lambda k, v: (k, sorted(v))),
                    equal_to([("a", [1, 3]), ("b", [2, 18])]), label="grouped")
        assert_that(shared_grouped | "SortShared" >> beam.MapTuple(lambda k, v: (k, sorted(v))),
                    equal_to([("a", ["x", "x"]), ("c", ["y", "y"])]), label="shared")
        assert_that(shared_count, equal_to([4]), label="counted")
