"""The deploy images' install steps, replayed in fresh venvs.

No Docker engine or registry is reachable from CI, so each Dockerfile's ``pip`` commands
run in a venv standing for the image's Python: for the SDK image (deploy/sdk-container) a
venv holding the Beam that Beam's own image holds (``apache-beam[gcp]``, the Dockerfile's
BEAM_VERSION); for the Flex Template launcher (deploy/flex-template) a bare venv, as the
launcher base image has no Beam. COPY sources are the repository's (recordbeam's wheel is
built here first). Then recordbeam must run there, Beam must be the version it was, the
SDK venv must serve a job's workers, and the launcher venv must write a Flex Template's job.

Both venvs install from one wheelhouse, downloaded from the package index once per run
(``pip wheel``, which also builds the few that come as source only): the commands resolve as they would
against the index, without fetching Beam twice.
"""

from __future__ import annotations

import glob
import os
import subprocess
import sys
from pathlib import Path

import apache_beam
import dockerfile
import pytest
from beam_services import free_port, job_service, worker_pool

from recordbeam.testing.samples import make_coco_sample

ROOT = Path(__file__).resolve().parents[2]
SDK = dockerfile.parse(ROOT / "deploy" / "sdk-container" / "Dockerfile")
LAUNCHER = dockerfile.parse(ROOT / "deploy" / "flex-template" / "Dockerfile")
TESTED_PYTHON = f"{sys.version_info.major}.{sys.version_info.minor}"
INSTALL_SECONDS = 1200


def _run(*command: object, timeout: float = 300, env: dict | None = None) -> str:
    done = subprocess.run([str(c) for c in command], capture_output=True, text=True,
                          timeout=timeout, env=env)
    assert done.returncode == 0, f"{command}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout


def _outside_env() -> dict[str, str]:
    """The environment without anything that points into the repository's source: what
    runs in a venv must come from what was installed there."""
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}


def _venv(path: Path) -> Path:
    _run(sys.executable, "-m", "venv", path)
    return path / "bin" / "python"


def _offline(wheelhouse: Path) -> dict[str, str]:
    return {**_outside_env(), "PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(wheelhouse)}


def _replay(image: dockerfile.Dockerfile, python: Path, wheels: Path, wheelhouse: Path) -> None:
    sources = {"dist/": wheels, "pipelines/": ROOT / "pipelines"}
    assert set(image.copies.values()) <= set(sources), image.copies
    assert image.pip_commands, "no pip command found"
    for words in image.pip_commands:
        local = dockerfile.localized(words, image.copies, sources)
        expanded = [m for w in local for m in (sorted(glob.glob(w)) if "*" in w else [w])]
        assert len(expanded) == len(local), f"a pattern matched nothing or several: {local}"
        _run(python, "-m", "pip", *expanded, timeout=INSTALL_SECONDS, env=_offline(wheelhouse))


def _beam_version(python: Path) -> str:
    return _run(python, "-c", "import apache_beam; print(apache_beam.__version__)",
                env=_outside_env()).strip()


def _runs_recordbeam(python: Path) -> None:
    where = _run(python, "-c", "import recordbeam.pipeline, recordbeam; print(recordbeam.__file__)",
                 env=_outside_env())
    assert where.startswith(str(python.parents[1])), where  # the installed wheel, not src/
    assert "convert" in _run(python.parent / "recordbeam", "--help", env=_outside_env())


@pytest.fixture(scope="module")
def wheels(tmp_path_factory) -> Path:
    dist = tmp_path_factory.mktemp("dist")
    _run(sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
         "-w", dist, ROOT, timeout=300)
    return dist


@pytest.fixture(scope="module")
def wheelhouse(tmp_path_factory, wheels) -> Path:
    """Every wheel both images install: Beam with its gcp extra, recordbeam and theirs."""
    house = tmp_path_factory.mktemp("wheelhouse")
    (wheel,) = wheels.glob("recordbeam-*.whl")
    beam = {SDK.args["BEAM_VERSION"], LAUNCHER.args["BEAM_VERSION"]}
    _run(sys.executable, "-m", "pip", "wheel", "-q", "-w", house, wheel,
         *(f"apache-beam[gcp]=={version}" for version in beam), timeout=INSTALL_SECONDS,
         env=_outside_env())
    return house


@pytest.fixture(scope="module")
def sample(tmp_path_factory):
    return make_coco_sample(tmp_path_factory.mktemp("sample"), num_images=12, include_bad=False)


def test_build_arguments_default_to_the_tested_python_and_beam():
    assert SDK.args["PYTHON_VERSION"] == TESTED_PYTHON
    assert SDK.args["BEAM_VERSION"] == apache_beam.__version__
    assert SDK.base == f"apache/beam_python{TESTED_PYTHON}_sdk:{apache_beam.__version__}"
    assert LAUNCHER.args["BEAM_VERSION"] == apache_beam.__version__
    # The launcher's Python is the workers': python311 for 3.11.
    assert f"/python{TESTED_PYTHON.replace('.', '')}-template-launcher-base" in LAUNCHER.base


def test_sdk_image_install_keeps_beams_version_and_serves_workers(
        tmp_path, wheels, wheelhouse, sample):
    python = _venv(tmp_path / "sdk")
    beam = SDK.args["BEAM_VERSION"]
    _run(python, "-m", "pip", "install", "-q", f"apache-beam[gcp]=={beam}",
         timeout=INSTALL_SECONDS, env=_offline(wheelhouse))
    _replay(SDK, python, wheels, wheelhouse)
    assert _beam_version(python) == beam
    _runs_recordbeam(python)

    # A job submitted from the test environment, its workers in the image's environment.
    pool, endpoint = free_port(), free_port()
    out = tmp_path / "out"
    with job_service(endpoint, tmp_path / "job_service.log"), \
            worker_pool(pool, tmp_path / "worker_pool.log", python=str(python),
                        env=_outside_env()):
        _run(sys.executable, "-m", "recordbeam", "convert", "coco", "--images",
             sample.images_dir, "--annotations", sample.annotations, "--output", out,
             "--shards", "2", "--quiet", "--runner=PortableRunner",
             f"--job_endpoint=localhost:{endpoint}", "--environment_type=EXTERNAL",
             f"--environment_config=localhost:{pool}")
    local = tmp_path / "local"
    _run(sys.executable, "-m", "recordbeam", "convert", "coco", "--images", sample.images_dir,
         "--annotations", sample.annotations, "--output", local, "--shards", "2", "--quiet")
    written = sorted(out.glob("*.tfrecord"))
    assert written and [p.read_bytes() for p in written] == [
        p.read_bytes() for p in sorted(local.glob("*.tfrecord"))]


def test_flex_template_launcher_install_writes_the_templates_job(
        tmp_path, wheels, wheelhouse, sample):
    python = _venv(tmp_path / "launcher")
    _replay(LAUNCHER, python, wheels, wheelhouse)
    assert _beam_version(python) == LAUNCHER.args["BEAM_VERSION"]
    _runs_recordbeam(python)

    script = dockerfile.localized([LAUNCHER.env["FLEX_TEMPLATE_PYTHON_PY_FILE"]],
                                  LAUNCHER.copies, {"pipelines/": ROOT / "pipelines"})[0]
    assert Path(script).is_file(), script
    # What the Flex Template launcher does: parameters as --name=value, the job to a file.
    staging, job = tmp_path / "staging", tmp_path / "staging" / "job_object"
    staging.mkdir()
    printed = _run(python, script, f"--images={sample.images_dir}",
                   f"--annotations={sample.annotations}", f"--output={tmp_path / 'out'}",
                   "--if_changed=true", "--runner=DataflowRunner", "--project=example-project",
                   "--region=us-central1", f"--staging_location={staging}",
                   f"--temp_location={staging}", f"--template_location={job}", "--no_auth",
                   f"--dataflow_endpoint=http://localhost:{free_port()}", env=_outside_env())
    assert printed.startswith(f"wrote the DataflowRunner job to {job}"), printed
    assert job.stat().st_size > 0
