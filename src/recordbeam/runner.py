"""Pipeline options: our defaults for local runs, and Beam's own options passed through.

Locally we run Beam's FnApiRunner in multi-processing mode, one worker per core
(:class:`LocalRunner`). Beam's ``DirectRunner`` would first try to download the Prism
runner binary (and warn when it cannot); the FnApiRunner needs no network. Any
``--runner`` and any other Beam option given by the user wins over these defaults.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shlex
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from typing import TextIO

from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import DirectOptions, PipelineOptions, StandardOptions
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from apache_beam.transforms.environments import SubprocessSDKEnvironment

from recordbeam.local_feed import feeding_in_pieces
from recordbeam.local_shuffle import spilling_shuffles

LOCAL_RUNNER = "recordbeam.runner.LocalRunner"


class LocalRunner(FnApiRunner):
    """Beam's FnApiRunner, with three changes.

    Its shuffles move to disk past a memory budget
    (:mod:`recordbeam.local_shuffle`): in every mode the FnApiRunner holds them in this
    process, so without that its memory grows with the dataset. And it feeds each stage's
    input to the workers in pieces while the stage runs (:mod:`recordbeam.local_feed`),
    instead of sending it whole first.

    In ``multi_processing`` mode its worker processes are ``recordbeam.local_worker``,
    Beam's worker that skips the interpreter's slow shutdown once its work is done
    (about 0.6 s per worker, stopped one after the other). Other modes run Beam's workers.
    """

    def run_pipeline(self, pipeline, options):
        with spilling_shuffles(), feeding_in_pieces():
            if options.view_as(DirectOptions).direct_running_mode != "multi_processing":
                return super().run_pipeline(pipeline, options)
            return self._run_with_local_workers(pipeline, options)

    def _run_with_local_workers(self, pipeline, options):
        direct = options.view_as(DirectOptions)
        default = self._default_environment
        self._default_environment = SubprocessSDKEnvironment.from_command_string(
            f"{_quoted(sys.executable)} -m recordbeam.local_worker")
        # The FnApiRunner picks Beam's worker command for this mode; with no mode named it
        # keeps the environment set above and still runs direct_num_workers processes.
        direct.direct_running_mode = None
        try:
            return super().run_pipeline(pipeline, options)
        finally:
            direct.direct_running_mode = "multi_processing"
            self._default_environment = default


def _quoted(path: str) -> str:
    """``path`` as one word of the shell command line Beam starts workers with."""
    return shlex.quote(path) if os.name == "posix" else subprocess.list2cmdline([path])


def pipeline_options(beam_args: Sequence[str] = (), **overrides) -> PipelineOptions:
    """Beam options from command-line style ``beam_args`` plus our local defaults.

    Also hands the options to Beam's ``FileSystems`` in this process, so the launcher's
    own checks (output folder, inputs, ``--if-changed``) reach object stores with the same
    settings (endpoint, credentials) as the workers.
    """
    options = PipelineOptions(list(beam_args), **overrides)
    FileSystems.set_options(options)
    standard = options.view_as(StandardOptions)
    if standard.runner is None:
        standard.runner = LOCAL_RUNNER
    if is_local(options):
        given = {a.split("=", 1)[0].lstrip("-") for a in beam_args if a.startswith("--")}
        given |= set(overrides)
        direct = options.view_as(DirectOptions)
        if "direct_running_mode" not in given:
            direct.direct_running_mode = "multi_processing"
        if "direct_num_workers" not in given:
            direct.direct_num_workers = os.cpu_count() or 1
    return options


def is_local(options: PipelineOptions) -> bool:
    runner = options.view_as(StandardOptions).runner or LOCAL_RUNNER
    name = runner if isinstance(runner, str) else type(runner).__name__
    return name.rsplit(".", 1)[-1] in (*StandardOptions.LOCAL_RUNNERS, LocalRunner.__name__)


_M_ARENA_MAX = -8  # glibc's mallopt parameter number


def limit_malloc_arenas(arenas: int = 2) -> None:
    """Cap glibc's per-thread malloc arenas, here and in worker processes started later.

    Beam's local runner moves data through many gRPC threads; with glibc's default of
    8 arenas per core, freed buffers stay mapped and the launcher's resident memory
    was 1.5x higher in our 100k-image benchmark. A no-op on other C libraries.
    """
    os.environ.setdefault("MALLOC_ARENA_MAX", str(arenas))  # inherited by workers
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(_M_ARENA_MAX, int(os.environ["MALLOC_ARENA_MAX"]))
    except (OSError, AttributeError, ValueError):
        pass


@contextlib.contextmanager
def worker_output_to_log(prefix: str = "recordbeam-") -> Iterator[tuple[TextIO, str]]:
    """Send everything written to file descriptor 2 (Beam's logs, and those of the
    worker processes it starts, which inherit it) to a log file for the duration.

    Yields ``(console, log_path)``: a stream to the real terminal for progress lines,
    and the log's path to show when something fails. The log is deleted on success.
    """
    sys.stderr.flush()
    fd, log_path = tempfile.mkstemp(prefix=prefix, suffix=".log")
    saved = os.dup(2)
    console = os.fdopen(os.dup(saved), "w", buffering=1)
    os.dup2(fd, 2)
    os.close(fd)
    failed = True
    try:
        yield console, log_path
        failed = False
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
        console.close()
        if not failed:
            os.unlink(log_path)
