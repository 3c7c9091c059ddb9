"""A local worker process killed (kill -9, as the kernel's out-of-memory killer does) at any
moment of a run: the command ends within seconds, naming the process and the signal.

Each run is the ``recordbeam`` command with two worker processes, forked by its standby;
the test finds the workers as the standby's children and kills one of them at a chosen
moment. Which input format is read makes no difference to the runner: COCO stands for all.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import apache_beam as beam
import pytest
from lanes import one_in_make_test
from reliability_data import convert_argv, runs_then_raises, snapshot

from recordbeam.cli import main as cli
from recordbeam.dataset.layout import MANIFEST
from recordbeam.local import standby
from recordbeam.local.worker_deaths import WorkerDied

CASE = pytest.mark.case

#: How long the command may take to end once its worker is killed.
DEADLINE = 30.0
#: The worker processes of each run here (--direct_num_workers).
WORKERS = 2

pytestmark = pytest.mark.skipif(not standby.SUPPORTED, reason="forked workers need Linux")


def _processes() -> dict[int, tuple[int, int, str]]:
    """pid -> (parent pid, process group, state) of every process."""
    found = {}
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        found[int(entry)] = (int(fields[1]), int(fields[2]), fields[0])
    return found


def _workers(launcher: int) -> list[int]:
    """The worker processes of a command: its standby's children that have taken over
    from the standby (their standard error is the launcher's during the run, the pipe to
    the run's log, no longer /dev/null; a child takes it on only once the launcher holds
    it as the run's worker)."""
    table = _processes()
    standbys = [pid for pid, (parent, _group, _state) in table.items() if parent == launcher]
    try:
        log = os.readlink(f"/proc/{launcher}/fd/2")
    except OSError:
        return []
    workers = []
    for pid, (parent, _group, state) in table.items():
        if parent in standbys and state != "Z":
            try:
                if log.startswith("pipe:") and os.readlink(f"/proc/{pid}/fd/2") == log:
                    workers.append(pid)
            except OSError:
                continue
    return sorted(workers)


def _alive_in_group(group: int) -> list[int]:
    return [pid for pid, (_parent, g, state) in _processes().items() if g == group and state != "Z"]


def _connected(pid: int) -> bool:
    """Whether a worker has opened its connections to the runner (sockets beyond the
    standby's channel)."""
    try:
        links = [os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")]
    except OSError:
        return False
    return sum(link.startswith("socket:") for link in links) >= 3


def _kill_a_worker(argv, ready) -> tuple[int, int, str, float]:
    """Start the command, SIGKILL the first worker for which ``ready(pid)`` holds, and
    still holds once the worker is stopped (SIGSTOP: it cannot move past the moment
    between the check and the kill); returns (its pid, the command's exit code, its
    stderr, seconds from kill to end)."""
    proc = subprocess.Popen([sys.executable, "-m", "recordbeam", *argv], start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    started = time.monotonic()
    victim = None
    workers: list[int] = []
    try:
        while victim is None:
            assert proc.poll() is None, "the run ended before a worker could be killed"
            assert time.monotonic() - started < 120, "no worker reached the moment"
            if len(workers) < WORKERS:  # the whole process table: only until both are found
                workers = _workers(proc.pid)
            victim = next((pid for pid in workers if ready(pid)), None)
            if victim is not None:
                os.kill(victim, signal.SIGSTOP)
                if not ready(victim):  # it moved on meanwhile
                    os.kill(victim, signal.SIGCONT)
                    victim = None
            if victim is None:
                time.sleep(0.001)
        os.kill(victim, signal.SIGKILL)
        killed = time.monotonic()
        _out, err = proc.communicate(timeout=DEADLINE)
        ended = time.monotonic() - killed
    finally:
        if proc.poll() is None:  # the hang this test is about: leave nothing behind
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    deadline = time.monotonic() + 10
    while _alive_in_group(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive_in_group(proc.pid), "processes outlived the failed run"
    return victim, proc.returncode, err, ended


def _writing_shards(out: str):
    """Whether a worker has a shard's temp file open: it is writing that shard, so the
    commit, which waits for every shard, has not begun."""
    temp = os.path.realpath(out) + "/.recordbeam-tmp-"

    def ready(pid: int) -> bool:
        try:
            links = [os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")]
        except OSError:
            return False
        return any(link.startswith(temp) and ".tfrecord." in link for link in links)
    return ready


@pytest.mark.parametrize(
    "moment",
    one_in_make_test([
        pytest.param("taken over", marks=CASE(
            "Local worker killed (SIGKILL, as the out-of-memory killer does) as soon as it "
            "has taken over from the standby, before it connected to the runner",
            "run fails within seconds (exit 3) naming the worker's pid and SIGKILL; no "
            "process lingers; nothing looks finished; the rerun equals a clean run")),
        pytest.param("connected", marks=CASE(
            "Local worker killed (SIGKILL) once connected to the runner",
            "the same: exit 3 within seconds, naming its pid and SIGKILL; the rerun equals "
            "a clean run")),
        pytest.param("writing shards", marks=CASE(
            "Local worker killed (SIGKILL) while shards are written",
            "the same: exit 3 within seconds, naming its pid and SIGKILL; the rerun equals "
            "a clean run")),
    ], keep=2),
)
def test_a_killed_worker_ends_the_run_naming_it(larger_sample, larger_clean, tmp_path, moment):
    out = str(tmp_path / "out")
    ready = {
        "taken over": lambda pid: True,
        "connected": _connected,
        "writing shards": _writing_shards(out),
    }[moment]
    argv = ["convert", "coco", "--images", larger_sample.images_dir, "--annotations",
            larger_sample.annotations, "--output", out, "--quiet", "--shards", "2",
            "--direct_running_mode=multi_processing", f"--direct_num_workers={WORKERS}"]
    victim, code, err, seconds = _kill_a_worker(argv, ready)
    lines = err.splitlines()
    assert code == 3, err
    assert lines[0].startswith(f"recordbeam: worker process {victim} was killed by SIGKILL"), err
    assert len(lines) == 2 and "the run's log is in" in lines[1], err
    os.unlink(lines[1].rsplit(" ", 1)[1])
    assert seconds < 10, f"the run took {seconds:.1f} s to end after its worker died"
    files = snapshot(out) if os.path.isdir(out) else {}
    assert MANIFEST not in files
    assert cli.main(convert_argv(larger_sample.images_dir, larger_sample.annotations, out, "--shards", "2")) == 0
    assert snapshot(out) == larger_clean


@pytest.mark.parametrize("layout", one_in_make_test(["fresh", "second split"]))
@CASE("Local worker killed once the run's commit is done, while the runner still waits for "
      "its (empty) share of the commit's stage",
      "the run succeeds (exit 0): the output equals a clean run's, and a warning names the "
      "worker, SIGKILL and the log")
def test_a_worker_killed_after_the_commit_is_a_warning(larger_sample, larger_clean, tmp_path,
                                                       capsys, monkeypatch, layout):
    out = tmp_path / "out"
    if layout == "second split":  # a manifest is there before the run: not taken for its commit
        assert cli.main(convert_argv(larger_sample.images_dir, larger_sample.annotations,
                                     str(out), "--shards", "2", "--split", "val")) == 0
        capsys.readouterr()
    monkeypatch.setattr(beam.Pipeline, "run", runs_then_raises(WorkerDied.ended(4321, -9)))
    code = cli.main(convert_argv(larger_sample.images_dir, larger_sample.annotations, str(out),
                                 "--shards", "2"))
    err = capsys.readouterr().err
    assert code == 0, err
    warning = next(line for line in err.splitlines() if "4321" in line)
    assert warning.startswith("warning: worker process 4321 was killed by SIGKILL"), err
    assert f"after the run had committed {out}: the output is complete" in warning
    log = warning.rsplit("; the run's log is in ", 1)[1]
    os.unlink(log)
    files = snapshot(out)
    assert not [name for name in files if name.startswith(".recordbeam-")]
    if layout == "fresh":
        assert files == larger_clean
    else:
        shards = {name: data for name, data in larger_clean.items() if name.startswith("train-")}
        assert shards and {name: files[name] for name in shards} == shards
        assert set(json.loads(files[MANIFEST])["splits"]) == {"train", "val"}


@CASE("Local worker killed before the commit of a second split into a finished folder",
      "exit 3 naming the worker: the folder's manifest (the first split's) is not taken for "
      "this run's commit, and stays as it was")
def test_a_worker_death_before_the_commit_still_fails_the_run(larger_sample, tmp_path, capsys,
                                                              monkeypatch):
    out = tmp_path / "out"
    assert cli.main(convert_argv(larger_sample.images_dir, larger_sample.annotations, str(out),
                                 "--shards", "2", "--split", "val")) == 0
    before = snapshot(out)
    capsys.readouterr()

    def dies_before_the_commit(pipeline, *args, **kwargs):
        raise WorkerDied.ended(4321, -9)

    monkeypatch.setattr(beam.Pipeline, "run", dies_before_the_commit)
    code = cli.main(convert_argv(larger_sample.images_dir, larger_sample.annotations, str(out),
                                 "--shards", "2"))
    lines = capsys.readouterr().err.splitlines()
    assert code == 3, lines
    assert lines[0].startswith("recordbeam: worker process 4321 was killed by SIGKILL"), lines
    assert "before the run was done" in lines[0]
    os.unlink(lines[1].rsplit(" ", 1)[1])
    assert snapshot(out) == before
