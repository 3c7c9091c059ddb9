"""The deploy images' install steps, replayed in fresh venvs.

No Docker engine or registry is reachable from CI, so each Dockerfile's ``pip`` commands
run in a venv standing for the image's Python: for the SDK image (deploy/sdk-container) a
venv holding the Beam that Beam's own image holds (``apache-beam[gcp]``, the Dockerfile's
BEAM_VERSION); for the Flex Template launcher (deploy/flex-template) a bare venv, as the
launcher base image has no Beam. COPY sources are the checkout's; ``dist/`` is the
session's wheelhouse (``launchers.py``: recordbeam's wheel, built from the checkout, and
what ``.[gcp]`` resolves to), which every install here uses with no index, so nothing is
downloaded twice. Then recordbeam must run there, Beam must be the version it was, the SDK
venv must serve a job's workers, and the launcher venv must write a Flex Template's job.
"""

from __future__ import annotations

import glob
import os
import shutil
import sys
from pathlib import Path

import apache_beam
import dockerfile
import pytest
from beam_services import free_port, job_service, worker_pool
from launchers import (
    ANNOTATIONS,
    IMAGES,
    PIP,
    REPO,
    Venv,
    base_python,
    launcher_environment,
    make_venv,
    run,
    venv_environment,
)

SDK = dockerfile.parse(REPO / "deploy" / "sdk-container" / "Dockerfile")
LAUNCHER = dockerfile.parse(REPO / "deploy" / "flex-template" / "Dockerfile")
TESTED_PYTHON = f"{sys.version_info.major}.{sys.version_info.minor}"
INSTALL_SECONDS = 1200


def _offline(wheelhouse: Path) -> dict[str, str]:
    """pip sees the wheelhouse and no index (nor this machine's pip configuration)."""
    return venv_environment(PIP_CONFIG_FILE="/dev/null", PIP_NO_INDEX="1",
                            PIP_FIND_LINKS=str(wheelhouse))


def _replay(image: dockerfile.Dockerfile, venv: Venv, wheelhouse: Path) -> None:
    sources = {"dist/": wheelhouse, "pipelines/": REPO / "pipelines"}
    assert set(image.copies.values()) <= set(sources), image.copies
    assert image.pip_commands, "no pip command found"
    for words in image.pip_commands:
        local = dockerfile.localized(words, image.copies, sources)
        expanded = [m for w in local for m in (sorted(glob.glob(w)) if "*" in w else [w])]
        assert len(expanded) == len(local), f"a pattern matched nothing or several: {local}"
        # --no-compile: no .pyc files written (half an install's time here), the same
        # packages installed; Python compiles on import all the same.
        no_compile = ["--no-compile"] if expanded[0] == "install" else []
        run([venv.python, "-m", "pip", *expanded, *no_compile], env=_offline(wheelhouse),
            timeout=INSTALL_SECONDS)


def _runs_recordbeam(venv: Venv) -> None:
    where = run([venv.python, "-c", "import recordbeam.pipeline, recordbeam; "
                 "print(recordbeam.__file__)"]).stdout
    assert where.startswith(str(venv.path)), where  # the installed wheel, not src/
    assert "convert" in run([str(venv.path / "bin" / "recordbeam"), "--help"]).stdout


@pytest.fixture(scope="module")
def wheelhouse(wheelhouses, tmp_path_factory) -> Path:
    probe = make_venv(base_python(), tmp_path_factory.mktemp("probe") / "venv")
    return wheelhouses.folder(probe)


def test_build_arguments_default_to_the_tested_python_and_beam():
    assert SDK.args["PYTHON_VERSION"] == TESTED_PYTHON
    assert SDK.args["BEAM_VERSION"] == apache_beam.__version__
    assert SDK.base == f"apache/beam_python{TESTED_PYTHON}_sdk:{apache_beam.__version__}"
    assert LAUNCHER.args["BEAM_VERSION"] == apache_beam.__version__
    # The launcher's Python is the workers': python311 for 3.11.
    assert f"/python{TESTED_PYTHON.replace('.', '')}-template-launcher-base" in LAUNCHER.base


def test_sdk_image_install_keeps_beams_version_and_serves_workers(
        tmp_path, wheelhouse, coco_sample):
    venv = make_venv(base_python(), tmp_path / "sdk")
    beam = SDK.args["BEAM_VERSION"]
    run([venv.python, "-m", "pip", "install", *PIP, "--no-compile", f"apache-beam[gcp]=={beam}"],
        env=_offline(wheelhouse), timeout=INSTALL_SECONDS)
    _replay(SDK, venv, wheelhouse)
    assert venv.package_version("apache-beam") == beam
    _runs_recordbeam(venv)

    # A job submitted from the test environment, its workers in the image's environment.
    pool, endpoint = free_port(), free_port()
    out, local = tmp_path / "out", tmp_path / "local"
    convert = [sys.executable, "-m", "recordbeam", "convert", "coco", "--images",
               coco_sample.images_dir, "--annotations", coco_sample.annotations,
               "--shards", "2", "--quiet"]
    with job_service(endpoint, tmp_path / "job_service.log"), \
            worker_pool(pool, tmp_path / "worker_pool.log", python=venv.python,
                        env=venv_environment()):
        run([*convert, "--output", str(out), "--runner=PortableRunner",
             f"--job_endpoint=localhost:{endpoint}", "--environment_type=EXTERNAL",
             f"--environment_config=localhost:{pool}"], env=dict(os.environ))
    run([*convert, "--output", str(local)], env=dict(os.environ))
    written = sorted(out.glob("*.tfrecord"))
    assert written and [p.read_bytes() for p in written] == [
        p.read_bytes() for p in sorted(local.glob("*.tfrecord"))]
    shutil.rmtree(venv.path, ignore_errors=True)  # ~800 MB


def test_flex_template_launcher_install_writes_the_templates_job(
        tmp_path, wheelhouse, emulator):
    venv = make_venv(base_python(), tmp_path / "launcher")
    _replay(LAUNCHER, venv, wheelhouse)
    assert venv.package_version("apache-beam") == LAUNCHER.args["BEAM_VERSION"]
    _runs_recordbeam(venv)

    script = dockerfile.localized([LAUNCHER.env["FLEX_TEMPLATE_PYTHON_PY_FILE"]],
                                  LAUNCHER.copies, {"pipelines/": REPO / "pipelines"})[0]
    assert Path(script).is_file(), script
    # What the Flex Template launcher does: parameters as --name=value, the job to a file.
    # The data is where Dataflow's workers can read it: gs://, on the emulator.
    staging, job = tmp_path / "staging", tmp_path / "staging" / "job_object"
    staging.mkdir()
    printed = run([venv.python, script, f"--images={IMAGES}", f"--annotations={ANNOTATIONS}",
                   "--output=gs://data/flex-template-out", "--if_changed=true",
                   "--runner=DataflowRunner", "--project=example-project", "--region=us-central1", f"--staging_location={staging}",
                   f"--temp_location={staging}", f"--template_location={job}", "--no_auth",
                   f"--dataflow_endpoint=http://localhost:{free_port()}"],
                  env=launcher_environment(emulator.url)).stdout
    assert printed.startswith(f"wrote the DataflowRunner job to {job}"), printed
    assert job.stat().st_size > 0
    shutil.rmtree(venv.path, ignore_errors=True)
