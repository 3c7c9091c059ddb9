"""The worker process of local runs: Beam's own Python SDK worker, which exits at once.

``python -m recordbeam.local.worker`` runs Beam's ``sdk_worker_main`` unchanged. When
its harness returns, every bundle has finished, every ``DoFn.teardown`` has run and its
log handler has flushed; the interpreter's own shutdown after that (gRPC's threads, a
large heap) takes about 0.6 s per worker, and the local runner stops its workers one
after the other. Exiting without it saves that wait on every local run.

``python -m recordbeam.local.worker --standby [module...]`` is started ahead of the run
(:mod:`recordbeam.local.standby`): it imports Beam's worker and the modules named, then
forks one worker per request of the launcher; each fork takes on the environment the
launcher sends and runs as above. A standby forked from the launcher runs the same way
(:func:`serve_as_standby`), with the modules it inherited.

Workers send their outputs to the launcher in messages of about :data:`MESSAGE_BYTES`
instead of Beam's 10 MB: the launcher holds several messages per worker at once
(received, queued, being decoded), so 10 MB messages cost it ~80 MB once a stage's
output passes a few tens of MB, and the cost grew with the dataset up to that point.
"""

from __future__ import annotations

import os
import sys
import traceback
from collections.abc import Sequence
from typing import Any

#: Bytes of output a worker gathers into one message to the launcher (Beam: 10 MB).
#: The launcher gathers its own messages to workers to this size too (``local_feed``).
MESSAGE_BYTES = 1 << 20


def smaller_messages(data_plane: Any) -> bool:
    """Make this process's Beam data channels send messages of ~:data:`MESSAGE_BYTES`.

    Beam's output streams take their flush size from a default argument, and its sender
    gathers queued outputs up to a module constant; both become :data:`MESSAGE_BYTES`.
    For worker processes, which live for one run. Returns False (and changes nothing)
    when this Beam version lacks either.
    """
    streams = [getattr(data_plane, name, None) for name in
               ("SizeBasedBufferingClosableOutputStream", "TimeBasedBufferingClosableOutputStream")]
    if not isinstance(getattr(data_plane, "_DEFAULT_SIZE_FLUSH_THRESHOLD", None), int):
        return False
    changes = []
    for stream in streams:
        init = getattr(stream, "__init__", None)
        code, defaults = getattr(init, "__code__", None), getattr(init, "__defaults__", None)
        if code is None or not defaults:
            return False
        names = code.co_varnames[:code.co_argcount]
        if "size_flush_threshold" not in names[len(names) - len(defaults):]:
            return False
        index = names.index("size_flush_threshold") - (len(names) - len(defaults))
        changes.append((init, defaults[:index] + (MESSAGE_BYTES,) + defaults[index + 1:]))
    for init, defaults in changes:
        init.__defaults__ = defaults
    data_plane._DEFAULT_SIZE_FLUSH_THRESHOLD = MESSAGE_BYTES
    return True


def import_beam_worker() -> None:
    """Import what a worker runs (Beam's SDK worker): in a standby, before it forks."""
    from apache_beam.runners.worker import data_plane, sdk_worker_main  # noqa: F401


def fork_standby_from_launcher() -> None:
    """In the launcher, once it has built the pipeline and before the run starts a thread:
    fork the standby the ``recordbeam`` command left for later, if any
    (:func:`recordbeam.local.standby.fork_from_launcher`), with Beam's worker imported."""
    from recordbeam.local import standby

    # Beam's worker imported here, once, for the standby and every worker.
    standby.fork_from_launcher(import_beam_worker, serve_as_standby)


def serve_as_standby(preload: Sequence[str] = ()) -> None:
    """Run as the standby (:func:`recordbeam.local.standby.serve`), then, in each worker it
    forks, as the worker. Never returns."""
    from recordbeam.local import standby

    import_beam_worker()  # before forking: each worker then has it
    standby.serve(preload=preload)  # returns in each forked worker
    _work()


def main() -> None:
    if sys.argv[1:2] == ["--standby"]:  # then the modules to import before forking
        serve_as_standby(sys.argv[2:])
    _work()


def _work() -> None:
    """Run Beam's SDK worker with smaller messages, then exit at once with its code."""
    from apache_beam.runners.worker import data_plane, sdk_worker_main

    smaller_messages(data_plane)
    code = 0
    try:
        sdk_worker_main.main(sys.argv)
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else 1
    except BaseException:  # noqa: BLE001 - the runner sees the exit code, the log the trace
        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    main()
