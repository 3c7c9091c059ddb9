"""Exit codes and messages come from error types, wherever the runner wrapped them."""

from __future__ import annotations

import errno

import pytest

from recordbeam.errors import (
    EXIT_DATA,
    EXIT_FAILED,
    EXIT_USAGE,
    DataError,
    Failure,
    RunFailed,
    UsageError,
    describe,
    full_filesystem,
    unknown_arguments_error,
)


class _Wrapper(RuntimeError):
    """Like the runner's failure: the error it wraps in ``cause``."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__(str(cause))
        self.cause = cause


def _worker_traceback(last_line: str) -> str:
    """What a worker process sends back: its traceback as text."""
    return ("Pipeline failed in stage 7:\nTraceback (most recent call last):\n"
            '  File "apache_beam/runners/common.py", line 1512, in process\n'
            "RuntimeError: nested: see below\n" + last_line + "\n")


def test_our_error_keeps_its_message_and_code():
    assert describe(UsageError("--images: no such folder")) == Failure("--images: no such folder", 2)


def test_in_process_worker_error_loses_beams_step_suffix():
    # Beam re-raises the worker's own error object with the step appended to its message.
    error = DataError("3 of 9 images were rejected [while running 'WriteShards/Finalize']")
    failure = describe(_Wrapper(error))
    assert failure.message == "3 of 9 images were rejected"
    assert failure.exit_code == EXIT_DATA


def test_worker_process_error_is_found_by_its_qualified_type():
    text = _worker_traceback("recordbeam.write.commit.RejectLimitExceeded: 3 of 9 images were rejected "
                             "(33.3%) [while running 'WriteShards/Finalize']")
    failure = describe(_Wrapper(RuntimeError(text)))
    assert failure.message == "3 of 9 images were rejected (33.3%)"
    assert failure.exit_code == EXIT_DATA


def test_a_subclass_gets_its_code_from_its_base():
    text = _worker_traceback("recordbeam.dataset.names.OutputFolderError: out holds files")
    assert describe(RuntimeError(text)).exit_code == EXIT_USAGE


@pytest.mark.parametrize("name", ["recordbeam.nowhere.Gone", "recordbeam.errors.describe",
                                  "elsewhere.DataError"])
def test_a_name_that_is_not_one_of_our_error_types_exits_three(name):
    failure = describe(RuntimeError(_worker_traceback(f"{name}: something")))
    assert failure == Failure("something", EXIT_FAILED)


def test_foreign_error_in_text_loses_its_type_name():
    text = _worker_traceback("OSError: [Errno 28] No space left on device: '/out/x' "
                             "[while running 'WriteShards/WriteShard']")
    failure = describe(RuntimeError(text))
    assert failure == Failure("[Errno 28] No space left on device: '/out/x'", EXIT_FAILED)


def test_foreign_error_object_says_what_and_where():
    error = OSError(errno.ENOSPC, "No space left on device", "/out/train-00000-of-00001")
    assert describe(_Wrapper(error)) == Failure(
        "No space left on device: /out/train-00000-of-00001", EXIT_FAILED)


def _job_service_traceback(last_line: str) -> str:
    """What Beam's job service sends back when a job fails: its traceback as text."""
    return ("Traceback (most recent call last):\n"
            '  File "apache_beam/runners/portability/fn_api_runner/worker_handlers.py", '
            "line 345, in create\n" + last_line + "\n")


def test_a_remote_runner_failure_is_the_runners_own_error_with_its_type():
    error = RunFailed(RuntimeError(_job_service_traceback("KeyError: 'beam:env:process:v1'")),
                      "/tmp/job.log", "PortableRunner")
    assert describe(error) == Failure(
        "the PortableRunner failed: KeyError: 'beam:env:process:v1' (the job service cannot start "
        "--environment_type PROCESS workers; Beam's Python job service starts EXTERNAL, LOOPBACK "
        "and DOCKER ones)", EXIT_FAILED)


def test_a_remote_runner_error_without_a_traceback_names_its_type():
    cause = RuntimeError("Unable to fetch remote job server jar at https://example/x.jar")
    assert describe(RunFailed(cause, None, "FlinkRunner")) == Failure(
        "the FlinkRunner failed: RuntimeError: Unable to fetch remote job server jar at "
        "https://example/x.jar", EXIT_FAILED)


def test_workers_without_recordbeam_are_told_how_to_give_it_to_them():
    text = _job_service_traceback("ModuleNotFoundError: No module named 'recordbeam'")
    failure = describe(RunFailed(RuntimeError(text), None, "PortableRunner"))
    assert failure.message == (
        "the PortableRunner failed: ModuleNotFoundError: No module named 'recordbeam' (the "
        "workers do not have recordbeam: give --setup_file ./setup.py, or --extra_package with "
        "its wheel, or a container image that holds it)")


def test_our_error_inside_a_remote_job_keeps_its_message_and_code():
    text = _job_service_traceback("recordbeam.write.commit.RejectLimitExceeded: 3 of 9 images "
                                  "were rejected (33.3%)")
    assert describe(RunFailed(RuntimeError(text), None, "PortableRunner")) == Failure(
        "3 of 9 images were rejected (33.3%)", EXIT_DATA)


@pytest.mark.parametrize(
    ("unknown", "expected"),
    [
        (["--compresion", "gzip"], "unknown option --compresion (did you mean --compression?): "
         "neither recordbeam convert coco nor Beam defines it; see recordbeam convert coco --help"),
        (["-n", "3", "--zzz"], "unknown options -n, --zzz: neither recordbeam convert coco nor "
         "Beam defines them; see recordbeam convert coco --help"),
        (["gzip"], "unexpected argument 'gzip': recordbeam convert coco takes no such argument "
         "(a path with spaces needs quotes); see recordbeam convert coco --help"),
    ],
)
def test_unknown_arguments_are_named(unknown, expected):
    error = unknown_arguments_error(unknown, ["--compression", "--quiet"], "recordbeam convert coco")
    assert isinstance(error, UsageError)
    assert str(error) == expected


@pytest.mark.parametrize(
    ("error", "where"),
    [
        (OSError(errno.ENOSPC, "No space left on device", "/out/x.tfrecord"), "/out/x.tfrecord"),
        (OSError(errno.EDQUOT, "Disk quota exceeded"), ""),
        # A worker process's error reaches the launcher as its traceback's text.
        (RuntimeError("Traceback (most recent call last):\n  File ...\nOSError: [Errno 28] "
                      "No space left on device: '/out/.recordbeam-tmp-ab/t.tfrecord.1' "
                      "[while running 'WriteShards/WriteShard']"), ""),
        (RuntimeError("Traceback (most recent call last):\n  File ...\nOSError: [Errno 28] "
                      "No space left on device: '/out/t.tfrecord.1'"), "/out/t.tfrecord.1"),
        (RuntimeError("Traceback ...\nOSError: [Errno 28] No space left on device"), ""),
        (OSError(errno.EACCES, "Permission denied", "/out"), None),
        (RuntimeError("1 of 3 images were rejected"), None),
    ],
)
def test_a_full_filesystem_is_found_with_where(error, where):
    assert full_filesystem(error) == where
