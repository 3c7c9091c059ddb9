"""A real full filesystem under a run with worker processes: a small tmpfs mounted for the
test, out of bytes or out of inodes. The error reaches the launcher as a worker's
traceback text; the command must still say where space ran out, leave nothing of its
own behind, and succeed once space is free. Needs root (mount); skipped otherwise."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from lanes import exhaustive, one_in_make_test
from reliability_data import snapshot

from recordbeam.testing.samples import make_coco_sample

CASE = pytest.mark.case


@pytest.fixture(scope="module")
def sample(tmp_path_factory):
    return make_coco_sample(tmp_path_factory.mktemp("sample"), num_images=40, include_bad=False)


@pytest.fixture
def small_disk(tmp_path):
    """A mount point and a function to (re)mount a tmpfs of the given size there."""
    where = tmp_path / "disk"
    where.mkdir()

    def mount(size: str, inodes: int, remount: bool = False) -> None:
        options = f"{'remount,' if remount else ''}size={size},nr_inodes={inodes}"
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(where)],
                              capture_output=True, text=True)
        if done.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")

    yield where, mount
    subprocess.run(["umount", str(where)], capture_output=True)


def _convert(sample, out, env=None, timeout=300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "recordbeam", "convert", "coco", "--images", sample.images_dir,
         "--annotations", sample.annotations, "--output", str(out), "--quiet", "--shards", "2",
         "--direct_running_mode=multi_processing", "--direct_num_workers=2"],
        capture_output=True, text=True, timeout=timeout, env=env)


@pytest.mark.parametrize("limit", one_in_make_test([
    pytest.param(("48k", 1000), marks=CASE(
        "Filesystem out of bytes under a run with worker processes (a 48 KiB tmpfs)",
        "exit 3, one line 'out of space on <folder>', nothing committed; nothing of the "
        "run left on the disk; the rerun succeeds once space is free")),
    pytest.param(("16m", 6), marks=CASE(
        "Filesystem out of inodes under a run with worker processes (a tmpfs of 6 inodes)",
        "the same: exit 3, 'out of space', nothing left; the rerun succeeds once inodes "
        "are free")),
]), ids=["bytes", "inodes"])
def test_a_full_filesystem_is_named_and_left_clean(sample, small_disk, limit):
    disk, mount = small_disk
    mount(*limit)
    out = disk / "out"
    done = _convert(sample, out)
    first, *rest = done.stderr.splitlines()
    assert done.returncode == 3, done.stderr
    assert first.startswith("recordbeam: out of space on "), done.stderr
    assert "nothing was committed" in first and "Errno" not in first
    assert all("the run's log is in" in line for line in rest), done.stderr
    for line in rest:
        os.unlink(line.rsplit(" ", 1)[1])
    assert snapshot(disk) == {}  # no temp folder, no lock, no shard
    mount("16m", 1000, remount=True)
    done = _convert(sample, out)
    assert done.returncode == 0, done.stderr


@CASE("Filesystem of the output and of TMPDIR (the run's log, the spilled shuffles) out of "
      "bytes under a run with worker processes (a 64 KiB tmpfs)",
      "exit 3, 'out of space on <folder>', in seconds: the workers' failed writes are "
      "reported although their tracebacks cannot reach the log; nothing left but the log; "
      "the rerun succeeds once space is free")
@exhaustive
def test_a_full_disk_under_the_log_fails_the_run_instead_of_hanging_it(sample, small_disk):
    disk, mount = small_disk
    mount("64k", 1000)
    out = disk / "out"
    env = {**os.environ, "TMPDIR": str(disk)}
    try:
        done = _convert(sample, out, env=env, timeout=120)
    except subprocess.TimeoutExpired:
        pytest.fail("the run waited on instead of failing")
    first, *rest = done.stderr.splitlines()
    assert done.returncode == 3, done.stderr
    assert first.startswith(f"recordbeam: out of space on {disk}"), done.stderr
    assert "nothing was committed" in first and "Errno" not in first
    for line in rest:
        os.unlink(line.rsplit(" ", 1)[1])
    assert snapshot(disk) == {}
    mount("16m", 1000, remount=True)
    done = _convert(sample, out, env=env)
    assert done.returncode == 0, done.stderr


@CASE("TMPDIR out of bytes while the local runner spills a shuffle there (a 16 KiB tmpfs, "
      "the output on another disk)",
      "exit 3, 'out of space on <TMPDIR>, where the local runner spills shuffles', naming "
      "TMPDIR, not the output folder; nothing committed; the rerun succeeds once space is "
      "free")
@exhaustive
def test_a_full_spill_folder_is_named_as_such(sample, small_disk, tmp_path):
    disk, mount = small_disk
    mount("16k", 1000)
    out = tmp_path / "out"
    env = {**os.environ, "TMPDIR": str(disk), "RECORDBEAM_SHUFFLE_MEMORY": "1024"}
    done = _convert(sample, out, env=env, timeout=120)
    first = done.stderr.splitlines()[0]
    assert done.returncode == 3, done.stderr
    assert first.startswith(f"recordbeam: out of space on {disk}, where the local runner "
                            "spills shuffles"), done.stderr
    assert f"nothing was committed to {out}" in first and "TMPDIR" in first
    for line in done.stderr.splitlines()[1:]:
        os.unlink(line.rsplit(" ", 1)[1])
    assert snapshot(disk) == {}  # the spill folder removed
    assert not out.exists() or snapshot(out) == {}
    mount("16m", 1000, remount=True)
    done = _convert(sample, out, env=env)
    assert done.returncode == 0, done.stderr
