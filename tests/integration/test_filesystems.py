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
