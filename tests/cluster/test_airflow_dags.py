"""The example DAGs (deploy/airflow/dags), run by real Airflow.

Airflow 3 and its Apache Beam and Google providers live in their own environment
(``make test-cluster`` builds ``.venv-airflow``; ``RECORDBEAM_AIRFLOW_VENV`` names it); the
DAGs run recordbeam from this test environment (``RECORDBEAM_PYTHON``), as a deployment
runs it from recordbeam's own. Each DAG run is ``airflow dags test`` on SQLite, in a
temporary ``AIRFLOW_HOME``, its paths given as the run's conf. Beam's job service, its
worker pool and the stand-in Dataflow API listen on loopback ports and stop with their
tests; the Dataflow DAG reads the COCO sample from the GCS emulator (``gs://data``).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import gcs_emulator
import pytest
from beam_services import fake_dataflow, free_port, job_service, worker_pool
from launchers import ANNOTATIONS, IMAGES

import recordbeam

ROOT = Path(__file__).resolve().parents[2]
DAGS = ROOT / "deploy" / "airflow" / "dags"
VENV_VARIABLE = "RECORDBEAM_AIRFLOW_VENV"
#: The --detach line's documented format (docs/deploy/scheduled.md, "Fire and forget").
DETACHED = re.compile(r"submitted job (?P<job_id>\S+) to the (?P<runner>\S+); not waiting")
DAG_RUN_SECONDS = 900
PROJECT = "example-project"
CONNECTION_VARIABLE = "AIRFLOW_CONN_GOOGLE_CLOUD_DEFAULT"


def _airflow_python() -> Path:
    venv = Path(os.environ.get(VENV_VARIABLE, ROOT / ".venv-airflow"))
    python = venv / "bin" / "python"
    if not (venv / "bin" / "airflow").exists():
        if VENV_VARIABLE in os.environ:  # make test-cluster built it: its absence is an error
            pytest.fail(f"{VENV_VARIABLE}={venv} holds no Airflow")
        pytest.skip(f"no Airflow environment at {venv}: make .venv-airflow/.airflow builds it "
                    "(make test-cluster does)")
    return python


@dataclass
class Airflow:
    """The ``airflow`` command of the Airflow environment, with its own environment
    variables: call it with the command's arguments."""

    python: Path
    env: dict[str, str]

    def __call__(self, *args: str, timeout: float = DAG_RUN_SECONDS) -> subprocess.CompletedProcess:
        return subprocess.run([str(self.python.parent / "airflow"), *args], capture_output=True,
                              text=True, env=self.env, timeout=timeout)


def _service_account_key(path: Path) -> Path:
    """A service account's JSON key, as ``gcloud iam service-accounts keys create`` writes
    it, for a made-up account of another project than the jobs': nothing here reaches
    Google with it."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    private_key = rsa.generate_private_key(public_exponent=65537, key_size=2048).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption())
    email = "recordbeam@example-accounts.iam.gserviceaccount.com"
    path.write_text(json.dumps({
        "type": "service_account", "project_id": "example-accounts",
        "private_key_id": "0" * 40, "private_key": private_key.decode(), "client_email": email,
        "client_id": "1" * 21, "auth_uri": "https://accounts.google.com/o/oauth2/auth",
        "token_uri": "https://oauth2.googleapis.com/token"}))
    return path


@pytest.fixture(scope="module")
def airflow(tmp_path_factory) -> Airflow:
    """Airflow with a migrated SQLite database in a temporary AIRFLOW_HOME, its workers'
    environment set up for the Dataflow DAG as docs/deploy/scheduled.md says (the
    connection ``google_cloud_default`` in its environment form, and recordbeam's
    credentials: the same key)."""
    home = tmp_path_factory.mktemp("airflow_home")
    key = _service_account_key(home / "key.json")
    airflow = Airflow(_airflow_python(), {
        **os.environ,
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "RECORDBEAM_PYTHON": sys.executable,
        "RECORDBEAM_PIPELINES": str(ROOT / "pipelines"),
        CONNECTION_VARIABLE: json.dumps({"conn_type": "google_cloud_platform",
                                         "extra": {"project": PROJECT, "key_path": str(key)}}),
        "GOOGLE_APPLICATION_CREDENTIALS": str(key),
    })
    migrated = airflow("db", "migrate", timeout=600)
    assert migrated.returncode == 0, migrated.stdout[-3000:] + migrated.stderr[-3000:]
    return airflow


def _dag_test(airflow, dag_id: str, conf: dict) -> tuple[int, str]:
    done = airflow("dags", "test", dag_id, "-c", json.dumps(conf))
    return done.returncode, done.stdout + done.stderr


def _paths(sample, output: Path) -> dict[str, str]:
    return {"images": sample.images_dir, "annotations": sample.annotations, "output": str(output)}


def _shards(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.glob("*.tfrecord"))}


@pytest.fixture(scope="module")
def local_run(airflow, coco_sample, tmp_path_factory):
    output = tmp_path_factory.mktemp("nightly") / "coco"
    code, log = _dag_test(airflow, "recordbeam_nightly",
                          {**_paths(coco_sample, output), "options": "--shards 2"})
    return output, code, log


def test_nightly_run_on_this_machine_commits(local_run, coco_sample):
    output, code, log = local_run
    assert code == 0, log[-5000:]
    assert "new_state=success" in log
    assert (output / "manifest.json").exists()
    examples = list(recordbeam.read(str(output)))
    assert len(examples) == len(coco_sample.expected["good_images"]) == 12
    assert len(_shards(output)) == 2


def test_a_failing_conversion_fails_the_task_with_recordbeams_message(airflow, coco_sample,
                                                                      tmp_path):
    code, log = _dag_test(airflow, "recordbeam_nightly", {
        **_paths(coco_sample, tmp_path / "coco"), "annotations": str(tmp_path / "missing.json")})
    assert code != 0
    assert "new_state=failed" in log
    assert f"recordbeam: {tmp_path / 'missing.json'}: no such annotation file" in log
    assert "Command exited with return code 2" in log
    assert not (tmp_path / "coco").exists()


def _job_state(endpoint: str, job_id: str) -> str:
    import grpc
    from apache_beam.portability.api import beam_job_api_pb2, beam_job_api_pb2_grpc

    with grpc.insecure_channel(endpoint) as channel:
        state = beam_job_api_pb2_grpc.JobServiceStub(channel).GetState(
            beam_job_api_pb2.GetJobStateRequest(job_id=job_id), timeout=30).state
    return beam_job_api_pb2.JobState.Enum.Name(state)


def test_nightly_run_detached_on_a_portable_runner_commits_then_is_up_to_date(
        airflow, coco_sample, local_run, tmp_path):
    output = tmp_path / "coco"
    pool, port = free_port(), free_port()
    endpoint = f"localhost:{port}"
    conf = {**_paths(coco_sample, output), "options": (
        f"--shards 2 --detach --runner PortableRunner --job_endpoint {endpoint} "
        f"--environment_type EXTERNAL --environment_config localhost:{pool}")}
    with job_service(port, tmp_path / "job_service.log"), \
            worker_pool(pool, tmp_path / "worker_pool.log"):
        code, log = _dag_test(airflow, "recordbeam_nightly", conf)
        assert code == 0, log[-5000:]
        assert "new_state=success" in log
        # The task ended at submission; the line names the job the job service runs.
        (detached,) = DETACHED.finditer(log)
        assert detached["runner"] == "PortableRunner"
        assert _job_state(endpoint, detached["job_id"]) in ("STARTING", "RUNNING", "DONE")
        deadline = time.monotonic() + 300
        while _job_state(endpoint, detached["job_id"]) != "DONE":
            assert time.monotonic() < deadline, "the detached job did not finish"
            time.sleep(1)
        assert (output / "manifest.json").exists()
        assert _shards(output) == _shards(local_run[0])

        code, log = _dag_test(airflow, "recordbeam_nightly", conf)
    assert code == 0, log[-5000:]
    assert f"{output} is up to date (same inputs, options and recordbeam version); nothing to do" in log
    assert not DETACHED.search(log)


def _dataflow_task(airflow: Airflow, env: dict[str, str], params: dict,
                   beam_options: dict) -> subprocess.CompletedProcess:
    """The Dataflow DAG's task, run by its operator's own ``execute``
    (``dataflow_operator_run.py``) with the Airflow environment's Python, in ``env``."""
    return subprocess.run(
        [str(airflow.python), str(Path(__file__).with_name("dataflow_operator_run.py")),
         "--dags", str(DAGS), "--params", json.dumps(params),
         "--beam-options", json.dumps(beam_options)],
        capture_output=True, text=True, env=env, timeout=DAG_RUN_SECONDS)


def test_dataflow_dag_hands_the_job_id_to_airflow(airflow, emulator, tmp_path):
    """The Dataflow DAG's operator, on the documented connection, against the stand-in
    Dataflow API (tests/fake_dataflow.py), the COCO sample on the GCS emulator (Dataflow
    refuses local inputs): the provider reads the job's id from Beam's log line in
    recordbeam's output and pushes it to XCom."""
    job_id = "2026-11-26_02_00_00-5151515151"
    port = free_port()
    (tmp_path / "staging").mkdir()
    with fake_dataflow(port, tmp_path / "fake_dataflow.log", job_id):
        done = _dataflow_task(
            airflow, {**airflow.env, gcs_emulator.VARIABLE: emulator.url},
            {"images": IMAGES, "annotations": ANNOTATIONS, "output": "gs://data/airflow/coco",
             "project": PROJECT, "temp_location": str(tmp_path / "staging")},
            {"dataflow_endpoint": f"http://localhost:{port}", "no_auth": True,
             "staging_location": str(tmp_path / "staging")})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["xcom"] == {"dataflow_job_id": job_id}
    assert result["returned"] == {"dataflow_job_id": job_id}
    assert result["job_name"].startswith("recordbeam-coco-")
    # The hook that follows the job loads the connection's key and takes its project,
    # not the key's own (example-accounts).
    assert result["connection_project"] == PROJECT


def test_dataflow_dag_without_its_connection_fails_before_recordbeam_runs(
        airflow, emulator, tmp_path):
    env = {name: value for name, value in airflow.env.items() if name != CONNECTION_VARIABLE}
    output = "gs://data/airflow/no-connection"
    done = _dataflow_task(
        airflow, {**env, gcs_emulator.VARIABLE: emulator.url},
        {"images": IMAGES, "annotations": ANNOTATIONS, "output": output, "project": PROJECT,
         "temp_location": str(tmp_path)},
        {"dataflow_endpoint": f"http://localhost:{free_port()}", "no_auth": True})
    assert done.returncode != 0
    assert "The conn_id `google_cloud_default` isn't defined" in done.stderr
    assert "coco_to_tfrecord.py" not in done.stderr  # the provider never started recordbeam
    assert emulator.names(output) == []
