"""``--runner`` takes any runner Beam can load, with the options its module defines; a
runner that cannot work is refused in one line before anything runs."""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest
from apache_beam.options.pipeline_options import FlinkRunnerOptions

from recordbeam.errors import UsageError
from recordbeam.job_server import check_job_server
from recordbeam.local.runner import check_beam_args, pipeline_options

RENDER = "apache_beam.runners.render.RenderRunner"


def _checked_in_a_new_interpreter(*beam_args: str) -> subprocess.CompletedProcess:
    # A new interpreter: RenderRunner's module must not have been imported by anything else.
    code = ("import sys; from recordbeam.local.runner import check_beam_args; "
            "assert 'apache_beam.runners.render' not in sys.modules; "
            f"check_beam_args({list(beam_args)!r}); print('accepted')")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)


def test_options_a_runner_defines_in_its_own_module_are_accepted():
    done = _checked_in_a_new_interpreter("--runner", RENDER, "--render_output", "graph.dot")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "accepted"


def test_a_misspelt_option_of_that_runner_is_refused_naming_the_option():
    with pytest.raises(UsageError) as refused:
        check_beam_args(["--runner", RENDER, "--render_outptu", "graph.dot"])
    assert "unknown option --render_outptu (did you mean --render_output?)" in str(refused.value)


def test_flink_options_are_accepted_and_a_typo_in_one_is_refused():
    oldest_flink = FlinkRunnerOptions.PUBLISHED_FLINK_VERSIONS[0]  # each Beam has its list
    options = pipeline_options(["--runner", "FlinkRunner", "--flink_master", "flink:8081",
                                "--flink_version", oldest_flink, "--flink_job_server_jar", "js.jar"])
    assert options.get_all_options()["flink_master"] == "flink:8081"
    with pytest.raises(UsageError, match=r"--flink_mastr \(did you mean --flink_master\?\)"):
        check_beam_args(["--runner=FlinkRunner", "--flink_mastr", "flink:8081"])


def test_dask_runner_is_refused_with_why_not_with_its_options_unknown():
    with pytest.raises(UsageError) as refused:
        check_beam_args(["--runner", "apache_beam.runners.dask.dask_runner.DaskRunner",
                         "--dask_client_address", "scheduler:8786"])
    message = str(refused.value)
    assert "recordbeam does not run on Beam's DaskRunner" in message
    assert "records and rejects down separate outputs" in message
    assert "unknown option" not in message and "\n" not in message


@pytest.mark.parametrize(("runner", "said"), [
    ("Flnk", "--runner Flnk: Beam knows no runner of that name (did you mean FlinkRunner?)"),
    ("no_such_package.Runner",
     "--runner no_such_package.Runner: Beam cannot load this runner (ModuleNotFoundError: "
     "No module named 'no_such_package')"),
    ("apache_beam.runners.render.NoRunner",
     "--runner apache_beam.runners.render.NoRunner: Beam cannot load this runner "
     "(AttributeError: "),
    ("recordbeam.errors.UsageError",
     "--runner recordbeam.errors.UsageError: UsageError is no Beam PipelineRunner"),
])
def test_a_runner_beam_cannot_load_is_one_line(runner, said):
    with pytest.raises(UsageError) as refused:
        check_beam_args(["--runner", runner])
    assert str(refused.value).startswith(said)
    assert "\n" not in str(refused.value)


def test_runner_names_are_matched_as_beam_matches_them():
    for name in ("flink", "Flink", "recordbeam.runner.LocalRunner", "DirectRunner"):
        check_beam_args(["--runner", name])


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # nothing listens once the socket is closed


def test_a_job_endpoint_where_nothing_listens_is_refused_at_once():
    port = _closed_port()
    options = pipeline_options(["--runner=PortableRunner", f"--job_endpoint=localhost:{port}"])
    with pytest.raises(UsageError, match=rf"--job_endpoint localhost:{port}: no job server "
                                         r"listens there \(connection refused\)"):
        check_job_server(options)


def test_a_job_endpoint_on_an_unknown_host_is_refused():
    options = pipeline_options(["--runner=PortableRunner", "--job_endpoint=no-such-host.invalid:8099"])
    with pytest.raises(UsageError, match="the host no-such-host.invalid is not known"):
        check_job_server(options)


def test_a_listening_job_endpoint_is_left_to_beam():
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        check_job_server(pipeline_options(["--runner=PortableRunner",
                                           f"--job_endpoint=localhost:{port}"]))
