"""Standby workers: the ``recordbeam`` command forks a standby from itself once its pipeline is
built (a new standby interpreter where other threads run), and the local runner's workers
are forks of it; anything wrong with it means new worker processes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import DirectOptions, StandardOptions
from lanes import exhaustive

from recordbeam.cli import main as cli
from recordbeam.local import runner, standby
from recordbeam.local.runner import LOCAL_RUNNER, pipeline_options

linux_only = pytest.mark.skipif(not standby.SUPPORTED, reason="standbys need Linux")


def needs_standby(test):
    """A test of standbys: Linux only, and part of the local runner's fast path (where it
    is off, runs start Beam's own workers and these skip)."""
    return pytest.mark.fast_path(linux_only(test))


TWO_WORKERS = ("--direct_num_workers=2",)
# For pipelines built here: Beam 2.60's dill would send their lambdas by reference to this
# test module, which the worker processes cannot import (cloudpickle: Beam 2.77's default).
CLOUDPICKLE = ("--pickle_library=cloudpickle",)


@pytest.fixture
def hand_offs(monkeypatch) -> list[int | None]:
    """For every hand-off to the standby, in order: the forked worker's pid, or None."""
    seen: list[int | None] = []
    hand_off = standby.Standby.hand_off

    def counted(self, environment):
        worker = hand_off(self, environment)
        seen.append(worker.pid if worker is not None else None)
        return worker

    monkeypatch.setattr(standby.Standby, "hand_off", counted)
    return seen


def _children() -> dict[int, str]:
    """pid -> state of this process's child processes, zombies included."""
    found = {}
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[1]) == os.getpid():
            found[int(entry)] = fields[0]
    return found


def _tagged(tag: str) -> list[int]:
    """Processes whose environment holds ``tag``."""
    found = []
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                if tag.encode() in f.read().split(b"\0"):
                    found.append(int(entry))
        except OSError:
            continue
    return found


def _convert_args(sample, output) -> list[str]:
    return ["convert", "coco", "--images", sample.images_dir, "--annotations", sample.annotations,
            "--output", str(output), "--max-reject-fraction", "0.5", "--quiet", *TWO_WORKERS]


def _worker_pids(options, folder) -> set[int]:
    """Runs a small pipeline; the pids of the processes its elements went through."""
    folder.mkdir()
    with beam.Pipeline(options=options) as p:
        # A lambda: workers cannot import this test module, a lambda travels by value.
        _ = (p | beam.Create(range(16)) | beam.Reshuffle()
             | beam.Map(lambda _, at=str(folder):
                        open(f"{at}/{__import__('os').getpid()}", "w").close()))
    return {int(name) for name in os.listdir(folder)}


# --- which runs get standbys ----------------------------------------------------------


@pytest.mark.parametrize("beam_args", [
    [],
    ["--direct_num_workers=3"],
    ["--direct_num_workers", "3"],
    ["--direct_num_workers=0"],
    ["--direct_running_mode=multi_processing", "--direct_num_workers=1"],
    ["--direct_running_mode", "in_memory"],
    ["--direct_running_mode=multi_threading", "--direct_num_workers=2"],
    [f"--runner={LOCAL_RUNNER}"],
    # Beam 2.60 knows the FnApiRunner by its path only.
    ["--runner=apache_beam.runners.portability.fn_api_runner.FnApiRunner"],
    ["--runner", "DirectRunner", "--direct_num_workers=2"],
    ["--runner=DataflowRunner", "--project=p", "--region=r", "--temp_location=gs://b/t"],
    ["--direct_num_workers=2", "--direct_num_workers=4"],
])
def test_standbys_match_the_workers_the_run_starts(beam_args):
    options = pipeline_options(beam_args)
    direct = options.view_as(DirectOptions)
    ours = (options.view_as(StandardOptions).runner == LOCAL_RUNNER
            and direct.direct_running_mode == "multi_processing")
    expected = (direct.direct_num_workers or os.cpu_count()) if ours else 0
    assert standby.workers_needed(beam_args) == expected


def test_no_standby_where_it_cannot_fork_workers(monkeypatch):
    monkeypatch.setattr(standby, "SUPPORTED", False)
    with standby.started(2) as process:
        assert process is None and standby.take() is None


# --- the command uses them ------------------------------------------------------------


@needs_standby
def test_a_local_run_of_the_command_forks_its_workers_from_the_standby(
        coco_sample, tmp_path, hand_offs, capfd):
    before = _children()
    assert cli.main(_convert_args(coco_sample, tmp_path / "out")) == 0
    # Both workers were forked by the standby started before the pipeline ran.
    assert len(hand_offs) == 2 and all(hand_offs)
    # Their output went to the run's log, deleted on success: the terminal has none of it.
    out, err = capfd.readouterr()
    assert all(line.startswith("warning: ") for line in err.splitlines()), err
    assert "output:" in out and "INFO" not in out and "Worker" not in out
    # Every worker has exited and been reaped.
    assert _children().keys() <= before.keys()


@needs_standby
def test_a_standby_the_command_did_not_use_is_ended(coco_sample, tmp_path, capfd):
    before = _children()
    missing = str(tmp_path / "missing.json")  # fails after the standby started
    args = ["convert", "coco", "--images", coco_sample.images_dir, "--annotations", missing,
            "--output", str(tmp_path / "out"), *TWO_WORKERS]
    assert cli.main(args) == cli.EXIT_USAGE
    assert _children().keys() <= before.keys()
    assert capfd.readouterr().err.splitlines() == [
        f"recordbeam: {missing}: no such annotation file (check --annotations)"]


@linux_only  # whoever started the workers: the standby's forks, or Beam
def test_the_command_leaves_no_process_behind(coco_sample, tmp_path):
    name, value = "RECORDBEAM_STANDBY_TEST", uuid.uuid4().hex
    done = subprocess.run([sys.executable, "-m", "recordbeam",
                           *_convert_args(coco_sample, tmp_path / "out")],
                          env={**os.environ, name: value}, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    assert all(line.startswith("warning: ") for line in done.stderr.splitlines()), done.stderr
    assert _tagged(f"{name}={value}") == []


def test_the_command_keeps_openblas_to_one_thread_unless_told_otherwise(monkeypatch):
    seen = []
    monkeypatch.delenv("OPENBLAS_NUM_THREADS", raising=False)
    monkeypatch.setattr(cli, "main", lambda argv=None: seen.append(
        os.environ.get("OPENBLAS_NUM_THREADS")) or 0)
    monkeypatch.setattr(cli.signal, "signal", lambda *args: None)  # keep pytest's handler
    monkeypatch.setattr(cli.logging, "shutdown", lambda: None)

    def exit_now(code):
        raise SystemExit(code)

    monkeypatch.setattr(cli.os, "_exit", exit_now)
    with pytest.raises(SystemExit):
        cli.console([])
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "4")
    with pytest.raises(SystemExit):
        cli.console([])
    assert seen == ["1", "4"]


def test_with_one_blas_thread_numpy_starts_no_thread():
    # OpenBLAS's threads spin for ~0.1 CPU s each once numpy loads them.
    code = ("import os, sys\n"
            "if sys.argv[1] == 'one':\n"
            "    from recordbeam.cli.main import one_blas_thread; one_blas_thread()\n"
            "import numpy\n"
            "print(len(os.listdir('/proc/self/task')))\n")
    environment = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}

    def threads(mode):
        done = subprocess.run([sys.executable, "-c", code, mode], env=environment,
                              capture_output=True, text=True, timeout=120, check=True)
        return int(done.stdout)

    assert threads("one") == 1
    if (os.cpu_count() or 1) > 1:  # one thread per core otherwise
        assert threads("default") > 1


@needs_standby
def test_a_failing_run_with_forked_workers_still_fails_and_keeps_its_log(
        coco_sample, tmp_path, hand_offs, capfd, monkeypatch):
    shard_faults = _shard_faults(monkeypatch)
    shard_faults.install_in_workers(monkeypatch, shard=0, after=1, marker=tmp_path / "fired")
    assert cli.main(_convert_args(coco_sample, tmp_path / "out")) == cli.EXIT_FAILED
    assert len(hand_offs) == 2 and all(hand_offs)
    err = capfd.readouterr().err
    log_line = [line for line in err.splitlines() if "the run's log is in" in line]
    assert log_line, err
    log_path = log_line[0].rsplit(" ", 1)[1]
    with open(log_path) as log:
        assert "InjectedFault" in log.read()
    os.unlink(log_path)


@needs_standby
def test_a_forked_standby_writes_its_stderr_to_its_own_descriptor_2(tmp_path):
    """A launcher whose ``sys.stderr`` writes to another descriptor (pytest's capture, a
    program's): the forked standby's ``sys.stderr`` must still work once that descriptor
    is closed, or a worker's failed bundle (whose traceback Beam prints first) is never
    reported and the run waits forever. In a new interpreter: one thread, as the
    launcher has when it forks its standby."""
    code = (
        "import os, socket, sys\n"
        "from recordbeam.local import standby\n"
        "channel, other = socket.socketpair()\n"
        "sys.stderr = open(os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT), 'w')\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    code = 1\n"
        "    try:\n"
        "        standby._as_new_process(channel.fileno())\n"
        "        print(\"a failed bundle's traceback\", file=sys.stderr, flush=True)\n"
        "        code = 0 if (sys.stderr.fileno(), sys.stdout.fileno()) == (2, 1) else 2\n"
        "    finally:\n"
        "        os._exit(code)\n"
        "sys.exit(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))\n")
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path / "captured")],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


def _shard_faults(monkeypatch):
    """The reliability tests' fault injection: a shard's temp file that fails."""
    monkeypatch.syspath_prepend(str(Path(__file__).parents[1] / "reliability"))
    import shard_faults

    return shard_faults


# --- the runner's side ----------------------------------------------------------------


@needs_standby
def test_forked_workers_write_where_the_launcher_writes_at_hand_off(hand_offs, capfd):
    options = pipeline_options(["--direct_num_workers=1", *CLOUDPICKLE])
    with standby.started(1) as process:
        with beam.Pipeline(options=options) as p:
            _ = (p | beam.Create(["hello"]) | beam.Reshuffle()
                 | beam.Map(lambda text: __import__("os").write(
                     2, f"{text} from a child of {__import__('os').getppid()}\n".encode())))
    assert len(hand_offs) == 1 and hand_offs[0]
    assert f"hello from a child of {process.pid}" in capfd.readouterr().err


@needs_standby
def test_a_dead_standby_means_new_workers(hand_offs, tmp_path):
    with standby.started(2) as process:
        process.send_signal(signal.SIGKILL)
        process.wait()
        pids = _worker_pids(pipeline_options([*TWO_WORKERS, *CLOUDPICKLE]), tmp_path / "pids")
    assert hand_offs == [] and pids and os.getpid() not in pids


@needs_standby
@exhaustive  # a standby that cannot serve means new workers: test_a_dead_standby_means_new_workers
def test_a_second_run_gets_new_workers(hand_offs, tmp_path):
    options = pipeline_options([*TWO_WORKERS, *CLOUDPICKLE])
    with standby.started(2):
        first = _worker_pids(options, tmp_path / "first")
        assert len(hand_offs) == 2 and all(hand_offs) and set(hand_offs) >= first
        # The standby forks the workers of one run: the next starts its own, as usual.
        again = _worker_pids(options, tmp_path / "second")
        assert len(hand_offs) == 2 and not again & first and os.getpid() not in again


@needs_standby
@exhaustive  # a standby that cannot give a worker means a new one: test_a_dead_standby_means_new_workers
def test_a_standby_that_fails_before_forking_means_new_workers(hand_offs, monkeypatch, tmp_path):
    # Alive when asked, gone before it answers: an import that crashed. It lives 3 s: a
    # loaded machine may take over a second to build the pipeline and ask for workers.
    monkeypatch.setattr(standby, "_COMMAND",
                        (sys.executable, "-c", "import time; time.sleep(3); raise SystemExit(1)"))
    with standby.started(2):
        pids = _worker_pids(pipeline_options([*TWO_WORKERS, *CLOUDPICKLE]), tmp_path / "pids")
    assert hand_offs == [None, None]
    assert pids and os.getpid() not in pids


@needs_standby
def test_a_forked_workers_exit_code_reaches_the_runner():
    # Options that are not JSON make Beam's worker fail at start; the runner must see it.
    environment = {**os.environ, "CONTROL_API_SERVICE_DESCRIPTOR": "url: 'localhost:1'",
                   "PIPELINE_OPTIONS": "not json"}
    environment.pop("LOGGING_API_SERVICE_DESCRIPTOR", None)
    with standby.started(1):
        worker = standby.take().hand_off(environment)
        assert worker is not None
        assert runner._wait_for_worker(worker) == 1


@needs_standby
def test_a_forked_worker_can_be_killed():
    # Waiting for a control service nobody runs: alive until killed.
    environment = {**os.environ, "CONTROL_API_SERVICE_DESCRIPTOR": "url: 'localhost:1'",
                   "PIPELINE_OPTIONS": "{}"}
    environment.pop("LOGGING_API_SERVICE_DESCRIPTOR", None)
    with standby.started(1):
        worker = standby.take().hand_off(environment)
        assert worker.poll() is None
        worker.kill()
        assert worker.wait() == -signal.SIGKILL and worker.poll() == -signal.SIGKILL


@needs_standby
@exhaustive  # a standby that cannot serve means new workers: test_a_dead_standby_means_new_workers
def test_a_worker_whose_standby_died_is_waited_for_until_it_ends():
    environment = {**os.environ, "CONTROL_API_SERVICE_DESCRIPTOR": "url: 'localhost:1'",
                   "PIPELINE_OPTIONS": "{}"}
    environment.pop("LOGGING_API_SERVICE_DESCRIPTOR", None)
    with standby.started(1) as process:
        worker = standby.take().hand_off(environment)
        process.kill()
        process.wait()
        ended = threading.Event()
        waiter = threading.Thread(target=lambda: (worker.wait(), ended.set()))
        waiter.start()
        try:
            # The worker outlives its standby: the wait goes on while it runs.
            assert not ended.wait(1.0)
            worker.kill()
            assert ended.wait(10)
            assert worker.returncode is None and worker.status_lost  # lost with the standby
        finally:
            worker.kill()
            waiter.join(10)


@needs_standby
def test_the_standby_starts_with_the_workers_malloc_settings(monkeypatch):
    # glibc reads it as a process starts: the standby must have it from its start, as
    # workers started by the run have (recordbeam.pipeline.run sets it first).
    monkeypatch.delenv("MALLOC_ARENA_MAX", raising=False)
    monkeypatch.delenv("MALLOC_MMAP_THRESHOLD_", raising=False)
    monkeypatch.delenv("MALLOC_TRIM_THRESHOLD_", raising=False)
    with standby.started(1) as process:
        environment = b""
        for _ in range(100):  # empty for a moment while the process is being started
            with open(f"/proc/{process.pid}/environ", "rb") as f:
                environment = f.read()
            if environment:
                break
            time.sleep(0.01)
    for name in ("MALLOC_ARENA_MAX", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_"):
        assert f"{name}={os.environ[name]}".encode() in environment.split(b"\0")


def _probe_module(folder: Path, monkeypatch) -> tuple[str, Path]:
    """A module that, imported, appends the importing process's pid to a file; importable
    by processes started from here on."""
    record = folder / "imported_by"
    (folder / "preload_probe.py").write_text(
        f"import os\nwith open({str(record)!r}, 'a') as f:\n    f.write(f'{{os.getpid()}}\\n')\n")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [
        str(folder), os.environ.get("PYTHONPATH")])))
    return "preload_probe", record


def _importers(record: Path) -> list[int]:
    return [int(pid) for pid in record.read_text().split()] if record.exists() else []


@needs_standby
def test_the_standby_imports_the_preloaded_modules_once_for_all_its_workers(tmp_path, monkeypatch):
    module, record = _probe_module(tmp_path, monkeypatch)
    # Workers that wait for a control service nobody runs: alive until killed.
    environment = {**os.environ, "CONTROL_API_SERVICE_DESCRIPTOR": "url: 'localhost:1'",
                   "PIPELINE_OPTIONS": "{}"}
    environment.pop("LOGGING_API_SERVICE_DESCRIPTOR", None)
    with standby.started(2, preload=(module,)) as process:
        workers = [standby.take().hand_off(environment) for _ in range(2)]
        try:
            assert all(workers)
            # Imported by the standby before it forked: the workers have it already.
            assert _importers(record) == [process.pid]
        finally:
            for worker in workers:
                if worker is not None:
                    worker.kill()


@needs_standby
@exhaustive  # a standby that cannot give a worker means a new one: test_a_dead_standby_means_new_workers
def test_a_preloaded_module_that_fails_to_import_still_gives_workers(hand_offs, tmp_path):
    with standby.started(2, preload=("recordbeam_no_such_module",)):
        pids = _worker_pids(pipeline_options([*TWO_WORKERS, *CLOUDPICKLE]), tmp_path / "pids")
    assert len(hand_offs) == 2 and all(hand_offs) and set(hand_offs) >= pids


_FORKED_LAUNCHER = """
import json, os, sys
from recordbeam.cli import main as cli
from recordbeam.local import standby

held = open(sys.argv[1], "w")  # open in this process as it forks the standby
seen = []
hand_off = standby.Standby.hand_off

def parent(pid):
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])

def recorded(self, environment):
    worker = hand_off(self, environment)
    if worker is not None:  # alive: it waits for the runner, which waits for this call
        forker = parent(worker.pid)
        with open(f"/proc/{forker}/cmdline", "rb") as f:
            command = f.read().hex()
        fds = []
        for fd in os.listdir(f"/proc/{worker.pid}/fd"):
            try:
                fds.append(os.readlink(f"/proc/{worker.pid}/fd/{fd}"))
            except OSError:
                pass
        seen.append({"forker": forker, "forker_parent": parent(forker),
                     "forker_command": command, "fds": fds})
    return worker

standby.Standby.hand_off = recorded
code = cli.main(sys.argv[2:])
with open("/proc/self/cmdline", "rb") as f:
    print(json.dumps({"code": code, "pid": os.getpid(), "command": f.read().hex(),
                      "workers": seen}))
"""


@needs_standby
def test_the_command_forks_its_standby_from_itself_once_the_pipeline_is_built(
        coco_sample, tmp_path):
    # A launcher in a new interpreter, as the command runs: one thread until the run.
    held = tmp_path / "held-open"
    done = subprocess.run(
        [sys.executable, "-c", _FORKED_LAUNCHER, str(held),
         *_convert_args(coco_sample, tmp_path / "out")],
        capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.splitlines()[-1])
    assert result["code"] == 0
    workers = result["workers"]
    assert len(workers) == 2
    for worker in workers:
        # Forked by one standby, itself a fork of the launcher (the same command line:
        # no new interpreter), not by a `python -m recordbeam.local.worker --standby`.
        assert worker["forker_parent"] == result["pid"]
        assert worker["forker_command"] == result["command"]
        # Nothing the launcher held open reached the workers.
        assert str(held) not in worker["fds"]
    assert len({worker["forker"] for worker in workers}) == 1


@needs_standby
@exhaustive  # a standby that cannot serve means new workers: test_a_dead_standby_means_new_workers
def test_with_other_threads_running_the_command_starts_a_new_standby_with_its_pipeline_module(
        coco_sample, tmp_path, monkeypatch, hand_offs):
    # A fork could copy a lock another thread holds: a new interpreter instead, which
    # imports the command's pipeline module before forking the workers.
    spawned = []
    spawn = standby._spawn

    def recorded(workers, preload=()):
        spawned.append(tuple(preload))
        return spawn(workers, preload)

    monkeypatch.setattr(standby, "_spawn", recorded)
    monkeypatch.setattr(standby, "_only_thread", lambda: False)
    monkeypatch.setattr(standby, "_fork", lambda *_: pytest.fail("forked with threads running"))
    assert cli.main(_convert_args(coco_sample, tmp_path / "out")) == 0
    assert spawned == [(cli.PIPELINE_MODULE,)]
    assert len(hand_offs) == 2 and all(hand_offs)
    # The name is a module that defines the run's transforms.
    import importlib

    assert hasattr(importlib.import_module(cli.PIPELINE_MODULE), "WriteShards")


@needs_standby
def test_a_standby_whose_launcher_is_gone_exits_by_itself():
    orphan = standby._spawn(1)
    orphan.channel.close()  # what the launcher's exit does to it
    assert orphan.process.wait(timeout=120) == 0
