"""Fixtures of the launcher tests: one copy of the checkout, one wheelhouse per Python
version, one stock venv and one GCS emulator per session (see ``launchers.py``)."""

from __future__ import annotations

import shutil
from pathlib import Path

import gcs_emulator
import pytest
from launchers import (
    ANNOTATIONS,
    IMAGES,
    REPO,
    Wheelhouses,
    base_python,
    make_venv,
    run,
)

from recordbeam.testing.samples import make_coco_sample


@pytest.fixture(scope="session")
def checkout(tmp_path_factory) -> Path:
    """The files git tracks (and new ones it does not ignore), copied as a clone has
    them: pip and Beam's stager write build folders beside setup.py, and they stay out of
    the real checkout."""
    copy = tmp_path_factory.mktemp("checkout") / "recordbeam"
    tracked = run(["git", "-C", str(REPO), "ls-files", "-z", "--cached", "--others",
                   "--exclude-standard"])
    for name in filter(None, tracked.stdout.split("\0")):
        source = REPO / name
        if source.is_file():
            (copy / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, copy / name)
    return copy


@pytest.fixture(scope="session")
def wheelhouses(tmp_path_factory, checkout) -> Wheelhouses:
    return Wheelhouses(tmp_path_factory.mktemp("wheels"), checkout)


@pytest.fixture(scope="session")
def stock_venv(tmp_path_factory, wheelhouses):
    venv = make_venv(base_python(), tmp_path_factory.mktemp("stock") / "venv")
    wheelhouses.install(venv, ".[gcp]")
    yield venv
    shutil.rmtree(venv.path, ignore_errors=True)


@pytest.fixture(scope="session")
def coco_sample(tmp_path_factory):
    return make_coco_sample(tmp_path_factory.mktemp("coco"), num_images=12, seed=0,
                            include_bad=False)


@pytest.fixture(scope="session")
def emulator(coco_sample):
    """The GCS emulator, holding the COCO sample where the documented Dataflow command reads it."""
    with gcs_emulator.running("data") as running:
        running.upload_folder(coco_sample.images_dir, IMAGES)
        running.upload_file(coco_sample.annotations, ANNOTATIONS)
        yield running
