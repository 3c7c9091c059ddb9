"""Our local runner: Beam's FnApiRunner with worker processes that exit as soon as they are done."""

from __future__ import annotations

import os
import subprocess
import sys

import apache_beam as beam
from apache_beam.options.pipeline_options import DirectOptions
from apache_beam.testing.util import assert_that, equal_to

from recordbeam.runner import LOCAL_RUNNER, LocalRunner, is_local, pipeline_options


def test_default_local_run_uses_our_worker_processes():
    options = pipeline_options(["--direct_num_workers=2"])
    assert options.view_as(DirectOptions).direct_running_mode == "multi_processing"
    here = os.getpid()
    with beam.Pipeline(options=options) as p:
        seen = (p | beam.Create(range(8)) | beam.Reshuffle()
                # A lambda: workers cannot import this test module, a lambda travels by value.
                | beam.Map(lambda _: (getattr(__import__("sys").modules["__main__"].__spec__,
                                              "name", "?"), __import__("os").getpid())))
        assert_that(seen | beam.Map(lambda kv: kv[0]) | beam.Distinct(),
                    equal_to(["recordbeam.local_worker"]))
        assert_that(seen | "NotHere" >> beam.Filter(lambda kv: kv[1] == here),
                    equal_to([]), label="ran in other processes")
    # The mode is only set aside while the runner picks its worker command.
    assert options.view_as(DirectOptions).direct_running_mode == "multi_processing"


def test_a_runner_reused_in_another_mode_runs_in_process():
    runner = LocalRunner()
    with beam.Pipeline(runner=runner, options=pipeline_options(["--direct_num_workers=2"])) as p:
        _ = p | "Two" >> beam.Create([1, 2]) | beam.Reshuffle()
    pid = os.getpid()
    in_memory = pipeline_options(["--direct_running_mode=in_memory", "--direct_num_workers=1"])
    with beam.Pipeline(runner=runner, options=in_memory) as p:
        pids = p | beam.Create([1]) | beam.Map(lambda _: os.getpid())
        assert_that(pids, equal_to([pid]))


def test_other_modes_are_beams_own():
    options = pipeline_options(["--direct_running_mode=in_memory", "--direct_num_workers=1"])
    pid = os.getpid()
    with beam.Pipeline(options=options) as p:
        pids = p | beam.Create([1]) | beam.Map(lambda _: os.getpid())
        assert_that(pids, equal_to([pid]))


def test_local_runner_counts_as_local():
    assert is_local(pipeline_options([]))
    assert LOCAL_RUNNER.endswith("LocalRunner")
    assert is_local(pipeline_options(["--runner=FnApiRunner"]))
    assert not is_local(pipeline_options(["--runner=DataflowRunner"]))


def test_worker_exit_code_reaches_the_runner():
    # Options that are not JSON make Beam's worker fail at start; ours must not exit 0.
    env = {**os.environ, "CONTROL_API_SERVICE_DESCRIPTOR": "url: 'localhost:1'",
           "PIPELINE_OPTIONS": "not json"}
    env.pop("LOGGING_API_SERVICE_DESCRIPTOR", None)
    done = subprocess.run([sys.executable, "-m", "recordbeam.local_worker"], env=env,
                          capture_output=True, timeout=120)
    assert done.returncode != 0
