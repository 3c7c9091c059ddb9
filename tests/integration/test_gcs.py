"""``gs://`` end to end through Beam's GCS filesystem, against a GCS emulator on a loopback
port (``tests/gcs_emulator.py``): no credentials, no route to Google needed.

Conversions read their inputs from ``gs://`` and write their output there; every command
that reads a finished folder reads it there; what an interrupted run leaves there is
checked; the line saying which credentials ``gs://`` uses is checked in fresh processes
(the answer is settled once per process).
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import signal
import subprocess
import sys
from pathlib import Path

import gcs_emulator
import pytest
from growing_corpus import Corpus, incremental_through_store, store_argv

import recordbeam
from recordbeam.cli.main import main
from recordbeam.dataset.image_hashes import decode_hash_file
from recordbeam.dataset.names import MANIFEST, REJECTS, TEMP_PREFIX, is_hash_file
from recordbeam.dataset.reader import ReaderError

pytestmark = pytest.mark.slow

REPO = Path(__file__).parents[2]
IMAGES = "gs://data/coco/images"
ANNOTATIONS = "gs://data/coco/instances.json"
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
def local_run(coco_sample, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("local") / "out"
    assert main(_convert(coco_sample.images_dir, coco_sample.annotations, str(out))) == 0
    return out


def _local_snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file()}


@pytest.fixture(scope="module")
def gcs_run(emulator, local_run) -> str:
    """The sample converted from gs:// to gs://, once for the module."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(gcs_emulator.VARIABLE, emulator.url)
        assert main(_convert(IMAGES, ANNOTATIONS, "gs://data/out")) == 0
    return "gs://data/out"


def test_convert_from_gcs_to_gcs_writes_the_bytes_of_a_local_run(gcs, gcs_run, local_run,
                                                                  coco_sample):
    written = gcs.snapshot(gcs_run)
    local = _local_snapshot(local_run)
    assert sorted(written) == sorted(local)
    assert any(".tfrecord" in name for name in written)
    named = (MANIFEST, REJECTS)
    assert {n: b for n, b in written.items() if n not in named and not is_hash_file(n)} == {
        n: b for n, b in local.items() if n not in named and not is_hash_file(n)}
    # The rejects name their sources where they were (and are sorted by that name).
    moved = local[REJECTS].replace(coco_sample.images_dir.encode(), IMAGES.encode())
    assert sorted(written[REJECTS].splitlines()) == sorted(moved.splitlines())
    # So do the image hashes; the rest of each entry is the same.
    hashes = [n for n in local if is_hash_file(n)]
    assert hashes
    for name in hashes:
        ours, theirs = decode_hash_file(written[name]), decode_hash_file(local[name])
        assert [dataclasses.replace(e, source=e.source.replace(coco_sample.images_dir, IMAGES))
                for e in theirs.entries] == list(ours.entries)
    # The manifest also says when, from where (its settings and the inputs' fingerprint
    # name the inputs); the rest of what it says of the split is the same.
    assert _split_facts(written[MANIFEST]) == _split_facts(local[MANIFEST])


def _split_facts(manifest: bytes) -> dict:
    split = json.loads(manifest)["splits"]["train"]
    return {k: v for k, v in split.items() if k not in ("settings", "inputs_fingerprint")}


def test_if_changed_finds_a_gcs_output_up_to_date_then_rebuilds_it(gcs, coco_sample, capsys):
    argv = _convert(IMAGES, ANNOTATIONS, "gs://data/again", "--if-changed")
    assert main(argv) == 0
    first = gcs.snapshot("gs://data/again")
    capsys.readouterr()
    assert main(argv) == 0
    assert "is up to date" in capsys.readouterr().out
    # One more image in the input folder: the fingerprint changes, the split is rebuilt.
    extra = sorted(os.listdir(coco_sample.images_dir))[0]
    gcs.upload_file(os.path.join(coco_sample.images_dir, extra), f"{IMAGES}/zz-copy-{extra}")
    try:
        assert main(argv) == 0
        assert "is up to date" not in capsys.readouterr().out
        assert json.loads(gcs.read(f"gs://data/again/{MANIFEST}")) != json.loads(first[MANIFEST])
    finally:
        gcs.client.bucket("data").blob(f"coco/images/zz-copy-{extra}").delete()


def test_reshard_from_gcs_to_gcs_keeps_every_record(gcs, gcs_run, local_run):
    assert main(["reshard", f"{gcs_run}/train-*.tfrecord", "gs://data/resharded", "--shards",
                 "3", "--quiet", *IN_MEMORY]) == 0
    names = gcs.names("gs://data/resharded")
    assert [n for n in names if n.endswith(".tfrecord")] == [
        f"train-{i:05d}-of-00003.tfrecord" for i in range(3)]
    def source_ids(folder: str) -> list[bytes]:
        return sorted(example["image/source_id"].item() for example in recordbeam.read(folder))

    assert source_ids("gs://data/resharded") == source_ids(str(local_run))


def test_inspect_verify_check_and_report_read_a_gcs_folder(gcs, gcs_run, tmp_path, capsys):
    assert main(["inspect", gcs_run, "-n", "1"]) == 0
    assert "image/source_id" in capsys.readouterr().out
    assert main(["verify", gcs_run]) == 0
    assert main(["check", "--for", "torch", gcs_run]) == 0
    html = tmp_path / "report.html"
    assert main(["report", gcs_run, "--html", str(html), "--gallery", "2"]) == 0
    assert html.stat().st_size > 1000


def test_read_iterates_and_indexes_a_gcs_folder(gcs, gcs_run, local_run):
    remote, local = recordbeam.read(gcs_run), recordbeam.read(str(local_run))
    assert len(remote) == len(local) > 0
    assert [e["image/source_id"].item() for e in remote] == [
        e["image/source_id"].item() for e in local]
    last = len(remote) - 1
    assert remote[last]["image/encoded"].item() == local[last]["image/encoded"].item()


@pytest.mark.case("Conversion into `gs://` that fails at its commit (rejects over the limit)",
                  "exit 1; no manifest.json in the gs:// folder; `recordbeam.read` refuses it")
def test_a_run_that_fails_midway_leaves_no_finished_looking_folder(gcs, capsys):
    # The sample rejects about a quarter of its images: with no rejects allowed the run
    # fails at its commit, after every shard was written to the temp folder.
    argv = ["convert", "coco", "--images", IMAGES, "--annotations", ANNOTATIONS, "--output",
            "gs://data/failed", "--max-reject-fraction", "0", "--quiet", *IN_MEMORY]
    assert main(argv) == 1
    assert MANIFEST not in gcs.names("gs://data/failed")
    with pytest.raises(ReaderError, match="not a finished recordbeam output"):
        recordbeam.read("gs://data/failed")


@pytest.mark.case("Conversion into `gs://` killed (SIGKILL) while writing a shard",
                  "no manifest.json, no final shard; the rerun into the same folder completes "
                  "and removes the killed run's temp objects")
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


def test_dataflow_dry_run_with_gcs_paths_checks_them_on_the_emulator(gcs):
    pytest.importorskip("apache_beam.runners.dataflow.internal.apiclient")
    env = {**os.environ, gcs_emulator.VARIABLE: gcs.url}
    done = subprocess.run(_dataflow("gs://data/dataflow-out", "--dry_run=True"), env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == (
        "dry run: the DataflowRunner job graph was built and checked; nothing was submitted "
        "and nothing was written to gs://data/dataflow-out")
    assert gcs.names("gs://data/dataflow-out") == []
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


@pytest.mark.case(
    "Glob characters in `gs://` folder names (`photos [1]` beside `photos 1`, output "
    "`out [v2]`), on the GCS emulator",
    "read and written as literal names: the dataset's own images, never the sibling's; a "
    "rerun into `out [v2]` replaces the first run's files (Beam's GCS delete matches globs: "
    "the names are escaped); no temp objects left")
def test_bracketed_gcs_folders_are_literal_names(gcs, coco_sample):
    names = sorted(os.listdir(coco_sample.images_dir))
    gcs.upload_folder(coco_sample.images_dir, "gs://data/photos [1]/images")
    gcs.upload_file(coco_sample.annotations, "gs://data/photos [1]/instances.json")
    bucket = gcs.client.bucket("data")
    for name in names:  # the same names beside it, none an image: read by mistake, rejects
        bucket.blob(f"photos 1/images/{name}").upload_from_string(b"sibling")
    argv = _convert("gs://data/photos [1]/images", "gs://data/photos [1]/instances.json",
                    "gs://data/out [v2]")

    assert main(argv) == 0
    train = json.loads(gcs.read(f"gs://data/out [v2]/{MANIFEST}"))["splits"]["train"]
    assert train["examples"] == len(coco_sample.expected["good_images"])
    assert train["input_files"] == len(names) + 1  # its images and the annotations, no more
    rejects = gcs.read(f"gs://data/out [v2]/{REJECTS}").decode().splitlines()
    assert not [line for line in rejects if "photos 1/" in json.loads(line)["source"]]

    assert main(argv) == 0  # the rerun deletes and renames by literal names
    assert not [n for n in gcs.names("gs://data/out [v2]") if n.startswith(TEMP_PREFIX)]
    assert json.loads(gcs.read(f"gs://data/out [v2]/{MANIFEST}"))["splits"]["train"] == train


def test_incremental_runs_from_gcs_to_gcs_keep_what_did_not_change(gcs, tmp_path):
    """A corpus synced to gs:// grows and changes; an incremental run from gs:// to gs://
    keeps the shards that did not change and holds what a full rebuild holds."""
    rng = random.Random(9)
    corpus = Corpus.make("coco", tmp_path / "in", 9)
    bucket = gcs.client.bucket("data")

    def put(name, path):
        bucket.blob(f"corpus/{name}").upload_from_filename(path)

    def delete(name):
        bucket.blob(f"corpus/{name}").delete()

    def download():
        local = tmp_path / "inc"
        for name, data in gcs.snapshot("gs://data/inc").items():
            (local / name).parent.mkdir(parents=True, exist_ok=True)
            (local / name).write_bytes(data)
        return local

    argv = store_argv("coco", "gs://data/corpus", "gs://data/inc", "--incremental",
                      "--shard-size", "4KiB")
    incremental_through_store(corpus, rng, argv, put, delete, download, tmp_path / "full")
    assert not [name for name in gcs.names("gs://data/inc") if name.startswith(".")]


def test_annotations_read_in_byte_ranges_through_gcs_write_what_the_stream_writes(
        gcs, gcs_run, monkeypatch):
    """A large annotation file's ranged read seeks into the object: cut into 4 KiB ranges,
    the sample's annotations give the folder the streamed pass gave."""
    from recordbeam.sources.coco import annotation_ranges

    for name in ("RANGED_FROM_BYTES", "MIN_RANGE_BYTES", "MAX_RANGE_BYTES"):
        monkeypatch.setattr(annotation_ranges, name, 4096)
    assert annotation_ranges.read_in_ranges(ANNOTATIONS)
    assert len(annotation_ranges.file_ranges(ANNOTATIONS, 4096, 4096)) > 3
    assert main(_convert(IMAGES, ANNOTATIONS, "gs://data/out-ranged")) == 0
    ranged, streamed = gcs.snapshot("gs://data/out-ranged"), gcs.snapshot(gcs_run)
    assert sorted(ranged) == sorted(streamed)
    assert {n: b for n, b in ranged.items() if n != MANIFEST} == {
        n: b for n, b in streamed.items() if n != MANIFEST}
    assert _split_facts(ranged[MANIFEST]) == _split_facts(streamed[MANIFEST])
