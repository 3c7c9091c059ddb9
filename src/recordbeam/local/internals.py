"""Whether the local runner may change Beam's runner: the one check, shared by its modules.

The local runner (:mod:`recordbeam.local.runner`, and what it installs for a run:
:mod:`recordbeam.local.shuffle`, :mod:`recordbeam.local.feed`, the worker processes of
:mod:`recordbeam.local.worker` forked by :mod:`recordbeam.local.standby`) reaches into Beam's
runner: modules outside Beam's public API and private attributes, which any Beam release
may change. It does so only when :func:`why_unusable` returns None: the installed Beam is
one CI tests (:data:`TESTED_BEAM`) and has every internal the runner uses
(:data:`RUNNER_INTERNALS`). Otherwise a local run is Beam's plain ``FnApiRunner``: the
same output, more memory and a slower start, and the log says why once per run.

The piece-by-piece feed has a check of its own on top of this one
(``local_feed.AVAILABLE``): Beam added the send-queue cap it needs in 2.77, and older
tested versions send each stage's input whole, as Beam does.

This module imports Beam only when asked.
"""

from __future__ import annotations

import functools
import importlib
import re
from collections.abc import Iterator
from typing import Any

#: The oldest and the newest Beam (major, minor) CI runs the local runner on: ``make
#: test-oldest`` and ``make test``, with the Makefile's ``OLDEST_BEAM`` and ``NEWEST_BEAM``.
#: pyproject.toml admits any Beam from the oldest on: a newer one runs local runs as
#: Beam's plain FnApiRunner (``make test-newest-beam`` tests that on the newest release).
TESTED_BEAM = ((2, 60), (2, 77))

#: What the local runner uses of Beam's runner, as (module, attribute path).
RUNNER_INTERNALS = (
    # The runner it extends, whose worker environment it replaces for a run.
    ("apache_beam.runners.portability.fn_api_runner", "FnApiRunner.run_pipeline"),
    # The pipeline options its worker processes are told (the runner's _provision_info).
    ("apache_beam.runners.portability.fn_api_runner.fn_runner", "ExtendedProvisionInfo"),
    ("apache_beam.runners.portability.portable_runner", "JobServiceHandle.encode_pipeline_options"),
    # Workers started from our own environment, forked by the standby when there is one.
    ("apache_beam.runners.portability.fn_api_runner.worker_handlers",
     "WorkerHandler.register_environment"),
    ("apache_beam.runners.portability.fn_api_runner.worker_handlers",
     "SubprocessSdkWorkerHandler.start_worker"),
    ("apache_beam.runners.portability.local_job_service", "BeamFnLoggingServicer"),
    # A worker that died: the waits on it are failed (recordbeam.local.worker_deaths).
    ("apache_beam.runners.portability.fn_api_runner.worker_handlers", "ControlConnection.abort"),
    ("apache_beam.runners.worker.data_plane", "_GrpcDataChannel.input_elements"),
    ("apache_beam.runners.worker.sdk_worker_main", "main"),
    # The shuffle that spills to disk.
    ("apache_beam.runners.portability.fn_api_runner.execution", "GroupingBuffer"),
    ("apache_beam.runners.portability.fn_api_runner.execution",
     "BundleContextManager.get_buffer"),
    # Materialized collections that spill to disk too.
    ("apache_beam.runners.portability.fn_api_runner.execution", "ListBuffer.partition"),
    ("apache_beam.runners.portability.fn_api_runner.execution",
     "FnApiRunnerExecutionContext.bundle_manager_for"),
    ("apache_beam.runners.portability.fn_api_runner.translations", "split_buffer_id"),
    # A Flatten feeding a GroupByKey written into the grouping (recordbeam.local.grouped_flattens).
    ("apache_beam.runners.portability.fn_api_runner.translations",
     "create_and_optimize_stages"),
    ("apache_beam.runners.portability.fn_api_runner.translations", "sink_flattens"),
    ("apache_beam.runners.portability.fn_api_runner.translations",
     "TransformContext.add_data_channel_coder"),
    ("apache_beam.runners.worker.bundle_processor", "DATA_OUTPUT_URN"),
)


def beam_version() -> str:
    import apache_beam

    return apache_beam.__version__


def minor_version(version: str) -> tuple[int, int] | None:
    """(major, minor) of a Beam version string such as ``2.60.0`` or ``2.78.0rc1``."""
    found = re.match(r"(\d+)\.(\d+)", version)
    return (int(found.group(1)), int(found.group(2))) if found else None


def is_tested(version: str) -> bool:
    """Whether ``version`` is in :data:`TESTED_BEAM`'s range."""
    minor = minor_version(version)
    return minor is not None and TESTED_BEAM[0] <= minor <= TESTED_BEAM[1]


def _present(module: str, attributes: str) -> bool:
    try:
        found: object = importlib.import_module(module)
    except ImportError:
        return False
    for name in attributes.split("."):
        found = getattr(found, name, None)
        if found is None:
            return False
    return True


def names_used(function: object) -> set[str]:
    """Global and attribute names a function's code uses, nested functions included."""
    names: set[str] = set()
    stack = [getattr(function, "__code__", None)]
    while stack:
        code = stack.pop()
        if code is not None:
            names.update(code.co_names)
            stack.extend(c for c in code.co_consts if hasattr(c, "co_names"))
    return names


def missing_internals() -> list[str]:
    """The runner internals this Beam lacks, as ``module.attribute``."""
    missing = [f"{module}.{attributes}" for module, attributes in RUNNER_INTERNALS
               if not _present(module, attributes)]
    if not missing:
        from apache_beam.runners.portability.fn_api_runner import FnApiRunner

        # Our worker environment goes where run_pipeline reads it: set anywhere else, it
        # would be ignored and the run would quietly use Beam's workers.
        if "_default_environment" not in names_used(FnApiRunner.run_pipeline):
            missing.append("FnApiRunner.run_pipeline reading _default_environment")
        if "_provision_info" not in names_used(FnApiRunner.run_stages):
            missing.append("FnApiRunner.run_stages reading _provision_info")
        if not _data_channels_report_errors():
            missing.append("_GrpcDataChannel.input_elements raising _exception")
    return missing


def _data_channels_report_errors() -> bool:
    """Whether a gRPC data channel's reader raises the error kept in its ``_exception``
    while it waits for outputs (:func:`fail_data_channel` relies on it)."""
    from apache_beam.runners.worker import data_plane

    return "_exception" in names_used(data_plane._GrpcDataChannel.input_elements)


def fail_data_channel(channel: Any, error: BaseException) -> None:
    """Make the runner's wait for outputs on ``channel`` (a worker's gRPC data channel)
    raise ``error`` within a second: Beam's reader polls the error its own receiving
    thread keeps when a stream breaks, ``_exception``. Other channels are left alone."""
    from apache_beam.runners.worker import data_plane

    if isinstance(channel, data_plane._GrpcDataChannel) and channel._exception is None:
        channel._exception = error


@functools.cache
def why_unusable() -> str | None:
    """None when the local runner may change Beam's runner, else why not (for the log).

    Checked once per process: the answer depends only on the installed Beam."""
    version = beam_version()
    oldest, newest = TESTED_BEAM
    if not is_tested(version):
        return (f"Apache Beam {version} is not one recordbeam's local runner is tested with "
                f"({oldest[0]}.{oldest[1]} to {newest[0]}.{newest[1]})")
    missing = missing_internals()
    if missing:
        return f"Apache Beam {version} lacks what recordbeam's local runner uses: " + ", ".join(
            missing)
    return None


def submitted_job_id(result: object) -> str | None:
    """The runner's id of a job submitted without waiting: Dataflow's public ``job_id()``;
    the portable runner's result keeps it only in the private ``_job_id`` (no accessor up
    to Beam 2.77), read here, where Beam's internals are fenced. None when neither says."""
    job_id = getattr(result, "job_id", None)
    if callable(job_id):
        job_id = job_id()
    job_id = job_id or getattr(result, "_job_id", None)
    return str(job_id) if job_id else None


def _match_lists_privately() -> bool:
    """Whether Beam's ``FileSystem.match`` lists through the private members
    :func:`streamed_match` calls (``_list``, ``_url_dirname``) and filters through
    ``match_files``; if a Beam release changes that, streaming the listing could give
    other files than ``match``."""
    from apache_beam.io.filesystem import FileSystem

    return {"_list", "_url_dirname", "match_files"} <= names_used(FileSystem.match) and all(
        callable(getattr(FileSystem, name, None)) for name in ("_list", "_url_dirname"))


def streamed_match(system: Any, pattern: str, where: str | None = None) -> Iterator[Any] | None:
    """``system.match([pattern])``'s files, streamed: the filesystem's own lister
    (``_list``, the generator every Beam ``FileSystem`` implements and ``match`` drains)
    on the part before the first glob character (or on ``where``, the pattern's literal
    part when the caller knows it better: escaped glob characters are no glob), through
    the same filter (``match_files``). None where that would not give ``match``'s files: a
    pattern without a glob, a filesystem with a ``match`` of its own, or a Beam whose
    ``match`` lists another way (checked once per process)."""
    from apache_beam.io.filesystem import FileSystem

    prefix = re.match(r"[^[*?]*", pattern).group(0)
    if prefix == pattern or not _streams_listings() or type(system).match is not FileSystem.match:
        return None
    where = prefix if where is None else where
    if system.has_dirs():
        where = system._url_dirname(where)  # as match does: list the folder itself
    return system.match_files(system._list(where), pattern)


@functools.cache
def _streams_listings() -> bool:
    return _match_lists_privately()


#: Beam's process-wide answer to "which Google credentials?" (``apache_beam.internal.gcp.
#: auth._Credentials``): a lock, whether the answer was found, the answer. The same three
#: names from Beam 2.60 to 2.77; Beam's own tests reset them this way.
BEAM_CREDENTIALS_CACHE = ("apache_beam.internal.gcp.auth", "_Credentials")
_CACHE_MEMBERS = ("_credentials_lock", "_credentials_init", "_credentials")


def answer_beam_anonymously() -> bool:
    """Tell Beam's Google clients in this process (GCS, the Dataflow API) to connect
    without credentials, as Beam does itself once its own search finds none, but without
    that search: up to five calls of ``google.auth.default`` with exponential backoff
    between them (~25 s measured here), then a warning. An answer Beam already holds is
    kept.

    Returns False, changing nothing, when this Beam keeps its answer another way (Beam
    then searches as usual)."""
    try:
        module = importlib.import_module(BEAM_CREDENTIALS_CACHE[0])
    except ImportError:
        return False
    cache = getattr(module, BEAM_CREDENTIALS_CACHE[1], None)
    if cache is None or not all(hasattr(cache, name) for name in _CACHE_MEMBERS):
        return False
    # The answer goes where Beam's lookup reads it, or it would search all the same.
    if "_credentials_init" not in names_used(getattr(cache, "get_service_credentials", None)):
        return False
    with cache._credentials_lock:
        if not cache._credentials_init:
            cache._credentials = None
            cache._credentials_init = True
    return True


def filesystems_options() -> tuple[bool, Any]:
    """``(readable, options)``: the pipeline options Beam's ``FileSystems`` hands the
    filesystems it builds in this process (``FileSystems.set_options``: the launcher's, or
    those a worker was started with; None when none were set). ``readable`` is False when
    this Beam keeps them elsewhere."""
    from apache_beam.io.filesystems import FileSystems

    if not hasattr(FileSystems, "_pipeline_options"):
        return False, None
    return True, FileSystems._pipeline_options



def staged_names(result: Any) -> list[str] | None:
    """The files a Dataflow job built by ``result``'s run stages for its workers (its
    setup file's package, requirements, extra packages...), as its job graph names them;
    None where the result does not show its job graph (another runner, another Beam)."""
    graph = getattr(getattr(result, "job", None), "proto_pipeline", None)
    environments = getattr(getattr(graph, "components", None), "environments", None)
    if environments is None:
        return None
    return sorted({_staged_name(artifact) for environment in environments.values()
                   for artifact in environment.dependencies})


def _staged_name(resource: Any) -> str:
    """The file name an ``ArtifactInformation`` is staged under."""
    role = getattr(resource, "role_payload", b"")
    if role:
        from apache_beam.portability.api import beam_runner_api_pb2

        payload = beam_runner_api_pb2.ArtifactStagingToRolePayload.FromString(role)
        if payload.staged_name:
            return payload.staged_name
    return str(resource)
