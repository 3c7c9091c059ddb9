"""A worker process of a local run that dies before the run is done ends the run.

Beam's FnApiRunner notices a worker's death only through its gRPC streams: a worker
killed once connected ends them, and the runner fails with "Channel closed prematurely";
one killed before it connected (the kernel's out-of-memory killer strikes while workers
import, in their first few hundred milliseconds) never opened them, and the runner waits
for its answers forever. So the local runner watches the processes themselves: when one
ends before the runner closed it, :meth:`RunWatch.worker_died` makes every wait on that
worker fail (:func:`fail_waits_on`) and the run raises :class:`WorkerDied`, naming the
process and how it ended, whatever error Beam raised on the way.

A death after the run's work is done does not fail the run: the output is complete. Nor
does one after the commit's task has finished, while the runner still waits for the
other workers' (empty) shares of that stage: :func:`recordbeam.pipeline.run` finds the
commit done and reports the death as a warning.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import uuid
from collections.abc import Iterator
from typing import Any

from recordbeam.errors import RecordbeamError
from recordbeam.local import internals


class WorkerDied(RecordbeamError):
    """A worker process of a local run ended while the run still needed it, or could not
    be started (exit 3)."""

    def __init__(self, message: str, *, pid: int | None = None,
                 returncode: int | None = None) -> None:
        super().__init__(message)
        self.pid = pid
        self.returncode = returncode

    @classmethod
    def ended(cls, pid: int, returncode: int | None) -> WorkerDied:
        return cls(f"worker process {pid} {how_it_ended(returncode)} before the run was "
                   "done, so the run stopped; see the log for what it was doing",
                   pid=pid, returncode=returncode)

    def after_commit(self, output_dir: str) -> str:
        """What to say when the run's commit was done all the same: the runner still had
        the dead worker's share of the commit's stage (an empty one) to wait for."""
        who = (f"worker process {self.pid} {how_it_ended(self.returncode)}"
               if self.pid is not None else str(self))
        return f"{who} after the run had committed {output_dir}: the output is complete"


def how_it_ended(returncode: int | None) -> str:
    """``was killed by SIGKILL ...``, ``exited with code 1``, as ``subprocess`` codes go
    (negative: the signal that ended it; None: not known)."""
    if returncode is None:
        return "ended (its exit status was lost with the standby process that forked it)"
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        if -returncode == signal.SIGKILL:
            return (f"was killed by {name} (as the kernel's out-of-memory killer does: "
                    "check the memory the run had)")
        return f"was killed by {name}"
    return f"exited with code {returncode}"


class RunWatch:
    """The worker deaths of one run, in the order they were seen."""

    def __init__(self) -> None:
        self.token = uuid.uuid4().hex
        self._deaths: list[WorkerDied] = []
        self._lock = threading.Lock()

    def worker_died(self, death: WorkerDied) -> None:
        with self._lock:
            self._deaths.append(death)

    def first_death(self) -> WorkerDied | None:
        with self._lock:
            return self._deaths[0] if self._deaths else None


_watches: dict[str, RunWatch] = {}
_watches_lock = threading.Lock()


@contextlib.contextmanager
def watching() -> Iterator[RunWatch]:
    """A :class:`RunWatch` for the run inside the block; its workers find it by
    :attr:`RunWatch.token` (:func:`watch_of`)."""
    watch = RunWatch()
    with _watches_lock:
        _watches[watch.token] = watch
    try:
        yield watch
    finally:
        with _watches_lock:
            _watches.pop(watch.token, None)


def watch_of(token: str) -> RunWatch | None:
    with _watches_lock:
        return _watches.get(token)


def fail_waits_on(handler: Any, death: WorkerDied) -> None:
    """Make the runner's waits on ``handler``'s worker raise ``death``: the answers it
    waits for (every instruction sent so far) and the outputs of its bundles. Called
    again while the runner goes on, it also fails what was sent since."""
    with contextlib.suppress(RuntimeError):  # a send in another thread changed the dict
        handler.control_conn.abort(death)
    internals.fail_data_channel(handler.data_conn, death)
