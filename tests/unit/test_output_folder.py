"""Unit tests for recordbeam.dataset.layout: our file names and the foreign-file guard."""

from __future__ import annotations

import json

import pytest

from recordbeam.dataset.folder_lock import LOCK, LockRecord
from recordbeam.dataset.layout import (
    FAILED_REJECTS,
    LABELS,
    MANIFEST,
    REJECTS,
    TEMP_PREFIX,
    OutputFolderError,
    check_creatable,
    check_split_name,
    check_writable,
    existing_files,
    is_ours,
    read_manifest,
    shard_name,
)
from recordbeam.tfrecord.framing import Compression


@pytest.mark.parametrize(
    ("split", "index", "count", "compression", "expected"),
    [
        ("train", 0, 1, Compression.NONE, "train-00000-of-00001.tfrecord"),
        ("train", 2, 3, Compression.NONE, "train-00002-of-00003.tfrecord"),
        ("val_2017", 41, 128, Compression.GZIP, "val_2017-00041-of-00128.tfrecord.gz"),
        ("test", 99998, 99999, Compression.ZLIB, "test-99998-of-99999.tfrecord.zz"),
    ],
)
def test_shard_name(split, index, count, compression, expected):
    assert shard_name(split, index, count, compression) == expected


@pytest.mark.parametrize(
    "name",
    [
        MANIFEST,
        LABELS,
        REJECTS,
        FAILED_REJECTS,
        "train-00000-of-00001.tfrecord",
        "train-00002-of-00003.tfrecord.gz",
        "val_2017-00000-of-00010.tfrecord.zz",
        "train-00000-of-00001.tfrecord.idx",
        "train-00000-of-00001.tfrecord.gz.idx",
        f"{TEMP_PREFIX}0123456789ab/train-00000-of-00001.tfrecord.aaaa",
        f"{TEMP_PREFIX}0123456789ab/plan.json",
        f"{TEMP_PREFIX}0123456789ab/nested/deeper/file",
    ],
)
def test_files_a_run_writes_are_ours(name):
    assert is_ours(name)


@pytest.mark.parametrize(
    "name",
    [
        "notes.txt",
        ".DS_Store",
        "train.tfrecord",
        "train-0-of-1.tfrecord",  # not five digits
        "train-00000-of-00001.tfrecord.bak",
        "train-00000-of-00001.tfrecords",
        "mnist-train.tfrecord-00000-of-00001",  # TFDS's layout, not ours
        "sub/train-00000-of-00001.tfrecord",  # ours only at the top level
        "sub/manifest.json",
        "manifest.json.orig",
        "recordbeam-tmp-abc/file",  # the prefix starts with a dot
        "x" + TEMP_PREFIX + "abc/file",
    ],
)
def test_other_files_are_foreign(name):
    assert not is_ours(name)


def test_check_writable_accepts_a_missing_or_empty_folder(tmp_path):
    check_writable(str(tmp_path / "does-not-exist"), overwrite=False)
    check_writable(str(tmp_path), overwrite=False)


def _touch(folder, *names):
    for name in names:
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"x")


def _recorded(folder, *, temp_folders=(), files=()) -> None:
    """The folder's lock record, naming what earlier runs left there."""
    (folder / LOCK).write_bytes(
        LockRecord(None, temp_folders=tuple(temp_folders), files=tuple(files)).to_bytes())


def _manifest(*shards: str) -> str:
    return json.dumps({"format": "recordbeam.dataset.manifest/1",
                       "splits": {"train": {"shards": [{"file": f} for f in shards]}}})


def test_check_writable_accepts_a_folder_holding_only_our_files(tmp_path):
    _touch(
        tmp_path,
        LABELS,
        REJECTS,
        "train-00000-of-00002.tfrecord",
        "train-00001-of-00002.tfrecord",
        "train-00001-of-00002.tfrecord.idx",
        f"{TEMP_PREFIX}abc/train-00000-of-00002.tfrecord.123",
        FAILED_REJECTS,
    )
    _recorded(tmp_path, temp_folders=[f"{TEMP_PREFIX}abc"], files=[FAILED_REJECTS])
    (tmp_path / MANIFEST).write_text(
        _manifest("train-00000-of-00002.tfrecord", "train-00001-of-00002.tfrecord"))
    check_writable(str(tmp_path), overwrite=False)


@pytest.mark.parametrize("name", [
    f"{TEMP_PREFIX}notes/todo.txt",  # a folder of the user's named like our temp folders
    f"{TEMP_PREFIX}todo",
    FAILED_REJECTS,
])
def test_files_named_like_ours_that_no_record_names_are_foreign(tmp_path, name):
    _touch(tmp_path, "train-00000-of-00001.tfrecord", name)
    _recorded(tmp_path, temp_folders=[f"{TEMP_PREFIX}0123456789ab"])
    (tmp_path / MANIFEST).write_text(_manifest("train-00000-of-00001.tfrecord"))
    with pytest.raises(OutputFolderError) as caught:
        check_writable(str(tmp_path), overwrite=False)
    assert f"({name})" in str(caught.value)


def test_shard_named_files_no_manifest_lists_are_foreign(tmp_path):
    # Beam's WriteToTFRecord writes names like ours: a name alone does not make a file ours.
    _touch(tmp_path, "train-00000-of-00003.tfrecord", "train-00001-of-00003.tfrecord")
    (tmp_path / MANIFEST).write_text(_manifest("train-00000-of-00003.tfrecord"))
    with pytest.raises(OutputFolderError) as caught:
        check_writable(str(tmp_path), overwrite=False)
    assert "train-00001-of-00003.tfrecord" in str(caught.value)
    assert "train-00000-of-00003.tfrecord," not in str(caught.value)


def test_files_a_cut_short_commit_was_placing_are_ours(tmp_path):
    _touch(tmp_path, "train-00000-of-00001.tfrecord")
    (tmp_path / f"{TEMP_PREFIX}abc").mkdir()
    (tmp_path / f"{TEMP_PREFIX}abc" / "commit.json").write_text(
        json.dumps({"files": ["train-00000-of-00001.tfrecord"]}))
    _recorded(tmp_path, temp_folders=[f"{TEMP_PREFIX}abc"])
    check_writable(str(tmp_path), overwrite=False)


def test_check_writable_refuses_an_output_path_that_is_a_file(tmp_path):
    _touch(tmp_path, "out")
    with pytest.raises(OutputFolderError, match="is a file"):
        check_writable(str(tmp_path / "out"), overwrite=False)


def test_check_creatable_accepts_what_can_be_created_and_leaves_nothing(tmp_path, monkeypatch):
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    monkeypatch.chdir(tmp_path)
    for given in (str(tmp_path / "a" / "b"), "relative/out", "link/out", f"file://{tmp_path}/x",
                  str(tmp_path), "gs://bucket/never/probed"):
        check_creatable(given)
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["link", "real"]


@pytest.mark.parametrize("make,said", [
    (lambda t: (t / "a_file").write_text("x"), "a_file is a file, not a folder"),
    (lambda t: (t / "a_file").symlink_to(t / "nowhere"), "a_file is a broken symbolic link"),
    (lambda t: (t / "a_file").symlink_to(t / "a_file"), "a_file is a broken symbolic link"),
])
def test_check_creatable_names_what_stands_in_the_way(tmp_path, make, said):
    make(tmp_path)
    with pytest.raises(OutputFolderError, match=f"cannot write the output folder "
                                                f"{tmp_path}/a_file/out: {tmp_path}/{said}; "):
        check_creatable(str(tmp_path / "a_file" / "out"))


def test_check_creatable_lets_the_kernel_resolve_dot_dot_after_a_link(tmp_path, monkeypatch):
    # link/.. is the link target's parent, not tmp_path: a path normalized by its text
    # would probe the wrong folder.
    (tmp_path / "deep" / "target").mkdir(parents=True)
    (tmp_path / "link").symlink_to(tmp_path / "deep" / "target")
    (tmp_path / "deep" / "blocker").write_text("x")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(OutputFolderError, match="blocker is a file, not a folder"):
        check_creatable("link/../blocker/out")


def test_check_writable_refuses_foreign_files_and_names_them(tmp_path):
    _touch(tmp_path, "train-00000-of-00001.tfrecord", "my-notes.txt")
    (tmp_path / MANIFEST).write_text(_manifest("train-00000-of-00001.tfrecord"))
    with pytest.raises(OutputFolderError) as caught:
        check_writable(str(tmp_path), overwrite=False)
    message = str(caught.value)
    assert "my-notes.txt" in message
    assert str(tmp_path) in message
    assert "--overwrite" in message
    assert "train-00000-of-00001.tfrecord" not in message


def test_check_writable_refuses_foreign_files_in_subfolders(tmp_path):
    _touch(tmp_path, "nested/photo.jpg")
    with pytest.raises(OutputFolderError, match="nested/photo.jpg"):
        check_writable(str(tmp_path), overwrite=False)


def test_check_writable_lists_five_foreign_files_and_counts_the_rest(tmp_path):
    names = [f"foreign-{i}.txt" for i in range(8)]
    _touch(tmp_path, *names)
    with pytest.raises(OutputFolderError) as caught:
        check_writable(str(tmp_path), overwrite=False)
    message = str(caught.value)
    assert sum(name in message for name in names) == 5
    assert "and 3 more" in message


def test_check_writable_with_overwrite_allows_foreign_files_and_keeps_them(tmp_path):
    _touch(tmp_path, "my-notes.txt")
    check_writable(str(tmp_path), overwrite=True)
    assert (tmp_path / "my-notes.txt").read_bytes() == b"x"


def test_existing_files_lists_relative_paths_recursively_and_sorted(tmp_path):
    _touch(tmp_path, "b.txt", "a/c.txt", MANIFEST)
    assert existing_files(str(tmp_path)) == sorted(["a/c.txt", "b.txt", MANIFEST])
    assert existing_files(str(tmp_path / "missing")) == []


@pytest.mark.parametrize("split", ["train", "val2017", "Test_1", "_"])
def test_check_split_name_accepts_file_name_safe_names(split):
    assert check_split_name(split) == split


@pytest.mark.parametrize("split", ["", "train/val", "a b", "train-1", "../x", "é"])
def test_check_split_name_refuses_names_that_would_break_file_names(split):
    with pytest.raises(OutputFolderError) as caught:
        check_split_name(split)
    assert repr(split) in str(caught.value)


def test_read_manifest_is_none_until_our_manifest_exists(tmp_path):
    assert read_manifest(str(tmp_path)) is None
    (tmp_path / MANIFEST).write_text(json.dumps({"totals": {"examples": 3}}))
    assert read_manifest(str(tmp_path)) is None  # a manifest.json, but not ours
    ours = {"format": "recordbeam.dataset.manifest/1", "totals": {"examples": 3}}
    (tmp_path / MANIFEST).write_text(json.dumps(ours))
    assert read_manifest(str(tmp_path)) == ours
