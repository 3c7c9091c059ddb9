"""Small helpers over Beam's FileSystems."""

from __future__ import annotations

import os
import re
import warnings

import pytest
from apache_beam.io.filesystem import FileSystem
from apache_beam.io.localfilesystem import LocalFileSystem
from hypothesis import given
from hypothesis import strategies as st

from recordbeam import filesystems
from recordbeam.local import internals


def _counting_walk(monkeypatch) -> list[str]:
    """The paths the local walk yields from now on, as it yields them."""
    listed: list[str] = []
    walk = filesystems._local_files_below

    def counting(folder):
        for meta in walk(folder):
            listed.append(meta.path)
            yield meta

    monkeypatch.setattr(filesystems, "_local_files_below", counting)
    return listed


def test_has_files_looks_below_the_folder_and_stops_at_the_first(tmp_path, monkeypatch):
    assert not filesystems.has_files(str(tmp_path / "missing"))
    (tmp_path / "a" / "b").mkdir(parents=True)
    assert not filesystems.has_files(str(tmp_path))  # folders alone hold no files
    for i in range(50):
        (tmp_path / "a" / "b" / f"{i}.jpg").write_bytes(b"x")
    listed = _counting_walk(monkeypatch)
    assert filesystems.has_files(str(tmp_path))
    assert len(listed) == 1  # one file listed, not fifty


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
    listed = _counting_walk(monkeypatch)
    files = filesystems.list_files(str(root))
    first = next(files)
    assert listed == [first.path]  # one file listed so far, not a hundred
    assert len(list(files)) == 99


def test_a_local_folder_is_read_one_entry_at_a_time(tmp_path, monkeypatch):
    # One folder of a million images must not become a list of its entries (and the stat
    # each caches) in the lister's memory.
    root = tmp_path / "images"
    root.mkdir()
    for i in range(100):
        (root / f"{i}.jpg").write_bytes(b"x")
    pulled = []
    scandir = os.scandir

    class Counted:
        def __init__(self, path):
            self._inner = scandir(path)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self._inner.close()

        def __iter__(self):
            return self

        def __next__(self):
            entry = next(self._inner)
            pulled.append(entry.name)
            return entry

    monkeypatch.setattr(os, "scandir", Counted)
    files = filesystems.list_files(str(root))
    next(files)
    assert len(pulled) == 1  # not the hundred entries of the folder
    assert len(list(files)) == 99 and len(pulled) == 100


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
    assert filesystems.local_real_path("gs://bucket/a.jpg", folders) is None


def test_input_roots_name_what_links_lead_out_of_them(tmp_path):
    import pickle

    real = tmp_path / "real"
    (real / "sub").mkdir(parents=True)
    (real / "sub" / "a.jpg").write_bytes(b"x")
    (tmp_path / "secret.jpg").write_bytes(b"s")
    (tmp_path / "real-sibling").mkdir()  # shares the root's name as a prefix
    (tmp_path / "real-sibling" / "b.jpg").write_bytes(b"y")
    os.symlink(real, tmp_path / "linked_dir")
    os.symlink(tmp_path / "secret.jpg", real / "sub" / "out.jpg")
    os.symlink(tmp_path / "real-sibling" / "b.jpg", real / "sub" / "beside.jpg")
    os.symlink(real / "sub" / "a.jpg", real / "sub" / "in.jpg")
    roots = filesystems.InputRoots([str(tmp_path / "linked_dir")])  # a root may be a link
    for _ in range(2):  # the second time from the remembered folders
        sub = tmp_path / "linked_dir" / "sub"
        assert roots.outside(str(sub / "a.jpg")) is None
        assert roots.outside(str(sub / "in.jpg")) is None
        assert roots.outside(str(sub / "out.jpg")) == os.path.realpath(tmp_path / "secret.jpg")
        assert roots.outside(str(sub / "beside.jpg")) == str(tmp_path / "real-sibling" / "b.jpg")
        assert roots.outside(str(tmp_path / "linked_dir" / ".." / "secret.jpg")) is not None
        assert roots.outside("gs://bucket/a.jpg") is None  # object stores have no links
    copy = pickle.loads(pickle.dumps(roots))  # as a worker receives it
    assert copy.folders == roots.folders and copy.outside(str(sub / "a.jpg")) is None
    assert filesystems.input_roots([str(real), None], allow_outside_root=True) is None
    assert filesystems.input_roots([str(real), None], False).folders == (str(real),)


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
    system = LocalFileSystem(None)  # as an object store's listing is used
    for pattern in patterns:
        where = filesystems.pattern_parts(pattern)[0]
        assert sorted((m.path, m.size_in_bytes, m.last_updated_in_seconds)
                      for m in filesystems.match_listed(system, pattern, where)
                      ) == expected[pattern], pattern
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
    assert filesystems.read_bytes("hdfs://host/x.jpg") == b"from hdfs://host/x.jpg"
    assert looked_up == ["hdfs://host/x.jpg"]


def test_listed_through_the_filesystem_streams_from_where_the_literal_part_ends(tmp_path):
    # The lister starts below the escaped folder name, not at its first "[".
    root = tmp_path / "photos [1]"
    _tree(root)
    (tmp_path / "photos 1").mkdir()
    (tmp_path / "photos 1" / "a.jpg").write_bytes(b"sibling")
    pattern = filesystems.everything_below(str(root))
    listed = []
    system = LocalFileSystem(None)
    original = system._list
    system._list = lambda where: listed.append(where) or original(where)
    found = sorted(m.path for m in filesystems.match_listed(
        system, pattern, filesystems.pattern_parts(pattern)[0]))
    assert found == sorted(str(root / name) for name in
                           ("a.jpg", ".hidden", "sub/b.png", "sub/deeper/c.jpg", "sub2/d"))
    assert listed == [str(root)]


#: Folder names that are globs to Beam: each must list itself only.
GLOB_NAMES = ["photos [2019]", "imgs[1]", "a*b", "what?", "[!x]", "[", "]", "a\\b", "x[*]y"]


@pytest.mark.parametrize("name", GLOB_NAMES)
def test_folder_names_holding_glob_characters_list_only_themselves(tmp_path, name):
    siblings = ["photos 2019", "photos 1", "imgs1", "axxb", "whatx", "x", "a\\b2", "x*y", "xy"]
    for folder in {name, *siblings}:
        (tmp_path / folder).mkdir(exist_ok=True)
        (tmp_path / folder / "f.jpg").write_bytes(folder.encode())
    found = [m.path for m in filesystems.list_files(str(tmp_path / name))]
    assert found == [str(tmp_path / name / "f.jpg")]
    assert filesystems.has_files(str(tmp_path / name))
    literal_file = filesystems.literal(str(tmp_path / name / "f.jpg"))
    assert [m.path for m in filesystems.iter_match(literal_file)] == found
    assert filesystems.file_metadata(found[0]).size_in_bytes == len(name.encode())


@given(st.text(st.characters(codec="utf-8", exclude_characters="\x00"), max_size=12),
       st.text(st.characters(codec="utf-8", exclude_characters="\x00"), max_size=12))
def test_an_escaped_name_matches_itself_only_in_beams_patterns(name, other):
    # The translation Beam's match uses on every filesystem (GCS and S3 included).
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "possible nested set" from re
        regex = re.compile(FileSystem.translate_pattern(filesystems.literal(name)))
    assert regex.match(name)
    assert bool(regex.match(other)) == (other == name)
    assert filesystems.pattern_parts(filesystems.literal(name)) == (name, "")
    assert filesystems.pattern_parts(filesystems.literal(name) + "/**") == (name + "/", "**")


def test_links_to_folders_are_followed_and_loops_are_not(tmp_path):
    real = tmp_path / "elsewhere"
    (real / "deep").mkdir(parents=True)
    (real / "deep" / "c.jpg").write_bytes(b"c")
    root = tmp_path / "root"
    (root / "a").mkdir(parents=True)
    (root / "a" / "a.jpg").write_bytes(b"a")
    os.symlink(real, root / "linked")  # a folder elsewhere
    os.symlink(root / "a", root / "again")  # the same folder twice, under two names
    os.symlink(root, root / "a" / "loop")  # back to a folder the walk is in
    os.symlink(tmp_path / "nowhere", root / "dangling")
    found = sorted(m.path for m in filesystems.list_files(str(root)))
    assert found == [str(root / "a" / "a.jpg"), str(root / "again" / "a.jpg"),
                     str(root / "linked" / "deep" / "c.jpg")]


def test_links_that_fan_out_stop_the_listing_naming_the_folder(tmp_path):
    # Each level links twice to the next: the last would be listed 2^depth times.
    depth = 8
    for level in range(depth):
        (tmp_path / f"l{level}").mkdir()
        (tmp_path / f"l{level}" / "f.jpg").write_bytes(b"x")
    for level in range(depth - 1):
        for link in ("x", "y"):
            os.symlink(tmp_path / f"l{level + 1}", tmp_path / f"l{level}" / link)
    with pytest.raises(filesystems.LinkFanOut, match="symbolic links") as raised:
        list(filesystems.list_files(str(tmp_path / "l0")))
    assert str(tmp_path / "l0") in str(raised.value)


def test_delete_takes_names_literally(tmp_path):
    folder = tmp_path / "out [v2]"
    (folder / ".temp [1]").mkdir(parents=True)
    (folder / ".temp [1]" / "x").write_bytes(b"x")
    (folder / "manifest.json").write_bytes(b"{}")
    (tmp_path / "out v").mkdir()
    (tmp_path / "out v" / "manifest.json").write_bytes(b"keep")
    filesystems.delete([str(folder / "manifest.json"), str(folder / "gone")])
    filesystems.remove_tree(str(folder / ".temp [1]"))
    assert sorted(os.listdir(folder)) == []
    assert (tmp_path / "out v" / "manifest.json").read_bytes() == b"keep"
