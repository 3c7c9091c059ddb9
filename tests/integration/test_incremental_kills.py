"""An incremental run killed (SIGKILL) at any moment: the folder holds the previous
version, whole and readable (or, killed after its manifest was replaced, the new one),
``verify`` finds it clean, and a rerun completes with what a full rebuild gives.

Kills land at chosen points of the commit (the run kills itself there, in-memory runner:
one process) and at random moments of the whole run (a timer, seeded)."""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from growing_corpus import Corpus, examples, globbed_examples, rejects, split_facts
from lanes import exhaustive, one_in_make_test

import recordbeam
from recordbeam.cli.main import main

CASE = pytest.mark.case
SMALL_SHARDS = ("--shard-size", "4KiB")
REPO = Path(__file__).resolve().parents[2]

#: Where a run kills itself: code run in the driver before the conversion starts.
POINTS = {
    "encoding a new shard": (
        "from recordbeam.write import sink\n"
        "write = sink._WriteShard.process\n"
        "def dying(self, group):\n"
        "    for n, out in enumerate(write(self, group)):\n"
        "        die() if n else None\n"
        "        yield out\n"
        "sink._WriteShard.process = dying\n"),
    "rewriting a shard from its surviving records": (
        "from recordbeam.write import incremental\n"
        "Writer = incremental.RecordWriter\n"
        "incremental.RecordWriter = type('Dying', (Writer,), {\n"
        "    'write': lambda self, data: die() if self.records_written else "
        "Writer.write(self, data)})\n"),
    "renaming the new shards into place": (
        "from recordbeam import filesystems\n"
        "rename = filesystems.rename\n"
        "def half(sources, targets):\n"
        "    if len(sources) > 2 and any('.tfrecord' in t for t in targets):\n"
        "        rename(sources[:2], targets[:2])\n"
        "        die()\n"
        "    rename(sources, targets)\n"
        "filesystems.rename = half\n"),
    "replacing the manifest": (
        "from recordbeam.write import incremental_commit as commit\n"
        "rename = commit._rename_logged\n"
        "def dying(out, sources, targets, what):\n"
        "    die() if 'manifest' in what else rename(out, sources, targets, what)\n"
        "commit._rename_logged = dying\n"),
    "replacing the metadata files": (
        "from recordbeam.write import incremental_commit as commit\n"
        "rename = commit._rename_logged\n"
        "def dying(out, sources, targets, what):\n"
        "    die() if 'metadata' in what else rename(out, sources, targets, what)\n"
        "commit._rename_logged = dying\n"),
    "deleting the previous version's files": (
        "from recordbeam.write import incremental_commit as commit\n"
        "delete = commit._delete_logged\n"
        "def dying(out, stale, why):\n"
        "    delete(out, stale[:1], why)\n"
        "    die()\n"
        "commit._delete_logged = dying\n"),
}

DRIVER = (
    "import os, signal, sys\n"
    "def die():\n"
    "    os.kill(os.getpid(), signal.SIGKILL)\n"
    "{patch}"
    "from recordbeam.cli.main import main\n"
    "sys.exit(main(sys.argv[1:]))\n")


@pytest.fixture(scope="module")
def versions(tmp_path_factory):
    """Version 1 of an incremental folder, the corpus changed since, and a full rebuild of
    the changed corpus (what version 2 must hold)."""
    root = tmp_path_factory.mktemp("kills")
    rng = random.Random(4)
    corpus = Corpus.make("coco", root / "in", 40)
    v1 = root / "v1"
    assert main(corpus.argv(v1, "--incremental", *SMALL_SHARDS)) == 0
    for what in ("add", "add", "add", "delete", "relabel", "repaint", "break", "touch"):
        corpus.mutate(what, rng)
    corpus.write()
    full = root / "full"
    assert main(corpus.argv(full, *SMALL_SHARDS)) == 0
    return corpus, v1, full


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join(
        filter(None, [str(REPO / "src"), os.environ.get("PYTHONPATH")]))}


def _check_killed_then_rerun(corpus: Corpus, out: Path, v1: Path, full: Path) -> int:
    """The folder is version 1 or 2, whole; a rerun completes as a full rebuild would.
    Returns the version the kill left."""
    manifest = json.loads((out / "manifest.json").read_text())
    version = manifest["version"]
    assert examples(out) == examples(v1 if version == 1 else full)
    assert main(["verify", str(out)]) == 0
    assert len(list(recordbeam.read(str(out)))) == manifest["splits"]["train"]["examples"]
    assert main(corpus.argv(out, "--incremental", *SMALL_SHARDS)) == 0
    assert examples(out) == globbed_examples(out) == examples(full)
    assert split_facts(out) == split_facts(full) and rejects(out) == rejects(full)
    left = [p.name for p in out.iterdir() if p.name.startswith(".recordbeam")]
    assert left == []  # no temp folder, no lock
    return version


@CASE("Incremental run killed (SIGKILL) at each point of its commit: encoding a new shard, "
      "rewriting a shard from its surviving records, renaming the new shards into place, "
      "replacing the manifest, replacing the metadata files, deleting the previous "
      "version's files",
      "the previous version (or, once the manifest was replaced, the new one) whole, "
      "readable and verify-clean; the rerun completes as a full rebuild would")
@pytest.mark.parametrize("point", one_in_make_test(list(POINTS)))
def test_a_run_killed_at_a_point_of_its_commit(point, versions, tmp_path):
    corpus, v1, full = versions
    out = tmp_path / "out"
    shutil.copytree(v1, out)
    killed = subprocess.run(
        [sys.executable, "-c", DRIVER.format(patch=POINTS[point]),
         *corpus.argv(out, "--incremental", *SMALL_SHARDS, "--compact-below", "0.3")],
        env=_env(), capture_output=True, text=True, timeout=300)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    version = _check_killed_then_rerun(corpus, out, v1, full)
    replaced = point in ("replacing the metadata files", "deleting the previous version's files")
    assert version == (2 if replaced else 1)


@CASE("Incremental run killed (SIGKILL) at random moments (seeded)",
      "each time the folder holds one whole version, verify-clean; every rerun completes")
@exhaustive
def test_runs_killed_at_random_moments(versions, tmp_path):
    corpus, v1, full = versions
    rng = random.Random(12)
    left = set()
    for attempt in range(6):
        out = tmp_path / f"out{attempt}"
        shutil.copytree(v1, out)
        proc = subprocess.Popen(
            [sys.executable, "-m", "recordbeam",
             *corpus.argv(out, "--incremental", *SMALL_SHARDS)],
            env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True)
        time.sleep(rng.uniform(0.5, 4.0))
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        left.add(_check_killed_then_rerun(corpus, out, v1, full))
    assert 1 in left  # at least one kill landed before the commit
