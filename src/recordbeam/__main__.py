"""``python -m recordbeam`` runs the ``recordbeam`` command."""

import os
import signal
import sys


def _interrupted_while_starting(_signal: int, _frame: object) -> None:
    # Ctrl-C before the command has started anything: one line, not an import traceback.
    sys.stderr.write("recordbeam: interrupted\n")
    os._exit(130)


if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
    signal.signal(signal.SIGINT, _interrupted_while_starting)

from recordbeam.cli.main import console  # noqa: E402 - after the handler: imports take a while

console()
