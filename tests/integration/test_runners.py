"""The same COCO conversion on other runners gives the same bytes.

Portable runner (the path Flink and Spark take) against Beam's local job service, with a
LOOPBACK environment and with an EXTERNAL worker pool; Dataflow's job graph built
offline with ``--dry_run``. All servers listen on loopback ports and are stopped here.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import stores
from beam_services import free_port, job_service, worker_pool
from lanes import exhaustive

from recordbeam.cli.main import main


def _convert(sample, output: Path, *beam_args: str) -> None:
    code = main([
        "convert", "coco", "--images", sample.images_dir, "--annotations", sample.annotations,
        "--output", str(output), "--shards", "2", "--max-reject-fraction", "0.5", "--quiet",
        *beam_args,
    ])
    assert code == 0


def _shards(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.glob("*.tfrecord"))}


@pytest.fixture(scope="module")
def local_run(coco_sample, tmp_path_factory):
    out = tmp_path_factory.mktemp("local") / "out"
    # The reference the other runners' bytes are compared with; the default runner's
    # bytes equal it (test_coco_pipeline.py::test_runner_modes_write_byte_identical_shards).
    _convert(coco_sample, out, "--direct_running_mode=in_memory", "--direct_num_workers=1")
    return out


@pytest.fixture(scope="module")
def job_endpoint(tmp_path_factory):
    port = free_port()
    with job_service(port, tmp_path_factory.mktemp("jobservice") / "job_service.log"):
        yield f"localhost:{port}"


def test_portable_runner_loopback_equals_local_run(coco_sample, local_run, job_endpoint, tmp_path):
    out = tmp_path / "out"
    _convert(coco_sample, out, "--runner=PortableRunner", f"--job_endpoint={job_endpoint}",
             "--environment_type=LOOPBACK")
    assert _shards(out) and _shards(out) == _shards(local_run)


@exhaustive  # the portable runner: test_portable_runner_loopback_equals_local_run
def test_portable_runner_external_worker_pool_equals_local_run(
        coco_sample, local_run, job_endpoint, tmp_path):
    port = free_port()
    with worker_pool(port, tmp_path / "worker_pool.log"):
        out = tmp_path / "out"
        _convert(coco_sample, out, "--runner=PortableRunner", f"--job_endpoint={job_endpoint}",
                 "--environment_type=EXTERNAL", f"--environment_config=localhost:{port}")
    assert _shards(out) and _shards(out) == _shards(local_run)


def test_detach_submits_prints_the_job_and_the_job_commits(
        coco_sample, local_run, job_endpoint, tmp_path, capsys):
    port = free_port()
    with worker_pool(port, tmp_path / "worker_pool.log"):
        out = tmp_path / "out"
        _convert(coco_sample, out, "--runner=PortableRunner", f"--job_endpoint={job_endpoint}",
                 "--environment_type=EXTERNAL", f"--environment_config=localhost:{port}",
                 "--detach")
        printed = capsys.readouterr().out
        # Returned at submission: the job goes on in the job service and commits by itself.
        assert re.search(r"^submitted job \S+ to the PortableRunner; not waiting for it", printed,
                         re.MULTILINE), printed
        assert f"{out / 'manifest.json'} appears, last, when it has finished" in printed
        deadline = time.monotonic() + 300
        while not (out / "manifest.json").exists():
            assert time.monotonic() < deadline, "the detached job never committed"
            time.sleep(0.5)
    assert _shards(out) == _shards(local_run)


def test_detach_with_loopback_workers_is_refused(coco_sample, job_endpoint, tmp_path, capsys):
    code = main(["convert", "coco", "--images", coco_sample.images_dir, "--annotations",
                 coco_sample.annotations, "--output", str(tmp_path / "out"), "--detach",
                 "--runner=PortableRunner", f"--job_endpoint={job_endpoint}",
                 "--environment_type=LOOPBACK"])
    assert code == 2
    assert "--detach cannot work with --environment_type LOOPBACK" in capsys.readouterr().err


def test_an_environment_the_job_service_cannot_start_is_one_line_and_a_log(
        coco_sample, job_endpoint, tmp_path):
    # The command in its own process: its log file gets what Beam logs (pytest's capture
    # would take it otherwise).
    done = subprocess.run(
        [sys.executable, "-m", "recordbeam", "convert", "coco", "--images", coco_sample.images_dir,
         "--annotations", coco_sample.annotations, "--output", str(tmp_path / "out"), "--quiet",
         "--runner=PortableRunner", f"--job_endpoint={job_endpoint}",
         "--environment_type=PROCESS", '--environment_config={"command": "/bin/false"}'],
        capture_output=True, text=True, timeout=300)
    lines = done.stderr.splitlines()
    assert done.returncode == 3, lines
    assert lines[0] == (
        "recordbeam: the PortableRunner failed: KeyError: 'beam:env:process:v1' (the job service "
        "cannot start --environment_type PROCESS workers; Beam's Python job service starts "
        "EXTERNAL, LOOPBACK and DOCKER ones)"), lines
    log = re.fullmatch(r"recordbeam: the run's log is in (\S+)", lines[1])
    assert log and "KeyError: 'beam:env:process:v1'" in Path(log.group(1)).read_text()
    assert len(lines) == 2, lines
    Path(log.group(1)).unlink()


# --- Dataflow, offline ------------------------------------------------------------------


@pytest.mark.case("A local input or output path given to DataflowRunner (a dry run too)",
                  "exit 2 naming the path: Dataflow's workers could not read it")
def test_dataflow_refuses_local_paths_its_workers_cannot_read(coco_sample, tmp_path):
    pytest.importorskip("apache_beam.runners.dataflow.internal.apiclient")
    out = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, str(Path(__file__).parents[2] / "pipelines" / "coco_to_tfrecord.py"),
         "--images", coco_sample.images_dir, "--annotations", coco_sample.annotations,
         "--output", str(out), "--runner=DataflowRunner", "--dry_run=True",
         "--project=example-project", "--region=us-central1",
         "--temp_location=gs://example-bucket/tmp"],
        capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines()[-1].startswith(
        f"recordbeam: {coco_sample.images_dir} is a local path, and DataflowRunner's "
        "workers run on Google's machines")
    assert not out.exists()


def _dataflow_job(images: str, annotations: str, output: str):
    pytest.importorskip("apache_beam.runners.dataflow.internal.apiclient")
    import apache_beam as beam

    from recordbeam.local.runner import pipeline_options
    from recordbeam.sources.coco.reader import CocoOptions
    from recordbeam.sources.coco.reader import to_tfrecord as coco_to_tfrecord
    from recordbeam.write.image_encoder import ImageChecks
    from recordbeam.write.sink import ShardOptions

    options = pipeline_options([
        "--runner=DataflowRunner", "--dry_run=True", "--project=example-project",
        "--region=us-central1", "--temp_location=gs://data/tmp",
        "--setup_file=" + str(Path(__file__).parents[2] / "setup.py"),
    ])
    p = beam.Pipeline(options=options)
    coco_to_tfrecord(p, output, CocoOptions(images, annotations), ShardOptions(), ImageChecks())
    return p.run().job


def _write_annotations(path: Path, annotations: int) -> None:
    images = max(1, annotations // 7)
    with path.open("w") as f:
        f.write('{"images": [')
        f.write(",".join(f'{{"id": {i}, "file_name": "{i:012d}.jpg", "width": 640, "height": 480}}'
                         for i in range(images)))
        f.write('], "categories": [{"id": 1, "name": "thing"}], "annotations": [')
        f.write(",".join(f'{{"id": {a}, "image_id": {a % images}, "category_id": 1, '
                         f'"bbox": [1, 2, 30, 40], "area": 1200, "iscrowd": 0}}'
                         for a in range(annotations)))
        f.write("]}")


def test_dataflow_job_graph_builds_offline_pickles_and_stays_small(coco_sample):
    from apache_beam.internal import pickler
    from apache_beam.portability import common_urns
    from apache_beam.portability.api import beam_runner_api_pb2

    with stores.gcs() as gcs:  # building the graph reads the inputs and the output folder
        gcs.upload_folder(coco_sample.images_dir, "gs://data/coco/images")
        gcs.upload_file(coco_sample.annotations, "gs://data/coco/instances.json")
        job = _dataflow_job("gs://data/coco/images", "gs://data/coco/instances.json",
                            "gs://data/coco-tfrecord")
    graph = job.proto_pipeline
    assert graph.ByteSize() < 1_000_000
    pardos = [t for t in graph.components.transforms.values()
              if t.spec.urn == common_urns.primitives.PAR_DO.urn]
    assert pardos
    for transform in pardos:
        payload = beam_runner_api_pb2.ParDoPayload.FromString(transform.spec.payload)
        if payload.do_fn.urn == "beam:dofn:pickled_python_info:v1":
            assert pickler.loads(payload.do_fn.payload) is not None, transform.unique_name


def test_dataflow_job_graph_does_not_grow_with_the_dataset(tmp_path):
    sizes = {}
    for count in (1_000, 100_000):
        folder = tmp_path / f"a{count:06d}"
        folder.mkdir()
        _write_annotations(folder / "instances.json", count)
        job = _dataflow_job(str(folder / "images"), str(folder / "instances.json"),
                            str(tmp_path / "out"))
        sizes[count] = job.proto_pipeline.ByteSize()
    assert (tmp_path / "a100000" / "instances.json").stat().st_size > 50 * (
        tmp_path / "a001000" / "instances.json").stat().st_size
    # Same-length paths; the graph carries a few random ids (run folder, pickled state),
    # so allow noise of a few hundred bytes, against megabytes of extra annotations.
    assert abs(sizes[100_000] - sizes[1_000]) < 1024, sizes
