"""Shuffles and materialized collections of local runs that move to disk past a memory budget.

Beam's FnApiRunner keeps every ``GroupByKey`` of a run in the launcher process: its
``GroupingBuffer`` holds the decoded values of every key in a dict, and builds a second,
encoded copy of them when it deals the groups to the workers. The launcher's memory then
grows with the dataset (a COCO conversion's three shuffles take ~1.5 KB per image encoded,
more decoded).

:class:`SpillingGroupingBuffer` is that buffer with a budget. Below it, it keeps what the
workers sent as they sent it, and gives it to Beam's buffer when the runner asks for the
groups (so a shuffle that ends up on disk is never decoded into values and encoded
again). Past it, each element goes to one of :data:`BUCKETS` buckets by a hash
of its key, still encoded, into one temp file; when the runner asks for the groups, one
bucket at a time is grouped and encoded by Beam's own buffer and its groups dealt to the
workers' parts (temp files too, read back in whole-element chunks). Memory then holds one
bucket and a few write buffers, however many elements the shuffle has. (Beam's runner
would still build what it sends a worker as one message per worker and stage;
:mod:`recordbeam.local.feed` sends it in pieces.)

What the workers receive is what Beam's buffer would give them: the same groups, each
key's values in the order they arrived, and parts whose numbers of keys differ by at most
one. Only which keys share a part, and their order in it, differ: Beam's follow the keys'
arrival, which is not deterministic either once several workers send them.

The runner also holds in this process every collection it materializes between two
stages: one whose consumer waits for a side input computed from all the data (a
manifest's rows wait for every range's line count, its records for the shard plan), or
that two stages read. Beam's ``ListBuffer`` keeps its chunks in a list; past the same
budget :class:`SpillingListBuffer` keeps them in a temp file instead, and the workers
receive the same chunks in the same parts.

:func:`spilling_shuffles` installs both buffers in Beam's runner for the duration of a run;
``recordbeam.local.runner.LocalRunner`` does so for every run where ``recordbeam.local.internals``
allows it. This reaches into Beam's private runner module; :data:`AVAILABLE` is False
when a Beam version lacks what it needs, and runs then keep Beam's buffer.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import tempfile
import threading
import weakref
import zlib
from array import array
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

try:
    from apache_beam.coders.coder_impl import create_InputStream
    from apache_beam.runners.portability.fn_api_runner import execution
    from apache_beam.runners.portability.fn_api_runner.translations import split_buffer_id
    from apache_beam.transforms.window import GlobalWindows
except ImportError:  # a Beam without the FnApiRunner: nothing to install into
    execution = None

_LOG = logging.getLogger(__name__)

#: Bytes one shuffle (or one materialized collection) keeps in memory before it moves to
#: disk, counted as the encoded bytes the workers sent it. Beam's grouping buffer holds
#: them decoded, several times larger for rich records, and encodes them again when it
#: deals them: at 32 MiB a 100k-row manifest's launcher peaked at 410-480 MiB, at 8 MiB
#: at ~300 MiB (the same bytes written; ``benchmarks/scale.py``). Spilling costs the
#: launcher some CPU: ~1% of a 20k COCO run's CPU on a quiet machine (0.1 of 8.5 s, three
#: alternating runs against a budget nothing reached), since what the workers sent is kept
#: encoded until it spills.
#: ``RECORDBEAM_SHUFFLE_MEMORY`` sets it in bytes (read once, when this module is imported).
def _budget_from_environment(default: int = 8 << 20) -> int:
    text = os.environ.get("RECORDBEAM_SHUFFLE_MEMORY")
    if text is None:
        return default
    try:
        budget = int(text)
    except ValueError:
        budget = -1
    if budget < 0:
        raise ValueError(
            f"RECORDBEAM_SHUFFLE_MEMORY must be a whole number of bytes such as 33554432, "
            f"got {text!r}; unset it for the default of {default >> 20} MiB")
    return budget


SHUFFLE_MEMORY = _budget_from_environment()

#: Hash buckets of a spilled shuffle; grouping holds one in memory at a time, so 512
#: keep that to ~1 MiB per 500 MiB spilled.
BUCKETS = 512

#: Encoded elements a spilling shuffle collects before writing them out, bucket by bucket.
WRITE_BUFFER = 8 << 20

#: Size a part's chunks reach before they are written; what a worker receives per read.
PART_CHUNK = 1 << 20

_BeamGroupingBuffer: Any = getattr(execution, "GroupingBuffer", None)
_BeamListBuffer: Any = getattr(execution, "ListBuffer", None)
_BeamBundleContextManager: Any = getattr(execution, "BundleContextManager", None)


def _beam_has_what_we_need() -> bool:
    """Beam's runner builds its grouping buffers by a global name lookup in ``execution``
    (so replacing that name swaps the class), and the buffer keeps the attributes this
    module reads and writes."""
    manager = getattr(execution, "BundleContextManager", None)
    get_buffer = getattr(manager, "get_buffer", None)
    if _BeamGroupingBuffer is None or get_buffer is None:
        return False
    code = getattr(get_buffer, "__code__", None)
    if code is None or "GroupingBuffer" not in code.co_names:
        return False
    names = set()
    for method in ("__init__", "append", "extend", "partition"):
        code = getattr(getattr(_BeamGroupingBuffer, method, None), "__code__", None)
        if code is None:
            return False
        names.update(code.co_names)
    if not {"_table", "_grouped_output", "_key_coder", "_pre_grouped_coder",
            "_post_grouped_coder", "_windowing"} <= names:
        return False
    return _beam_materializes_as_we_expect()


def _beam_materializes_as_we_expect() -> bool:
    """The runner builds its stage managers by a global name lookup in ``execution``, and
    a ``ListBuffer`` keeps its chunks in ``_inputs``, which every method of it goes
    through (so a list look-alike there keeps them all working)."""
    context = getattr(execution, "FnApiRunnerExecutionContext", None)
    builds = getattr(getattr(context, "bundle_manager_for", None), "__code__", None)
    if builds is None or "BundleContextManager" not in builds.co_names:
        return False
    for method in ("__init__", "append", "extend", "partition", "__iter__", "clear"):
        code = getattr(getattr(_BeamListBuffer, method, None), "__code__", None)
        if code is None or "_inputs" not in code.co_names:
            return False
    return True


#: Whether this Beam version can take the spilling buffer.
AVAILABLE = _beam_has_what_we_need()


class _SpillFile:
    """A temp file written once, front to back, then read by (offset, length) spans.

    Deleted when its last holder lets go of it (or with its folder, at the end of a run).
    """

    def __init__(self, folder: str) -> None:
        fd, self.path = tempfile.mkstemp(prefix="shuffle-", dir=folder)
        self._out = os.fdopen(fd, "wb")
        self.size = 0
        self._remove = weakref.finalize(self, _remove_file, self.path, self._out)

    def write(self, data: bytes | bytearray) -> int:
        """Append ``data``; returns its offset."""
        offset = self.size
        try:
            self._out.write(data)
        except OSError as error:
            raise _naming(error, self.path) from error
        self.size += len(data)
        return offset

    def finish(self) -> None:
        try:
            self._out.close()
        except OSError as error:
            raise _naming(error, self.path) from error

    def read(self, spans: array) -> Iterator[bytes]:
        """The bytes of each ``(offset, length)`` pair in ``spans`` (a flat array)."""
        if not spans:
            return
        with open(self.path, "rb") as f:
            for i in range(0, len(spans), 2):
                f.seek(spans[i])
                yield f.read(spans[i + 1])


def _naming(error: OSError, path: str) -> OSError:
    """``error`` with the file it was about: a buffered write's error names none, and a
    full spill folder must be told apart from a full output folder."""
    if error.filename is not None:
        return error
    return type(error)(error.errno, error.strerror, path)


def spilled_under(path: str) -> str | None:
    """The folder in which runs make their spill folders (``TMPDIR``) when ``path`` is in
    one of them, else None."""
    folder, _name = os.path.split(path)
    root, name = os.path.split(folder)
    if name.startswith(_RUN_FOLDER_PREFIX) and root == tempfile.gettempdir():
        return root
    return None


def _remove_file(path: str, out) -> None:
    out.close()
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


class _BucketedSpill:
    """Encoded elements on disk, by hash bucket of their key, in arrival order.

    Open until :meth:`finish`; then read only, and safe to share between buffers.
    """

    def __init__(self, folder: str) -> None:
        self._file = _SpillFile(folder)
        self._pending = [bytearray() for _ in range(BUCKETS)]
        self._pending_size = 0
        self._spans = [array("q") for _ in range(BUCKETS)]
        self.finished = False

    @property
    def size(self) -> int:
        return self._file.size + self._pending_size

    def add(self, encoded_key: bytes, element) -> None:
        self._pending[zlib.crc32(encoded_key) % BUCKETS] += element
        self._pending_size += len(element)
        if self._pending_size >= WRITE_BUFFER:
            self._write_pending()

    def _write_pending(self) -> None:
        for bucket, data in enumerate(self._pending):
            if data:
                self._spans[bucket].extend((self._file.write(data), len(data)))
                self._pending[bucket] = bytearray()
        self._pending_size = 0

    def finish(self) -> None:
        if not self.finished:
            self._write_pending()
            self._file.finish()
            self.finished = True

    def bucket(self, index: int) -> Iterator[bytes]:
        """Runs of whole elements of bucket ``index``, in the order they were added."""
        return self._file.read(self._spans[index])


class _Part:
    """One worker's share of a spilled shuffle: chunks of whole encoded groups, read from
    disk each time it is iterated (Beam iterates a part again when a bundle is retried)."""

    def __init__(self, file: _SpillFile, spans: array) -> None:
        self._file = file
        self._spans = spans

    def __iter__(self) -> Iterator[bytes]:
        return self._file.read(self._spans)


class _PartWriter:
    """Collects encoded groups per part into chunks of about :data:`PART_CHUNK` bytes,
    all in one temp file."""

    def __init__(self, parts: int, folder: str) -> None:
        self._file = _SpillFile(folder)
        self._pending: list[list[bytes]] = [[] for _ in range(parts)]
        self._pending_size = [0] * parts
        self._spans = [array("q") for _ in range(parts)]

    def add(self, part: int, groups: bytes) -> None:
        if groups:
            self._pending[part].append(groups)
            self._pending_size[part] += len(groups)
            if self._pending_size[part] >= PART_CHUNK:
                self._write(part)

    def _write(self, part: int) -> None:
        chunk = b"".join(self._pending[part])
        self._spans[part].extend((self._file.write(chunk), len(chunk)))
        self._pending[part], self._pending_size[part] = [], 0

    def finish(self) -> list[_Part]:
        for part, pending in enumerate(self._pending):
            if pending:
                self._write(part)
        self._file.finish()
        return [_Part(self._file, spans) for spans in self._spans]


class SpillingGroupingBuffer(_BeamGroupingBuffer or object):
    """Beam's ``GroupingBuffer`` that moves its elements to disk past ``budget`` bytes.

    ``budget`` defaults to :data:`SHUFFLE_MEMORY`; ``folder`` to the folder of the current
    run (see :func:`spilling_shuffles`), else the system's temp folder. Shuffles with a
    windowing other than the global window stay in memory: they are Beam's buffer.
    ``clear`` drops the contents and their files (Beam's buffer ignores ``clear``; its
    runner never calls it on a grouping buffer).
    """

    def __init__(self, pre_grouped_coder, post_grouped_coder, windowing, *,
                 budget: int | None = None, folder: str | None = None) -> None:
        super().__init__(pre_grouped_coder, post_grouped_coder, windowing)
        default = SHUFFLE_MEMORY if budget is None else budget
        self._budget = default if windowing.is_default() else None
        self._folder = folder
        self._held = 0  # bytes held in memory, as the workers sent them
        # What the workers sent, as they sent it: decoded into the table only at
        # partition(), so a shuffle that spills never decodes and encodes it again.
        self._raw: list[bytes] = []
        self._spills: list[_BucketedSpill] = []  # once spilled, nothing stays in memory
        self.cleared = False

    @property
    def spilled_bytes(self) -> int:
        return sum(spill.size for spill in self._spills)

    def append(self, elements_data: bytes) -> None:
        if self._grouped_output:
            raise RuntimeError("Grouping table append after read.")
        if self._spills:
            self._spill_elements(elements_data)
        elif self._budget is None:
            super().append(elements_data)
        else:
            self._raw.append(elements_data)
            self._held += len(elements_data)
            self._spill_if_over_budget()

    def extend(self, input_buffer) -> None:
        if not isinstance(input_buffer, _BeamGroupingBuffer):
            super().extend(input_buffer)  # Beam ignores list buffers, refuses the rest
            return
        spilling = isinstance(input_buffer, SpillingGroupingBuffer)
        theirs = input_buffer._shared_spills() if spilling else []
        their_raw = list(input_buffer._raw) if spilling else []
        if not self._spills and not theirs:
            self._decode_raw()  # ours arrived first
            super().extend(input_buffer)
            for elements_data in their_raw:
                super().append(elements_data)
            self._held += getattr(input_buffer, "_held", 0)
            self._spill_if_over_budget()
            return
        if not self._spills:
            self._spill_held()  # ours arrived first
        if theirs:
            self._spills[-1].finish()  # later appends start a new spill after theirs
            self._spills.extend(theirs)
        else:
            self._spill_table(input_buffer._table)
            for elements_data in their_raw:
                self._spill_elements(elements_data)

    def partition(self, n: int) -> list:
        if self._grouped_output or not self._spills:
            self._decode_raw()
            return super().partition(n)
        for spill in self._spills:
            spill.finish()
        parts = _PartWriter(n, self._spill_folder())
        dealt = 0  # keys dealt so far: the next key goes to part dealt % n, as in Beam
        for index in range(BUCKETS):
            bucket = _BeamGroupingBuffer(
                self._pre_grouped_coder, self._post_grouped_coder, self._windowing)
            for spill in self._spills:
                for elements in spill.bucket(index):
                    bucket.append(elements)
            keys = len(bucket._table)
            if not keys:
                continue
            for i, chunks in enumerate(bucket.partition(n)):
                for groups in chunks:
                    parts.add((dealt + i) % n, groups)
            dealt += keys
        _LOG.info("A shuffle of %d keys spilled %.1f MiB to disk", dealt,
                  self.spilled_bytes / 2**20)
        self._grouped_output = parts.finish()
        self._spills = []  # their files go with the last buffer that shares them
        return self._grouped_output

    def clear(self) -> None:
        self._table.clear()
        self._raw = []
        self._held = 0
        self._spills = []
        self._grouped_output = None
        self.cleared = True

    def reset(self) -> None:
        self.cleared = False

    def _spill_if_over_budget(self) -> None:
        if self._budget is not None and self._held > self._budget:
            self._spill_held()

    def _spill_held(self) -> None:
        """Move what memory holds into the open spill, in the order it arrived: the table
        (what :meth:`extend` took from another buffer), then what the workers sent since."""
        self._spill_table()
        raw, self._raw = self._raw, []
        for elements_data in raw:
            self._spill_elements(elements_data)

    def _decode_raw(self) -> None:
        """What the workers sent, into Beam's table, as its own ``append`` would have."""
        raw, self._raw = self._raw, []
        for elements_data in raw:
            super().append(elements_data)

    def _open_spill(self) -> _BucketedSpill:
        if not self._spills or self._spills[-1].finished:
            self._spills.append(_BucketedSpill(self._spill_folder()))
        return self._spills[-1]

    def _spill_folder(self) -> str:
        return _spill_folder(self._folder)

    def _spill_table(self, table: dict | None = None) -> None:
        """Move ``table`` (ours by default, then emptied) into the open spill, encoded as
        the elements it was decoded from (global window: only key and value matter)."""
        own = table is None
        table = self._table if own else table
        spill = self._open_spill()
        key_coder = self._key_coder.get_impl()
        element_coder = self._pre_grouped_coder.get_impl()
        in_global_window = GlobalWindows.windowed_value(None).with_value
        for encoded_key, values in table.items():
            key = key_coder.decode(encoded_key)
            for value in values:
                spill.add(encoded_key, element_coder.encode_nested(in_global_window((key, value))))
        if own:
            self._table.clear()
            self._held = 0

    def _spill_elements(self, elements_data: bytes) -> None:
        """Add each encoded element of ``elements_data`` to the open spill as it is."""
        spill = self._open_spill()
        key_coder = self._key_coder.get_impl()
        element_coder = self._pre_grouped_coder.get_impl()
        stream = create_InputStream(elements_data)
        view = memoryview(elements_data)
        total, start = len(elements_data), 0
        while stream.size() > 0:
            key = element_coder.decode_from_stream(stream, True).value[0]
            end = total - stream.size()
            spill.add(key_coder.encode(key), view[start:end])
            start = end

    def _shared_spills(self) -> list[_BucketedSpill]:
        """Our spills, finished, for another buffer to read too."""
        for spill in self._spills:
            spill.finish()
        return list(self._spills)


class _SpilledChunks(Sequence):
    """A materialized collection's chunks on disk, in the shape Beam's ``ListBuffer`` keeps
    them in memory (its ``_inputs`` list): appended, counted, sliced into per-worker parts,
    iterated. A slice is a view over the same files; reading seals the open file, and
    later appends go to a new one."""

    def __init__(self, folder: str, chunks: list[tuple[_SpillFile, int, int]] | None = None) -> None:
        self._folder = folder
        self._chunks = chunks if chunks is not None else []
        self._open: _SpillFile | None = None

    def append(self, chunk: bytes) -> None:
        if self._open is None:
            self._open = _SpillFile(self._folder)
        self._chunks.append((self._open, self._open.write(chunk), len(chunk)))

    def extend(self, chunks: Iterable[bytes]) -> None:
        for chunk in chunks:
            self.append(chunk)

    def __len__(self) -> int:
        return len(self._chunks)

    @property
    def size(self) -> int:
        return sum(length for _file, _offset, length in self._chunks)

    def __getitem__(self, index):
        self._seal()
        if isinstance(index, slice):
            return _SpilledChunks(self._folder, self._chunks[index])
        file, offset, length = self._chunks[index]
        return next(file.read(array("q", (offset, length))))

    def __iter__(self) -> Iterator[bytes]:
        self._seal()
        for file, offset, length in self._chunks:
            yield from file.read(array("q", (offset, length)))

    def _seal(self) -> None:
        if self._open is not None:
            self._open.finish()
            self._open = None


class SpillingListBuffer(_BeamListBuffer or object):
    """Beam's ``ListBuffer`` (a collection the runner materializes between two stages)
    that moves its chunks to disk past ``budget`` bytes.

    The runner materializes a collection whose consumer must wait for something else: a
    side input computed from all the data (a manifest's rows wait for every range's line
    count, its records for the shard plan), or a second consumer. Such a collection is as
    large as the data, and Beam holds it in this process. Past the budget its chunks, as
    the workers sent them, go to one temp file, kept in order; the workers then receive
    the same chunks in the same parts as from Beam's buffer. ``budget`` and ``folder``
    default as for :class:`SpillingGroupingBuffer`.
    """

    def __init__(self, coder_impl, *, budget: int | None = None,
                 folder: str | None = None) -> None:
        super().__init__(coder_impl)
        self._budget = SHUFFLE_MEMORY if budget is None else budget
        self._folder = folder
        self._held = 0

    @property
    def spilled(self) -> bool:
        return isinstance(self._inputs, _SpilledChunks)

    def append(self, element: bytes) -> None:
        super().append(element)
        self._count(len(element))

    def extend(self, extra) -> None:
        super().extend(extra)
        self._count(_size_of(extra._inputs))

    def clear(self) -> None:
        super().clear()
        self._held = 0

    def copy(self):
        if not self.spilled:
            return super().copy()
        self._inputs._seal()  # a second consumer reads the same, finished files
        twin = SpillingListBuffer(self._coder_impl, budget=self._budget, folder=self._folder)
        twin._inputs = self._inputs[:]
        return twin

    def _count(self, size: int) -> None:
        if self.spilled:
            return
        self._held += size
        if self._held > self._budget:
            chunks = _SpilledChunks(_spill_folder(self._folder))
            chunks.extend(self._inputs)
            self._inputs = chunks
            self._held = 0
            _LOG.info("A materialized collection spilled to disk past %.1f MiB", self._budget / 2**20)


def _size_of(chunks: Sequence[bytes]) -> int:
    return chunks.size if isinstance(chunks, _SpilledChunks) else sum(map(len, chunks))


class _SpillingBundleContextManager(_BeamBundleContextManager or object):
    """Beam's stage manager, whose materialized collections are :class:`SpillingListBuffer`s."""

    def get_buffer(self, buffer_id: bytes, transform_id: str):
        buffers = self.execution_context.pcoll_buffers
        if split_buffer_id(buffer_id)[0] == "materialize" and buffer_id not in buffers:
            buffers[buffer_id] = SpillingListBuffer(self.get_input_coder_impl(transform_id))
        return super().get_buffer(buffer_id, transform_id)


_install_lock = threading.Lock()
_runs = 0
_run_folder: str | None = None


@contextlib.contextmanager
def spilling_shuffles() -> Iterator[None]:
    """Make Beam's runner use :class:`SpillingGroupingBuffer` while the block runs.

    Spill files go to a temp folder made at the first spill and removed at the end,
    failed runs included. A launcher killed outright (SIGKILL, the out-of-memory killer)
    leaves its folder, which names its pid: the next run's first spill removes the
    folders whose process is gone (:func:`_remove_orphaned_spills`).
    Nested or concurrent blocks share one installation (the class is a module global of
    Beam's); the last to leave restores Beam's buffer. Without :data:`AVAILABLE`, does
    nothing.
    """
    global _runs, _run_folder
    if not AVAILABLE:
        yield
        return
    with _install_lock:
        if _runs == 0:
            execution.GroupingBuffer = SpillingGroupingBuffer
            execution.BundleContextManager = _SpillingBundleContextManager
        _runs += 1
    try:
        yield
    finally:
        with _install_lock:
            _runs -= 1
            if _runs == 0:
                execution.GroupingBuffer = _BeamGroupingBuffer
                execution.BundleContextManager = _BeamBundleContextManager
                if _run_folder is not None:
                    shutil.rmtree(_run_folder, ignore_errors=True)
                    _run_folder = None


_RUN_FOLDER_PREFIX = "recordbeam-shuffle-"


def _spill_folder(chosen: str | None) -> str:
    """Where a buffer spills: its own folder if given, else the runs' folder, else TMPDIR."""
    return chosen or _current_run_folder() or tempfile.gettempdir()


def _current_run_folder() -> str | None:
    """The spill folder of the runs in progress, made on first use; None outside runs."""
    global _run_folder
    with _install_lock:
        if _runs and _run_folder is None:
            _remove_orphaned_spills()
            _run_folder = tempfile.mkdtemp(prefix=f"{_RUN_FOLDER_PREFIX}{os.getpid()}-")
        return _run_folder


def _remove_orphaned_spills() -> None:
    """Remove the spill folders in ``TMPDIR`` of launchers that are gone (killed before
    their clean-up): a nightly run killed every night must not fill the disk. A folder
    whose pid is alive, or that names none, is kept."""
    root = tempfile.gettempdir()
    try:
        names = os.listdir(root)
    except OSError:
        return
    for name in names:
        pid = name[len(_RUN_FOLDER_PREFIX):].split("-", 1)[0]
        if name.startswith(_RUN_FOLDER_PREFIX) and pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(os.path.join(root, name), ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's process
        return True
    return True
