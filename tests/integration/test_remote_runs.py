"""What a run on a remote runner prints, and what it leaves behind.

Beam's DataflowRunner submits to a stand-in of the Dataflow job API on a loopback port
(``tests/fake_dataflow.py``): the submitting side is Beam's own code, staging included, so
the lines Beam logs are the real ones. Schedulers read the job's id from them (Airflow's
Beam and Dataflow operators look for ``Created job with id: [...]``), and our own
``--detach`` line on stdout has a fixed format. A Flex Template launcher runs the pipeline
script with ``--template_location``: the job is written there, and the command exits 0.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import stores
from beam_services import fake_dataflow, free_port

from recordbeam.cli.main import main
from recordbeam.dataset import folder_lock

ROOT = Path(__file__).parents[2]
SCRIPT = ROOT / "pipelines" / "coco_to_tfrecord.py"
JOB_ID = "2026-11-26_02_00_00-4242424242"


def _dataflow_args(tmp_path: Path) -> list[str]:
    (tmp_path / "staging").mkdir()
    (tmp_path / "temp").mkdir()
    return ["--runner=DataflowRunner", "--project=example-project", "--region=us-central1",
            f"--staging_location={tmp_path / 'staging'}", f"--temp_location={tmp_path / 'temp'}",
            "--no_auth"]


def _run_script(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True,
                          timeout=300)


@pytest.fixture
def dataflow_client():
    return pytest.importorskip("apache_beam.runners.dataflow.internal.apiclient")


@pytest.fixture
def gcs(coco_sample):
    """The COCO sample at gs://data/coco on the GCS emulator: Dataflow's workers read
    nothing local."""
    with stores.gcs() as store:
        store.upload_folder(coco_sample.images_dir, IMAGES)
        store.upload_file(coco_sample.annotations, ANNOTATIONS)
        yield store


IMAGES, ANNOTATIONS, OUT = "gs://data/coco/images", "gs://data/coco/instances.json", "gs://data/out"


def test_dataflow_submission_shows_beams_job_lines_and_our_detach_line(
        gcs, tmp_path, dataflow_client):
    port = free_port()
    out = OUT
    with fake_dataflow(port, tmp_path / "fake_dataflow.log", JOB_ID):
        done = _run_script("--images", IMAGES, "--annotations", ANNOTATIONS, "--output", out,
                           "--detach", *_dataflow_args(tmp_path),
                           f"--dataflow_endpoint=http://localhost:{port}")
    assert done.returncode == 0, done.stderr
    # Our line, whole: stdout holds nothing else.
    assert done.stdout == (
        f"submitted job {JOB_ID} to the DataflowRunner; not waiting for it (--detach). The job "
        f"commits its output itself: {out}/manifest.json appears, last, when it has "
        "finished; follow the job on the runner's own console\n")
    # Beam's lines, as Beam logs them: what was staged, the job's id, its console.
    assert f"Staging file locally to {tmp_path / 'staging' / 'pipeline.pb'}" in done.stderr
    assert f"Created job with id: [{JOB_ID}]" in done.stderr
    assert (f"https://console.cloud.google.com/dataflow/jobs/us-central1/{JOB_ID}"
            "?project=example-project") in done.stderr
    assert "Converting string literal type hint" not in done.stderr
    assert (tmp_path / "fake_dataflow.log").read_text().count('"POST /v1b3/projects/'
                                                              'example-project/locations/'
                                                              'us-central1/jobs') == 1
    _held_for_the_job(gcs, out)  # the job writes the rest, and this job never runs


def test_a_flex_template_launch_writes_the_job_and_exits_zero(gcs, tmp_path, dataflow_client):
    """The launcher passes each template parameter as ``--name=value`` (switches as
    ``=true`` / ``=false``) and asks for the job in a file (``--template_location``)."""
    out = OUT
    job_file = tmp_path / "staging" / "template_launches" / "job_object"
    parameters = [f"--images={IMAGES}", f"--annotations={ANNOTATIONS}", f"--output={out}",
                  "--include_masks=true", "--if_changed=false", "--max_reject_fraction=0.5",
                  "--shards=2"]
    # No API is called: an endpoint on loopback only keeps Beam from checking the real
    # service's storage, as it does for gs:// locations.
    args = [*_dataflow_args(tmp_path), f"--dataflow_endpoint=http://localhost:{free_port()}"]
    job_file.parent.mkdir(parents=True)
    done = _run_script(*parameters, *args, f"--template_location={job_file}")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"wrote the DataflowRunner job to {job_file}; nothing runs "
                                  "until a launch from there"), done.stdout
    job = json.loads(job_file.read_text())
    assert job["type"] == "JOB_TYPE_BATCH"
    assert job["environment"]["tempStoragePrefix"] == str(tmp_path / "temp")
    _held_for_the_job(gcs, out)


def test_template_location_is_refused_off_dataflow(coco_sample, tmp_path, capsys):
    code = main(["convert", "coco", "--images", coco_sample.images_dir, "--annotations",
                 coco_sample.annotations, "--output", str(tmp_path / "out"),
                 f"--template_location={tmp_path / 'job'}"])
    assert code == 2
    assert ("--template_location is honoured by DataflowRunner only"
            in capsys.readouterr().err)
    assert not (tmp_path / "job").exists()


def _held_for_the_job(store, out: str) -> None:
    """OUT holds only its lock, naming the job's run and no process of this machine: the
    job's commit gives it up, and a later run here does not take it for a dead one."""
    assert store.names(out) == [folder_lock.LOCK]
    held = folder_lock.read(out)
    assert held is not None and held.run is not None
    assert held.pid is None
