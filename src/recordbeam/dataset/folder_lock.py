"""One run writes an output folder at a time: the folder's lock, which is also the record
of what recordbeam left in it outside the manifest.

A run takes the lock before its pipeline starts (:func:`acquire`): the file
``.recordbeam-lock.json`` in the output folder, naming the run (its id is the name of its
temp folder), where it runs (host, boot, pid) and when it started. A second run into the
folder finds it and is refused (:class:`FolderLocked`, exit 2) naming the first. The
commit checks that the lock still names its own run before it changes anything in the
folder (:func:`check_held`), and gives it up when it is done; a run that fails gives it up
too, keeping in it the record of what it leaves behind.

The lock is also the folder's record of ownership outside the manifest: the temp folders
recordbeam made there (the holder's, and those of runs killed before they could remove
theirs, whose commits a later run may have to finish) and the loose files it wrote
(``failed-run-rejects.jsonl``). A file is never ours because of its name alone: a
``.recordbeam-tmp-notes`` folder no lock names is the user's.

What each filesystem guarantees:

- Local folders (and other POSIX mounts): the lock file is written beside its name, then
  hard-linked to it (``O_EXCL`` where the filesystem has no hard links), so of two runs
  starting together exactly one gets it, and the other reads it whole. A lock whose run was killed
  (``kill -9``, a crash, a reboot) is recognised as soon as its host sees the process
  gone, and taken over. Taking over (a gone run's lock, or the record a failed run left)
  replaces the file: two runs doing so at the same moment may both go on, and the
  commit's check lets only the one the lock names change the folder, as on object
  stores below.
- Object stores (``gs://``, ``s3://``) and other Beam filesystems: Beam's filesystem API
  has no create-if-absent, so the lock is written after checking it is absent, then read
  back. Two runs starting within the same moment can both believe they hold it; the
  commit's check then lets only the one the lock names change the folder, and the other
  fails before touching it. Nothing committed is lost either way.
- A lock whose owner cannot be seen (another host, a detached job) is stale once older
  than :data:`STALE_AFTER_HOURS`. ``--break-lock`` takes any lock at once: use it when you
  know its run is gone.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, replace

from recordbeam import filesystems
from recordbeam.dataset.names import TEMP_PREFIX, OutputFolderError

LOCK = ".recordbeam-lock.json"
FORMAT = "recordbeam-lock/1"
#: Age after which a lock whose owner cannot be checked from here is taken over.
STALE_AFTER_HOURS = 24.0
#: Reads of an empty lock file before it is taken for a file recordbeam did not write.
_READ_ATTEMPTS = 6
#: Tries to create the lock while other runs keep creating and removing it.
_CREATE_ATTEMPTS = 20


class FolderLocked(OutputFolderError):
    """Another run holds the output folder, or took it over while this run went on."""


@dataclass(frozen=True)
class LockRecord:
    """What ``.recordbeam-lock.json`` says. ``run`` is None when no run holds the folder
    and the file only records what earlier runs left (``temp_folders``, ``files``)."""

    run: str | None
    host: str = ""
    boot: str = ""
    pid: int | None = None
    pid_started: str = ""
    started: float = 0.0
    command: str = ""
    temp_folders: tuple[str, ...] = ()
    files: tuple[str, ...] = ()

    def to_bytes(self) -> bytes:
        data = {"format": FORMAT, **asdict(self)}
        data["temp_folders"], data["files"] = list(self.temp_folders), list(self.files)
        return (json.dumps(data, indent=1, sort_keys=True) + "\n").encode("utf-8")

    def describe(self) -> str:
        where = f"pid {self.pid} on {self.host}" if self.pid else f"started from {self.host}"
        when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(self.started))
        return f"run {self.run} ({self.command or 'recordbeam'}, {where}, since {when})"


def run_id_of(temp_dir: str) -> str:
    """The id of the run writing through the temp folder ``temp_dir``."""
    return temp_dir.rstrip("/").rsplit("/", 1)[-1].removeprefix(TEMP_PREFIX)


def temp_folder_of(run_id: str) -> str:
    return TEMP_PREFIX + run_id


def read(output_dir: str) -> LockRecord | None:
    """The folder's lock record, or None when it has none. Raises
    :class:`recordbeam.dataset.names.OutputFolderError` for a file of that name that is
    not one recordbeam wrote (it is never read as ours, nor deleted)."""
    path = filesystems.join(output_dir, LOCK)
    for attempt in range(_READ_ATTEMPTS):
        last = attempt == _READ_ATTEMPTS - 1
        try:
            data = filesystems.read_bytes(path)
        except Exception:  # noqa: BLE001 - each filesystem says "missing" its own way
            if not filesystems.exists(path):
                return None
            if last:
                raise
            continue  # created between the read and the check: read it again
        record = _parse(data)
        if record is not None or data or last:
            break
        # Empty: a lock being created where the filesystem cannot do it in one step.
        time.sleep(0.05 * (attempt + 1))
    if record is None:
        raise OutputFolderError(
            f"{path} is not a lock recordbeam wrote; recordbeam keeps its lock under that "
            "name: move the file elsewhere, then run again")
    return record


def _parse(data: bytes) -> LockRecord | None:
    try:
        value = json.loads(data)
        if not isinstance(value, dict) or value.pop("format", None) != FORMAT:
            return None
        value["temp_folders"] = tuple(value.get("temp_folders", ()))
        value["files"] = tuple(value.get("files", ()))
        return LockRecord(**value)
    except (ValueError, TypeError):
        return None


def owned_names(record: LockRecord | None) -> tuple[set[str], set[str]]:
    """(temp folder names, loose file names) the record says recordbeam made."""
    if record is None:
        return set(), set()
    return set(record.temp_folders), set(record.files)


# --- who holds it ------------------------------------------------------------------------


def _boot_id() -> str:
    with contextlib.suppress(OSError):
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip()
    return ""


def _process_started(pid: int) -> str:
    """When process ``pid`` started (clock ticks since boot), '' when unknown: tells a pid
    reused by another process from the process that took the lock."""
    with contextlib.suppress(OSError, IndexError):
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    return ""


def _on_this_host(record: LockRecord) -> bool:
    """Same host name, and the same boot where the system tells it (Linux): after a
    reboot no process of the lock's can be alive."""
    return record.host == socket.gethostname() and record.boot == _boot_id()


def _owner_gone(record: LockRecord) -> bool:
    """Whether the lock's run is known to be over: no run holds it, its process on this
    host is gone, or it is older than :data:`STALE_AFTER_HOURS`."""
    if record.run is None:
        return True
    if record.pid and os.name == "posix" and _on_this_host(record):
        try:
            os.kill(record.pid, 0)  # no signal sent: asks whether the process exists
        except ProcessLookupError:
            return True
        except PermissionError:
            pass
        now = _process_started(record.pid)
        return bool(now and record.pid_started and now != record.pid_started)  # pid reused
    return time.time() - record.started > STALE_AFTER_HOURS * 3600


# --- taking and giving it up -------------------------------------------------------------


@dataclass
class FolderLock:
    """A lock this process took (:func:`acquire`)."""

    output_dir: str
    record: LockRecord
    taken_over: LockRecord | None = None  # the stale lock this one replaced
    _released: bool = field(default=False, repr=False)

    @property
    def path(self) -> str:
        return filesystems.join(self.output_dir, LOCK)

    def release(self, *, keep_temp: bool = False, files: Iterable[str] = ()) -> None:
        """Give the folder up, unless another run took it meanwhile. What still lies in
        it (this run's temp folder with ``keep_temp``, folders taken over, ``files``) stays
        recorded in the file; with nothing to record, the file is removed."""
        if self._released:
            return
        self._released = True
        current = _read_quietly(self.output_dir)
        if current is None or current.run != self.record.run:
            return  # the commit gave it up already, or another run took it over
        own = temp_folder_of(self.record.run)
        temp_folders = [t for t in current.temp_folders
                        if (t != own or keep_temp) and _folder_exists(self.output_dir, t)]
        kept = sorted(set(current.files) | set(files))
        give_up(self.output_dir, current, temp_folders, kept)


def give_up(output_dir: str, record: LockRecord, temp_folders: Iterable[str],
            files: Iterable[str]) -> None:
    """Replace the lock ``record`` by the record of what stays (or by nothing)."""
    path = filesystems.join(output_dir, LOCK)
    temp_folders, files = tuple(temp_folders), tuple(files)
    if not (temp_folders or files):
        filesystems.delete([path])
        return
    try:
        _write(path, LockRecord(None, temp_folders=temp_folders, files=files).to_bytes())
    except Exception:
        # A full disk: the folder is given up all the same; what it records becomes
        # foreign, kept, never deleted.
        filesystems.delete([path])
        raise


def _read_quietly(output_dir: str) -> LockRecord | None:
    try:
        return read(output_dir)
    except OutputFolderError:
        return None


def _folder_exists(output_dir: str, name: str) -> bool:
    return filesystems.has_files(filesystems.join(output_dir, name))


def acquire(output_dir: str, run_id: str, *, command: str = "", detached: bool = False,
            break_lock: bool = False) -> FolderLock:
    """Take the lock of ``output_dir`` for run ``run_id``, or raise :class:`FolderLocked`
    naming the run that holds it. A lock whose run is gone (or any lock, with
    ``break_lock``) is taken over, with what it records. ``detached``: the run goes on
    without this process (a job submitted and left), so no pid is recorded."""
    mine = LockRecord(
        run_id, host=socket.gethostname(), boot=_boot_id(),
        pid=None if detached else os.getpid(),
        pid_started="" if detached else _process_started(os.getpid()),
        started=time.time(), command=command, temp_folders=(temp_folder_of(run_id),))
    path = filesystems.join(output_dir, LOCK)
    previous = read(output_dir)
    for _attempt in range(_CREATE_ATTEMPTS):
        if previous is not None:
            break
        if _create_new(path, mine.to_bytes()):
            return _confirmed(FolderLock(output_dir, mine))
        previous = read(output_dir)  # another run's, or gone again: then try once more
    else:
        raise FolderLocked(
            f"{path} was made and removed again {_CREATE_ATTEMPTS} times while this run "
            "tried to take it: other runs are starting and stopping in this folder. Run "
            "again when they are done")
    if previous.run is not None and not (break_lock or _owner_gone(previous)):
        raise _locked(output_dir, previous)
    mine = replace(mine, temp_folders=(*mine.temp_folders, *previous.temp_folders),
                   files=previous.files)
    _write(path, mine.to_bytes())
    return _confirmed(FolderLock(output_dir, mine, taken_over=previous))


def _locked(output_dir: str, holder: LockRecord) -> FolderLocked:
    return FolderLocked(
        f"{output_dir} is being written by another {holder.describe()}: one run writes a "
        "folder at a time. Wait for it to finish; if that run is gone for good, pass "
        f"--break-lock (a lock whose process is gone from this machine, or older than "
        f"{STALE_AFTER_HOURS:g} hours, is taken over without it)")


def _confirmed(lock: FolderLock) -> FolderLock:
    """Read the lock back: where the filesystem cannot create a file atomically, another
    run may have written its own lock over ours meanwhile."""
    current = read(lock.output_dir)
    if current is None or current.run != lock.record.run:
        raise _locked(lock.output_dir, current or lock.record)
    return lock


def _create_new(path: str, data: bytes) -> bool:
    """Create ``path`` holding ``data`` unless it exists; False when it does. Atomic on
    local filesystems (a hard link, else ``O_EXCL``); elsewhere a check, then a write. A
    write that fails (a full disk) leaves no file behind."""
    local = filesystems.local_path(path)
    if local is None:
        if filesystems.exists(path):
            return False
        _written_whole(path, data, lambda: filesystems.write_bytes(path, data))
        return True
    os.makedirs(os.path.dirname(local) or ".", exist_ok=True)
    staged = _staged(local, data)
    try:
        os.link(staged, local)  # whole or absent: a reader never sees it half written
        return True
    except FileExistsError:
        return False
    except OSError:
        pass  # a filesystem without hard links
    finally:
        with contextlib.suppress(OSError):
            os.unlink(staged)
    try:
        fd = os.open(local, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        return False
    _written_whole(path, data, lambda: _write_and_close(fd, data))
    return True


def _staged(local: str, data: bytes) -> str:
    """``data`` written whole to a new file beside ``local``; its path."""
    staged = f"{local}.{os.getpid()}.{time.monotonic_ns()}"
    try:
        with open(staged, "wb") as f:
            f.write(data)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(staged)
        raise
    return staged


def _write_and_close(fd: int, data: bytes) -> None:
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def _written_whole(path: str, data: bytes, write) -> None:
    try:
        write()
    except BaseException:
        with contextlib.suppress(Exception):
            filesystems.delete([path])
        raise


def _write(path: str, data: bytes) -> None:
    """Replace ``path`` by ``data`` in one step where the filesystem can (a rename)."""
    local = filesystems.local_path(path)
    if local is None:
        filesystems.write_bytes(path, data)
        return
    staged = _staged(local, data)
    try:
        os.replace(staged, local)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(staged)
        raise


# --- the commit's side -------------------------------------------------------------------


def check_held(output_dir: str, run_id: str) -> LockRecord | None:
    """Before the commit changes ``output_dir``: the lock record naming run ``run_id``, or
    None when the folder has no lock (a pipeline built without :func:`acquire`). Raises
    :class:`FolderLocked` when another run holds it: that run took the folder over."""
    record = read(output_dir)
    if record is None or record.run == run_id:
        return record
    raise FolderLocked(
        f"{output_dir} was taken over by {record.describe() if record.run else 'another run'} "
        "while this run went on (its lock was older than "
        f"{STALE_AFTER_HOURS:g} hours, or broken with --break-lock); nothing was committed "
        "by this run")
