"""What a remote run's failures say when their cause is a setting to fix: a worker pool
that started no worker, a package the stager could not build."""

from __future__ import annotations

import subprocess

from apache_beam.options.pipeline_options import PipelineOptions

from recordbeam.errors import UsageError, describe
from recordbeam.pipeline import _no_worker_from_the_pool, _staging_error


def _deadline() -> Exception:
    try:
        try:
            raise RuntimeError("<_InactiveRpcError of RPC that terminated with: status = "
                               "StatusCode.DEADLINE_EXCEEDED details = \"Deadline Exceeded\">")
        except RuntimeError as inner:
            raise RuntimeError("Pipeline job failed") from inner
    except RuntimeError as outer:
        return outer


def test_an_external_pool_that_started_no_worker_is_named_with_what_to_check():
    options = PipelineOptions(["--runner=PortableRunner", "--job_endpoint=localhost:8099",
                               "--environment_type=EXTERNAL",
                               "--environment_config=pool-host:50000"])
    said = describe(_no_worker_from_the_pool(_deadline(), options))
    assert said.message.startswith("no worker of the EXTERNAL worker pool at pool-host:50000 "
                                   "connected before the job service stopped waiting")
    assert "`python` from its own PATH" in said.message
    assert said.exit_code == 3


def test_other_environments_and_other_errors_keep_the_runners_message():
    loopback = PipelineOptions(["--environment_type=LOOPBACK"])
    external = PipelineOptions(["--environment_type=EXTERNAL"])
    assert _no_worker_from_the_pool(_deadline(), loopback) is None
    assert _no_worker_from_the_pool(RuntimeError("KeyError: 'x'"), external) is None


def test_a_package_that_did_not_build_names_the_command_and_the_log():
    failed = subprocess.CalledProcessError(1, ["python", "setup.py", "sdist"])
    try:
        raise RuntimeError("Full trace: ...") from failed
    except RuntimeError as wrapped:
        refusal = _staging_error(wrapped, "/tmp/run.log")
    assert isinstance(refusal, UsageError)
    assert str(refusal) == (
        "what the job stages for its workers could not be built: `python setup.py sdist` "
        "ended with exit status 1 (its output is in /tmp/run.log); check --setup_file, "
        "--requirements_file and --extra_package")
    assert _staging_error(RuntimeError("something else"), "/tmp/run.log") is None
