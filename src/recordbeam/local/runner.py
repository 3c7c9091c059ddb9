"""Pipeline options: our defaults for local runs, and Beam's own options passed through.

Locally we run Beam's FnApiRunner in multi-processing mode, one worker per core
(:class:`LocalRunner`). Beam's ``DirectRunner`` would first try to download the Prism
runner binary (and warn when it cannot); the FnApiRunner needs no network. Any
``--runner`` and any other Beam option given by the user wins over these defaults.

The local runner's worker processes are ``recordbeam.local.worker``: forked by a standby
process made ready ahead of the run (:mod:`recordbeam.local.standby`) when the command started
one, else new processes started as Beam starts them.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import logging
import os
import select
import shlex
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, TextIO

import grpc
from apache_beam.io.filesystems import FileSystems
from apache_beam.options import pipeline_options as beam_pipeline_options
from apache_beam.options.pipeline_options import (
    DirectOptions,
    PipelineOptions,
    StandardOptions,
)
from apache_beam.portability.api import beam_fn_api_pb2_grpc, endpoints_pb2
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from apache_beam.transforms.environments import Environment, SubprocessSDKEnvironment
from apache_beam.utils import thread_pool_executor
from google.protobuf import json_format, text_format

from recordbeam.errors import UsageError, unknown_arguments_error
from recordbeam.local import internals, standby
from recordbeam.local.feed import feeding_in_pieces
from recordbeam.local.grouped_flattens import grouping_flattens
from recordbeam.local.named_runner import load_named_runner
from recordbeam.local.shuffle import spilling_shuffles
from recordbeam.local.standby import LOCAL_RUNNER
from recordbeam.local.worker_deaths import WorkerDied, fail_waits_on, watch_of, watching

try:
    from apache_beam.runners.portability.fn_api_runner import worker_handlers
except ImportError:  # internals.why_unusable() says so, and runs are Beam's own
    worker_handlers = None

_LOG = logging.getLogger(__name__)

#: Runner names that run in this process's machine, as Beam 2.77 lists them
#: (``StandardOptions.LOCAL_RUNNERS``, which older Beam lacks).
LOCAL_RUNNERS = ("BundleBasedDirectRunner", "DirectRunner", "SwitchingDirectRunner",
                 "FnApiRunner", "PrismRunner", "TestDirectRunner")

_BeamWorkerHandler: Any = getattr(worker_handlers, "WorkerHandler", None)
_BeamSubprocessWorkerHandler: Any = getattr(worker_handlers, "SubprocessSdkWorkerHandler", None)

#: The environment of our local worker processes: Beam's subprocess environment under a
#: name of our own, so that its workers are started by :class:`_LocalWorkerHandler`.
LOCAL_WORKER_URN = "recordbeam:env:local_worker:v1"


class LocalRunner(FnApiRunner):
    """Beam's FnApiRunner, with four changes.

    Its shuffles move to disk past a memory budget
    (:mod:`recordbeam.local.shuffle`): in every mode the FnApiRunner holds them in this
    process, so without that its memory grows with the dataset. It feeds each stage's
    input to the workers in pieces while the stage runs (:mod:`recordbeam.local.feed`),
    instead of sending it whole first. And a ``Flatten`` that feeds a ``GroupByKey`` (every
    ``CoGroupByKey``) is written into the grouping, not through a stage of its own
    (:mod:`recordbeam.local.grouped_flattens`).

    In ``multi_processing`` mode its worker processes are ``recordbeam.local.worker``,
    Beam's worker that skips the interpreter's slow shutdown once its work is done
    (about 0.6 s per worker, stopped one after the other), forked by the standby of
    :mod:`recordbeam.local.standby` when the ``recordbeam`` command started one. A
    worker that dies before the run is done fails the run with :class:`WorkerDied`
    (:mod:`recordbeam.local.worker_deaths`). Other modes run Beam's workers.

    All of this reaches into Beam's runner internals; on a Beam without them, or one CI
    does not test (:func:`recordbeam.local.internals.why_unusable`), it is Beam's plain
    FnApiRunner instead, and each run logs why.
    """

    def run_pipeline(self, pipeline, options):
        notice = plain_runner_notice()
        if notice is not None:
            _LOG.warning("%s", notice)
            return _plain_runner(options).run_pipeline(pipeline, options)
        self._provision_info = _provision_info(options)
        with spilling_shuffles(), feeding_in_pieces(), grouping_flattens():
            if options.view_as(DirectOptions).direct_running_mode != "multi_processing":
                return super().run_pipeline(pipeline, options)
            return self._run_with_local_workers(pipeline, options)

    def _run_with_local_workers(self, pipeline, options):
        _register_local_worker_handler()
        direct = options.view_as(DirectOptions)
        default = self._default_environment
        # The FnApiRunner picks Beam's worker command for this mode; with no mode named it
        # keeps the environment set below and still runs direct_num_workers processes.
        direct.direct_running_mode = None
        try:
            with watching() as watch:
                self._default_environment = _LocalWorkerEnvironment(
                    f"{_quoted(sys.executable)} -m recordbeam.local.worker", watch.token)
                try:
                    return super().run_pipeline(pipeline, options)
                except Exception as error:
                    # Beam's own error says a channel closed, or a sibling's wait failed.
                    death = watch.first_death()
                    if death is not None:
                        raise death from error
                    raise
        finally:
            direct.direct_running_mode = "multi_processing"
            self._default_environment = default


def _provision_info(options: PipelineOptions) -> Any:
    """What the runner tells its worker processes: the pipeline options, as a portable
    runner sends them. Beam's FnApiRunner sends none, so its worker processes built their
    filesystems without the run's options (``--s3_endpoint_url`` and the other S3
    options, a GCS project...): an S3-compatible store's objects were looked for on AWS."""
    from apache_beam.portability.api import beam_provision_api_pb2
    from apache_beam.runners.portability.fn_api_runner.fn_runner import ExtendedProvisionInfo
    from apache_beam.runners.portability.portable_runner import JobServiceHandle

    encoded = JobServiceHandle.encode_pipeline_options(options.get_all_options())
    return ExtendedProvisionInfo(beam_provision_api_pb2.ProvisionInfo(
        retrieval_token="unused-retrieval-token", pipeline_options=encoded))


def _plain_runner(options: PipelineOptions) -> FnApiRunner:
    """Beam's plain FnApiRunner, whose worker processes are told the pipeline options
    where this Beam still takes them as before (else they start without them, as Beam's
    own do, and the log says so)."""
    try:
        return FnApiRunner(provision_info=_provision_info(options))
    except (ImportError, AttributeError, TypeError) as error:
        _LOG.warning("worker processes start without the pipeline options (%s): a filesystem "
                     "option such as --s3_endpoint_url reaches only this process", error)
        return FnApiRunner()


def plain_runner_notice() -> str | None:
    """Why :class:`LocalRunner` runs as Beam's plain FnApiRunner here, and what that
    changes, in one line; None when the installed Beam is one it may change."""
    why_not = internals.why_unusable()
    if why_not is None:
        return None
    notice = (f"{why_not}; this run uses Beam's plain FnApiRunner: the same output, but "
              "shuffles stay in the launcher's memory and workers start as Beam starts them")
    if internals.is_tested(internals.beam_version()):
        return notice
    oldest, newest = internals.TESTED_BEAM
    tested = f"'apache-beam>={oldest[0]}.{oldest[1]},<{newest[0]}.{newest[1] + 1}'"
    return f"{notice}; pip install {tested} keeps that memory bounded"


def runs_on_local_runner(options: PipelineOptions) -> bool:
    """Whether ``options`` name :class:`LocalRunner` (the default of :func:`pipeline_options`)."""
    return _runner_name(options) == LocalRunner.__name__


@Environment.register_urn(LOCAL_WORKER_URN, bytes)
class _LocalWorkerEnvironment(SubprocessSDKEnvironment):
    """Beam's subprocess environment, which also names the run its workers belong to
    (the :class:`recordbeam.local.worker_deaths.RunWatch` told of their deaths). The
    payload, ours alone, is ``<run token> <command line>``."""

    def __init__(self, command_string: str, run_token: str = "", *args: Any) -> None:
        super().__init__(command_string, *args)
        self.run_token = run_token

    def to_runner_api_parameter(self, context):
        payload = f"{self.run_token or '-'} {self.command_string}"
        return LOCAL_WORKER_URN, payload.encode("utf-8")

    @staticmethod
    def from_runner_api_parameter(payload, capabilities, artifacts, resource_hints, context):
        token, command = _read_payload(payload)
        return _LocalWorkerEnvironment(command, token, capabilities, artifacts, resource_hints)


def _read_payload(payload: bytes) -> tuple[str, str]:
    """(run token, command line) of a :class:`_LocalWorkerEnvironment`'s payload."""
    token, _space, command = payload.decode("utf-8").partition(" ")
    return ("" if token == "-" else token), command


class _LocalWorkerHandler(_BeamSubprocessWorkerHandler or object):
    """Beam's handler of subprocess workers, whose workers may be standbys, and whose
    worker's death before the runner closes it fails the run (see
    :mod:`recordbeam.local.worker_deaths`)."""

    def __init__(self, payload: bytes, state, provision_info, grpc_server) -> None:
        token, command_line = _read_payload(payload)
        super().__init__(command_line.encode("utf-8"), state, provision_info, grpc_server)
        self._command_line = command_line
        self._watch = watch_of(token)
        self._closing = threading.Event()
        self.death: WorkerDied | None = None

    def start_worker(self) -> None:
        self.worker = _LocalWorker(self._command_line, self.control_address,
                                   self.provision_info, self.worker_id)
        self.worker_thread = threading.Thread(name="run_worker", target=self._run_worker)
        self.worker_thread.start()

    def _run_worker(self) -> None:
        try:
            death = WorkerDied.ended(*self.worker.run())
        except Exception as error:  # noqa: BLE001 - e.g. no more processes: the run must hear of it
            death = WorkerDied(f"a worker process could not be started: {error}")
        if self._closing.is_set():
            return  # the runner is done with it: any end is fine
        self.death = death
        _LOG.error("%s", self.death)
        if self._watch is not None:
            self._watch.worker_died(self.death)
        # Until the runner closes this handler, fail whatever it sends the dead worker.
        while not self._closing.is_set():
            fail_waits_on(self, self.death)
            self._closing.wait(0.2)

    def close(self) -> None:
        self._closing.set()
        if self.death is None:
            super().close()
            return
        # Its streams are gone, or never opened: nothing to flush to it, nor to wait for.
        self.control_conn.close()
        self.stop_worker()


@functools.cache
def _register_local_worker_handler() -> None:
    """Beam's runner starts :data:`LOCAL_WORKER_URN`'s workers with our handler. Done on
    the first run that uses it, never on import: a Beam that no longer registers handlers
    this way must still import this module and run as its plain FnApiRunner."""
    _BeamWorkerHandler.register_environment(LOCAL_WORKER_URN, bytes)(_LocalWorkerHandler)


class _LocalWorker:
    """One worker process for the life of a run: forked by the command's standby when it
    has one (:func:`recordbeam.local.standby.take`), else started as Beam's
    ``SubprocessSdkWorker`` starts it. Either way :meth:`run` returns when the process
    has ended: its pid and exit code (negative: the signal that ended it)."""

    def __init__(self, command_line: str, control_address: str, provision_info,
                 worker_id: str | None) -> None:
        self._command_line = command_line
        self._control_address = control_address
        self._provision_info = provision_info
        self._worker_id = worker_id

    def run(self) -> tuple[int, int | None]:
        log_server, log_address = _start_log_server()
        try:
            environment = self._environment(log_address)
            ready = standby.take()
            worker = ready.hand_off(environment) if ready is not None else None
            if worker is None:
                # No standby, or it could not fork a worker: a new process, as Beam starts
                # them, but without a shell between, so that its pid is the worker's.
                worker = subprocess.Popen(_command_words(self._command_line), env=environment)
            return worker.pid, _wait_for_worker(worker)
        finally:
            log_server.stop(0)

    def _environment(self, log_address: str) -> Mapping[str, str]:
        """What Beam's ``SubprocessSdkWorker`` adds to the environment of the process."""
        options = self._provision_info.provision_info.pipeline_options
        environment = {
            **os.environ,
            "CONTROL_API_SERVICE_DESCRIPTOR": _service_descriptor(self._control_address),
            "LOGGING_API_SERVICE_DESCRIPTOR": _service_descriptor(log_address),
            "PIPELINE_OPTIONS": json_format.MessageToJson(options),
        }
        if self._worker_id:
            environment["WORKER_ID"] = self._worker_id
        return environment


def _service_descriptor(address: str) -> str:
    return text_format.MessageToString(endpoints_pb2.ApiServiceDescriptor(url=address))


def _start_log_server() -> tuple[grpc.Server, str]:
    """A gRPC server receiving one worker's log records, which it logs in this process."""
    from apache_beam.runners.portability.local_job_service import BeamFnLoggingServicer

    # A worker may stay quiet for long: the server must not take its keep-alive pings
    # for abuse and drop the connection.
    server = grpc.server(thread_pool_executor.shared_unbounded_instance(),
                         options=[("grpc.http2.max_pings_without_data", 0),
                                  ("grpc.http2.max_ping_strikes", 0)])
    beam_fn_api_pb2_grpc.add_BeamFnLoggingServicer_to_server(BeamFnLoggingServicer(), server)
    port = server.add_insecure_port("[::]:0")
    server.start()
    return server, f"localhost:{port}"


def _wait_for_worker(process: subprocess.Popen | standby.Worker) -> int | None:
    """Its exit code once it has ended (None: not known); killed if the wait is cut short."""
    try:
        return process.wait()
    finally:
        if process.poll() is None:
            process.kill()


def _command_words(command_line: str) -> list[str] | str:
    """The words of a command line :func:`_quoted` built, for ``subprocess.Popen``."""
    return shlex.split(command_line) if os.name == "posix" else command_line


def _quoted(path: str) -> str:
    """``path`` as one word of the shell command line Beam starts workers with."""
    return shlex.quote(path) if os.name == "posix" else subprocess.list2cmdline([path])


class PlainBeamParser(argparse.ArgumentParser):
    """What Beam's own parser adds to argparse's, for checking options (not for making
    them): its options' ``add_value_provider_argument``, parsed as a plain argument."""

    def add_value_provider_argument(self, *args, **kwargs) -> None:
        if not args[0].startswith("-") and kwargs.get("nargs") is None:
            kwargs["nargs"] = "?"
        self.add_argument(*args, **kwargs)


def _beam_parser_class() -> type[argparse.ArgumentParser]:
    """Beam's parser class where this Beam has it under its private name, else
    :class:`PlainBeamParser`."""
    return getattr(beam_pipeline_options, "_BeamArgumentParser", PlainBeamParser)


class _BeamOptionsParser(_beam_parser_class()):
    """The parser Beam reads pipeline options with (every ``PipelineOptions`` subclass's
    arguments, no abbreviations), raising on a bad value instead of exiting."""

    def error(self, message: str):  # argparse's hook; the default prints usage and exits
        raise UsageError(f"{message} (a Beam pipeline option)")


def _beam_options_parser() -> _BeamOptionsParser:
    # As PipelineOptions.get_all_options collects them: the direct subclasses loaded now,
    # one per name.
    parser = _BeamOptionsParser(allow_abbrev=False, add_help=False)
    classes = {str(cls): cls for cls in PipelineOptions.__subclasses__()}
    for cls in classes.values():
        cls._add_argparse_args(parser)
    return parser


def beam_option_flags() -> list[str]:
    """Every option Beam's ``PipelineOptions`` define (``--runner``, ``--project``...)."""
    return [flag for action in _beam_options_parser()._actions for flag in action.option_strings]


def unknown_beam_args(beam_args: Sequence[str]) -> list[str]:
    """The arguments no Beam pipeline option takes (unknown options, their values, stray
    words), in order; raises ``UsageError`` when a Beam option's value is bad."""
    _known, unknown = _beam_options_parser().parse_known_args(list(beam_args))
    return unknown


def check_beam_args(beam_args: Sequence[str], *, command: str = "recordbeam",
                    other_flags: Sequence[str] = (),
                    explained: Mapping[str, str] | None = None) -> None:
    """Raise ``UsageError`` unless every argument is a Beam pipeline option (and its value):
    Beam itself only logs a warning and drops the rest, so a typo would change the run
    without a word. ``other_flags`` join Beam's as suggestions; ``explained`` says what
    ``command`` takes instead of an option other commands have.

    The runner ``--runner`` names is loaded first, so that the options its own module
    defines are known (:mod:`recordbeam.local.named_runner`)."""
    load_named_runner(beam_args)
    unknown = unknown_beam_args(beam_args)
    if unknown:
        flags = [*other_flags, *beam_option_flags()]
        raise unknown_arguments_error(unknown, flags, command, explained=explained)


#: Beam's option groups that configure its filesystems: what a command that only reads a
#: finished folder (inspect, verify, check...) takes of Beam's options.
FILESYSTEM_OPTION_GROUPS = ("S3Options", "GoogleCloudOptions", "AzureOptions",
                            "HadoopFileSystemOptions")


def filesystem_options(args: Sequence[str], *, command: str,
                       other_flags: Sequence[str] = ()) -> PipelineOptions:
    """Hand Beam's ``FileSystems`` in this process the filesystem options among ``args``
    (``--s3_endpoint_url`` and the other S3, GCS, Azure and HDFS options), for a command
    that reads a folder without running a pipeline. Raises ``UsageError`` for any other
    argument, naming the closest option the command takes."""
    parser = _BeamOptionsParser(allow_abbrev=False, add_help=False)
    for name in FILESYSTEM_OPTION_GROUPS:
        group = getattr(beam_pipeline_options, name, None)
        if group is not None:
            group._add_argparse_args(parser)
    _known, unknown = parser.parse_known_args(list(args))
    if unknown:
        flags = [*other_flags, *(f for a in parser._actions for f in a.option_strings)]
        raise unknown_arguments_error(unknown, flags, command, beam=False)
    options = PipelineOptions(list(args))
    FileSystems.set_options(options)
    return options


class ViewsOnce(PipelineOptions):
    """Beam's options, each of whose views is made once. Beam asks a pipeline's options for
    a view at every transform applied and every type check (``view_as(TypeOptions)``), and
    each new view parses the flags again: about 2 ms, hundreds of times in a conversion. A
    view shares its options' values, so one view per class serves every caller; views of
    views are Beam's own."""

    def view_as(self, cls: type[Any]) -> Any:
        views = self.__dict__.setdefault("_views", {})
        if cls not in views:
            views[cls] = super().view_as(cls)
        return views[cls]

    def __getstate__(self) -> dict[str, Any]:
        state = dict(super().__getstate__())
        state.pop("_views", None)
        return state


def pipeline_options(beam_args: Sequence[str] = (), **overrides) -> PipelineOptions:
    """Beam options from command-line style ``beam_args`` plus our local defaults.

    Raises ``UsageError`` for an argument that is no Beam option (:func:`check_beam_args`).
    Also hands the options to Beam's ``FileSystems`` in this process, so the launcher's
    own checks (output folder, inputs, ``--if-changed``) reach object stores with the same
    settings (endpoint, credentials) as the workers.
    """
    check_beam_args(beam_args)
    options = ViewsOnce(list(beam_args), **overrides)
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
    return _runner_name(options) in (*LOCAL_RUNNERS, LocalRunner.__name__)


def _runner_name(options: PipelineOptions) -> str:
    """The class name of the runner ``options`` name (given as a path, a name or a runner)."""
    runner = options.view_as(StandardOptions).runner or LOCAL_RUNNER
    name = runner if isinstance(runner, str) else type(runner).__name__
    return name.rsplit(".", 1)[-1]


@contextlib.contextmanager
def worker_output_to_log(prefix: str = "recordbeam-") -> Iterator[tuple[TextIO, str]]:
    """Send everything written to file descriptor 2 (Beam's logs, and those of the
    worker processes it starts, which inherit it) to a log file for the duration.

    File descriptor 2 becomes a pipe that a thread copies into the log, so writing to it
    never fails: when the log's disk is full the thread drops what it cannot write. A
    failed write there would stop a run for good: Beam's SDK worker prints a failed
    bundle's traceback to stderr before it reports the failure, and a print that raises
    leaves the failure unreported and the runner waiting for the bundle.

    Yields ``(console, log_path)``: a stream to the real terminal for progress lines,
    and the log's path to show when something fails. The log is deleted on success.
    """
    sys.stderr.flush()
    log, log_path = tempfile.mkstemp(prefix=prefix, suffix=".log")
    read_end, write_end = os.pipe()
    drain = _LogDrain(read_end, log)
    drain.start()
    saved = os.dup(2)
    console = os.fdopen(os.dup(saved), "w", buffering=1)
    os.dup2(write_end, 2)
    os.close(write_end)
    failed = True
    try:
        yield console, log_path
        failed = False
    finally:
        if failed:
            _let_data_readers_finish(LATE_TRACEBACK_SECONDS)
        sys.stderr.flush()
        os.dup2(saved, 2)  # the workers, stopped by now, have let go of the pipe too
        os.close(saved)
        console.close()
        drain.stop(timeout=LOG_DRAIN_SECONDS)
        if not failed:
            os.unlink(log_path)


#: How long a failed or interrupted run waits at most for Beam's data readers to end.
LATE_TRACEBACK_SECONDS = 1.0

#: Beam's name for the launcher's threads that read what a worker sends.
_DATA_READER_THREAD = "read_grpc_client_inputs"


def _let_data_readers_finish(seconds: float) -> None:
    """After a failed or interrupted run: the launcher's threads reading the workers' data
    streams see the streams broken a moment after the runner has returned, and print a
    traceback as they end. Wait for them (at most ``seconds``), so that it goes to the
    log, not to the terminal under the command's one line."""
    deadline = time.monotonic() + seconds
    for thread in threading.enumerate():
        if thread.name == _DATA_READER_THREAD and thread is not threading.current_thread():
            thread.join(max(0.0, deadline - time.monotonic()))


#: How long the end of a run waits at most for the log's pipe to be copied out, and how
#: long the pipe must stay empty for the copy to end.
LOG_DRAIN_SECONDS = 5.0
LOG_POLL_SECONDS = 0.1


class _LogDrain(threading.Thread):
    """Copies the log's pipe into the log file until every writer has closed it, or,
    once :meth:`stop` is called, until the pipe is empty: a process that outlives the
    run with the pipe (a runner's job server) does not hold the command up. What the
    file refuses (a full disk) is dropped."""

    def __init__(self, read_end: int, log: int) -> None:
        super().__init__(name="recordbeam-log", daemon=True)
        self._read_end = read_end
        self._log = log
        self._stopping = threading.Event()

    def stop(self, timeout: float) -> None:
        self._stopping.set()
        self.join(timeout)

    def run(self) -> None:
        try:
            while True:
                ready, _, _ = select.select([self._read_end], [], [], LOG_POLL_SECONDS)
                if ready:
                    chunk = os.read(self._read_end, 1 << 16)
                    if not chunk:
                        return
                    self._write(memoryview(chunk))
                elif self._stopping.is_set():
                    return
        finally:
            os.close(self._read_end)
            os.close(self._log)

    def _write(self, chunk: memoryview) -> None:
        with contextlib.suppress(OSError):  # the log's disk is full: drop the rest
            while chunk:
                chunk = chunk[os.write(self._log, chunk):]
