"""Runs that collide: two commands writing one output folder, locks left by killed runs,
and files named like ours that recordbeam did not write.

The folder's lock (``recordbeam.dataset.folder_lock``) and the sink are the same for every
input format; COCO stands for them all, with ``reshard`` as a second kind of writer.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
import shard_faults
from lanes import exhaustive, one_in_make_test
from read_back import write_folder_files
from reliability_data import convert_argv, snapshot

from recordbeam.cli import main as cli
from recordbeam.dataset import folder_lock
from recordbeam.dataset.folder_lock import LOCK, LockRecord
from recordbeam.dataset.layout import FAILED_REJECTS, MANIFEST, TEMP_PREFIX
from recordbeam.testing.samples import make_coco_sample

CASE = pytest.mark.case


def _command(larger_sample, out, *extra: str) -> list[str]:
    return [sys.executable, "-m", "recordbeam", *convert_argv(
        larger_sample.images_dir, larger_sample.annotations, str(out), "--shards", "2", *extra)]


def _start(argv: list[str], env: dict[str, str] | None = None) -> subprocess.Popen:
    return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, env=env)


def _finish(proc: subprocess.Popen) -> tuple[int, str]:
    try:
        _out, err = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return proc.returncode, err


@pytest.mark.parametrize(
    "second",
    one_in_make_test([
        pytest.param("convert", marks=CASE(
            "A second conversion into a folder another run is writing (a finished output "
            "there)",
            "the second is refused (exit 2) naming the first run, its pid and host, and "
            "--break-lock; the first finishes; the folder equals a clean run")),
        pytest.param("reshard", marks=CASE(
            "`reshard` into a folder a conversion is writing",
            "refused (exit 2) naming the conversion's run; the conversion's output is whole")),
    ]),
)
def test_a_second_writer_is_refused_naming_the_first(larger_sample, larger_clean, tmp_path, second):
    out = tmp_path / "out"
    write_folder_files(out, larger_clean)  # a finished output, as a nightly run finds it
    writing = tmp_path / "writing"  # the first run holds a shard's write until released
    first = _start(_command(larger_sample, out, "--overwrite"),
                   {**os.environ, **shard_faults.holding_environment(writing)})
    started = time.monotonic()
    while not writing.exists():
        assert first.poll() is None, first.communicate()
        assert time.monotonic() - started < 120, "the first run never started writing"
        time.sleep(0.005)
    holder = json.loads((out / LOCK).read_text())
    if second == "convert":
        argv = _command(larger_sample, out)
    else:
        argv = [sys.executable, "-m", "recordbeam", "reshard", str(tmp_path / "inputs"),
                str(out), "--quiet", "--direct_running_mode=in_memory",
                "--direct_num_workers=1"]
        write_folder_files(tmp_path / "inputs", larger_clean)
    # The first run holds the folder, writing, while the second one starts.
    try:
        code, err = _finish(_start(argv))
    finally:
        shard_faults.release(writing)
    assert code == 2, err
    assert f"is being written by another run {holder['run']}" in err
    assert f"pid {first.pid} on " in err and "--break-lock" in err
    assert len(err.splitlines()) == 1, err
    assert _finish(first)[0] == 0
    assert snapshot(out) == larger_clean


@CASE(
    "Two conversions started at the same moment into one folder (new, then holding a "
    "finished output), three times each",
    "one writes, any other is refused (exit 2) naming the run that writes; never both fail; "
    "the folder equals a clean run each time",
)
@exhaustive
def test_runs_started_together_never_lose_the_output(larger_sample, larger_clean, tmp_path):
    out = tmp_path / "out"
    for trial in range(6):
        if trial == 3:  # from here on, a finished output is there
            assert snapshot(out) == larger_clean
        runs = [_start(_command(larger_sample, out)) for _ in range(2)]
        results = [_finish(run) for run in runs]
        codes = sorted(code for code, _err in results)
        assert codes in ([0, 0], [0, 2]), results  # one after the other, or one refused
        for (code, err), other in zip(results, reversed(runs), strict=True):
            if code == 2:
                assert f"pid {other.pid} on " in err, err
        assert snapshot(out) == larger_clean


# --- locks left behind ---------------------------------------------------------------


def _lock_of(run: str, **fields) -> bytes:
    return LockRecord(run, **fields).to_bytes()


def _this_host(tmp_path) -> tuple[str, str, str]:
    """(host, boot, this process's start) as a lock taken here records them."""
    lock = folder_lock.acquire(str(tmp_path / "probe"), "probe")
    lock.release()
    return lock.record.host, lock.record.boot, lock.record.pid_started


@CASE(
    "Lock left by a run killed with SIGKILL (its process gone from this host), and one of "
    "another host older than 24 hours",
    "taken over without a word: the run succeeds, the dead run's temp folder is removed, "
    "the lock is gone after the commit",
)
def test_stale_locks_are_taken_over(larger_sample, larger_clean, tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    host, boot, _started = _this_host(tmp_path)
    for name, lock in [
        ("killed", _lock_of("0123456789ab", host=host, boot=boot, pid=dead.pid,
                            pid_started="1", started=time.time(),
                            temp_folders=(f"{TEMP_PREFIX}0123456789ab",))),
        ("old", _lock_of("0123456789ab", host="another-host", pid=4242,
                         started=time.time() - 25 * 3600,
                         temp_folders=(f"{TEMP_PREFIX}0123456789ab",))),
    ]:
        out = tmp_path / name
        (out / f"{TEMP_PREFIX}0123456789ab").mkdir(parents=True)
        (out / f"{TEMP_PREFIX}0123456789ab" / "train-00000-of-00002.tfrecord.aaaa").write_bytes(
            b"partial")
        (out / LOCK).write_bytes(lock)
        assert cli.main(convert_argv(larger_sample.images_dir, larger_sample.annotations, str(out),
                                     "--shards", "2")) == 0, name
        assert snapshot(out) == larger_clean, name


@CASE(
    "Lock of a live run on this host, and of another host's run younger than 24 hours",
    "refused (exit 2) naming it; `--break-lock` takes it and the run succeeds",
)
def test_a_live_lock_is_refused_unless_broken(larger_sample, larger_clean, tmp_path, capsys):
    host, boot, started = _this_host(tmp_path)
    for name, lock in [
        ("live", _lock_of("feedfacecafe", host=host, boot=boot, pid=os.getpid(),
                          pid_started=started, started=time.time(), command="convert coco")),
        ("remote", _lock_of("feedfacecafe", host="another-host", pid=4242,
                            started=time.time() - 3600)),
    ]:
        out = tmp_path / name
        out.mkdir()
        (out / LOCK).write_bytes(lock)
        argv = convert_argv(larger_sample.images_dir, larger_sample.annotations, str(out), "--shards", "2")
        assert cli.main(argv) == 2, name
        err = capsys.readouterr().err
        assert "is being written by another run feedfacecafe" in err
        assert (out / LOCK).read_bytes() == lock  # untouched
        assert cli.main([*argv, "--break-lock"]) == 0, name
        assert snapshot(out) == larger_clean, name


@CASE(
    "`recordbeam index OUT` while another run holds OUT (it may be replacing the shards)",
    "refused (exit 2) naming that run; no `.idx` written; once the folder is free, indexed",
)
def test_index_waits_for_no_run(larger_clean, tmp_path, capsys):
    out = tmp_path / "out"
    write_folder_files(out, larger_clean)
    host, boot, started = _this_host(tmp_path)
    lock = _lock_of("feedfacecafe", host=host, boot=boot, pid=os.getpid(),
                    pid_started=started, started=time.time(), command="convert coco")
    (out / LOCK).write_bytes(lock)
    assert cli.main(["index", str(out)]) == 2
    assert "is being written by another run feedfacecafe" in capsys.readouterr().err
    assert snapshot(out) == {**larger_clean, LOCK: lock}
    (out / LOCK).unlink()
    assert cli.main(["index", str(out)]) == 0
    assert sorted(set(snapshot(out)) - set(larger_clean)) == [
        "train-00000-of-00002.tfrecord.idx", "train-00001-of-00002.tfrecord.idx"]


@CASE(
    "`.recordbeam-lock.json` that recordbeam did not write (any other content)",
    "refused (exit 2) naming the file; never read as a lock, never deleted",
)
def test_a_foreign_file_named_like_the_lock_is_refused(larger_sample, tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (out / LOCK).write_text("my own notes\n")
    argv = convert_argv(larger_sample.images_dir, larger_sample.annotations, str(out), "--overwrite")
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert f"{out / LOCK} is not a lock recordbeam wrote" in err
    assert snapshot(out) == {LOCK: b"my own notes\n"}


# --- names like ours -------------------------------------------------------------------


@CASE(
    "Files of the user's named like recordbeam's: a `.recordbeam-tmp-notes/` folder, a "
    "`.recordbeam-tmp-todo` file, `failed-run-rejects.jsonl`, `my-classes.labels.txt` (a "
    "TFDS label file's name)",
    "refused (exit 2) naming them; with `--overwrite` written beside them and never "
    "deleted, by a run that fails its reject limit, nor by a later successful run",
)
def test_files_named_like_ours_are_never_deleted(tmp_path, capsys):
    sample = make_coco_sample(tmp_path / "sample", num_images=12)  # some images are bad
    out = tmp_path / "out"
    mine = {f"{TEMP_PREFIX}notes/todo.txt": b"buy milk", f"{TEMP_PREFIX}todo": b"call",
            "notes.txt": b"mine", "my-classes.labels.txt": b"cat\ndog\n"}
    for name, data in mine.items():
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        (out / name).write_bytes(data)
    argv = convert_argv(sample.images_dir, sample.annotations, str(out))
    assert cli.main(argv) == 2
    assert f"{TEMP_PREFIX}notes/todo.txt" in capsys.readouterr().err
    # A run that fails its reject limit writes failed-run-rejects.jsonl and records it.
    assert cli.main([*argv, "--overwrite", "--max-reject-fraction", "0"]) == 1
    assert FAILED_REJECTS in snapshot(out)
    assert cli.main([*argv, "--overwrite", "--max-reject-fraction", "1"]) == 0
    after = snapshot(out)
    assert {n: after.get(n) for n in mine} == mine
    assert FAILED_REJECTS not in after and LOCK not in after  # ours, recorded: replaced
    # The user's own failed-run-rejects.jsonl is theirs: named, kept by every run.
    (out / FAILED_REJECTS).write_bytes(b"my list\n")
    assert cli.main([*argv, "--max-reject-fraction", "1"]) == 2
    assert FAILED_REJECTS in capsys.readouterr().err
    assert cli.main([*argv, "--overwrite", "--max-reject-fraction", "1"]) == 0
    assert (out / FAILED_REJECTS).read_bytes() == b"my list\n"
    assert MANIFEST in snapshot(out)
