"""`recordbeam convert kitti` end to end on a small hand-written KITTI folder with the messy
cases real exports have."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from lanes import exhaustive
from PIL import Image
from read_back import split_examples

from recordbeam.cli import main as cli

IN_MEMORY = ["--direct_running_mode=in_memory", "--direct_num_workers=1"]
KINDS = {"image/object/class/label": "int64", "image/object/class/text": "bytes",
         "image/object/bbox/xmin": "float", "image/object/bbox/xmax": "float",
         "image/object/bbox/ymin": "float", "image/object/bbox/ymax": "float",
         "image/object/truncated": "float", "image/object/occluded": "int64",
         "image/object/alpha": "float", "image/object/3d_bbox/z": "float",
         "image/object/3d_bbox/rot_y": "float"}


def _line(kind: str, box: tuple, z: float = 10.0) -> str:
    left, top, right, bottom = box
    return f"{kind} 0.25 2 -0.5 {left} {top} {right} {bottom} 1.5 1.6 3.9 1.0 1.7 {z} 0.75"


@pytest.fixture(scope="module")
def kitti_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("kitti")

    def image(split, name, size=(100, 50)):
        folder = root / split / "image_2"
        folder.mkdir(parents=True, exist_ok=True)
        Image.new("RGB", size, (40, 90, 160)).save(
            folder / name, format="PNG" if name.lower().endswith(".png") else "JPEG")

    def label(split, stem, data: bytes):
        folder = root / split / "label_2"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{stem}.txt").write_bytes(data)

    image("training", "000000.png")
    label("training", "000000", "\n".join([
        _line("Car", (10, 5, 60, 45)),
        _line("Person_sitting", (50, 10, 130, 30), z=4.5),  # clipped at the right edge
        "DontCare -1 -1 -10 70 1 90 9 -1 -1 -1 -1000 -1000 -1000 -10",
    ]).encode())
    image("training", "000001.JPG")  # upper-case extension; CRLF and a BOM in its labels
    label("training", "000001", b"\xef\xbb\xbf" + "\r\n".join([
        _line("Pedestrian", (0, 0, 20, 40)) + " 0.98",  # a score after rotation_y
        _line("Car", (30, 10, 30, 20)),  # degenerate
        "Car 0 0 0 1 2 3",  # too few fields
    ]).encode() + b"\r\n")
    image("training", "000002.png")  # no label file: written with no objects, warned
    label("training", "000003", _line("Car", (1, 1, 5, 5)).encode())  # no image
    image("training", "000004.png")
    label("training", "000004", b"")  # empty: no objects, counted
    image("testing", "000000.png")  # KITTI's testing/ has no label_2
    image("testing", "000001.png")
    return root


def _examples(output, split):
    return split_examples(output, split, kinds=KINDS)


def test_kitti_folder_converts_with_every_reject_named(kitti_root, tmp_path):
    out = tmp_path / "out"
    code = cli.main(["convert", "kitti", "--input", str(kitti_root), "--output", str(out),
                     "--max-reject-fraction", "1", "--max-annotation-reject-fraction", "1",
                     "--quiet", *IN_MEMORY])
    assert code == 0
    training, testing = _examples(out, "training"), _examples(out, "testing")
    assert set(training) == {"training/000000", "training/000001", "training/000002",
                             "training/000004"}
    assert set(testing) == {"testing/000000", "testing/000001"}
    first = training["training/000000"]
    assert first["image/object/class/text"].tolist() == [b"Car", b"Person_sitting"]
    assert first["image/object/class/label"].tolist() == [1, 3]
    assert first["image/object/bbox/xmin"].tolist() == pytest.approx([0.1, 0.5])
    assert first["image/object/bbox/xmax"].tolist() == pytest.approx([0.6, 1.0])  # clipped
    assert first["image/object/bbox/ymax"].tolist() == pytest.approx([0.9, 0.6])
    assert first["image/object/truncated"].tolist() == [0.25, 0.25]
    assert first["image/object/occluded"].tolist() == [2, 2]
    assert first["image/object/alpha"].tolist() == [-0.5, -0.5]
    assert first["image/object/3d_bbox/z"].tolist() == [10.0, 4.5]
    assert first["image/object/3d_bbox/rot_y"].tolist() == [0.75, 0.75]
    second = training["training/000001"]
    assert second["image/object/class/text"].tolist() == [b"Pedestrian"]
    assert second["image/object/3d_bbox/rot_y"].tolist() == [0.75]  # the score is not it
    for empty in ("training/000002", "training/000004"):
        assert training[empty]["image/object/class/label"].tolist() == []
    assert all(e["image/object/class/label"].tolist() == [] for e in testing.values())

    rejects = {(r["reason"], r["source"].replace(str(kitti_root) + "/", ""))
               for r in map(json.loads, (out / "rejects.jsonl").read_text().splitlines())}
    assert rejects == {
        ("degenerate_bbox", "training/label_2/000001.txt:2"),
        ("malformed_line", "training/label_2/000001.txt:3"),
        ("no_annotation_file", "training/image_2/000002.png"),
        ("missing", "training/label_2/000003.txt"),
    }
    manifest = json.loads((out / "manifest.json").read_text())
    # The types found, sorted; DontCare is no class.
    assert manifest["label_map"] == {"1": "Car", "2": "Pedestrian", "3": "Person_sitting"}
    counts = manifest["splits"]["training"]["counts"]
    assert counts["boxes_clipped"] == 1
    assert counts["images_without_objects"] == 2  # 000002 (no labels), 000004 (empty)
    assert manifest["splits"]["testing"]["counts"]["images_without_objects"] == 2


def test_source_counts_are_in_the_summary(kitti_root, tmp_path, capsys):
    code = cli.main(["convert", "kitti", "--input", str(kitti_root), "--output",
                     str(tmp_path / "out"), "--max-reject-fraction", "1",
                     "--max-annotation-reject-fraction", "1", *IN_MEMORY])
    assert code == 0
    summary = capsys.readouterr().out
    for said in ("dontcare skipped", "empty label files", "unlabeled images"):
        assert said in summary.replace("_", " "), summary


@exhaustive  # the same bytes on a rerun, for any format: test_cvat_pipeline.py
def test_reruns_write_the_same_bytes(kitti_root, tmp_path):
    shards = []
    for run in ("one", "two"):
        out = tmp_path / run
        assert cli.main(["convert", "kitti", "--input", str(kitti_root), "--output", str(out),
                         "--max-reject-fraction", "1", "--max-annotation-reject-fraction", "1",
                         "--quiet", *IN_MEMORY]) == 0
        shards.append({n: (out / n).read_bytes() for n in sorted(os.listdir(out))
                       if n.endswith(".tfrecord")})
    assert shards[0] == shards[1] and len(shards[0]) == 2


def test_split_option_beside_split_folders_is_refused(kitti_root, tmp_path, capsys):
    code = cli.main(["convert", "kitti", "--input", str(kitti_root), "--output",
                     str(tmp_path / "out"), "--split", "holdout", "--quiet", *IN_MEMORY])
    assert code == 2
    assert "--split holdout would be ignored" in capsys.readouterr().err


def test_folder_without_kitti_layout_is_a_usage_error(tmp_path, capsys):
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.png").write_bytes(b"x")
    code = cli.main(["convert", "kitti", "--input", str(tmp_path / "in"), "--output",
                     str(tmp_path / "out"), "--quiet", *IN_MEMORY])
    assert code == 2
    err = capsys.readouterr().err
    assert "no <split>/image_2/ or <split>/label_2/ folder" in err
    assert "Traceback" not in err


def test_flat_root_is_one_split_named_by_split_option(kitti_root, tmp_path):
    flat = tmp_path / "flat"
    for folder in ("image_2", "label_2"):
        (flat / folder).mkdir(parents=True)
    (flat / "image_2" / "000000.png").write_bytes(
        (kitti_root / "training/image_2/000000.png").read_bytes())
    (flat / "label_2" / "000000.txt").write_bytes(
        (kitti_root / "training/label_2/000000.txt").read_bytes())
    out = tmp_path / "out"
    assert cli.main(["convert", "kitti", "--input", str(flat), "--output", str(out),
                     "--split", "val", "--quiet", *IN_MEMORY]) == 0
    [example] = _examples(out, "val").values()
    assert example["image/object/class/text"].tolist() == [b"Car", b"Person_sitting"]


@exhaustive  # --if-changed over any format: test_voc_pipeline.py, test_incremental.py
def test_if_changed_skips_a_rerun_until_a_label_file_changes(kitti_root, tmp_path, capsys):
    (kitti_root / "notes.txt").write_text("not an input: never read, never fingerprinted")
    args = ["convert", "kitti", "--input", str(kitti_root), "--output", str(tmp_path / "out"),
            "--max-reject-fraction", "1", "--max-annotation-reject-fraction", "1",
            "--quiet", "--if-changed", *IN_MEMORY]
    assert cli.main(args) == 0
    capsys.readouterr()
    assert cli.main(args) == 0
    assert "is up to date" in capsys.readouterr().out
    label = kitti_root / "training/label_2/000004.txt"
    label.write_text("Tram 0 0 0 1 1 9 9 1 1 1 1 1 1 1")
    try:
        assert cli.main(args) == 0
        assert "is up to date" not in capsys.readouterr().out
    finally:
        label.write_bytes(b"")


def test_pipeline_script_runs_the_same_conversion(kitti_root, tmp_path):
    script = os.path.join(os.path.dirname(__file__), "..", "..", "pipelines",
                          "kitti_to_tfrecord.py")
    out = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, script, "--input", str(kitti_root), "--output", str(out),
         "--max-reject-fraction", "1", "--max-annotation-reject-fraction", "1", "--quiet",
         *IN_MEMORY], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert set(_examples(out, "training")) == {
        "training/000000", "training/000001", "training/000002", "training/000004"}


def test_images_without_any_label_folder_are_refused_not_written_bare(tmp_path, capsys):
    folder = tmp_path / "in" / "testing" / "image_2"
    folder.mkdir(parents=True)
    Image.new("RGB", (8, 8)).save(folder / "000000.png")
    code = cli.main(["convert", "kitti", "--input", str(tmp_path / "in"), "--output",
                     str(tmp_path / "out"), "--quiet", *IN_MEMORY])
    assert code == 2
    assert "no label_2/ folder" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
