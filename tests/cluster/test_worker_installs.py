"""What cluster workers get from a job, installed as the SDK container installs it, writes
the local run's bytes.

Each route stages a job's files with Beam's own ``Stager`` from the job's options, installs
them into a fresh copy of a "container" venv (Python + the launcher's apache-beam) as the
container's boot program does, starts Beam's worker pool from that venv and Beam's job
service from the bare container venv (like a Flink or Spark job server, it holds no
recordbeam), and runs the conversion through the portable runner with EXTERNAL workers.

- ``--setup_file ./setup.py``: the stager builds an sdist with the launcher's setuptools;
  each worker builds and installs it, which needs a package index (build isolation
  fetches setuptools) and fetches recordbeam's dependencies.
- wheel + requirements: ``pip wheel --no-deps . -w dist`` and ``recordbeam
  worker-requirements``; the stager downloads the requirements' wheels, and the workers
  install everything with no index at all (pip sees none, so a missing file fails).

These tests build venvs (about a minute each the first time): ``make test-cluster``, not
``make test``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from worker_env import (
    WORKFLOW_FILE,
    beam_service,
    copy_venv,
    free_port,
    install_staged_files,
    make_container_venv,
    project_copy,
    run,
    stage_job,
    worker_env,
)

from recordbeam.testing.samples import make_coco_sample

JOB_SERVICE = "apache_beam.runners.portability.local_job_service_main"
WORKER_POOL = "apache_beam.runners.worker.worker_pool_main"


def _timed(what: str, started: float) -> None:
    print(f"[cluster] {what}: {time.monotonic() - started:.1f} s", file=sys.stderr)


@pytest.fixture(scope="session")
def cluster_tmp(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("cluster")


@pytest.fixture(scope="session")
def container_venv(cluster_tmp) -> Iterator[Path]:
    """Python and apache-beam of the launcher's version, as Beam's SDK container holds them;
    copied for each worker, never changed. Removed at the end (~0.5 GB)."""
    started = time.monotonic()
    venv = make_container_venv(cluster_tmp / "container")
    _timed("container venv (python -m venv + pip install apache-beam)", started)
    yield venv
    shutil.rmtree(venv, ignore_errors=True)


@pytest.fixture
def worker_venv(container_venv, cluster_tmp, request) -> Iterator[Path]:
    """A fresh copy of the container venv for one test's workers, removed after it."""
    started = time.monotonic()
    venv = copy_venv(container_venv, cluster_tmp / f"worker-{request.node.name}")
    _timed(f"copy of the container venv for {request.node.name}", started)
    yield venv
    shutil.rmtree(venv, ignore_errors=True)


@pytest.fixture(scope="session")
def project(cluster_tmp) -> Path:
    return project_copy(cluster_tmp / "project")


@pytest.fixture(scope="session")
def sample(cluster_tmp):
    return make_coco_sample(str(cluster_tmp / "coco"), num_images=24, seed=0)


def _convert(sample, output: Path, *beam_args: str) -> None:
    """The launcher: this checkout's recordbeam, in its own process."""
    run([sys.executable, "-m", "recordbeam", "convert", "coco", "--images", sample.images_dir,
         "--annotations", sample.annotations, "--output", str(output), "--shards", "2",
         "--max-reject-fraction", "0.5", "--quiet", *beam_args], timeout=600)


def _shards(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.glob("*.tfrecord"))}


@pytest.fixture(scope="session")
def local_shards(sample, cluster_tmp) -> dict[str, bytes]:
    out = cluster_tmp / "local-out"
    _convert(sample, out, "--direct_running_mode=in_memory", "--direct_num_workers=1")
    shards = _shards(out)
    assert len(shards) == 2
    return shards


@pytest.fixture(scope="session")
def job_service(container_venv, cluster_tmp):
    """Beam's job service, from the container venv: it holds no recordbeam."""
    port = free_port()
    with beam_service(container_venv / "bin" / "python", [JOB_SERVICE, "--port", str(port)],
                      port, cluster_tmp / "job_service.log",
                      worker_env(container_venv, index=False)) as endpoint:
        yield endpoint


def _recordbeam_location(venv: Path, env: dict[str, str]) -> Path:
    done = run([str(venv / "bin" / "python"), "-c",
                "import recordbeam; print(recordbeam.__file__)"], env=env, cwd=venv)
    return Path(done.stdout.strip())


def _install_and_convert(venv: Path, staging: Path, *, index: bool, route: str,
                         job_service: str, sample, cluster_tmp: Path) -> dict[str, bytes]:
    """Install the staged job in ``venv`` as the container's boot does, start a worker pool
    from it, convert on those workers; the shards written."""
    env = worker_env(venv, index=index)
    started = time.monotonic()
    install_staged_files(venv, staging, env)
    _timed(f"worker install, {route}", started)
    assert _recordbeam_location(venv, env).is_relative_to(venv)
    out = cluster_tmp / f"{route}-out"
    port = free_port()
    with beam_service(venv / "bin" / "python", [WORKER_POOL, f"--service_port={port}"], port,
                      cluster_tmp / f"pool-{route}.log", env) as pool:
        started = time.monotonic()
        _convert(sample, out, "--runner=PortableRunner", f"--job_endpoint={job_service}",
                 "--environment_type=EXTERNAL", f"--environment_config={pool}")
        _timed(f"conversion on the workers, {route}", started)
    return _shards(out)


# --- --setup_file: an sdist built on each worker ----------------------------------------


@pytest.fixture(scope="session")
def setup_file_job(project, cluster_tmp) -> Path:
    started = time.monotonic()
    staging = cluster_tmp / "staged-setup-file"
    staged = stage_job([f"--setup_file={project / 'setup.py'}"], staging,
                       cluster_tmp / "stager-temp-setup-file")
    _timed("staging with --setup_file (the stager builds the sdist)", started)
    assert WORKFLOW_FILE in staged, staged
    return staging


def test_setup_file_route_workers_write_the_local_runs_bytes(
        worker_venv, setup_file_job, job_service, sample, local_shards, cluster_tmp):
    shards = _install_and_convert(worker_venv, setup_file_job, index=True, route="setup-file",
                                  job_service=job_service, sample=sample, cluster_tmp=cluster_tmp)
    assert shards == local_shards


def test_the_setup_file_route_needs_an_index_on_workers(worker_venv, setup_file_job):
    with pytest.raises(AssertionError) as failed:
        install_staged_files(worker_venv, setup_file_job, worker_env(worker_venv, index=False))
    # pip builds the sdist in isolation, with a setuptools it must fetch.
    said = str(failed.value)
    assert "workflow.tar.gz" in said and "setuptools" in said, said


# --- wheel + requirements: no build, no index on workers --------------------------------


@pytest.fixture(scope="session")
def wheel(project, cluster_tmp) -> Path:
    started = time.monotonic()
    dist = cluster_tmp / "dist"
    # As docs/deploy/dataflow.md says: pip wheel --no-deps . -w dist
    run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", ".", "-w", str(dist)],
        cwd=project, timeout=600)
    _timed("pip wheel --no-deps .", started)
    (built,) = dist.glob("recordbeam-*.whl")
    return built


@pytest.fixture(scope="session")
def worker_requirements(cluster_tmp) -> Path:
    done = run([sys.executable, "-m", "recordbeam", "worker-requirements"], timeout=120)
    path = cluster_tmp / "worker-requirements.txt"
    path.write_text(done.stdout)
    return path


def _stage_wheel_job(wheel: Path, requirements: Path, cluster_tmp: Path, name: str) -> Path:
    started = time.monotonic()
    staging = cluster_tmp / f"staged-{name}"
    stage_job([f"--extra_package={wheel}", f"--requirements_file={requirements}",
               f"--requirements_cache={cluster_tmp / 'requirements-cache'}"], staging,
              cluster_tmp / f"stager-temp-{name}")
    _timed(f"staging {name} (the stager downloads the requirements' wheels)", started)
    return staging


def test_worker_requirements_name_what_beam_does_not_bring(worker_requirements):
    lines = [line for line in worker_requirements.read_text().splitlines()
             if line and not line.startswith("#")]
    names = {line.split("==")[0].lower() for line in lines}
    assert {"crc32c", "ijson", "defusedxml"} <= names, lines
    assert not names & {"apache-beam", "numpy", "protobuf"}, lines  # Beam's, in every release
    assert all("==" in line for line in lines), lines


def test_wheel_route_workers_without_an_index_write_the_local_runs_bytes(
        worker_venv, wheel, worker_requirements, job_service, sample, local_shards, cluster_tmp):
    staging = _stage_wheel_job(wheel, worker_requirements, cluster_tmp, "wheel")
    staged = set(os.listdir(staging))
    assert {wheel.name, "extra_packages.txt", "requirements.txt"} <= staged, staged
    assert any(name.startswith("crc32c-") and name.endswith(".whl") for name in staged), staged

    shards = _install_and_convert(worker_venv, staging, index=False, route="wheel",
                                  job_service=job_service, sample=sample, cluster_tmp=cluster_tmp)
    assert shards == local_shards


def test_a_requirement_left_out_fails_the_install_without_an_index(
        worker_venv, wheel, worker_requirements, cluster_tmp):
    # What the route's test relies on: pip on these workers finds nothing but the job's files.
    short = cluster_tmp / "short-requirements.txt"
    short.write_text("".join(line + "\n" for line in worker_requirements.read_text().splitlines()
                             if not line.lower().startswith("ijson")))
    staging = _stage_wheel_job(wheel, short, cluster_tmp, "wheel-short")
    with pytest.raises(AssertionError) as failed:
        install_staged_files(worker_venv, staging, worker_env(worker_venv, index=False))
    assert "ijson" in str(failed.value)


def test_workers_without_recordbeam_fail_the_job_saying_so(
        container_venv, job_service, sample, cluster_tmp):
    # The other tests' workers could not have run recordbeam but for what they installed.
    env = worker_env(container_venv, index=False)
    port = free_port()
    with beam_service(container_venv / "bin" / "python", [WORKER_POOL, f"--service_port={port}"],
                      port, cluster_tmp / "pool-bare.log", env) as pool:
        done = subprocess.run(
            [sys.executable, "-m", "recordbeam", "convert", "coco", "--images", sample.images_dir,
             "--annotations", sample.annotations, "--output", str(cluster_tmp / "bare-out"),
             "--quiet", "--runner=PortableRunner", f"--job_endpoint={job_service}",
             "--environment_type=EXTERNAL", f"--environment_config={pool}"],
            capture_output=True, text=True, timeout=600)
    lines = done.stderr.splitlines()
    assert done.returncode == 3, lines
    assert lines[0].startswith("recordbeam: the PortableRunner failed: ModuleNotFoundError: No "
                               "module named 'recordbeam' (the workers do not have recordbeam"), lines
    assert lines[1].startswith("recordbeam: the run's log is in "), lines
    Path(lines[1].rsplit(" ", 1)[1]).unlink()
