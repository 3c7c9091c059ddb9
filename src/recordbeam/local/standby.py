"""Standby workers: the worker processes of a local run, made ready before the runner needs them.

On :class:`recordbeam.local.runner.LocalRunner` a run starts one worker process per core once
its pipeline is built, and each spends over a second importing Beam while the launcher
waits. The ``recordbeam`` command knows right after parsing its arguments whether it will
run that way (:func:`workers_needed`), and gets one standby process ready for the run
(:func:`started`). When the runner starts a worker it asks for one instead (:func:`take`,
:meth:`Standby.hand_off`): the standby forks, and the child becomes the worker with what a
new process would have inherited at that moment: the environment (the runner's
addresses, the pipeline options), the working folder, and the launcher's standard output
and error, passed as open file descriptors, so it writes into the run's log exactly as a
worker started then would. The standby reports each worker's exit code to the launcher.

The command's standby is forked from the launcher itself (:func:`fork_from_launcher`)
once the launcher has imported Beam and built the pipeline, just before the run starts
its first thread: Beam and the pipeline's modules are then imported once per command,
not twice (0.8 of a 20k-image COCO run's 9.4 CPU s here), and the workers are ready as
soon as the run asks for them. The child is made to look like a new process first:
SIGINT as a new interpreter would have it, no logging handler, no file descriptor of the
launcher's but its channel, standard output and error on ``/dev/null`` (``sys.stdout``
and ``sys.stderr`` too, not the launcher's objects). Where other threads already run
(the library used from a program), a fork could copy a lock one of them holds: the
standby is then a new interpreter (:func:`started` without ``fork_later``), which
imports Beam's worker and the ``preload`` modules itself. One standby that forks, rather
than a new interpreter per worker: on two cores, two more processes importing Beam beside
the launcher slowed it by ~0.5 s; forked workers also share the imported modules' memory.

Whatever goes wrong before a worker is running (the standby died, its import failed, the
platform cannot fork or pass file descriptors) only means the runner starts a worker the
usual way. A standby nobody used is ended when the command is done; one whose launcher
died exits once its workers have. This module does not import Beam.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import json
import logging
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence

from recordbeam.errors import STOPPING_SIGNALS
from recordbeam.local.malloc_arenas import tune_malloc

#: Linux only: Windows cannot fork, and on macOS forking a process that has loaded native
#: libraries is unsafe (Python's multiprocessing starts fresh processes there).
SUPPORTED = sys.platform.startswith("linux") and hasattr(socket, "send_fds")

#: The runner local runs use by default. Named here, where no Beam is imported, so that
#: argument parsing can tell a local run; ``recordbeam.local.runner`` takes it from here.
LOCAL_RUNNER = "recordbeam.local.runner.LocalRunner"
_COMMAND = (sys.executable, "-m", "recordbeam.local.worker", "--standby")
_ACCEPTED = b"+"  # then the worker's pid
_EXITED = b"exit "  # then its exit code, as subprocess reports it

_lock = threading.Lock()
_current: list[_StandbyProcess | _Later] = []  # the standby of the command running, if any


def workers_needed(beam_args: Sequence[str]) -> int:
    """How many worker processes a run with these Beam arguments starts: ``direct_num_workers``
    (default: one per core) on our local runner in ``multi_processing`` mode, which
    :func:`recordbeam.local.runner.pipeline_options` picks when neither is named; 0 otherwise.

    Reads the arguments without Beam. A wrong guess costs time, never correctness: an
    unused standby is ended, a worker without one is started as usual.
    """
    given = _last_values(beam_args)
    if given.get("runner", LOCAL_RUNNER) != LOCAL_RUNNER:
        return 0
    if given.get("direct_running_mode", "multi_processing") != "multi_processing":
        return 0
    try:
        count = int(given.get("direct_num_workers", "0"))
    except ValueError:
        return 0
    if count == 0:  # Beam's own meaning of 0, and our default: one per core
        return os.cpu_count() or 1
    return max(count, 0)


def _last_values(args: Sequence[str]) -> dict[str, str]:
    """The last value of each ``--name=value`` or ``--name value`` argument, as argparse reads them."""
    values: dict[str, str] = {}
    for position, arg in enumerate(args):
        if arg.startswith("--"):
            name, equals, value = arg[2:].partition("=")
            if not equals:
                value = args[position + 1] if position + 1 < len(args) else ""
            values[name] = value
    return values


# --- the launcher's side ----------------------------------------------------------------


class _StandbyProcess:
    """The standby process, its request channel, and how many workers it may still fork."""

    def __init__(self, process: subprocess.Popen | _ForkedChild, channel: socket.socket,
                 workers: int) -> None:
        self.process = process
        self.channel = channel
        self.workers_left = workers
        self.forked = 0
        self.sending = threading.Lock()

    def end(self) -> None:
        """Close the channel: the standby exits once the workers it forked have."""
        self.channel.close()
        if not self.forked and self.process.poll() is None:
            self.process.kill()  # maybe still importing: no need to wait for that
        try:
            self.process.wait(timeout=2)
        except subprocess.TimeoutExpired:  # a worker still runs: its runner is going away too
            self.process.kill()
            self.process.wait()


class _Later:
    """A standby the command will fork from itself (:func:`fork_from_launcher`)."""

    def __init__(self, workers: int, preload: Sequence[str]) -> None:
        self.workers_left = workers
        self.preload = tuple(preload)


@contextlib.contextmanager
def started(workers: int, preload: Sequence[str] = (), *,
            fork_later: bool = False) -> Iterator[subprocess.Popen | None]:
    """Start a standby able to fork ``workers`` workers for the runs inside the block, and
    end it at the end of the block. Yields its process (None when none was started now).

    ``preload``: modules the standby imports after Beam's worker, before it forks: those
    that define the run's transforms (the command's pipeline module). Each worker would
    otherwise import them itself as it unpickles its first stage, one copy per worker
    while the run waits; a module that fails to import is left for the worker to import
    (and report) as usual.

    ``fork_later``: start none now; the first run inside the block forks it from this
    process (:func:`fork_from_launcher`), with everything this process has imported by then.
    """
    standby: _StandbyProcess | _Later | None = None
    if SUPPORTED and workers > 0:
        # Workers read glibc's MALLOC_ settings as they start, and this process starts now:
        # set them first, as the run would (recordbeam.pipeline.run) before starting workers.
        tune_malloc()
        if fork_later:
            standby = _Later(workers, preload)
        else:
            with contextlib.suppress(OSError):  # no more processes: the runner starts them
                standby = _spawn(workers, preload)
    if standby is None:
        yield None
        return
    with _lock:
        position = len(_current)
        _current.append(standby)
    try:
        yield standby.process if isinstance(standby, _StandbyProcess) else None
    finally:
        with _lock:
            ended = _current.pop(position)  # the standby, or what it became when forked
        if isinstance(ended, _StandbyProcess):
            ended.end()


def fork_from_launcher(prepare: Callable[[], None], serve: Callable[[], None]) -> None:
    """Fork the standby :func:`started` left for later, if any, from this process: call it
    once the run's modules are imported, before the run starts a thread. ``prepare`` runs
    here just before the fork (the imports every worker needs); the child runs ``serve``
    (:func:`recordbeam.local.worker.serve_as_standby`), which never returns.

    With other threads running, a forked child could inherit a lock one of them holds, so
    the standby is started as a new interpreter instead. Failing both, the runner starts
    its workers as usual."""
    with _lock:
        later = _current[-1] if _current else None
    if not isinstance(later, _Later):
        return
    standby = None
    with contextlib.suppress(OSError):
        if _only_thread():
            prepare()
            standby = _fork(later.workers_left, serve)
        else:
            standby = _spawn(later.workers_left, later.preload)
    if standby is not None:
        with _lock:
            _current[_current.index(later)] = standby  # ended with the block of started()


def _only_thread() -> bool:
    return threading.active_count() == 1


def _fork(workers: int, serve: Callable[[], None]) -> _StandbyProcess:
    """The standby, forked from this process; see the module's docstring."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()  # or the child would write this process's buffered output again
    # Nor need the child collect what this process allocated so far (see serve()).
    gc.freeze()
    try:
        pid = os.fork()
    except BaseException:
        gc.unfreeze()
        ours.close()
        theirs.close()
        raise
    if pid == 0:
        try:
            ours.detach()
            _as_new_process(theirs.detach())
            serve()
        finally:
            os._exit(1)
    gc.unfreeze()
    theirs.close()
    return _StandbyProcess(_ForkedChild(pid), ours, workers)


def _as_new_process(channel: int) -> None:
    """In the standby forked from the launcher: what a new interpreter would have, as
    :func:`_spawn` starts it: the channel as standard input, standard output and error
    on /dev/null with ``sys.stdout`` and ``sys.stderr`` writing to them, no other file
    descriptor, no logging handler, SIGINT raising KeyboardInterrupt and SIGTERM and
    SIGHUP ending the process, unless the launcher was started with them ignored."""
    if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    for signum in STOPPING_SIGNALS:
        if signal.getsignal(signum) is not signal.SIG_IGN:
            signal.signal(signum, signal.SIG_DFL)
    signal.set_wakeup_fd(-1)
    logging.getLogger().handlers.clear()
    os.dup2(channel, 0)
    devnull = os.open(os.devnull, os.O_WRONLY)
    for fd in (1, 2):
        os.dup2(devnull, fd)
    os.closerange(3, os.sysconf("SC_OPEN_MAX"))  # Linux only (SUPPORTED)
    # The launcher's sys.stdout and sys.stderr may write to a descriptor just closed (a
    # program's or pytest's capture of them): a worker's print to them would raise, and
    # Beam's SDK worker prints a failed bundle's traceback before it reports the failure,
    # so the runner would wait for that bundle forever. Streams on 1 and 2, as a new
    # interpreter has; a worker's 1 and 2 become the launcher's (_become_worker).
    sys.stdout = open(1, "w", closefd=False)
    sys.stderr = open(2, "w", buffering=1, errors="backslashreplace", closefd=False)


class _ForkedChild:
    """The parts of ``subprocess.Popen`` :class:`_StandbyProcess` uses, for a forked child."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:  # reaped elsewhere: its code is lost
                pid, status = self.pid, 1 << 8
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(f"standby {self.pid}", timeout)
            time.sleep(0.005)
        return self.returncode

    def kill(self) -> None:
        if self.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)


def _spawn(workers: int, preload: Sequence[str] = ()) -> _StandbyProcess:
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        # Started before the run sends its output to the log: nothing for the terminal.
        process = subprocess.Popen((*_COMMAND, *preload), stdin=theirs,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    except BaseException:
        ours.close()
        raise
    finally:
        theirs.close()
    return _StandbyProcess(process, ours, workers)


class Standby:
    """A standby worker (:func:`take`): one the standby process forks on :meth:`hand_off`."""

    def __init__(self, standby: _StandbyProcess) -> None:
        self._standby = standby

    def hand_off(self, environment: Mapping[str, str]) -> Worker | None:
        """Fork a worker that starts with ``environment``, this process's working folder and
        its file descriptors 1 and 2 (as a new process would inherit them), and wait until
        it has taken them on (the standby may still be importing). Returns the running
        worker, or None when the standby could not fork one: then start a worker as usual.
        """
        ours, theirs = socket.socketpair()
        try:
            with self._standby.sending:
                socket.send_fds(self._standby.channel, [b"w"], [1, 2, theirs.fileno()])
            theirs.close()
            message = json.dumps({"environment": dict(environment), "cwd": os.getcwd()})
            ours.sendall(message.encode("utf-8") + b"\n")
            answer = _read_line(ours)
        except OSError:  # the standby is gone
            answer = b""
        finally:
            theirs.close()
        if not answer.startswith(_ACCEPTED):  # no fork, or the child failed before starting
            ours.close()
            return None
        with _lock:
            self._standby.forked += 1
        return Worker(int(answer[len(_ACCEPTED):]), ours)


def take() -> Standby | None:
    """A worker the running command's standby can fork, or None: then start one as usual."""
    with _lock:
        if not _current or not isinstance(_current[-1], _StandbyProcess):
            return None  # none, or one not forked yet: the runner starts its workers
        standby = _current[-1]
        if standby.workers_left <= 0 or standby.process.poll() is not None:
            return None
        standby.workers_left -= 1
    return Standby(standby)


class Worker:
    """A worker forked by the standby: a child of the standby, not of this process, so its
    exit code comes from the standby. The parts of ``subprocess.Popen`` the runner uses.

    A process descriptor (``pidfd``) taken at hand-off follows the worker itself: should
    the standby die first, :meth:`wait` still returns only once the worker has ended
    (its exit code is then unknown: ``returncode`` None, ``status_lost`` True), and
    :meth:`kill` can never reach another process that reused its pid."""

    def __init__(self, pid: int, channel: socket.socket) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self.status_lost = False
        self._channel = channel
        self._pidfd = _open_pidfd(pid)
        self._standby_gone = False
        self._ended = False
        self._lock = threading.Lock()

    def wait(self) -> int | None:
        while True:
            with self._lock:
                if self._settled():
                    return self.returncode
                watched = self._pidfd if self._standby_gone else self._channel
            with contextlib.suppress(OSError, ValueError):  # closed by a poll meanwhile
                select.select([watched], [], [])

    def poll(self) -> int | None:
        with self._lock:
            self._settled()
            return self.returncode

    def kill(self) -> None:
        with self._lock:
            if self._settled():
                return
            with contextlib.suppress(ProcessLookupError, OSError):
                if self._pidfd is not None:
                    signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)
                else:  # not reaped by the standby yet: the pid is still the worker's
                    os.kill(self.pid, signal.SIGKILL)

    def _settled(self) -> bool:
        """Whether the worker has ended, learning it without waiting: its exit code from
        the standby, or, once the standby is gone, its end from its pidfd."""
        if self._ended:
            return True
        if not self._standby_gone:
            if not _readable(self._channel):
                return False
            line = _read_line(self._channel)
            self._channel.close()
            if line.startswith(_EXITED):
                self.returncode = int(line[len(_EXITED):])
                return self._end()
            self._standby_gone = True  # no exit code: the worker may still run
        if self._pidfd is None or _readable(self._pidfd):
            self.status_lost = True
            return self._end()
        return False

    def _end(self) -> bool:
        self._ended = True
        if self._pidfd is not None:
            os.close(self._pidfd)
            self._pidfd = None
        return True


def _open_pidfd(pid: int) -> int | None:
    """A descriptor of process ``pid`` (Linux 5.3 and later), or None."""
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None


def _readable(channel: socket.socket | int) -> bool:
    return bool(select.select([channel], [], [], 0)[0])


def _read_line(channel: socket.socket) -> bytes:
    """One short line, or what came before the end of the stream; nothing read beyond it."""
    line = b""
    while not line.endswith(b"\n"):
        byte = channel.recv(1)
        if not byte:
            break
        line += byte
    return line


# --- the standby's side -----------------------------------------------------------------


def serve(preload: Sequence[str] = ()) -> None:
    """Run as the standby, with Beam's worker imported: import the ``preload`` modules,
    then fork a worker for each request on standard input. Returns only in a forked child,
    set up to run as the worker; the standby itself exits once its launcher has closed the
    channel and its workers are gone.
    """
    try:
        for name in preload:
            with contextlib.suppress(Exception):  # the worker imports it again, and reports
                importlib.import_module(name)
        # What is imported by now lives as long as the workers: their garbage collector
        # need not scan it, nor copy the pages it shares with the standby.
        gc.freeze()
        fds = _fork_on_request()
    except BaseException:  # noqa: BLE001 - whatever it was, the standby must not go on as a worker
        os._exit(1)
    _become_worker(*fds)


def _fork_on_request() -> tuple[int, int, int]:
    """The standby's loop; returns only in a forked child: its stdout, stderr and channel."""
    requests = socket.socket(fileno=0)
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_read, False)
    os.set_blocking(wake_write, False)
    signal.set_wakeup_fd(wake_write)
    signal.signal(signal.SIGCHLD, lambda _signal, _frame: None)  # wakes select() up
    workers: dict[int, socket.socket] = {}  # pid -> where to report its exit code
    listening = True
    while listening or workers:
        ready = select.select([requests, wake_read] if listening else [wake_read], [], [])[0]
        if wake_read in ready:
            with contextlib.suppress(BlockingIOError):
                os.read(wake_read, 512)
            _report_exits(workers)
        if requests not in ready:
            continue
        try:
            data, fds, _flags, _address = socket.recv_fds(requests, 16, 3)
        except OSError:
            data, fds = b"", []
        if not data:  # the launcher is done, or gone
            listening = False
            continue
        if len(fds) != 3:
            for fd in fds:
                os.close(fd)
            continue
        stdout, stderr, status = fds
        try:
            pid = os.fork()
        except OSError:
            pid = None
        if pid == 0:
            # Nothing of the standby's stays open in the worker. Detached, not closed, so
            # that no socket object closes a number the worker reuses once it is collected.
            signal.set_wakeup_fd(-1)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            for fd in (wake_read, wake_write, *(w.detach() for w in workers.values())):
                os.close(fd)
            requests.detach()  # fd 0: replaced in _become_worker
            return stdout, stderr, status
        os.close(stdout)
        os.close(stderr)
        if pid is None:
            os.close(status)  # the launcher reads the end of the stream: no worker
        else:
            workers[pid] = socket.socket(fileno=status)
    os._exit(0)


def _report_exits(workers: dict[int, socket.socket]) -> None:
    while workers:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        channel = workers.pop(pid, None)
        if channel is not None:
            with contextlib.suppress(OSError):
                channel.sendall(_EXITED + str(os.waitstatus_to_exitcode(status)).encode() + b"\n")
            channel.close()


def _become_worker(stdout: int, stderr: int, status: int) -> None:
    """In the forked child: take on the environment the launcher sends, answer, and return
    to run as the worker. Never returns on failure."""
    try:
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)  # also closes the standby's request channel
        os.close(devnull)
        channel = socket.socket(fileno=status)
        message = json.loads(_read_line(channel))
        os.chdir(message["cwd"])
        os.environ.clear()
        os.environ.update(message["environment"])
        # Accepted before it takes on the launcher's output: once it writes to the
        # launcher's standard error it is the run's worker, and its death is reported as
        # one. Killed between the two, it would have been replaced unseen.
        channel.sendall(_ACCEPTED + str(os.getpid()).encode() + b"\n")
        channel.close()
        for fd, target in ((stdout, 1), (stderr, 2)):
            os.dup2(fd, target)
            os.close(fd)
    except BaseException:  # noqa: BLE001 - never return into the standby's loop
        os._exit(1)
