"""Duplicates found while converting, end to end with real pipelines on small generated
class folders: the same picture under two names in one split, in two splits of one run,
in a split of an earlier run; the drop modes; near duplicates; the shards a run without
duplicates writes; and ``check`` and ``report`` on a folder already written."""

from __future__ import annotations

import io
import json
import os

import numpy as np
import pytest
from lanes import exhaustive
from photos import photo_like_jpeg, photo_like_pixels
from PIL import Image
from read_back import folder_files

from recordbeam.cli import main as cli
from recordbeam.dataset.image_hashes import decode_hash_file
from recordbeam.dataset.report import report_page
from recordbeam.tfrecord.example import decode_example
from recordbeam.tfrecord.framing import open_records
from recordbeam.write.planning import order_key

IN_MEMORY = ["--direct_running_mode=in_memory", "--direct_num_workers=1"]


def _photo(seed: int) -> bytes:
    return photo_like_jpeg(96, 72, seed=seed, quality=85)


def _tree(root, files: dict[str, bytes]) -> str:
    for relative, data in files.items():
        path = os.path.join(root, relative)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(data)
    return os.fspath(root)


def _convert(root: str, out, *options: str) -> int:
    return cli.main(["convert", "imagefolder", "--root", root, "--output", os.fspath(out),
                     "--quiet", *options, *IN_MEMORY])


def _manifest(out) -> dict:
    with open(os.path.join(out, "manifest.json"), encoding="utf-8") as f:
        return json.load(f)


def _lines(out, name: str = "duplicates.jsonl") -> list[dict]:
    """The groups listed; none when the file is not there (a list of no group)."""
    if not os.path.exists(os.path.join(out, name)):
        return []
    with open(os.path.join(out, name), encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def _examples(out, split: str) -> list[dict]:
    names = sorted(n for n in os.listdir(out) if n.startswith(f"{split}-") and
                   n.endswith(".tfrecord"))
    return [decode_example(r) for n in names for r in open_records(os.path.join(out, n))]


def _rejects(out) -> list[dict]:
    with open(os.path.join(out, "rejects.jsonl"), encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]




@pytest.fixture()
def one_split(tmp_path) -> str:
    """A flat layout: one picture under two names, three others."""
    cat = _photo(1)
    return _tree(tmp_path / "flat", {"cats/a.jpg": cat, "cats/a_copy.jpg": cat,
                                     "cats/b.jpg": _photo(2), "dogs/c.jpg": _photo(3),
                                     "dogs/d.jpg": _photo(4)})


def test_the_same_image_under_two_names_in_one_split_is_one_group(one_split, tmp_path, capsys):
    out = tmp_path / "out"
    assert _convert(one_split, out, "--shards", "2") == 0
    summary = capsys.readouterr().out
    (group,) = _lines(out)
    assert group["size"] == 2 and group["splits"] == ["train"]
    members = sorted(group["members"], key=lambda m: m["source"])
    assert [os.path.basename(m["source"]) for m in members] == ["a.jpg", "a_copy.jpg"]
    # Each member says where it was written; the record there holds the picture.
    cat = _photo(1)
    for member in members:
        records = list(open_records(os.path.join(out, member["shard"])))
        assert decode_example(records[member["record"]])["image/encoded"][0] == cat
    manifest = _manifest(out)
    assert manifest["duplicates"] == {"mode": "keep", "groups": 1, "images": 2,
                                      "extra_copies": 1, "across_splits": 0, "dropped": 0}
    assert "duplicate groups" in summary and "1 (2 images)" in summary
    # One hash file per shard, listed by the manifest, holding every written example.
    shards = [s["file"] for s in manifest["splits"]["train"]["shards"]]
    assert manifest["splits"]["train"]["image_hashes"] == {"near": False}
    entries = 0
    for shard in shards:
        path = os.path.join(out, "hashes", shard.removesuffix(".tfrecord") + ".hashes")
        with open(path, "rb") as f:
            hashes = decode_hash_file(f.read(), path)
        assert (hashes.split, hashes.shard) == ("train", shard)
        entries += len(hashes.entries)
    assert entries == manifest["splits"]["train"]["examples"] == 5


def test_without_duplicates_the_shards_are_those_of_a_run_that_does_not_look(tmp_path):
    root = _tree(tmp_path / "in", {f"c{i % 2}/{i}.jpg": _photo(10 + i) for i in range(6)})
    assert _convert(root, tmp_path / "off", "--duplicates", "off", "--shards", "2") == 0
    assert _convert(root, tmp_path / "keep", "--shards", "2") == 0
    off, keep = folder_files(tmp_path / "off"), folder_files(tmp_path / "keep")
    added = set(keep) - set(off)  # no group: no duplicates.jsonl
    assert added == {"hashes/train-00000-of-00002.hashes", "hashes/train-00001-of-00002.hashes"}
    for name in off:
        if name != "manifest.json":
            assert keep[name] == off[name], name
    manifest_off, manifest_keep = _manifest(tmp_path / "off"), _manifest(tmp_path / "keep")
    assert "duplicates" not in manifest_off and "image_hashes" not in manifest_off["splits"]["train"]
    assert manifest_off["options"]["duplicates"] == "off"
    assert "duplicates" not in manifest_keep["options"]  # the default is not recorded
    for manifest in (manifest_off, manifest_keep):
        manifest.pop("duplicates", None)
        manifest.pop("options")
        entry = manifest["splits"]["train"]
        for key in ("image_hashes", "settings", "inputs_fingerprint"):
            entry.pop(key, None)
    assert manifest_keep == manifest_off


def test_the_lists_are_the_same_bytes_however_many_buckets_they_are_found_in(
        tmp_path, monkeypatch):
    from recordbeam.write import duplicates

    files = {}
    for picture in range(6):  # six pictures, each under 1 to 3 names in two classes
        for copy in range(picture % 3 + 1):
            files[f"c{copy % 2}/p{picture}_{copy}.jpg"] = _photo(40 + picture)
    root = _tree(tmp_path / "in", files)
    bucket_count, counted = duplicates.bucket_count, []

    def recorded(*args):
        counted.append(bucket_count(*args))
        return counted[-1]

    monkeypatch.setattr(duplicates, "bucket_count", recorded)
    assert _convert(root, tmp_path / "one", "--shards", "2", "--near-duplicates") == 0
    assert set(counted) == {1}
    counted.clear()
    monkeypatch.setattr(duplicates, "BUCKET_IMAGES", 2)  # 12 images: 6 buckets
    assert _convert(root, tmp_path / "six", "--shards", "2", "--near-duplicates") == 0
    assert set(counted) == {6}
    one, six = folder_files(tmp_path / "one"), folder_files(tmp_path / "six")
    assert set(one) == set(six)
    assert len(_lines(tmp_path / "one")) == 4  # the pictures under 2 or 3 names
    for name in one:
        if name != "manifest.json":
            assert six[name] == one[name], name
    assert _manifest(tmp_path / "six")["duplicates"] == _manifest(tmp_path / "one")["duplicates"]


def test_a_copy_in_two_splits_of_one_run_is_a_warning(tmp_path, capsys):
    cat = _photo(1)
    root = _tree(tmp_path / "in", {"train/cats/a.jpg": cat, "train/dogs/b.jpg": _photo(2),
                                   "val/cats/leak.jpg": cat, "val/dogs/c.jpg": _photo(3)})
    assert _convert(root, tmp_path / "out") == 0
    captured = capsys.readouterr()
    (group,) = _lines(tmp_path / "out")
    assert group["splits"] == ["train", "val"]
    assert [m["split"] for m in group["members"]] == ["train", "val"]
    assert _manifest(tmp_path / "out")["duplicates"]["across_splits"] == 1
    assert "warning: 1 image is in more than one split" in captured.err
    assert "leak.jpg" in captured.err and "duplicates.jsonl" in captured.err


def test_a_later_run_finds_its_copies_of_an_earlier_split(tmp_path, capsys):
    cat = _photo(1)
    first = _tree(tmp_path / "a", {"cats/a.jpg": cat, "cats/b.jpg": _photo(2),
                                   "dogs/c.jpg": _photo(3)})
    later = _tree(tmp_path / "b", {"cats/x.jpg": cat, "dogs/y.jpg": _photo(4)})
    out = tmp_path / "out"
    assert _convert(first, out, "--split", "train") == 0
    train_files = {k: v for k, v in folder_files(out).items() if k.startswith(("train-", "hashes/"))}
    assert _convert(later, out, "--split", "val") == 0
    (group,) = _lines(out)
    assert group["splits"] == ["train", "val"]
    train_member, val_member = group["members"]
    assert train_member["source"].endswith("a/cats/a.jpg")
    assert train_member["shard"] == "train-00000-of-00001.tfrecord"
    assert val_member["source"].endswith("b/cats/x.jpg")
    assert "in more than one split" in capsys.readouterr().err

    # Again with drop-across-splits: the later split's copy goes, train is untouched.
    assert _convert(later, out, "--split", "val", "--duplicates", "drop-across-splits",
                    "--max-reject-fraction", "0.5") == 0
    assert [e["image/source_id"][0] for e in _examples(out, "val")] == [b"dogs/y.jpg"]
    (reject,) = [r for r in _rejects(out) if r["reason"] == "duplicate"]
    assert reject["split"] == "val" and reject["source"].endswith("b/cats/x.jpg")
    assert "split train" in reject["detail"] and "earlier run" in reject["detail"]
    assert {k: v for k, v in folder_files(out).items() if k.startswith(("train-", "hashes/train"))} \
        == train_files
    (group,) = _lines(out)
    assert group["members"][1] == {"split": "val", "source": val_member["source"],
                                   "dropped": True}
    manifest = _manifest(out)
    assert manifest["duplicates"]["dropped"] == 1
    assert manifest["splits"]["val"]["rejects"]["by_reason"] == {"image:duplicate": 1}


def test_drop_keeps_the_copy_of_smallest_identity_hash_and_counts_the_others(tmp_path):
    cat = _photo(1)
    names = ["cats/one.jpg", "cats/two.jpg", "dogs/three.jpg"]
    root = _tree(tmp_path / "in", {**dict.fromkeys(names, cat), "dogs/other.jpg": _photo(2),
                                   **{f"birds/{i}.jpg": _photo(20 + i) for i in range(4)}})
    # Two of eight images dropped: above the default 1% reject limit, so nothing is written.
    out = tmp_path / "out"
    assert _convert(root, out, "--duplicates", "drop") == 1
    assert not os.path.exists(os.path.join(out, "manifest.json"))
    with open(os.path.join(out, "failed-run-rejects.jsonl"), encoding="utf-8") as f:
        assert [json.loads(line)["reason"] for line in f] == ["duplicate", "duplicate"]

    assert _convert(root, out, "--duplicates", "drop", "--max-reject-fraction", "0.3") == 0
    written = [e["image/source_id"][0].decode() for e in _examples(out, "train")]
    keeper = min(names, key=order_key)
    assert [n for n in written if n in names] == [keeper]
    assert len(written) == 6
    dropped = sorted(os.path.relpath(r["source"], root) for r in _rejects(out))
    assert dropped == sorted(set(names) - {keeper})
    (group,) = _lines(out)
    assert group["size"] == 3 and sum(m.get("dropped", False) for m in group["members"]) == 2


def test_a_copy_linked_out_of_the_input_is_never_read_to_find_duplicates(tmp_path):
    # The link outside would be the copy kept (the smaller identity hash): were its bytes
    # read to find duplicates, the copy inside would be dropped and the link then refused.
    cat = _photo(1)
    secret = tmp_path / "elsewhere" / "secret.jpg"
    secret.parent.mkdir()
    secret.write_bytes(cat)
    link, inside = sorted(["cats/a.jpg", "cats/b.jpg"], key=order_key)
    root = _tree(tmp_path / "in", {inside: cat, "dogs/d.jpg": _photo(2),
                                   **{f"birds/{i}.jpg": _photo(20 + i) for i in range(3)}})
    os.symlink(secret, os.path.join(root, link))
    out = tmp_path / "out"
    assert _convert(root, out, "--duplicates", "drop", "--max-reject-fraction", "0.5") == 0
    written = sorted(e["image/source_id"][0].decode() for e in _examples(out, "train"))
    assert inside in written and link not in written and len(written) == 5
    assert [(os.path.relpath(r["source"], root), r["reason"]) for r in _rejects(out)] == [
        (link, "outside_root")]
    assert _lines(out) == []


def test_drop_across_splits_keeps_every_copy_of_the_first_split(tmp_path):
    cat = _photo(1)
    root = _tree(tmp_path / "in", {
        "train/cats/a.jpg": cat, "train/cats/b.jpg": cat, "train/dogs/t.jpg": _photo(2),
        "val/cats/c.jpg": cat, "val/dogs/v.jpg": _photo(3),
        "test/cats/d.jpg": cat, "test/dogs/w.jpg": _photo(4)})
    out = tmp_path / "out"
    assert _convert(root, out, "--duplicates", "drop-across-splits",
                    "--max-reject-fraction", "0.5") == 0
    written = {split: sorted(e["image/source_id"][0].decode() for e in _examples(out, split))
               for split in ("train", "val", "test")}
    assert written == {"train": ["train/cats/a.jpg", "train/cats/b.jpg", "train/dogs/t.jpg"],
                       "val": ["val/dogs/v.jpg"], "test": ["test/dogs/w.jpg"]}
    assert sorted((r["split"], r["reason"]) for r in _rejects(out)) == [
        ("test", "duplicate"), ("val", "duplicate")]


@exhaustive  # the same bytes on every runner: test_coco_pipeline.py
def test_drop_writes_the_same_bytes_on_every_runner(tmp_path):
    cat, dog = _photo(1), _photo(2)
    root = _tree(tmp_path / "in", {**{f"cats/{i}.jpg": cat for i in range(5)},
                                   **{f"dogs/{i}.jpg": dog for i in range(3)},
                                   **{f"owls/{i}.jpg": _photo(30 + i) for i in range(6)}})
    options = ("--duplicates", "drop", "--max-reject-fraction", "0.6", "--shards", "3")
    assert _convert(root, tmp_path / "a", *options) == 0
    assert cli.main(["convert", "imagefolder", "--root", root, "--output",
                     os.fspath(tmp_path / "b"), "--quiet", *options,
                     "--direct_running_mode=multi_processing", "--direct_num_workers=2"]) == 0
    a, b = folder_files(tmp_path / "a"), folder_files(tmp_path / "b")
    assert sorted(a) == sorted(b)
    for name in a:
        if name != "manifest.json":
            assert a[name] == b[name], name


def _jpeg(pixels: np.ndarray, quality: int) -> bytes:
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, "JPEG", quality=quality)
    return out.getvalue()


@pytest.fixture()
def near_copies(tmp_path) -> str:
    """A photo, a resized copy in the same split, a re-encoded copy in val, two others."""
    pixels = photo_like_pixels(320, 240, seed=5)
    small = np.asarray(Image.fromarray(pixels).resize((200, 150), Image.LANCZOS))
    return _tree(tmp_path / "near", {
        "train/cats/photo.jpg": _jpeg(pixels, 90),
        "train/cats/small.jpg": _jpeg(small, 75),
        "train/dogs/other.jpg": _jpeg(photo_like_pixels(320, 240, seed=6), 90),
        "val/cats/recoded.jpg": _jpeg(pixels, 60),
        "val/dogs/another.jpg": _jpeg(photo_like_pixels(320, 240, seed=7), 90)})


def test_near_duplicates_of_a_reencoded_and_a_resized_copy(near_copies, tmp_path, capsys):
    out = tmp_path / "out"
    assert _convert(near_copies, out, "--near-duplicates") == 0
    err = capsys.readouterr().err
    assert _lines(out) == []
    (group,) = _lines(out, "near-duplicates.jsonl")
    assert group["size"] == 3 and group["splits"] == ["train", "val"]
    assert sorted(os.path.basename(m["source"]) for m in group["members"]) == [
        "photo.jpg", "recoded.jpg", "small.jpg"]
    assert all(len(m["sha256"]) == 64 for m in group["members"])
    near = _manifest(out)["duplicates"]["near"]
    assert near["groups"] == 1 and near["images"] == 3 and near["across_splits"] == 1
    assert _manifest(out)["splits"]["train"]["image_hashes"] == {"near": True}
    assert "1 near-duplicate group spans more than one split" in err


def test_check_finds_them_in_a_folder_converted_without_looking(tmp_path, capsys):
    cat = _photo(1)
    root = _tree(tmp_path / "in", {"train/cats/a.jpg": cat, "train/cats/b.jpg": cat,
                                   "train/dogs/t.jpg": _photo(2), "val/cats/c.jpg": cat,
                                   "val/dogs/v.jpg": _photo(3)})
    out = os.fspath(tmp_path / "out")
    assert _convert(root, out, "--duplicates", "off") == 0
    capsys.readouterr()
    assert cli.main(["check", out, "--duplicates"]) == 1
    printed = capsys.readouterr()
    assert "duplicates: FAILED, 1 violation" in printed.out
    assert "split-overlap: FAILED, 1 violation" in printed.out
    assert "train: 2 copies of one image" in printed.out
    assert "train-00000-of-00001.tfrecord record" in printed.out
    assert "does not fit" not in printed.err and "2 rules failed" in printed.err

    assert cli.main(["check", out, "--for", "torch", "--duplicates"]) == 1
    assert "kinds: ok" in capsys.readouterr().out

    assert cli.main(["check", out]) == 2
    assert "--for" in capsys.readouterr().err


def test_check_finds_near_duplicates(near_copies, tmp_path, capsys):
    out = os.fspath(tmp_path / "out")
    assert _convert(near_copies, out, "--duplicates", "off") == 0
    capsys.readouterr()
    assert cli.main(["check", out, "--duplicates"]) == 0
    assert cli.main(["check", out, "--duplicates", "--near-duplicates"]) == 1
    printed = capsys.readouterr().out
    assert "near-duplicates: FAILED, 1 violation" in printed
    assert cli.main(["check", out, "--for", "torch", "--near-duplicates"]) == 2
    assert "--near-duplicates goes with --duplicates" in capsys.readouterr().err


def test_the_report_shows_a_row_per_group(tmp_path, near_copies):
    cat = _photo(1)
    root = _tree(tmp_path / "in", {"train/cats/a.jpg": cat, "train/dogs/t.jpg": _photo(2),
                                   "val/cats/c.jpg": cat, "val/dogs/v.jpg": _photo(3)})
    out = os.fspath(tmp_path / "out")
    assert _convert(root, out) == 0
    page, _charts = report_page(out, charts=False)
    section = page[page.index("<h2>Duplicates</h2>"):]
    assert "1 image is written more than once" in section
    assert section.count("<figure>") == 2
    assert "train/cats/a.jpg" in section and "val/cats/c.jpg" in section
    assert "in train and val" in section

    near_out = os.fspath(tmp_path / "near-out")
    assert _convert(near_copies, near_out) == 0
    page, _charts = report_page(near_out, charts=False, near_duplicates=True)
    section = page[page.index("<h2>Near duplicates</h2>"):]
    assert section.count("<figure>") == 3
    page, _charts = report_page(near_out, charts=False)
    assert "<h2>Near duplicates</h2>" not in page


def test_a_rerun_that_does_not_look_leaves_no_lists_behind(one_split, tmp_path):
    out = tmp_path / "out"
    assert _convert(one_split, out) == 0
    assert os.path.isdir(out / "hashes") and _lines(out)
    assert _convert(one_split, out, "--duplicates", "off") == 0
    assert not (out / "hashes").exists()
    assert not (out / "duplicates.jsonl").exists()
    assert _manifest(out)["duplicates"]["groups"] == 0


def test_a_kept_split_without_hashes_is_named_not_compared(tmp_path, capsys):
    cat = _photo(1)
    first = _tree(tmp_path / "a", {"cats/a.jpg": cat, "dogs/c.jpg": _photo(3)})
    later = _tree(tmp_path / "b", {"cats/x.jpg": cat, "dogs/y.jpg": _photo(4)})
    out = tmp_path / "out"
    assert _convert(first, out, "--split", "train", "--duplicates", "off") == 0
    capsys.readouterr()
    assert _convert(later, out, "--split", "val") == 0
    err = capsys.readouterr().err
    assert "the split(s) train" in err and "not compared" in err
    assert _manifest(out)["duplicates"]["not_compared"] == ["train"]
    assert _lines(out) == []  # train's copy could not be seen
