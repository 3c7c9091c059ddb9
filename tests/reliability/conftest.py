"""The reliability suite: each test declares the case it proves and what must happen
(``@pytest.mark.case``, registered in ``tests/conftest.py``)."""

from __future__ import annotations

import os

import pytest
from once import once_per_run
from reliability_data import convert_argv, snapshot

from recordbeam.testing.samples import make_coco_sample


def pytest_collection_modifyitems(items):
    here = os.path.dirname(__file__)
    for item in items:
        if str(item.fspath).startswith(here) and not any(item.iter_markers("case")):
            raise pytest.UsageError(f"{item.nodeid} declares no @pytest.mark.case(...)")


@pytest.fixture(scope="session")
def larger_sample(tmp_path_factory):
    """A COCO sample with enough pixels that a run spills its shuffles and spends a while
    in each stage. Its shards take well under a second to write: a test that must stop
    or race a run while it writes holds the write (``shard_faults.holding_environment``)
    or stops the worker first. Made once per test run."""
    return once_per_run(tmp_path_factory, "larger", lambda folder: make_coco_sample(
        folder, num_images=400, image_size=(320, 240), include_bad=False))


@pytest.fixture(scope="session")
def larger_clean(larger_sample, tmp_path_factory) -> dict[str, bytes]:
    """Every file of an undisturbed run of :func:`larger_sample` into two shards."""
    from recordbeam.cli import main as cli

    def run(folder):
        out = folder / "out"
        assert cli.main(convert_argv(larger_sample.images_dir, larger_sample.annotations,
                                     str(out), "--shards", "2")) == 0
        return snapshot(out)

    return once_per_run(tmp_path_factory, "larger-clean", run)
