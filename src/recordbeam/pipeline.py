"""Compose inputs and the sink into runnable conversions; run them and report.

The CLI and the scripts in ``pipelines/`` both call these functions, so a laptop run
and a Dataflow job build the same graph.

Every ``<format>_to_tfrecord`` raises ``LabelMapMismatch`` before any work when the output
folder holds other splits whose label map disagrees with this run's, where the classes
are known before the run (a class list, a label map file); where they are known only once
the annotations are read, the commit checks them.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, nullcontext, suppress
from dataclasses import dataclass
from typing import Any, TextIO

import apache_beam as beam
from apache_beam.io.filesystem import FileMetadata
from apache_beam.options.pipeline_options import (
    GoogleCloudOptions,
    PipelineOptions,
    PortableOptions,
    SetupOptions,
    StandardOptions,
    TestOptions,
)

from recordbeam import filesystems, gcs_credentials
from recordbeam.dataset import folder_lock, layout
from recordbeam.errors import (
    OutOfSpace,
    RecordbeamError,
    RunFailed,
    Terminated,
    UsageError,
    error_chain,
    full_filesystem,
)
from recordbeam.job_server import check_job_server, no_job_server_error
from recordbeam.local import internals
from recordbeam.local.internals import submitted_job_id, why_unusable
from recordbeam.local.malloc_arenas import tune_malloc
from recordbeam.local.runner import is_local, pipeline_options, worker_output_to_log
from recordbeam.local.shuffle import spilled_under
from recordbeam.local.standby import LOCAL_RUNNER
from recordbeam.local.worker import fork_standby_from_launcher
from recordbeam.local.worker_deaths import WorkerDied
from recordbeam.sources.fingerprint import combine_terms, file_term, fingerprint
from recordbeam.write.progress import ProgressReporter
from recordbeam.write.sink import WriteShards


class RunInterrupted(KeyboardInterrupt):
    """Ctrl-C (or SIGTERM or SIGHUP: ``terminated`` is that :class:`Terminated`) while a
    run went on. ``outcome`` says what became of the output folder (or of the remote
    job), ``log_path`` where Beam's log of a local run is kept."""

    def __init__(self, outcome: str, log_path: str | None = None, *,
                 terminated: Terminated | None = None) -> None:
        super().__init__(outcome)
        self.outcome = outcome
        self.log_path = log_path
        self.terminated = terminated


def _terminated(interrupt: KeyboardInterrupt) -> Terminated | None:
    return interrupt if isinstance(interrupt, Terminated) else None


@dataclass(frozen=True)
class RunResult:
    """What a finished run produced: its manifest and how long it took; ``warnings``: what
    went wrong once the output was complete (a worker that died after the commit)."""

    manifest: Mapping[str, Any]
    wall_seconds: float
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True)
class SubmittedRun:
    """A run this process did not wait for: a job handed to a remote runner (``detach``),
    whose own finalize step commits the output; with Dataflow's ``--dry_run``, a job graph
    built and checked but never submitted; with Dataflow's ``--template_location``, a job
    written there for a later launch (what a Flex Template launcher asks for)."""

    job_id: str | None
    runner: str
    dry_run: bool
    template_location: str | None = None
    #: A dry run's files built as the runner stages them for its workers (None: this
    #: Beam's stager could not be asked).
    staged: tuple[str, ...] | None = None


def _listed_inputs(pattern: str, skip_below: str | None) -> Iterator[FileMetadata]:
    """The files ``pattern`` matches, without those in ``skip_below`` when the pattern
    lists a folder holding it (the output folder put inside an input folder)."""
    listed = filesystems.iter_match(pattern)
    literal, rest = filesystems.pattern_parts(pattern)
    folder = literal.rstrip("/") if rest == "**" else None
    prefix = filesystems.prefix_below(folder, skip_below) if folder and skip_below else None
    return listed if prefix is None else (m for m in listed if not m.path.startswith(prefix))


def current_fingerprint(patterns: Sequence[str], settings: Mapping[str, Any],
                        skip_below: str | None = None) -> str:
    """The inputs fingerprint a run would record now, computed by listing on the launcher
    (the pipeline computes the same value from the same listing on workers, which leaves
    the output folder ``skip_below`` out as this does)."""
    total, count = combine_terms(
        file_term(m.path, m.size_in_bytes, m.last_updated_in_seconds)
        for pattern in patterns for m in _listed_inputs(pattern, skip_below)
    )
    return fingerprint(total, count, settings)


def is_up_to_date(output_dir: str, split: str, patterns: Sequence[str],
                  settings: Mapping[str, Any]) -> bool:
    """True when ``output_dir`` holds a finished ``split`` made from these very inputs
    (names, sizes, modification times) and settings (options, recordbeam version), and
    every shard its manifest lists is there with the size the commit wrote: a shard
    deleted or cut since is no output to keep."""
    manifest = layout.read_manifest(output_dir)
    entry = (manifest or {}).get("splits", {}).get(split, {})
    recorded = entry.get("inputs_fingerprint")
    return (recorded is not None and _shards_whole(output_dir, entry)
            and recorded == current_fingerprint(patterns, settings, skip_below=output_dir))


def _shards_whole(output_dir: str, entry: Mapping[str, Any]) -> bool:
    return all(
        filesystems.size_of(filesystems.join(output_dir, shard["file"])) == shard.get("bytes")
        for shard in entry.get("shards", []))




def check_run_options(options: PipelineOptions, *, detach: bool = False) -> None:
    """Raise ``UsageError`` for run options that would be ignored: ``detach`` on a local
    runner (its run ends with this process), or with workers inside this process
    (``LOOPBACK``); ``--dry_run`` on a runner that does not honour it (all but Dataflow's
    would run the job for real); a ``--setup_file`` Beam could not build; nothing
    listening at ``--job_endpoint`` (:func:`recordbeam.job_server.check_job_server`; checked
    after what this machine alone can tell); a Dataflow submission without Google credentials
    (:mod:`recordbeam.gcs_credentials`)."""
    runner = _runner_name(options)
    if detach and is_local(options):
        raise UsageError(
            f"--detach needs a remote runner (DataflowRunner, FlinkRunner, SparkRunner, "
            f"PortableRunner): the {runner} runs in this process and ends with it")
    environment = options.view_as(PortableOptions).environment_type
    if detach and (environment or "").upper() == "LOOPBACK":
        raise UsageError("--detach cannot work with --environment_type LOOPBACK: its workers "
                         "run in this process and end with it")
    if options.view_as(TestOptions).dry_run and not _is_dataflow(options):
        raise UsageError(f"--dry_run is honoured by DataflowRunner only; the {runner} would "
                         "run the job for real")
    if options.view_as(GoogleCloudOptions).template_location and not _is_dataflow(options):
        raise UsageError(f"--template_location is honoured by DataflowRunner only; the "
                         f"{runner} would run the job for real")
    _check_setup_file(options)
    if not is_local(options):
        check_job_server(options)
    if _submits_to_dataflow(options):
        credentials = gcs_credentials.settle()
        if credentials.emulator:
            raise UsageError(
                f"DataflowRunner submits the job to Google, and {gcs_credentials.EMULATOR_VARIABLE} "
                "sends gs:// to a storage emulator, which Dataflow's workers cannot reach: "
                "--dry_run=True checks the job against the emulator")
        if not credentials.found:
            raise UsageError(
                "DataflowRunner submits the job with Google credentials, and none were found "
                f"here: {gcs_credentials.HOW_TO_LOG_IN}; --dry_run=True checks the job without "
                "them")


def _check_setup_file(options: PipelineOptions) -> None:
    """Beam builds ``--setup_file`` into a source package with this environment's own
    setuptools (``python -m build --no-isolation``, else ``python setup.py sdist``); a
    missing file or a missing setuptools would end the launch in a traceback."""
    setup_file = options.view_as(SetupOptions).setup_file
    if not setup_file or is_local(options):
        return
    if not os.path.isfile(setup_file):
        raise UsageError(f"--setup_file {setup_file}: no such file; give the setup.py of a "
                         "recordbeam checkout (./setup.py from its top folder)")
    if importlib.util.find_spec("setuptools") is None:
        raise UsageError(
            f"--setup_file {setup_file} is built by this Python environment's setuptools, and "
            f"it has none ({sys.executable}): pip install setuptools, or build a wheel "
            "(pip wheel --no-deps . -w dist/) and pass --extra_package with it instead of "
            "--setup_file")


def _staging_error(error: BaseException, log_path: str) -> UsageError | None:
    """What was wrong, when Beam's stager could not build what a job stages for its
    workers (``--setup_file``'s package, ``--requirements_file``, ``--extra_package``):
    a setting to fix, said in one line. Beam wraps a failed build's
    ``CalledProcessError`` in a ``RuntimeError``; the build's own output is in the log."""
    failed = next((link for link in error_chain(error)
                   if isinstance(link, subprocess.CalledProcessError)), None)
    if failed is not None:
        command = " ".join(map(str, failed.cmd)) if isinstance(failed.cmd, list) else failed.cmd
        said = (f"`{command}` ended with exit status {failed.returncode} (its output is in "
                f"{log_path})")
    elif isinstance(error, RuntimeError) and "command line option" in str(error):
        said = " ".join(str(error).split())
    else:
        return None
    return UsageError(f"what the job stages for its workers could not be built: {said}; "
                      "check --setup_file, --requirements_file and --extra_package")


def _no_worker_from_the_pool(error: BaseException, options: PipelineOptions
                             ) -> RecordbeamError | None:
    """What to say when an ``EXTERNAL`` worker pool started no worker the job service could
    use before its wait ran out (gRPC's ``DEADLINE_EXCEEDED``, after 5 minutes): Beam's
    worker pool starts each worker as ``python`` from its own ``PATH``, and a ``python``
    without Beam or recordbeam dies at once, seen only in the pool's own output."""
    portable = options.view_as(PortableOptions)
    if (portable.environment_type or "").upper() != "EXTERNAL":
        return None
    text = " ".join(str(link) for link in error_chain(error))
    if "DEADLINE_EXCEEDED" not in text and "Deadline Exceeded" not in text:
        return None
    pool = portable.environment_config or "the worker pool"
    return RecordbeamError(
        f"no worker of the EXTERNAL worker pool at {pool} connected before the job service "
        "stopped waiting (DEADLINE_EXCEEDED): the pool starts each worker as `python` from "
        "its own PATH, which must be an environment holding recordbeam and this Beam (start "
        "the pool with that environment's bin first on PATH); its output says why the "
        "worker did not start")


def check_paths_for_runner(options: PipelineOptions, paths: Sequence[str]) -> None:
    """Raise ``UsageError`` for a local path given to a runner whose workers run on other
    machines (Dataflow): they could not read it, and the job would fail there."""
    if not _is_dataflow(options):
        return
    for path in paths:
        if filesystems.local_path(path) is not None:
            path = filesystems.pattern_parts(path)[0].rstrip("/") or path
            raise UsageError(f"{path} is a local path, and DataflowRunner's workers run on "
                             "Google's machines, which cannot read it: copy it to gs:// "
                             "(gcloud storage cp -r) and give that path")


def _runner_name(options: PipelineOptions) -> str:
    runner = options.view_as(StandardOptions).runner or LOCAL_RUNNER
    return (runner if isinstance(runner, str) else type(runner).__name__).rsplit(".", 1)[-1]


def _is_dataflow(options: PipelineOptions) -> bool:
    return _runner_name(options).endswith("DataflowRunner")


def _submits_to_dataflow(options: PipelineOptions) -> bool:
    """A Dataflow run for real, with credentials (Beam's ``--no_auth`` goes without)."""
    return (_is_dataflow(options) and not options.view_as(TestOptions).dry_run
            and not options.view_as(GoogleCloudOptions).no_auth)


def run(
    build: Callable[[beam.Pipeline], WriteShards], output_dir: str, *,
    beam_args: Sequence[str] = (), overwrite: bool = False, show_progress: bool = True,
    options: PipelineOptions | None = None, detach: bool = False, break_lock: bool = False,
    command: str = "", inputs: Sequence[str] = (),
) -> RunResult | SubmittedRun:
    """Check the output folder, build the pipeline, take the folder's lock, run, and
    return the manifest.

    With ``detach`` (remote runners only), return as soon as the job is submitted; with
    Dataflow's ``--dry_run``, once its graph is built; with Dataflow's
    ``--template_location``, once the job is written there. All give a
    :class:`SubmittedRun`.

    ``inputs`` are the paths the workers read: local ones are refused for a runner whose
    workers run elsewhere (:func:`check_paths_for_runner`).

    Raises ``OutputFolderError`` before any work when the folder holds foreign files and
    ``overwrite`` is False; ``FolderLocked`` when another run holds the folder (see
    :mod:`recordbeam.dataset.folder_lock`; ``break_lock`` takes it anyway); ``UsageError``
    for options :func:`check_run_options` refuses; ``RunFailed`` when the run fails
    (a local worker that died once the commit was done does not fail it: the result's
    ``warnings`` name it); ``RunInterrupted`` on Ctrl-C. A run that fails removes its
    temp folder (unless its commit had begun: the next run completes it) and gives the
    lock up.
    """
    options = options or pipeline_options(beam_args)
    check_run_options(options, detach=detach)
    check_paths_for_runner(options, [*inputs, output_dir])
    layout.check_writable(output_dir, overwrite=overwrite)
    if is_local(options):
        layout.check_creatable(output_dir)
    started = time.monotonic()
    p = beam.Pipeline(options=options)
    sink = build(p)
    dry_run = _is_dataflow(options) and options.view_as(TestOptions).dry_run
    lock = None
    run_id = folder_lock.run_id_of(sink.temp_dir)
    failed_rejects = _failed_rejects_state(output_dir)
    warnings: tuple[str, ...] = ()
    try:
        if not dry_run:
            # A job written for a later launch (--template_location) runs without this
            # process too: its commit gives the lock up.
            left = detach or bool(options.view_as(GoogleCloudOptions).template_location)
            lock = folder_lock.acquire(output_dir, run_id, command=command, detached=left,
                                       break_lock=break_lock)
        if is_local(options):
            try:
                _run_locally(p, sink, output_dir, show_progress, run_id)
            except RunFailed as failed:
                warning = _death_after_commit(failed, output_dir, sink.temp_dir, run_id)
                if warning is None:
                    raise
                warnings = (warning,)
        else:
            submitted = _run_remotely(p, options, detach)
            if submitted is not None:
                return submitted  # the job's commit gives the lock up
    except BaseException as error:
        if lock is not None:
            _give_up_after_failure(lock, sink.temp_dir, failed_rejects)
        full = _out_of_space(error, output_dir, sink.temp_dir)
        if full is not None:
            raise full from error
        raise
    if lock is not None:
        lock.release()  # the commit gave it up; a no-op unless something went amiss
    manifest = layout.read_manifest(output_dir)
    if manifest is None:
        raise RecordbeamError(f"the run ended but {output_dir} has no manifest.json, so nothing "
                              "was committed; see the runner's log of the job")
    return RunResult(manifest, time.monotonic() - started, warnings)


def _commit_done(output_dir: str, temp_dir: str, run_id: str) -> bool:
    """Whether the run ``run_id`` committed ``output_dir`` whole: the last steps of its
    commit removed its temp folder and gave the folder's lock up, and the manifest is in
    place."""
    with suppress(Exception):  # what cannot be read is not known to be done
        current = folder_lock.read(output_dir)
        return ((current is None or current.run != run_id)
                and not filesystems.exists(temp_dir)
                and filesystems.exists(filesystems.join(output_dir, layout.MANIFEST)))
    return False


def _death_after_commit(failed: RunFailed, output_dir: str, temp_dir: str,
                        run_id: str) -> str | None:
    """The warning for a local run that failed only because a worker died once its commit
    was done (the output is whole); None for any other failure."""
    if not isinstance(failed.cause, WorkerDied) or not _commit_done(output_dir, temp_dir, run_id):
        return None
    kept = f"; the run's log is in {failed.log_path}" if failed.log_path else ""
    return failed.cause.after_commit(output_dir) + kept


def _out_of_space(error: BaseException, output_dir: str, temp_dir: str) -> OutOfSpace | None:
    """The error to report when ``error`` is a write to a full filesystem: where, and
    what became of the output folder. None for any other error."""
    where = full_filesystem(error) if isinstance(error, Exception) else None
    if where is None:
        return None
    place = where.rsplit("/", 1)[0] if "/" in where else where
    if filesystems.exists(filesystems.join(temp_dir, layout.COMMIT_PLAN)):
        outcome = (f"the commit to {output_dir} had begun: it holds no manifest.json until a "
                   "run into it finishes")
    else:
        outcome = f"nothing was committed to {output_dir} and this run's temp files are removed"
    spills = spilled_under(where)
    if spills is not None:
        return OutOfSpace(
            f"out of space on {spills}, where the local runner spills shuffles that do not "
            f"fit in memory (TMPDIR); {outcome}. Free some space there, or set TMPDIR to a "
            "folder on a larger disk, then run again", getattr(error, "log_path", None))
    return OutOfSpace(
        f"out of space on {place or output_dir} (no space or inodes left, or a quota "
        f"reached); {outcome}. Free some space there, then run again",
        getattr(error, "log_path", None))


def _failed_rejects_state(output_dir: str) -> tuple[int, float] | None:
    """Size and time of ``failed-run-rejects.jsonl``, None when there is none: a failed run
    that wrote one records it as its own."""
    path = filesystems.join(output_dir, layout.FAILED_REJECTS)
    with suppress(Exception):
        found = next(iter(filesystems.iter_match(path)), None)
        if found is not None:
            return found.size_in_bytes, found.last_updated_in_seconds
    return None


def _give_up_after_failure(lock: folder_lock.FolderLock, temp_dir: str,
                           failed_rejects: tuple[int, float] | None) -> None:
    """After a failed or interrupted run: remove its temp folder unless its commit had
    begun (the next run needs what it says), then give the lock up, recording what the
    run leaves in the folder."""
    with suppress(Exception):  # best effort: what stays is recorded, the next run removes it
        commit_began = filesystems.exists(filesystems.join(temp_dir, layout.COMMIT_PLAN))
        if not commit_began:
            filesystems.remove_tree(temp_dir)
        after = _failed_rejects_state(lock.output_dir)
        wrote_rejects = after is not None and after != failed_rejects
        lock.release(keep_temp=commit_began,
                     files=[layout.FAILED_REJECTS] if wrote_rejects else [])


def _run_locally(p: beam.Pipeline, sink: WriteShards, output_dir: str,
                 show_progress: bool, run_id: str) -> None:
    tune_malloc()
    # The command's standby, if it left it for now: forked with the modules this process
    # has imported, before the run starts any thread. None where the local runner is
    # Beam's plain FnApiRunner, which starts Beam's own workers.
    if why_unusable() is None:
        fork_standby_from_launcher()
    # Beam's and its worker processes' logs go to a file; the terminal gets progress.
    with worker_output_to_log() as (console, log_path):
        try:
            with ProgressReporter(sink.temp_dir, stream=console) if show_progress else nullcontext():
                p.run().wait_until_finish()
        except KeyboardInterrupt as interrupt:
            # The runner has stopped its workers on the way out; say what is left.
            raise RunInterrupted(_after_interruption(output_dir, sink.temp_dir, run_id), log_path,
                                 terminated=_terminated(interrupt)) from None
        except Exception as error:
            raise RunFailed(error, log_path) from error


def _after_interruption(output_dir: str, temp_dir: str, run_id: str) -> str:
    """What a local run interrupted by Ctrl-C leaves in ``output_dir``. Before its commit
    began: nothing, and its temp folder is removed. During the commit: a folder without
    a manifest, which the next run into it completes or replaces. After it: the output,
    whole."""
    if _commit_done(output_dir, temp_dir, run_id):
        return f"the run had committed {output_dir} before it stopped: the output is complete"
    if filesystems.exists(filesystems.join(temp_dir, layout.COMMIT_PLAN)):
        return (f"the commit to {output_dir} had begun: it holds no manifest.json until a run "
                "into it finishes; rerun the command")
    return f"nothing was committed to {output_dir}"


def _run_remotely(p: beam.Pipeline, options: PipelineOptions,
                  detach: bool) -> SubmittedRun | None:
    """Submit the job; unless detached (or a dry run), wait for its end. Returns the
    :class:`SubmittedRun` when not waiting, None once the job has finished. Beam's log of
    the submission and of the job's messages goes to a file, kept when the run fails; the
    Dataflow runner's goes to the console too (:func:`_dataflow_log_shown_on`)."""
    runner = _runner_name(options)
    with worker_output_to_log(prefix="recordbeam-job-") as (console, log_path), \
            _dataflow_log_shown_on(console):
        try:
            return _submit_and_wait(p, options, detach, runner, log_path)
        except RecordbeamError:
            raise
        except Exception as error:
            refused = (no_job_server_error(error, options) or _staging_error(error, log_path)
                       or _no_worker_from_the_pool(error, options))
            if refused is not None:
                raise refused from error
            raise RunFailed(error, log_path, runner) from error


#: Where Beam's Dataflow runner logs the job's submission (staging, ``Created job with id:
#: [...]``, the job's console link) and, while it waits, the job's states and messages.
_DATAFLOW_LOGGER = "apache_beam.runners.dataflow"


@contextmanager
def _dataflow_log_shown_on(console: TextIO) -> Iterator[None]:
    """The Dataflow runner's log from INFO on ``console`` too, while a job is submitted
    and watched: that is how Dataflow reports, and where schedulers read the job's id
    (Airflow's Beam and Dataflow operators look for ``Created job with id: [...]``).
    Other runners' logs stay in the run's log file: their lines are the runner's
    machinery (ports, state changes), and a failure is said in one line."""
    logger = logging.getLogger(_DATAFLOW_LOGGER)
    handler = logging.StreamHandler(console)
    handler.setFormatter(logging.Formatter("%(levelname)s:%(name)s:%(message)s"))
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


def _submit_and_wait(p: beam.Pipeline, options: PipelineOptions, detach: bool, runner: str,
                     log_path: str) -> SubmittedRun | None:
    result = p.run()
    if _is_dataflow(options) and options.view_as(TestOptions).dry_run:
        staged = internals.staged_names(result)
        return SubmittedRun(None, runner, dry_run=True,
                            staged=None if staged is None else tuple(staged))
    template = options.view_as(GoogleCloudOptions).template_location
    if template:  # Beam wrote the job there and submitted nothing: no job to wait for
        return SubmittedRun(None, runner, dry_run=False, template_location=template)
    if detach:
        return SubmittedRun(submitted_job_id(result), runner, dry_run=False)
    try:
        result.wait_until_finish()
    except KeyboardInterrupt as interrupt:
        job = submitted_job_id(result)
        raise RunInterrupted(
            f"the job{' ' + job if job else ''} keeps running on the {runner}; cancel it there "
            "if it should stop", log_path, terminated=_terminated(interrupt)) from None
    return None
