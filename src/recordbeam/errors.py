"""What went wrong, as types: the errors recordbeam raises on purpose, and the exit code
and one-line message each stands for.

An error raised on the launcher arrives as itself. One raised inside a Beam worker
arrives wrapped by the runner: in an in-process worker Beam re-raises the same object
(its message suffixed with ``[while running 'Step']``); from a worker process or a remote
job only the worker's traceback text comes back, whose last line names the error's type
by its qualified name (``recordbeam.write.commit.RejectLimitExceeded: ...``). :func:`describe`
finds the error either way and maps it by its type (the class it resolves to), never by a
list of class names, so a new error only has to derive from :class:`DataError` or
:class:`UsageError` to get its exit code.

This module imports no Beam.
"""

from __future__ import annotations

import difflib
import errno
import importlib
import re
import signal
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

EXIT_OK, EXIT_DATA, EXIT_USAGE, EXIT_FAILED = 0, 1, 2, 3
#: A run stopped by Ctrl-C (SIGINT): 128 + the signal's number, as shells report it.
EXIT_INTERRUPTED = 130
#: A run stopped by SIGTERM (a scheduler's timeout or kill): 128 + 15.
EXIT_TERMINATED = 143
#: A run stopped by SIGHUP (its terminal closed, its ssh session dropped): 128 + 1.
EXIT_HUNG_UP = 129

#: The signals that stop a run as Ctrl-C does (:class:`Terminated`), where the platform
#: has them, with what the command's last line says of each.
_STOPPED_BY = {getattr(signal, name): said for name, said in (
    ("SIGTERM", "terminated (SIGTERM)"), ("SIGHUP", "hung up (SIGHUP)")) if hasattr(signal, name)}
STOPPING_SIGNALS = tuple(_STOPPED_BY)


class Terminated(KeyboardInterrupt):
    """SIGTERM (a scheduler's timeout or kill, ``timeout``, ``kill``) or SIGHUP (the
    terminal closed) in the command: it stops the work as Ctrl-C does, so the run's
    processes and temp files go with it. ``signum``: which signal; the command exits
    with 128 + it."""

    def __init__(self, signum: int = signal.SIGTERM) -> None:
        super().__init__(signum)
        self.signum = signum

    @property
    def exit_code(self) -> int:
        return 128 + self.signum

    @property
    def said(self) -> str:
        """What the command's last line starts with."""
        return _STOPPED_BY[self.signum]


class RecordbeamError(Exception):
    """An error recordbeam raises on purpose; ``exit_code`` says what kind it is."""

    exit_code = EXIT_FAILED


class DataError(RecordbeamError):
    """The inputs have problems (malformed annotations, too many rejects, corrupt records)."""

    exit_code = EXIT_DATA


class UsageError(RecordbeamError):
    """Bad arguments or paths, or an output folder that cannot be written as asked."""

    exit_code = EXIT_USAGE


class RunFailed(RuntimeError):
    """A run failed; ``cause`` is the runner's error (which may carry a worker's error as
    text: :func:`describe` finds it). ``log_path`` holds Beam's log of the run on this
    machine; ``runner`` names the remote runner the job ran on (None for a local run)."""

    def __init__(self, cause: BaseException, log_path: str | None,
                 runner: str | None = None) -> None:
        super().__init__(str(cause))
        self.cause = cause
        self.log_path = log_path
        self.runner = runner


class OutOfSpace(RecordbeamError):
    """A write found its filesystem full (no space or no inodes left, or a quota reached):
    the environment's problem, not the data's (exit 3). ``log_path``: the run's log."""

    def __init__(self, message: str, log_path: str | None = None) -> None:
        super().__init__(message)
        self.log_path = log_path


#: The errors of a write to a full filesystem: no space (or inodes) left, quota exceeded.
FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)
_FULL_IN_TEXT = re.compile(
    r"\[Errno (?:{})\][^\n]*?(?:: '([^'\n]*)')?$".format("|".join(map(str, FULL_ERRNOS))),
    re.MULTILINE)


def full_filesystem(error: BaseException) -> str | None:
    """Where a write found its filesystem full, when ``error`` (or what it wraps, or a
    worker's traceback carried as its text) is such an ``OSError``: the file's path, ''
    when not known. None for any other error."""
    for link in error_chain(error):
        if isinstance(link, OSError) and link.errno in FULL_ERRNOS:
            return str(link.filename or "")
    found = list(_FULL_IN_TEXT.finditer(str(error)))
    if found:
        return found[-1].group(1) or ""
    return None


@dataclass(frozen=True)
class Failure:
    """What to tell the user about an error: one line, and the exit code."""

    message: str
    exit_code: int


def unknown_arguments_error(unknown: Sequence[str], known_flags: Sequence[str],
                            command: str, *, beam: bool = True,
                            explained: Mapping[str, str] | None = None) -> UsageError:
    """The error for arguments nobody takes: one line naming them, with the closest known
    option as a suggestion (``beam``: Beam was asked too), or, for an option in
    ``explained`` (one another command has), what this command takes instead.

    The options among ``unknown`` are named first (a word after an unknown option is
    likely its value); a stray word alone is named when there is no unknown option.
    """
    options = list(dict.fromkeys(arg.split("=", 1)[0] for arg in unknown
                                 if arg.startswith("-") and arg not in ("-", "--")))
    if not options:
        return UsageError(f"unexpected argument {unknown[0]!r}: {command} takes no such "
                          f"argument (a path with spaces needs quotes); see {command} --help")
    named = []
    for option in options:
        if explained and option in explained:
            named.append(f"{option} ({explained[option]})")
            continue
        close = difflib.get_close_matches(option, known_flags, n=1)
        named.append(option + (f" (did you mean {close[0]}?)" if close else ""))
    it = "it" if len(named) == 1 else "them"
    owners = f"neither {command} nor Beam defines {it}" if beam else f"{command} does not define {it}"
    noun = "option" if len(named) == 1 else "options"
    return UsageError(f"unknown {noun} {', '.join(named)}: {owners}; see {command} --help")


# Beam appends the step to a worker error's message; the step means nothing to a user.
_BEAM_STEP = re.compile(r"\s*\[while running '[^\n]*?'\]\s*$")
# A job service asked for workers of an environment it has no handler for (Beam's Python
# job service and PROCESS, for one).
_UNKNOWN_ENVIRONMENT = re.compile(r"KeyError: 'beam:env:(\w+):v\d+'")
# The last line of a Python traceback: "package.module.TypeName: message".
_TRACEBACK_LAST_LINE = re.compile(r"^((?:[A-Za-z_]\w*\.)*)([A-Za-z_]\w*): (.*)$", re.MULTILINE)


def describe(error: BaseException) -> Failure:
    """The message and exit code for ``error``, which may be a runner's wrapping of it.

    Errors of ours (:class:`RecordbeamError`) keep their message and exit code. Anything
    else exits 3 with its message, never its type's name: an ``OSError`` says
    ``No space left on device: '/out/...'``; but a remote runner's failure is told as the
    runner's own error, with its type (``KeyError: 'beam:env:process:v1'`` means little
    without it), and the runner named.
    """
    for link in error_chain(error):
        if isinstance(link, RecordbeamError):
            return Failure(_without_step(str(link)), link.exit_code)
    found = _ours_in_text(str(error))
    if found is not None:
        return found
    if isinstance(error, RunFailed) and error.runner:
        return Failure(f"the {error.runner} failed: {_runner_error(error.cause)}", EXIT_FAILED)
    # The innermost error that is not a runner's wrapping says most.
    original = [link for link in error_chain(error) if not _is_wrapper(link)]
    if original:
        return Failure(_plain_message(original[-1]), EXIT_FAILED)
    return Failure(_message_in_text(str(error)), EXIT_FAILED)


def error_chain(error: BaseException) -> Iterator[BaseException]:
    """``error``, then what it wraps: ``cause`` (a failed run's) or ``__cause__``. Not
    ``__context__``: an error raised while handling another is the one that counts."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        wrapped = getattr(current, "cause", None)
        if not isinstance(wrapped, BaseException):
            wrapped = current.__cause__
        current = wrapped


def _is_wrapper(error: BaseException) -> bool:
    """A runner's error that carries a worker's traceback as text, rather than an error of
    its own: its message is several lines long."""
    return "\n" in str(error).strip()


def _ours_in_text(text: str) -> Failure | None:
    """An error of ours named on a traceback's last line in ``text`` (the last such line)."""
    for match in reversed(list(_TRACEBACK_LAST_LINE.finditer(text))):
        module, name, message = match.group(1).rstrip("."), match.group(2), match.group(3)
        if module != "recordbeam" and not module.startswith("recordbeam."):
            continue
        try:
            error_type = getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError):
            continue
        if isinstance(error_type, type) and issubclass(error_type, RecordbeamError):
            return Failure(_without_step(message), error_type.exit_code)
    return None


def _message_in_text(text: str) -> str:
    """The message of the last traceback line in ``text``, without the type's name; else
    the text's last line."""
    matches = list(_TRACEBACK_LAST_LINE.finditer(text))
    if matches:
        return _without_step(matches[-1].group(3))
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return _without_step(lines[-1]) if lines else "the run failed"


def _runner_error(error: BaseException) -> str:
    """A runner's error as ``Type: message``: the last line of the traceback a job sent
    back as text, else the innermost error's own; with what it means when it says the
    workers lack recordbeam, or that the runner has no such environment."""
    text = str(error)
    matches = list(_TRACEBACK_LAST_LINE.finditer(text))
    if matches:
        line = f"{matches[-1].group(2)}: {_without_step(matches[-1].group(3))}"
    else:
        innermost = list(error_chain(error))[-1]
        message = _plain_message(innermost) if str(innermost).strip() else ""
        line = f"{type(innermost).__name__}: {message}" if message else type(innermost).__name__
    if line == "ModuleNotFoundError: No module named 'recordbeam'":
        line += (" (the workers do not have recordbeam: give --setup_file ./setup.py, or "
                 "--extra_package with its wheel, or a container image that holds it)")
    environment = _UNKNOWN_ENVIRONMENT.fullmatch(line)
    if environment:
        line += (f" (the job service cannot start --environment_type "
                 f"{environment.group(1).upper()} workers; Beam's Python job service starts "
                 "EXTERNAL, LOOPBACK and DOCKER ones)")
    return line


def _plain_message(error: BaseException) -> str:
    if isinstance(error, OSError) and error.strerror:
        where = error.filename if error.filename is not None else ""
        return f"{error.strerror}: {where}" if where else error.strerror
    text = _without_step(str(error))
    return text or "the run failed"


def _without_step(message: str) -> str:
    return _BEAM_STEP.sub("", message).strip()


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """``1 shard``, ``2 shards``: a count with its noun in the number messages need."""
    return f"{n} {noun}" if n == 1 else f"{n} {plural or noun + 's'}"
