"""Local runs feed each stage's input to a worker piece by piece, while the stage runs.

Beam's FnApiRunner sends a worker its whole input for a stage before it starts the
stage: it writes every piece into one output stream and sends that as one message. The
launcher then holds the input two to three times over (the growing stream, its bytes,
the message) and the worker receives it whole, so both processes grow with the dataset
even when the input comes from a shuffle on disk (:mod:`recordbeam.local.shuffle`).

Here a thread sends the input, one message per piece as the buffer yields them (spilled
shuffles yield pieces of about 1 MiB), and the runner starts the stage at once, so the
worker consumes the pieces while they arrive. The data channel's queues block the thread
when the worker falls behind; Beam lets each hold 100 MB, which for a slow stage (the
shard writers) is the whole input up to ~200 MB per worker, so during a run they hold
:data:`QUEUE_BYTES`.

Only channels whose reader waits for each input's end get a thread: gRPC's, which the
worker processes of ``multi_processing`` runs use. An in-memory run's channel
(``InMemoryDataChannel``) hands the worker what has arrived when it asks and drops what
comes later, so its inputs are sent whole before the stage starts, as Beam does.

If sending fails, the thread closes the stream so the worker can finish, and the runner
then raises the error: the run fails (its partial outputs are never committed) instead
of waiting for the missing input. :func:`feeding_in_pieces` installs this for the
duration of a run; ``recordbeam.local.runner.LocalRunner`` does so for every run where
``recordbeam.local.internals`` allows it. Like the spilling shuffle it reaches into
Beam's private runner module; :data:`AVAILABLE` is False when a Beam version lacks what
it needs: Beam before 2.77 has no cap on its send queues, so there each input is sent
whole, as Beam does (the launcher's memory then grows with a stage's input again).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterable, Iterator
from typing import Any

from recordbeam.local.internals import names_used
from recordbeam.local.worker import MESSAGE_BYTES

try:
    from apache_beam.runners.portability.fn_api_runner import fn_runner
    from apache_beam.runners.worker import data_plane
except ImportError:  # a Beam without the FnApiRunner
    fn_runner = data_plane = None

#: Bytes each queue of the launcher's data channels holds during a run (sent pieces
#: waiting for the worker, outputs waiting for the runner). A channel has three.
QUEUE_BYTES = 2 << 20

_BeamBundleManager: Any = getattr(fn_runner, "BundleManager", None)


def _beam_has_what_we_need() -> bool:
    """The runner picks and builds its bundle managers by a global name lookup in
    ``fn_runner`` (replacing the name swaps the class), a bundle manager sends each input
    through ``_send_input_to_worker`` from ``process_bundle``, the data channels take
    their queue size from a module constant, and gRPC's channel class (the only one
    whose reader waits for the rest of an input) is where this version has it."""
    if _BeamBundleManager is None:
        return False
    parallel = getattr(fn_runner, "ParallelBundleManager", None)
    picks = getattr(getattr(fn_runner, "FnApiRunner", None), "_get_bundle_manager", None)
    return (
        "BundleManager" in names_used(getattr(parallel, "process_bundle", None))
        and "BundleManager" in names_used(picks)
        and "_send_input_to_worker" in names_used(_BeamBundleManager.process_bundle)
        and isinstance(getattr(data_plane, "_DEFAULT_SEND_QUEUE_MAX_BYTES", None), int)
        and isinstance(getattr(data_plane, "_DEFAULT_SIZE_FLUSH_THRESHOLD", None), int)
        and isinstance(getattr(data_plane, "_GrpcDataChannel", None), type)
    )


#: Whether this Beam version can feed inputs in pieces.
AVAILABLE = _beam_has_what_we_need()


class _Sender(threading.Thread):
    """Writes one input of one bundle to the worker's data stream, a message per piece."""

    def __init__(self, stream: Any, pieces: Iterable[bytes]) -> None:
        super().__init__(name="recordbeam-feed", daemon=True)
        self._stream = stream
        self._pieces = pieces
        self.error: BaseException | None = None
        self.stopped = threading.Event()

    def run(self) -> None:
        try:
            for piece in self._pieces:
                if self.stopped.is_set():
                    return
                self._stream.write(piece)
                self._stream.flush()
        except BaseException as error:  # noqa: BLE001 - reported by the runner's thread
            self.error = error
        finally:
            self._stream.close()  # the end of the input: the worker can finish the bundle


class PieceByPieceBundleManager(_BeamBundleManager or object):
    """Beam's bundle manager, sending inputs from threads while the bundle runs."""

    def process_bundle(self, *args, **kwargs):
        self._senders: list[_Sender] = []
        try:
            result = super().process_bundle(*args, **kwargs)
        except BaseException:
            for sender in self._senders:
                sender.stopped.set()
            raise
        for sender in self._senders:
            sender.join()
            if sender.error is not None:
                raise RuntimeError(
                    f"sending a stage's input to a worker failed: {sender.error!r}"
                ) from sender.error
        return result

    def _send_input_to_worker(self, process_bundle_id: str, read_transform_id: str,
                              byte_streams) -> None:
        connection = self._worker_handler.data_conn
        if not isinstance(connection, data_plane._GrpcDataChannel):
            # The in-memory channel does not wait for pieces sent after the worker
            # starts reading: they would be lost. Send the whole input first.
            super()._send_input_to_worker(process_bundle_id, read_transform_id, byte_streams)
            return
        stream = connection.output_stream(process_bundle_id, read_transform_id)
        sender = _Sender(stream, byte_streams or ())
        getattr(self, "_senders", []).append(sender)
        sender.start()


_install_lock = threading.Lock()
_runs = 0
_beam_sizes = (0, 0)


@contextlib.contextmanager
def feeding_in_pieces() -> Iterator[None]:
    """Make Beam's runner use :class:`PieceByPieceBundleManager`, and data channels with
    queues of :data:`QUEUE_BYTES` that gather messages to workers up to
    ``local_worker.MESSAGE_BYTES``, while the block runs. Nested or concurrent blocks
    share one installation; the last to leave restores Beam's. Without
    :data:`AVAILABLE`, does nothing."""
    global _runs, _beam_sizes
    if not AVAILABLE:
        yield
        return
    with _install_lock:
        if _runs == 0:
            fn_runner.BundleManager = PieceByPieceBundleManager
            _beam_sizes = (data_plane._DEFAULT_SEND_QUEUE_MAX_BYTES,
                           data_plane._DEFAULT_SIZE_FLUSH_THRESHOLD)
            data_plane._DEFAULT_SEND_QUEUE_MAX_BYTES = QUEUE_BYTES
            data_plane._DEFAULT_SIZE_FLUSH_THRESHOLD = MESSAGE_BYTES
        _runs += 1
    try:
        yield
    finally:
        with _install_lock:
            _runs -= 1
            if _runs == 0:
                fn_runner.BundleManager = _BeamBundleManager
                (data_plane._DEFAULT_SEND_QUEUE_MAX_BYTES,
                 data_plane._DEFAULT_SIZE_FLUSH_THRESHOLD) = _beam_sizes
