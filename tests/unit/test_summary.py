"""The end-of-run summary table's rows."""

from __future__ import annotations

from recordbeam.cli.summary import summary_table
from recordbeam.pipeline import RunResult


def _result(counts):
    split = {"examples": 3, "bytes": 10, "shards": [{"examples": 3}],
             "rejects": {"by_reason": {}}, "counts": counts}
    return RunResult(manifest={"splits": {"train": split}}, wall_seconds=1.0)


def test_exif_count_row_says_the_orientation_was_not_applied():
    table = summary_table(_result({"exif_rotated": 2, "boxes_clipped": 1}), ["train"])
    rows = dict(line.rsplit(None, 1) for line in table.splitlines() if line.strip())
    assert rows["exif orientation not applied"] == "2"
    assert rows["boxes clipped"] == "1"  # others keep the manifest's name, spaced
    assert "exif rotated" not in table


def _folder(**splits):
    """A manifest whose splits have shard files of the given suffix ('' for none)."""
    return {"splits": {
        split: {"examples": 3, "bytes": 10, "rejects": {"by_reason": {}}, "counts": {},
                "shards": [{"file": f"{split}-00000-of-00001.tfrecord{suffix}", "examples": 3}]}
        for split, suffix in splits.items()}}


def test_splits_written_with_different_compressions_are_a_warning(capsys):
    from recordbeam.cli.summary import print_summary

    for same in (_folder(train="", val=""), _folder(train=".gz", val=".gz")):
        print_summary(RunResult(manifest=same, wall_seconds=1.0), ["train"], "out")
        assert capsys.readouterr().err == ""
    mixed = _folder(train=".gz", val="", test=".zz")
    print_summary(RunResult(manifest=mixed, wall_seconds=1.0), ["train"], "out")
    assert capsys.readouterr().err == (
        "warning: the splits of this folder differ in compression (train: gzip; val: none; "
        "test: zlib): a reader given the folder needs one compression, and no TFDS files "
        "(dataset_info.json...) are written for it; write every split with the same "
        "--compression\n")


def test_an_image_in_two_splits_is_named_in_each_of_them(tmp_path):
    from recordbeam.cli.summary import duplicate_warnings
    from recordbeam.dataset.duplicate_groups import Member, group_of
    from recordbeam.write.duplicate_commit import stage_duplicates
    from recordbeam.write.duplicates import EarlierSplits
    from recordbeam.write.planning import ShardOptions

    copies = [Member("train", f"cats/{i}.jpg", "train-00000-of-00001.tfrecord", i)
              for i in range(5)] + [Member("val", "cats/leak.jpg", "val-00000-of-00001.tfrecord", 0)]
    part = tmp_path / "part-0.jsonl"
    part.write_text(group_of("ab" * 32, copies).to_line() + "\n", encoding="utf-8")
    (tmp_path / "temp").mkdir()
    staged = stage_duplicates(str(tmp_path / "out"), str(tmp_path / "temp"), ["train", "val"],
                              ShardOptions(), True, EarlierSplits(), [(0, str(part))], [], [])
    (warning, *_) = duplicate_warnings({"duplicates": staged.summary}, "out")
    assert ("1 image is in more than one split (train: cats/0.jpg, train: cats/1.jpg, "
            "train: cats/2.jpg, val: cats/leak.jpg):") in warning
