"""The ``recordbeam`` command: a thin shell over the library.

Exit codes:
    0  success (``verify``: every record is clean)
    1  the data has problems: ``verify`` found a corrupt record, ``check`` a broken rule, or a conversion failed
       on its inputs (malformed annotations, too many rejects)
    2  usage: bad arguments, missing input paths, an output folder holding foreign files or
       that another run is writing
    3  the run failed for another reason (out of space, a worker process killed, runner failure)
  130  interrupted (Ctrl-C)

Each error recordbeam raises on purpose carries its exit code in its type
(:mod:`recordbeam.errors`); messages never start with a type's name.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import warnings
from collections.abc import Sequence
from typing import Any

from recordbeam.cli.parser import build_parser, options_not_here, own_flags
from recordbeam.errors import (
    EXIT_DATA,  # noqa: F401 - part of the command's interface (cli.EXIT_DATA)
    EXIT_FAILED,  # noqa: F401 - part of the command's interface (cli.EXIT_FAILED)
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_USAGE,
    STOPPING_SIGNALS,
    RecordbeamError,
    Terminated,
    describe,
)
from recordbeam.gcs_credentials import settle as settle_gcs_credentials
from recordbeam.gcs_credentials import uses_gcs
from recordbeam.local import standby

#: Where every transform a command's pipeline runs is defined (or imported from): a
#: standby started as a new interpreter (when a fork of the launcher is not safe) imports
#: it before forking the workers, which then need not import it each.
PIPELINE_MODULE = "recordbeam.pipeline"


def _drop_beam_import_noise(record: logging.LogRecord) -> bool:
    """Beam warns at import time that optional GCP client libraries are absent; local
    users do not need them, and the ``gcp`` extra installs them for Dataflow."""
    return not str(record.msg).startswith("apitools not found")


def _interrupt_once(_signal: int, _frame: Any) -> None:
    """SIGINT's handler in the command: the first Ctrl-C stops the work (KeyboardInterrupt),
    which then ends its processes and says what became of the output; a second one during
    that clean-up ends the command at once."""
    signal.signal(signal.SIGINT, _exit_at_once)
    raise KeyboardInterrupt


def _exit_at_once(_signal: int, _frame: Any) -> None:
    os._exit(EXIT_INTERRUPTED)


def _terminate_once(signum: int, _frame: Any) -> None:
    """SIGTERM's and SIGHUP's handler in the command: as :func:`_interrupt_once`; the same
    signal again during the clean-up ends the command at once."""
    signal.signal(signum, _terminated_at_once)
    raise Terminated(signum)


def _terminated_at_once(signum: int, _frame: Any) -> None:
    os._exit(128 + signum)



def console(argv: Sequence[str] | None = None) -> None:
    """The ``recordbeam`` command: :func:`main`, then exit at once with its code.

    Everything is flushed and closed first; skipping the interpreter's own shutdown
    (Beam's and gRPC's threads, a large heap) saved about 0.5 s per command here.
    """
    # A shell that starts a background job ignores SIGINT for it: keep that.
    if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
        signal.signal(signal.SIGINT, _interrupt_once)
    for signum in STOPPING_SIGNALS:  # not when ignored (nohup) or handled by a host
        if signal.getsignal(signum) is signal.SIG_DFL:
            signal.signal(signum, _terminate_once)
    one_blas_thread()
    code = main(argv)
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe: nothing more can be said
            pass
    os._exit(code)


def one_blas_thread() -> None:
    """Before numpy loads: OpenBLAS, which it loads, starts a thread per core that spins
    for about 0.1 CPU s each once loaded (on 2 cores, 0.1 of a 20k-image COCO run's 8 CPU
    s; more on larger machines). recordbeam does no linear algebra, so its processes (the
    local workers inherit the environment) keep to one. A value the user set is kept."""
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


def main(argv: Sequence[str] | None = None) -> int:
    logging.getLogger().addFilter(_drop_beam_import_noise)
    # Google's client libraries (the gcp extra, imported with Beam) warn about their own
    # support schedules (Python versions, grpcio releases): nothing a user of this command
    # can act on. Seen with Beam 2.60's pinned grpcio.
    warnings.filterwarnings("ignore", category=FutureWarning, module=r"google\.")
    args = argparse.Namespace()  # what _interrupted knows when Ctrl-C comes while parsing
    try:
        parser = build_parser()  # imports no Beam: a usage error is told at once
        args, extra = parser.parse_known_args(argv)
        handler = getattr(args, "pipeline_handler", None)
        # A local run's workers: their standby is forked from this process once it has
        # imported Beam and built the pipeline, so that both are imported once.
        arguments = list(sys.argv[1:] if argv is None else argv)
        with standby.started(standby.workers_needed(extra) if handler is not None else 0,
                             preload=(PIPELINE_MODULE,), fork_later=True):
            return _dispatch(args, extra, handler, gcs=uses_gcs(arguments))
    except KeyboardInterrupt as interrupt:
        return _interrupted(args, interrupt)


def _dispatch(args: argparse.Namespace, extra: Sequence[str], handler: Any, *, gcs: bool) -> int:
    command = args.command_parser
    try:
        if gcs:
            settle_gcs_credentials(report=_say)
        if handler is None:
            if extra:  # a folder in a store may need Beam's filesystem options
                from recordbeam.local.runner import filesystem_options

                filesystem_options(extra, command=command.prog, other_flags=own_flags(command))
            return args.handler(args)
        from recordbeam.local.runner import check_beam_args, pipeline_options
        from recordbeam.pipeline import check_run_options

        check_beam_args(extra, command=command.prog, other_flags=own_flags(command),
                        explained=options_not_here(command))
        args.beam_options = pipeline_options(extra)  # also configures filesystems here
        check_run_options(args.beam_options, detach=getattr(args, "detach", False))
        return handler(args, extra)
    except BrokenPipeError:
        return EXIT_OK
    except Exception as error:  # noqa: BLE001 - turn any failure into a message and an exit code
        return _report_error(error)


def _say(line: str) -> None:
    print(f"recordbeam: {line}", file=sys.stderr)


def _report_error(error: Exception) -> int:
    failure = describe(error)
    code = failure.exit_code
    if isinstance(error, ValueError) and not isinstance(error, RecordbeamError):
        # Raised on the launcher, before any run: a bad option value (runs' failures
        # arrive wrapped, never as a ValueError).
        code = EXIT_USAGE
    print(f"recordbeam: {failure.message}", file=sys.stderr)
    log_path = getattr(error, "log_path", None)
    if log_path:
        print(f"recordbeam: the run's log is in {log_path}", file=sys.stderr)
    return code


def _interrupted(args: argparse.Namespace, interrupt: KeyboardInterrupt) -> int:
    """One line for Ctrl-C, SIGTERM or SIGHUP: what became of the output, and where the
    run's log is. A terminal that hung up takes no line: the exit code says it."""
    stop = interrupt if isinstance(interrupt, Terminated) else getattr(interrupt, "terminated", None)
    parts = [stop.said if stop is not None else "interrupted"]
    outcome = getattr(interrupt, "outcome", None)
    output = getattr(args, "output", None)
    if outcome:
        parts.append(outcome)
    elif output and getattr(args, "pipeline_handler", None) is not None:
        parts.append(f"nothing was committed to {output}")
    log_path = getattr(interrupt, "log_path", None)
    if log_path:
        parts.append(f"log: {log_path}")
    try:
        print("recordbeam: " + "; ".join(parts), file=sys.stderr)
    except OSError:  # the terminal is gone (EIO)
        pass
    return stop.exit_code if stop is not None else EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
