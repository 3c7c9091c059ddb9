"""The end-of-run summary table's rows."""

from __future__ import annotations

from types import SimpleNamespace

from recordbeam.cli.summary import summary_table


def _result(counts):
    split = {"examples": 3, "bytes": 10, "shards": [{"examples": 3}],
             "rejects": {"by_reason": {}}, "counts": counts}
    return SimpleNamespace(manifest={"splits": {"train": split}}, wall_seconds=1.0)


def test_exif_count_row_says_the_orientation_was_not_applied():
    table = summary_table(_result({"exif_rotated": 2, "boxes_clipped": 1}), ["train"])
    rows = dict(line.rsplit(None, 1) for line in table.splitlines() if line.strip())
    assert rows["exif orientation not applied"] == "2"
    assert rows["boxes clipped"] == "1"  # others keep the manifest's name, spaced
    assert "exif rotated" not in table
