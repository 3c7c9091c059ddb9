"""Our local runner: Beam's FnApiRunner with worker processes that exit as soon as they are done."""

from __future__ import annotations

import logging
import os
import subprocess
import sys

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import DirectOptions
from apache_beam.testing.util import assert_that, equal_to
from lanes import exhaustive, one_in_make_test

from recordbeam.cli import main as cli
from recordbeam.local import internals as runner_internals
from recordbeam.local import runner, standby
from recordbeam.local.runner import LOCAL_RUNNER, LocalRunner, is_local, pipeline_options

MULTI_PROCESS = ("--direct_running_mode=multi_processing", "--direct_num_workers=2")


def test_default_local_run_uses_our_worker_processes(fast_path):
    # cloudpickle (Beam 2.77's default): Beam 2.60's dill would send the lambdas below by
    # reference to this test module, which the worker processes cannot import.
    options = pipeline_options(["--direct_num_workers=2", "--pickle_library=cloudpickle"])
    assert options.view_as(DirectOptions).direct_running_mode == "multi_processing"
    here = os.getpid()
    # Beam's own workers where the local runner is Beam's plain FnApiRunner.
    worker = "recordbeam.local.worker" if fast_path else "apache_beam.runners.worker.sdk_worker_main"
    with beam.Pipeline(options=options) as p:
        seen = (p | beam.Create(range(8)) | beam.Reshuffle()
                # A lambda: workers cannot import this test module, a lambda travels by value.
                | beam.Map(lambda _: (getattr(__import__("sys").modules["__main__"].__spec__,
                                              "name", "?"), __import__("os").getpid())))
        assert_that(seen | beam.Map(lambda kv: kv[0]) | beam.Distinct(), equal_to([worker]))
        assert_that(seen | "NotHere" >> beam.Filter(lambda kv: kv[1] == here),
                    equal_to([]), label="ran in other processes")
    # The mode is only set aside while the runner picks its worker command.
    assert options.view_as(DirectOptions).direct_running_mode == "multi_processing"


@pytest.mark.fast_path  # Beam's own runner keeps its first run's worker environment
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
    # Beam 2.60 knows the FnApiRunner by its path only.
    assert is_local(pipeline_options(
        ["--runner=apache_beam.runners.portability.fn_api_runner.FnApiRunner"]))
    assert not is_local(pipeline_options(["--runner=DataflowRunner"]))


@pytest.mark.fast_path
def test_worker_exit_code_reaches_the_runner():
    # Options that are not JSON make Beam's worker fail at start; ours must not exit 0.
    env = {**os.environ, "CONTROL_API_SERVICE_DESCRIPTOR": "url: 'localhost:1'",
           "PIPELINE_OPTIONS": "not json"}
    env.pop("LOGGING_API_SERVICE_DESCRIPTOR", None)
    done = subprocess.run([sys.executable, "-m", "recordbeam.local.worker"], env=env,
                          capture_output=True, timeout=120)
    assert done.returncode != 0


# --- a Beam the local runner cannot change ----------------------------------------------


@pytest.fixture
def fresh_check():
    """The one check, asked anew during the test (it is cached per process)."""
    runner_internals.why_unusable.cache_clear()
    yield
    runner_internals.why_unusable.cache_clear()


def _make_internals_unusable(reason: str, monkeypatch) -> None:
    if reason == "untested version":
        monkeypatch.setattr(runner_internals, "beam_version", lambda: "2.59.0")
    else:  # an internal a tested version lacks, as a patched build might
        major, newest = runner_internals.TESTED_BEAM[1]
        monkeypatch.setattr(runner_internals, "beam_version", lambda: f"{major}.{newest}.0")
        gone = ("apache_beam.runners.portability.fn_api_runner", "FnApiRunner._gone_in_a_release")
        monkeypatch.setattr(runner_internals, "RUNNER_INTERNALS",
                            (*runner_internals.RUNNER_INTERNALS, gone))
    runner_internals.why_unusable.cache_clear()


@pytest.mark.parametrize("reason", one_in_make_test(["untested version", "missing internal"]))
def test_without_usable_internals_a_run_is_beams_own_with_the_same_bytes(
        reason, fresh_check, convert, three_shards, tmp_path, caplog, monkeypatch):
    # The local runner's own output, on any of its modes (test_coco_pipeline's
    # test_runner_modes_write_byte_identical_shards: the same on each).
    _make_internals_unusable(reason, monkeypatch)

    def must_not_run(*args, **kwargs):
        raise AssertionError("the local runner changed Beam's runner")

    # Neither of our changes is installed, nor are our workers started.
    monkeypatch.setattr(runner, "spilling_shuffles", must_not_run)
    monkeypatch.setattr(runner, "feeding_in_pieces", must_not_run)
    monkeypatch.setattr(runner.standby, "take", must_not_run)
    caplog.clear()  # where the fast path is off, the first run said so too
    with caplog.at_level(logging.WARNING, logger="recordbeam.local.runner"):
        plain = convert(tmp_path / "plain", shards=3, beam_args=MULTI_PROCESS)
    assert plain.snapshot() == three_shards.snapshot()
    said = [r.getMessage() for r in caplog.records if "plain FnApiRunner" in r.getMessage()]
    expected = "2.59.0 is not one" if reason == "untested version" else "_gone_in_a_release"
    assert len(said) == 1 and expected in said[0]


@pytest.mark.fast_path
def test_the_installed_beam_is_one_the_local_runner_uses(fresh_check):
    # A Beam upgrade that moves what the local runner relies on must fail here, not make
    # every local run quietly fall back to the plain FnApiRunner.
    assert runner_internals.why_unusable() is None
    assert runner_internals.missing_internals() == []


@exhaustive  # an untested Beam writes the same bytes: test_without_usable_internals_...[untested version]
def test_a_command_on_an_untested_beam_says_so_once_forks_no_standby_and_writes_the_same_bytes(
        coco_sample, tmp_path, fresh_check, monkeypatch, capfd):
    def convert(output, *beam_args):
        assert cli.main(["convert", "coco", "--images", coco_sample.images_dir,
                         "--annotations", coco_sample.annotations, "--output", str(output),
                         "--max-reject-fraction", "0.5", "--quiet", *beam_args]) == 0
        return {n: (output / n).read_bytes() for n in os.listdir(output) if ".tfrecord" in n}

    in_memory = convert(tmp_path / "in_memory", "--direct_running_mode=in_memory")
    capfd.readouterr()
    monkeypatch.setattr(runner_internals, "beam_version", lambda: "2.99.0")
    runner_internals.why_unusable.cache_clear()
    forked = []
    monkeypatch.setattr(standby, "fork_from_launcher", lambda *args: forked.append(args))
    plain = convert(tmp_path / "plain", "--direct_num_workers=2")
    said = [line for line in capfd.readouterr().err.splitlines() if "2.99.0" in line]
    (major, oldest), (_, newest) = runner_internals.TESTED_BEAM
    assert said == [
        "warning: Apache Beam 2.99.0 is not one recordbeam's local runner is tested with "
        f"({major}.{oldest} to {major}.{newest}); this run uses Beam's plain FnApiRunner: the "
        "same output, but shuffles stay in the launcher's memory and workers start as Beam "
        f"starts them; pip install 'apache-beam>={major}.{oldest},<{major}.{newest + 1}' "
        "keeps that memory bounded"]
    assert forked == []  # its workers are Beam's: no standby to fork them
    assert plain == in_memory and plain


#: A Beam release that renamed what the local runner calls as its module is imported
#: (registering its worker handler): the command, in a process where that name is gone.
_COMMAND_WITHOUT_HANDLER_REGISTRY = """
import sys
from apache_beam.runners.portability.fn_api_runner import worker_handlers
del worker_handlers.WorkerHandler.register_environment
from recordbeam.cli.main import main
sys.exit(main(sys.argv[1:]))
"""


@exhaustive  # the same promise as [missing internal] above
def test_a_beam_lacking_an_internal_the_runner_registers_with_runs_plain_with_the_same_bytes(
        coco_sample, tmp_path, fast_path):
    def convert(output, *python):
        done = subprocess.run(
            [*python, "convert", "coco", "--images", coco_sample.images_dir,
             "--annotations", coco_sample.annotations, "--output", str(output),
             "--max-reject-fraction", "0.5", "--quiet", "--direct_num_workers=2"],
            capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        shards = {n: (output / n).read_bytes() for n in os.listdir(output) if ".tfrecord" in n}
        return shards, done.stderr

    ours, _ = convert(tmp_path / "ours", sys.executable, "-m", "recordbeam")
    plain, said = convert(tmp_path / "plain", sys.executable, "-c",
                          _COMMAND_WITHOUT_HANDLER_REGISTRY)
    warnings = [line for line in said.splitlines() if "plain FnApiRunner" in line]
    assert len(warnings) == 1, said
    if fast_path:  # else the version itself is why, and the notice names it
        assert "lacks what recordbeam's local runner uses: apache_beam.runners.portability." \
            "fn_api_runner.worker_handlers.WorkerHandler.register_environment;" in warnings[0]
        assert "pip install" not in warnings[0]  # this Beam is a tested one
    assert plain == ours and plain


def test_beam_versions_read_by_major_and_minor():
    assert runner_internals.minor_version("2.60.0") == (2, 60)
    assert runner_internals.minor_version("2.78.0rc1") == (2, 78)
    assert runner_internals.minor_version("2.100.0.dev0") == (2, 100)
    assert runner_internals.minor_version("nightly") is None
