"""Inputs at fault end with the exit code of their fault (1 data, 2 usage) and a message
naming what to fix, never exit 3 with a Python message: names longer than a file system
allows, CSV fields past the csv module's limit, a manifest.json edited by hand, labels
beyond 64 bits, one odd byte in a compressed RLE."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from labelled_datasets import (
    LENIENT,
    class_folders,
    coco,
    edit_json,
    kitti,
    labelme,
    labelstudio,
    openimages,
    run,
)
from lanes import exhaustive, one_in_make_test

import recordbeam
from recordbeam.cli import main as cli
from recordbeam.dataset.manifest import DamagedManifest

CASE = pytest.mark.case
LONG = "x" * 300


@CASE("`--output` whose folder name is 300 characters long, or whose path is 4,300 bytes "
      "long (convert, reshard)",
      "usage error (exit 2) naming the length and the file system's limit; nothing created")
@CASE("`--split` of 300 characters (convert, reshard)",
      "usage error (exit 2): a split name is at most 128 characters")
@pytest.mark.parametrize("command", one_in_make_test(["convert", "reshard"]))
@pytest.mark.parametrize("long", ["output", "path", "split"])
def test_names_longer_than_a_file_system_allows_are_usage_errors(tmp_path, capsys, command,
                                                                  long):
    argv = coco(tmp_path / "in", ["dog"])
    if command == "reshard":
        assert run(capsys, argv, tmp_path / "first").code == 0
        argv = None
    output = {"output": tmp_path / LONG / "out",
              "path": tmp_path.joinpath(*["x" * 250] * 17)}.get(long, tmp_path / "out")
    split = ["--split", LONG] if long == "split" else []
    if argv is None:
        code = cli.main(["reshard", str(tmp_path / "first"), str(output), "--quiet", *split,
                         "--direct_running_mode=in_memory", "--direct_num_workers=1"])
        err = capsys.readouterr().err
    else:
        outcome = run(capsys, argv, output, *split)
        code, err = outcome.code, outcome.err
    assert code == 2, err
    said = {"output": "300 bytes long, more than the 255",
            "path": "paths would pass the 4096 bytes"}.get(long, "at most 128")
    assert said in err and "Errno" not in err
    assert sorted(os.listdir(tmp_path)) == (["first", "in"] if command == "reshard" else ["in"])


@CASE("Open Images class descriptions with a display name over 128 KiB (the csv module's "
      "field limit)",
      "run fails (exit 1) naming the file and line")
def test_a_class_description_past_the_csv_field_limit_is_named(tmp_path, capsys):
    argv = openimages(tmp_path / "in", ["dog", "y" * (200 << 10)])
    outcome = run(capsys, argv, tmp_path / "out")
    assert outcome.code == 1, outcome.err
    assert "class-descriptions-boxable.csv:2: not a CSV row" in outcome.err
    assert "field larger than field limit" in outcome.err


def _finished(tmp_path, capsys):
    folder = tmp_path / "done"
    assert run(capsys, coco(tmp_path / "in", ["dog"]), folder).code == 0
    return folder


_EDITS = {
    "splits-a-list": (lambda m: m.update(splits=[]), "'splits' is a JSON list"),
    "shard-without-file": (lambda m: m["splits"]["train"]["shards"][0].pop("file"),
                           "splits['train']['shards'][0] has no 'file'"),
    "shards-null": (lambda m: m["splits"]["train"].update(shards=None),
                    "splits['train']['shards'] is null"),
    "file-out-of-folder": (
        lambda m: m["splits"]["train"]["shards"][0].update(file="../../../etc/hostname"),
        "splits['train']['shards'][0] has no 'file' naming a shard of the folder (got "
        "'../../../etc/hostname')"),
    "label-map-a-list": (lambda m: m.update(label_map=["dog"]), "'label_map' is a JSON list"),
}
_COMMANDS = {
    "inspect": ["inspect", "{out}"],
    "verify": ["verify", "{out}"],
    "schema": ["schema", "{out}"],
    "report": ["report", "{out}", "--html", "{tmp}/report.html"],
    "check": ["check", "{out}", "--for", "tfds"],
    "reshard": ["reshard", "{out}", "{tmp}/again", "--quiet", "--direct_running_mode=in_memory",
                "--direct_num_workers=1"],
}


@CASE("manifest.json edited by hand (`splits` a list, a shard without `file` or with "
      "`../` in it, `shards: null`, `label_map` a list), read by inspect, verify, schema, "
      "report, check, reshard and `recordbeam.read`",
      "exit 1 (`DamagedManifest` from `read`) naming manifest.json and the key; no file "
      "outside the folder is opened")
@pytest.mark.parametrize("edit", sorted(_EDITS))
def test_a_manifest_edited_by_hand_is_named_not_crashed_on(tmp_path, capsys, edit):
    done = _finished(tmp_path, capsys)
    change, said = _EDITS[edit]
    manifest = json.loads((done / "manifest.json").read_text())
    change(manifest)
    (done / "manifest.json").write_text(json.dumps(manifest))
    for name, template in _COMMANDS.items():
        code = cli.main([a.format(out=done, tmp=tmp_path) for a in template])
        err = capsys.readouterr().err
        assert code == 1, (name, err)
        assert f"{done / 'manifest.json'} cannot be read: {said}" in err, (name, err)
    with pytest.raises(DamagedManifest, match="edited by hand"):
        list(recordbeam.read(str(done), "train"))


@CASE("`--label-offset 9223372036854775808` (2^63), or 2^63-1 with two classes",
      "usage error (exit 2) before any image is read; the run fails (exit 1) saying the "
      "labels would pass 64 bits, instead of every image rejected `encode_error`")
def test_a_label_offset_beyond_64_bits_is_refused(tmp_path, capsys):
    argv = class_folders(tmp_path / "in", ["cat", "dog"])
    with pytest.raises(SystemExit) as usage:  # argparse's own exit
        run(capsys, argv, tmp_path / "out", "--label-offset", str(2**63))
    assert usage.value.code == 2
    err = capsys.readouterr().err
    assert "--label-offset: must be at most 9223372036854775807, got 9223372036854775808" in err
    outcome = run(capsys, argv, tmp_path / "out", "--label-offset", str(2**63 - 1))
    assert outcome.code == 1, outcome.err
    assert "labels above 9223372036854775807" in outcome.err
    assert outcome.manifest() is None
    shutil.rmtree(tmp_path / "out", ignore_errors=True)


@CASE("Compressed COCO RLE holding a non-ASCII character (`--include-masks`)",
      "that annotation rejected `invalid_mask` naming the character; the image is written "
      "with its other objects")
def test_a_compressed_rle_with_a_foreign_character_rejects_one_annotation(tmp_path, capsys):
    argv = coco(tmp_path / "in", ["dog", "cat"])
    path = tmp_path / "in" / "instances.json"
    document = json.loads(path.read_text())
    document["annotations"][0]["segmentation"] = {"size": [24, 32], "counts": "0\u00e9"}
    document["annotations"][1]["segmentation"] = [[2, 2, 9, 2, 9, 9, 2, 9]]
    path.write_text(json.dumps(document))
    outcome = run(capsys, argv, tmp_path / "out", "--include-masks", *LENIENT)
    assert outcome.code == 0, outcome.err
    [reject] = outcome.rejects()
    assert reject["reason"] == "invalid_mask" and "'é'" in reject["detail"]
    counts = outcome.manifest()["splits"]["train"]["counts"]
    assert counts["masks_written"] == 1 and os.path.exists(tmp_path / "out" / "labels.txt")


def _numbers_dataset(root, kind: str) -> list[str]:
    """Two objects on one image; the first holds a number past 64 bits (or any float)."""
    if kind == "kitti":
        argv = kitti(root, ["Car"])
        (root / "training" / "label_2" / "000000.txt").write_text(
            "Car 0 99999999999999999999 0 2 2 9 9 1.5 1.6 3.9 1 1.7 10 0.5\n"
            "Car 0 0 0 2 2 9 9 1.5 1.6 3.9 1 1.7 10 0.5\n")
        return argv
    if kind == "labelme":
        argv = labelme(root, ["dog"])
        document = json.loads((root / "a0.json").read_text())
        good = dict(document["shapes"][0])
        document["shapes"][0]["points"] = [[2, 2], ["BIG", 9]]
        document["shapes"].append(good)
        (root / "a0.json").write_text(json.dumps(document).replace('"BIG"', "1" + "0" * 400))
        return argv
    if kind == "labelstudio":
        argv = labelstudio(root, ["dog"])
        export = Path(argv[argv.index("--input") + 1])
        tasks = json.loads(export.read_text())
        [good] = tasks[0]["annotations"][0]["result"]
        big = {**good, "id": "big", "value": {**good["value"], "x": "BIG"}}
        tasks[0]["annotations"][0]["result"] = [big, good]
        export.write_text(json.dumps(tasks).replace('"BIG"', "1" + "0" * 400))
        return argv
    argv = coco(root, ["dog", "cat"])
    path = root / "instances.json"
    document = json.loads(path.read_text())
    for category in document["categories"]:
        category.update(keypoints=["nose"], skeleton=[])
    for annotation, num in zip(document["annotations"], (2**70, 1), strict=True):
        annotation.update(keypoints=[3, 3, 2], num_keypoints=num)
    path.write_text(json.dumps(document))
    return [*argv, "--include-keypoints"]


@CASE("A number past 64 bits in one object: KITTI `occluded` 10^20, a labelme point 10^400, "
      "COCO `num_keypoints` 2^70, a Label Studio rectangle's `x` 10^400",
      "that object is an annotation reject naming the value; the image is written with its "
      "other object (not the whole image lost `encode_error`, nor the run failed)")
@pytest.mark.parametrize("kind, reason", [
    ("kitti", "malformed_line"), ("labelme", "invalid_shape"), ("coco", "invalid_keypoints"),
    ("labelstudio", "invalid_bbox")])
def test_a_number_past_64_bits_rejects_its_object_only(tmp_path, capsys, kind, reason):
    argv = _numbers_dataset(tmp_path / "in", kind)
    outcome = run(capsys, argv, tmp_path / "out", *LENIENT)
    assert outcome.code == 0, outcome.err
    assert [r["reason"] for r in outcome.rejects()] == [reason]
    entry = outcome.manifest()["splits"]
    [split] = entry.values()
    assert split["examples"] == 1 and split["counts"]["boxes_written"] == 1


def _first_task(tasks: list, change: str) -> None:
    task = tasks[0]
    if change == "no-url":
        task["data"]["image"] = "http://[::1/data/upload/1/a0.jpg"
    elif change == "surrogate":
        task["data"]["image"] = "/data/upload/1/3f2a9c00-a\udcff.jpg"
    else:  # result ids that are no text: a region's results cannot be paired by them
        result = task["annotations"][0]["result"][0]
        task["annotations"][0]["result"] = [{**result, "id": [1]}, {**result, "id": {"a": 1}}]


@CASE("Label Studio task at fault: its image reference no URL (`http://[`), or holding a "
      "JSON `\\udcff` escape (a name UTF-8 cannot write); result ids that are lists or "
      "objects",
      "an image reject naming the task (`unsupported_url`, `invalid_file_name`), or the "
      "results read as regions of their own; the other task is written; exit 0, never 3")
@pytest.mark.parametrize("change, reason", [
    pytest.param("no-url", "unsupported_url", marks=exhaustive),
    pytest.param("surrogate", "invalid_file_name", marks=exhaustive),
    pytest.param("ids", None, marks=exhaustive),
])
def test_a_labelstudio_task_at_fault_is_a_reject_not_a_crash(tmp_path, capsys, change, reason):
    argv = labelstudio(tmp_path / "in", ["dog", "cat"])
    export = Path(argv[argv.index("--input") + 1])
    edit_json(export, lambda tasks: _first_task(tasks, change))
    outcome = run(capsys, argv, tmp_path / "out", *LENIENT)
    assert outcome.code == 0, outcome.err
    split = outcome.manifest()["splits"]["train"]
    if reason is None:
        assert not outcome.rejects() and split["counts"]["boxes_written"] == 3
        return
    assert [(r["reason"], r["source"]) for r in outcome.rejects()] == [
        (reason, f"{export}: task 1")]
    assert split["examples"] == 1  # the other task's image
    assert split["counts"]["labelstudio_files_named_by_no_task"] == 1  # the first's image
