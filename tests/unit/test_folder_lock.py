"""The folder lock is created whole: a run starting at the same moment reads either no
lock or a complete one, never an empty file it would take for a stranger's."""

from __future__ import annotations

import errno
import os
import threading

import pytest

from recordbeam.dataset import folder_lock
from recordbeam.dataset.folder_lock import LOCK, FolderLocked
from recordbeam.dataset.names import OutputFolderError


def test_a_second_run_is_refused_naming_the_first(tmp_path):
    folder_lock.acquire(str(tmp_path), "first", command="convert coco")
    with pytest.raises(FolderLocked, match=r"run first \(convert coco, pid \d+ on "):
        folder_lock.acquire(str(tmp_path), "second")


def test_creation_leaves_no_staged_file_behind(tmp_path):
    folder_lock.acquire(str(tmp_path), "first")
    assert sorted(os.listdir(tmp_path)) == [LOCK]


def test_without_hard_links_the_lock_is_still_created_once(tmp_path, monkeypatch):
    def no_links(src, dst):
        raise OSError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(folder_lock.os, "link", no_links)
    folder_lock.acquire(str(tmp_path), "first")
    assert sorted(os.listdir(tmp_path)) == [LOCK]
    with pytest.raises(FolderLocked, match="run first"):
        folder_lock.acquire(str(tmp_path), "second")


def test_a_lock_read_while_it_is_being_written_is_read_whole(tmp_path):
    path = tmp_path / LOCK
    path.write_bytes(b"")  # created, not yet written, as O_EXCL leaves it for a moment
    record = folder_lock.LockRecord("first", host="h", pid=1, started=1.0)
    timer = threading.Timer(0.1, path.write_bytes, [record.to_bytes()])
    timer.start()
    try:
        assert folder_lock.read(str(tmp_path)) == record
    finally:
        timer.join()


@pytest.mark.parametrize("content", [b"", b"{}\n", b"notes"])
def test_a_file_recordbeam_did_not_write_is_refused_and_kept(tmp_path, content):
    path = tmp_path / LOCK
    path.write_bytes(content)
    with pytest.raises(OutputFolderError, match="is not a lock recordbeam wrote"):
        folder_lock.acquire(str(tmp_path), "first")
    assert path.read_bytes() == content


def test_runs_racing_from_threads_leave_exactly_one_holder(tmp_path):
    outcomes: list[str] = []
    start = threading.Barrier(8)

    def run(name):
        start.wait()
        try:
            folder_lock.acquire(str(tmp_path), name)
            outcomes.append("held")
        except FolderLocked:
            outcomes.append("refused")

    threads = [threading.Thread(target=run, args=(f"run{i}",)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(outcomes) == ["held"] + ["refused"] * 7


def test_a_lock_gone_again_before_it_is_read_is_created_anew(tmp_path, monkeypatch):
    created = folder_lock._create_new
    calls = []

    def another_run_came_and_went(path, data):
        calls.append(path)
        return False if len(calls) == 1 else created(path, data)

    monkeypatch.setattr(folder_lock, "_create_new", another_run_came_and_went)
    lock = folder_lock.acquire(str(tmp_path), "first")
    assert len(calls) == 2
    assert folder_lock.read(str(tmp_path)).run == "first" and lock.taken_over is None


def test_a_lock_that_never_settles_is_refused_not_waited_for(tmp_path, monkeypatch):
    monkeypatch.setattr(folder_lock, "_create_new", lambda path, data: False)
    with pytest.raises(FolderLocked, match="made and removed again 20 times"):
        folder_lock.acquire(str(tmp_path), "first")
