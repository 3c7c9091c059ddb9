"""Small helpers over Beam's FileSystems."""

from __future__ import annotations

from recordbeam import filesystems
from recordbeam.local import internals


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


def _tree(root):
    for relative in ("a.jpg", ".hidden", "sub/b.png", "sub/deeper/c.jpg", "sub2/d"):
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(relative.encode())
    (root / "empty-folder").mkdir()
    (root.parent / "images-other").mkdir()
    (root.parent / "images-other" / "not-below.jpg").write_bytes(b"x")  # shares the prefix


def test_list_files_gives_what_match_gives(tmp_path):
    root = tmp_path / "images"
    _tree(root)
    matched = filesystems.FileSystems.match([filesystems.everything_below(str(root))])
    expected = sorted((m.path, m.size_in_bytes) for m in matched[0].metadata_list)
    assert len(expected) == 5
    for directory in (str(root), str(root) + "/"):
        assert sorted((m.path, m.size_in_bytes)
                      for m in filesystems.list_files(directory)) == expected
    assert list(filesystems.list_files(str(tmp_path / "missing"))) == []


def test_iter_match_gives_what_match_gives(tmp_path):
    root = tmp_path / "images"
    _tree(root)
    for pattern in (f"{root}/*.jpg", f"{root}/sub/**", f"{root}/sub/*/c.jpg", f"{root}/",
                    f"{root}*/*.jpg", f"{root}/a.jpg", f"{root}/missing.jpg", f"{root}/s?b/*"):
        matched = filesystems.FileSystems.match([pattern])[0].metadata_list
        expected = sorted((m.path, m.size_in_bytes, m.last_updated_in_seconds) for m in matched)
        assert sorted((m.path, m.size_in_bytes, m.last_updated_in_seconds)
                      for m in filesystems.iter_match(pattern)) == expected, pattern


def test_list_files_streams_the_listing(tmp_path, monkeypatch):
    # A bucket of millions must not become one list in a worker's memory.
    root = tmp_path / "images"
    for i in range(100):
        (root / f"{i // 10}").mkdir(parents=True, exist_ok=True)
        (root / f"{i // 10}" / f"{i}.jpg").write_bytes(b"x")
    from apache_beam.io.localfilesystem import LocalFileSystem

    listed = []
    original = LocalFileSystem._list

    def counting(system, where):
        for meta in original(system, where):
            listed.append(meta.path)
            yield meta

    monkeypatch.setattr(LocalFileSystem, "_list", counting)
    files = filesystems.list_files(str(root))
    first = next(files)
    assert listed == [first.path]  # one file listed so far, not a hundred
    assert len(list(files)) == 99


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


def test_the_installed_beam_lets_listings_stream():
    # A Beam upgrade that changes how match lists must fail here, not quietly bring
    # back whole listings in a worker's memory.
    assert internals._streams_listings()


def test_a_beam_whose_match_lists_otherwise_is_not_streamed_from(monkeypatch):
    from apache_beam.io.filesystem import FileSystem, MatchResult

    def match_without_private_lister(self, patterns, limits=None):
        return [MatchResult(pattern, []) for pattern in patterns]

    monkeypatch.setattr(FileSystem, "match", match_without_private_lister)
    assert not internals._match_lists_privately()


def test_without_streamed_listings_iter_match_gives_what_match_gives(tmp_path, monkeypatch):
    root = tmp_path / "images"
    _tree(root)
    patterns = (f"{root}/*.jpg", f"{root}/sub/**", f"{root}/", f"{root}*/*.jpg",
                f"{root}/missing/*")
    expected = {pattern: sorted((m.path, m.size_in_bytes, m.last_updated_in_seconds)
                                for m in filesystems.iter_match(pattern))
                for pattern in patterns}
    monkeypatch.setattr(internals, "_streams_listings", lambda: False)
    asked = []
    match = filesystems.FileSystems.match

    def recording_match(patterns, limits=None):
        asked.extend(patterns)
        return match(patterns, limits)

    monkeypatch.setattr(filesystems.FileSystems, "match", recording_match)
    for pattern in patterns:
        assert sorted((m.path, m.size_in_bytes, m.last_updated_in_seconds)
                      for m in filesystems.iter_match(pattern)) == expected[pattern], pattern
    assert len(asked) == len(patterns)  # each pattern went through Beam's public match
    assert sum(len(found) for found in expected.values()) > 5


def test_list_files_below_streams_the_listing_and_skips_the_output_folder(tmp_path, monkeypatch):
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions
    from apache_beam.testing.util import assert_that, equal_to

    from recordbeam.runner import LocalRunner
    from recordbeam.sources.listing import ListFilesBelow, skipped_prefix

    root = tmp_path / "images"
    _tree(root)
    (root / "out").mkdir()
    (root / "out" / "shard.tfrecord").write_bytes(b"x")
    expected = sorted(str(root / name) for name in
                      ("a.jpg", ".hidden", "sub/b.png", "sub/deeper/c.jpg", "sub2/d"))
    asked = []
    match = filesystems.FileSystems.match

    def recording_match(patterns, limits=None):
        asked.extend(patterns)
        return match(patterns, limits)

    monkeypatch.setattr(filesystems.FileSystems, "match", recording_match)
    options = PipelineOptions(["--direct_running_mode=in_memory", "--direct_num_workers=1"])
    with beam.Pipeline(runner=LocalRunner(), options=options) as p:
        listed = p | ListFilesBelow(str(root), skipped_prefix(str(root), str(root / "out")))
        assert_that(listed | beam.Map(lambda meta: meta.path), equal_to(expected))
    # FileSystems.match returns the whole listing as one list in one worker's memory.
    assert filesystems.everything_below(str(root)) not in asked


def test_local_files_skip_the_filesystem_lookup_and_others_still_use_it(tmp_path, monkeypatch):
    # Beam's lookup walks every FileSystem subclass and builds a new filesystem per call;
    # the write stage reads one local file per image, so local paths use one instance.
    looked_up = []
    real_lookup = filesystems.FileSystems.get_filesystem

    def counting_lookup(path):
        looked_up.append(path)
        return real_lookup(path)

    monkeypatch.setattr(filesystems.FileSystems, "get_filesystem", counting_lookup)
    created = tmp_path / "new" / "a.bin"
    filesystems.write_bytes(str(created), b"\x00\x01gz-looking")
    assert filesystems.read_bytes(str(created)) == b"\x00\x01gz-looking"
    gz = tmp_path / "b.gz"
    gz.write_bytes(b"not gunzipped")
    assert filesystems.read_bytes(str(gz)) == b"not gunzipped"  # stored bytes, not gunzipped
    assert looked_up == []

    class Remote:
        def open(self, path, mime_type, compression_type):
            return __import__("io").BytesIO(f"from {path}".encode())

    monkeypatch.setattr(filesystems.FileSystems, "get_filesystem",
                        lambda path: looked_up.append(path) or Remote())
    assert filesystems.read_bytes("gs://bucket/x.jpg") == b"from gs://bucket/x.jpg"
    assert looked_up == ["gs://bucket/x.jpg"]
