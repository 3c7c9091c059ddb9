"""The worker process of local runs: Beam's own Python SDK worker, which exits at once.

``python -m recordbeam.local_worker`` runs Beam's ``sdk_worker_main`` unchanged. When
its harness returns, every bundle has finished, every ``DoFn.teardown`` has run and its
log handler has flushed; the interpreter's own shutdown after that (gRPC's threads, a
large heap) took about 0.6 s per worker here, and the local runner stops its workers one
after the other. Exiting without it saves that wait on every local run.

``python -m recordbeam.local_worker --standby`` is started ahead of the run
(:mod:`recordbeam.standby`): it imports Beam's worker, then forks one worker per request
of the launcher; each fork takes on the environment the launcher sends and runs as above.
"""

from __future__ import annotations

import os
import sys
import traceback


def main() -> None:
    from apache_beam.runners.worker import sdk_worker_main

    if sys.argv[1:] == ["--standby"]:
        from recordbeam import standby

        standby.serve()  # returns in each forked worker
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
