"""The run's log: everything written to file descriptor 2 during a run, by this process
and by the processes it starts, goes to a log file through a pipe."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from recordbeam.local.runner import worker_output_to_log


def test_what_a_child_process_writes_reaches_the_log_kept_after_a_failure():
    with pytest.raises(RuntimeError), worker_output_to_log() as (_console, log_path):
        subprocess.run([sys.executable, "-c", "import sys; sys.stderr.write('from a child')"],
                       check=True)
        os.write(2, b" and from here")
        raise RuntimeError("the run failed")
    try:
        with open(log_path) as log:
            assert log.read() == "from a child and from here"
    finally:
        os.unlink(log_path)


def test_the_log_of_a_run_that_ends_well_is_removed():
    with worker_output_to_log() as (_console, log_path):
        os.write(2, b"progress")
    assert not os.path.exists(log_path)


def test_a_process_that_outlives_the_run_holding_the_pipe_does_not_hold_the_command_up():
    started = time.monotonic()
    with worker_output_to_log():
        lingering = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        started = time.monotonic()
    try:
        assert time.monotonic() - started < 2
    finally:
        lingering.kill()
        lingering.wait()


def test_writes_to_stderr_never_fail_when_the_log_cannot_grow(monkeypatch):
    # The log's file refuses every write, as on a full disk: what is written to fd 2 is
    # dropped, never raised, so a worker's print of a failed bundle cannot fail.
    real_write = os.write

    def refusing(fd, data):
        if os.path.realpath(f"/proc/self/fd/{fd}") == os.path.realpath(log_path):
            raise OSError(28, "No space left on device")
        return real_write(fd, data)

    with pytest.raises(RuntimeError), worker_output_to_log() as (_console, log_path):
        monkeypatch.setattr(os, "write", refusing)
        for _ in range(100):
            print("x" * 10_000, file=sys.stderr, flush=True)  # 1 MB: more than a pipe holds
        raise RuntimeError("the run failed")  # the log is kept
    monkeypatch.undo()
    try:
        assert os.path.getsize(log_path) == 0  # every write was refused, none raised
    finally:
        os.unlink(log_path)
