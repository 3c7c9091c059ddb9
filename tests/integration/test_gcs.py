"""What is Google's own about ``gs://``, against a GCS emulator on a loopback port
(``tests/gcs_emulator.py``): a run killed while it writes there, the line saying which
credentials ``gs://`` uses (checked in fresh processes: the answer is settled once per
process), and Dataflow's launcher without Google. What every store does is in
``test_stores.py``."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import gcs_emulator
import pytest
from lanes import exhaustive

import recordbeam
from recordbeam.cli.main import main
from recordbeam.dataset.names import MANIFEST, TEMP_PREFIX
from recordbeam.dataset.reader import ReaderError

REPO = Path(__file__).parents[2]
IMAGES = "gs://data/coco/images"
ANNOTATIONS = "gs://data/coco/instances.json"
#: In memory: the killed run's fault is planted in its own process, and the folder it is
#: compared with is written the same way. The default runner on gs:// is test_stores.py's.
IN_MEMORY = ("--direct_running_mode=in_memory", "--direct_num_workers=1")
#: The sample rejects about a quarter of its images on purpose.
LENIENT = "0.5"


@pytest.fixture(scope="module")
def emulator(coco_sample):
    """One emulator for the module, holding the COCO sample at ``gs://data/coco``."""
    with gcs_emulator.running("data") as running:
        running.upload_folder(coco_sample.images_dir, IMAGES)
        running.upload_file(coco_sample.annotations, ANNOTATIONS)
        yield running


@pytest.fixture()
def gcs(emulator, monkeypatch):
    monkeypatch.setenv(gcs_emulator.VARIABLE, emulator.url)
    return emulator


def _convert(images: str, annotations: str, output: str, *extra: str) -> list[str]:
    return ["convert", "coco", "--images", images, "--annotations", annotations, "--output",
            output, "--shards", "2", "--max-reject-fraction", LENIENT, "--quiet",
            *IN_MEMORY, *extra]


@pytest.fixture(scope="module")
def gcs_run(emulator) -> str:
    """The sample converted from gs:// to gs://, once for the module."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(gcs_emulator.VARIABLE, emulator.url)
        assert main(_convert(IMAGES, ANNOTATIONS, "gs://data/out")) == 0
    return "gs://data/out"


@pytest.mark.case("Conversion into `gs://` killed (SIGKILL) while writing a shard",
                  "no manifest.json, no final shard; the rerun into the same folder completes "
                  "and removes the killed run's temp objects")
@exhaustive  # make test kills a local run (test_faults.py)
def test_a_killed_run_leaves_no_finished_looking_folder_and_a_rerun_completes(
        gcs, gcs_run, tmp_path):
    out = "gs://data/killed"
    env = {**os.environ, gcs_emulator.VARIABLE: gcs.url,
           "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO / "tests" / "reliability"),
                                                       str(REPO / "src"),
                                                       os.environ.get("PYTHONPATH")]))}
    # The run kills itself (SIGKILL, as the OOM killer or a preempted machine would) once
    # shard 1 has 3 records in its temp object.
    driver = (
        "import os, signal, sys\n"
        "import shard_faults\n"
        "from apache_beam.io.gcp.gcsfilesystem import GCSFileSystem\n"
        "def die(file):\n"
        "    file.flush()\n"
        "    os.kill(os.getpid(), signal.SIGKILL)\n"
        "GCSFileSystem.create = shard_faults.failing_creates(\n"
        "    GCSFileSystem.create, shard=1, after=3, marker='/nonexistent', fault=die)\n"
        "from recordbeam.cli.main import main\n"
        "sys.exit(main(sys.argv[1:]))\n")
    killed = subprocess.run([sys.executable, "-c", driver, *_convert(IMAGES, ANNOTATIONS, out)],
                            env=env, capture_output=True, text=True, timeout=300)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    names = gcs.names(out)
    assert MANIFEST not in names
    assert not [n for n in names if "/" not in n and ".tfrecord" in n]  # no finished shard
    assert [n for n in names if n.startswith(TEMP_PREFIX) and ".tfrecord" in n]  # killed midway
    with pytest.raises(ReaderError, match="not a finished recordbeam output"):
        recordbeam.read(out)
    # The rerun into the same folder finishes it and clears what the killed run left.
    assert main(_convert(IMAGES, ANNOTATIONS, out)) == 0
    assert not [n for n in gcs.names(out) if n.startswith(TEMP_PREFIX)]
    assert gcs.snapshot(out) == gcs.snapshot(gcs_run) | {
        MANIFEST: gcs.read(f"{out}/{MANIFEST}")}


def test_the_credentials_line_names_the_emulator_and_beam_does_not_search(gcs, gcs_run):
    done = subprocess.run(
        [sys.executable, "-m", "recordbeam", "inspect", "gs://data/out", "-n", "1"],
        env={**os.environ, gcs_emulator.VARIABLE: gcs.url}, capture_output=True, text=True,
        timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines() == [
        f"recordbeam: gs:// goes to the storage emulator at {gcs.url} (STORAGE_EMULATOR_HOST), "
        "without credentials"]  # and none of Beam's retries and warnings of its own search


# --- Dataflow's launcher, without Google --------------------------------------------------


def _dataflow(output: str, *extra: str) -> list[str]:
    """The documented Dataflow command (docs/deploy/dataflow.md), inputs and output on gs://."""
    return [sys.executable, str(REPO / "pipelines" / "coco_to_tfrecord.py"),
            "--images", IMAGES, "--annotations", ANNOTATIONS, "--output", output,
            "--split", "train", "--runner", "DataflowRunner", "--project", "example-project",
            "--region", "us-central1", "--temp_location", "gs://data/tmp",
            "--staging_location", "gs://data/staging", "--machine_type", "n2-standard-4",
            "--max_num_workers", "20", *extra]


@pytest.mark.case("Dataflow dry run whose `--setup_file` does not build",
                  "exit 2 naming the build's error, as the submission would have failed")
def test_dataflow_dry_run_builds_what_the_job_stages_and_checks_the_paths(gcs, tmp_path):
    pytest.importorskip("apache_beam.runners.dataflow.internal.apiclient")
    env = {**os.environ, gcs_emulator.VARIABLE: gcs.url}
    done = subprocess.run(_dataflow("gs://data/dataflow-out", "--dry_run=True",
                                    "--setup_file", "./setup.py"),
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    said = done.stdout.strip()
    assert said.startswith("dry run: the DataflowRunner job graph was built and checked, and "
                           "what it stages for its workers was built (") and said.endswith(
        "); nothing was submitted and nothing was written to gs://data/dataflow-out"), said
    assert "workflow.tar.gz" in said  # the setup file's package
    assert gcs.names("gs://data/dataflow-out") == []
    # A setup file that does not build fails the dry run, as it would fail the submission.
    broken = tmp_path / "setup.py"
    broken.write_text("raise SystemExit('this package cannot be built')\n")
    done = subprocess.run(_dataflow("gs://data/dataflow-out", "--dry_run=True",
                                    "--setup_file", str(broken)),
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stderr
    last = done.stderr.splitlines()[-1]
    assert last.startswith("recordbeam: what the job stages for its workers could not be "
                           "built: `") and "setup.py sdist" in last, last
    log = last.split("(its output is in ", 1)[1].split(")", 1)[0]
    assert "this package cannot be built" in Path(log).read_text()
    # The launcher's checks read the inputs there: a missing annotation file is named.
    missing = _dataflow("gs://data/dataflow-out", "--dry_run=True")
    missing[missing.index(ANNOTATIONS)] = "gs://data/coco/nothing-here.json"
    done = subprocess.run(missing, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2
    assert "gs://data/coco/nothing-here.json" in done.stderr.splitlines()[-1]


@pytest.mark.case("Dataflow submission without Google credentials, or with "
                  "`STORAGE_EMULATOR_HOST` set",
                  "refused at once (exit 2), saying how to log in; no retries, no staging")
def test_a_dataflow_submission_is_refused_at_once_without_credentials(gcs, tmp_path):
    pytest.importorskip("apache_beam.runners.dataflow.internal.apiclient")
    # No key file, no gcloud configuration: nothing google.auth could find off Google's
    # machines.
    env = {k: v for k, v in os.environ.items()
           if k not in (gcs_emulator.VARIABLE, "GOOGLE_APPLICATION_CREDENTIALS")}
    env["CLOUDSDK_CONFIG"] = str(tmp_path)
    done = subprocess.run(_dataflow("gs://data/dataflow-out"), env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines() == [
        "recordbeam: gs:// without credentials: no Google credentials were found (run `gcloud "
        "auth application-default login`, or set GOOGLE_APPLICATION_CREDENTIALS to a service "
        "account's key file); connecting anonymously, which reaches public buckets only",
        "recordbeam: DataflowRunner submits the job with Google credentials, and none were "
        "found here: run `gcloud auth application-default login`, or set "
        "GOOGLE_APPLICATION_CREDENTIALS to a service account's key file; --dry_run=True checks "
        "the job without them"]
    # With the emulator, Dataflow's workers could not reach the data: refused as well.
    env[gcs_emulator.VARIABLE] = gcs.url
    done = subprocess.run(_dataflow("gs://data/dataflow-out"), env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 2, done.stderr
    assert "--dry_run=True checks the job against the emulator" in done.stderr
