"""Small helpers over Beam's FileSystems."""

from __future__ import annotations

from recordbeam import filesystems


def test_has_files_looks_below_the_folder_and_stops_at_the_first(tmp_path, monkeypatch):
    assert not filesystems.has_files(str(tmp_path / "missing"))
    (tmp_path / "a" / "b").mkdir(parents=True)
    assert not filesystems.has_files(str(tmp_path))  # folders alone hold no files
    for i in range(50):
        (tmp_path / "a" / "b" / f"{i}.jpg").write_bytes(b"x")
    asked = []
    match = filesystems.FileSystems.match

    def counting(patterns, limits=None):
        results = match(patterns, limits)
        asked.extend(len(r.metadata_list) for r in results)
        return results

    monkeypatch.setattr(filesystems.FileSystems, "match", counting)
    assert filesystems.has_files(str(tmp_path))
    assert asked == [1]  # one file listed, not fifty


def test_real_path_with_remembered_folders_matches_realpath(tmp_path):
    import os

    real = tmp_path / "real"
    (real / "sub").mkdir(parents=True)
    (real / "sub" / "a.jpg").write_bytes(b"x")
    (tmp_path / "secret.jpg").write_bytes(b"s")
    os.symlink(real, tmp_path / "linked_dir")  # the folder itself is a link
    os.symlink(tmp_path / "secret.jpg", real / "sub" / "out.jpg")  # a file that is a link
    os.symlink(real / "sub" / "a.jpg", real / "sub" / "in.jpg")
    folders: dict[str, str] = {}
    paths = [str(tmp_path / "linked_dir" / "sub" / name)
             for name in ("a.jpg", "out.jpg", "in.jpg", "gone.jpg")]
    for path in paths * 2:  # the second time from the remembered folders
        assert filesystems.local_real_path(path, folders) == os.path.realpath(path)
    assert folders == {str(tmp_path / "linked_dir" / "sub"): os.path.realpath(real / "sub")}
    root = os.path.realpath(real)
    assert filesystems.outside_root(root, paths[1], folders) == os.path.realpath(tmp_path / "secret.jpg")
    assert filesystems.outside_root(root, paths[2], folders) is None
    assert filesystems.local_real_path("gs://bucket/a.jpg", folders) is None
