"""Annotations are never lost without a word: a reject limit of their own, malformed or
foreign annotation files refused, ids that collide or disagree in type named as such, and
every annotation of a rejected image listed.

Each test builds a small COCO dataset here; what must happen follows from how it was built.
"""

from __future__ import annotations

import json
import os

import pytest
from reliability_data import convert_argv, jpeg, read_jsonl, write

from recordbeam.cli import main as cli
from recordbeam.sources.coco import input_tasks

CASE = pytest.mark.case


_ABSENT = object()


def _dataset(root, images: list[dict], annotations=_ABSENT, files: dict | None = None,
             images_dir: str = "images", **document) -> tuple[str, str]:
    """(images folder, annotation file). ``files``: name -> bytes; by default every
    image entry's file is a small JPEG."""
    folder = os.path.join(str(root), images_dir)
    os.makedirs(folder, exist_ok=True)
    if files is None:
        files = {image["file_name"]: jpeg() for image in images if "file_name" in image}
    for name, data in files.items():
        write(os.path.join(folder, name), data)
    body = {"images": images, "categories": [{"id": 1, "name": "thing"}], **document}
    if annotations is not _ABSENT:
        body["annotations"] = annotations
    return folder, write(os.path.join(str(root), "instances.json"), json.dumps(body).encode())


def _images(n: int) -> list[dict]:
    return [{"id": i, "file_name": f"{i}.jpg", "width": 32, "height": 24} for i in range(1, n + 1)]


def _box(ann_id, image_id, category_id=1, **extra) -> dict:
    return {"id": ann_id, "image_id": image_id, "category_id": category_id,
            "bbox": [2.0, 2.0, 8.0, 8.0], "area": 64.0, **extra}


def _run(capsys, images, annotations, output, *extra) -> tuple[int, str, str]:
    code = cli.main(convert_argv(images, annotations, str(output), *extra))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _rejects(output, name="rejects.jsonl") -> list[dict]:
    return read_jsonl(os.path.join(str(output), name))


# ----------------------------------------------------------------- the annotation limit


@CASE(
    "Rejected annotations above `--max-annotation-reject-fraction` (1 of 5 = 0.2 vs 0.19; "
    "0.2 passes)",
    "run fails (exit 1) with the summary; nothing committed",
)
def test_annotation_reject_fraction_boundary(tmp_path, capsys):
    anns = [_box(i, i) for i in range(1, 5)] + [_box(5, 5, category_id=9)]  # unknown category
    images, annotations = _dataset(tmp_path / "data", _images(5), anns)
    code, _, err = _run(capsys, images, annotations, tmp_path / "at-limit",
                        "--max-annotation-reject-fraction", "0.2")
    assert code == 0, err
    over = tmp_path / "over"
    code, _, err = _run(capsys, images, annotations, over,
                        "--max-annotation-reject-fraction", "0.19")
    assert code == 1
    assert "1 of 5 annotations were rejected (20.0%)" in err and "unknown_category: 1" in err
    assert "--max-annotation-reject-fraction 0.19" in err
    # The lock file records the rejects file as recordbeam's, for the next run to replace.
    assert sorted(os.listdir(over)) == [".recordbeam-lock.json", "failed-run-rejects.jsonl"]
    # Unset, the annotation limit is --max-reject-fraction's.
    code, _, err = _run(capsys, images, annotations, tmp_path / "default",
                        "--max-reject-fraction", "0.19")
    assert code == 1 and "above --max-annotation-reject-fraction 0.19" in err


@CASE(
    "`--include-masks` on a dataset without segmentations",
    "run fails (exit 1): every object rejected `invalid_mask`, the message says it has no "
    "segmentation",
)
def test_masks_requested_from_a_boxes_only_dataset_fail(tmp_path, capsys):
    images, annotations = _dataset(tmp_path / "data", _images(3), [_box(i, i) for i in (1, 2, 3)])
    code, _, err = _run(capsys, images, annotations, tmp_path / "out", "--include-masks")
    assert code == 1
    assert "3 of 3 annotations were rejected (100.0%)" in err and "invalid_mask: 3" in err
    assert "no segmentation" in err and "Traceback" not in err
    assert not (tmp_path / "out" / "manifest.json").exists()


@CASE(
    "`image_id` given as the string `\"1\"` where image ids are integers",
    "run fails (exit 1): annotations rejected `image_id_type_mismatch`, the message names the "
    "types",
)
def test_image_ids_of_another_type_are_named_as_such(tmp_path, capsys):
    anns = [_box(i, str(i)) for i in (1, 2, 3)]
    images, annotations = _dataset(tmp_path / "data", _images(3), anns)
    code, _, err = _run(capsys, images, annotations, tmp_path / "out")
    assert code == 1
    assert "image_id_type_mismatch: 3" in err
    assert "image_id '1' (text) but the image's id is 1 (a number)" in err
    rejects = _rejects(tmp_path / "out", "failed-run-rejects.jsonl")
    assert sorted(r["reason"] for r in rejects) == ["image_id_type_mismatch"] * 3


# ----------------------------------------------------------------- files that are not usable


@pytest.mark.parametrize(
    ("value", "said"),
    [
        pytest.param(None, "null", marks=CASE(
            "`\"annotations\": null`", "run fails (exit 1) naming the file: not a list")),
        pytest.param("oops", "a string", marks=CASE(
            "`\"annotations\": \"oops\"`", "run fails (exit 1) naming the file: not a list")),
        pytest.param({"a": 1}, "an object", marks=CASE(
            "`\"annotations\": {\"a\": 1}`", "run fails (exit 1) naming the file: not a list")),
    ],
)
def test_annotations_that_are_not_a_list_fail(tmp_path, capsys, value, said):
    images, annotations = _dataset(tmp_path / "data", _images(2), value)
    code, _, err = _run(capsys, images, annotations, tmp_path / "out")
    assert code == 1
    assert f"{annotations}: 'annotations' is {said}, not a list" in err
    assert not (tmp_path / "out" / "manifest.json").exists()


@CASE("No `annotations` key, or an empty list (image info files)",
      "images written without objects; run succeeds")
def test_missing_or_empty_annotations_are_fine(tmp_path, capsys):
    for name, value in (("missing", _ABSENT), ("empty", [])):
        images, annotations = _dataset(tmp_path / name, _images(2), value)
        code, _, err = _run(capsys, images, annotations, tmp_path / name / "out")
        assert code == 0, err
        manifest = json.loads((tmp_path / name / "out" / "manifest.json").read_text())
        assert manifest["splits"]["train"]["examples"] == 2


@CASE("COCO panoptic JSON (`segments_info`, no `bbox`)",
      "run fails (exit 1): the message says it is a panoptic file")
def test_panoptic_file_is_named(tmp_path, capsys):
    anns = [{"image_id": i, "file_name": f"{i}.png", "segments_info": [
        {"id": 5, "category_id": 1, "bbox": [1, 1, 4, 4], "area": 16, "iscrowd": 0}]}
        for i in (1, 2)]
    images, annotations = _dataset(tmp_path / "data", _images(2), anns)
    code, _, err = _run(capsys, images, annotations, tmp_path / "out")
    assert code == 1
    assert "panoptic" in err and f"{annotations}: annotations[0]" in err
    assert not (tmp_path / "out" / "manifest.json").exists()


# ----------------------------------------------------------------- ids


@CASE("Image ids `1` and `\"1\"` in one file (one `image/source_id`)",
      "both entries rejected `duplicate_image_id`, saying they are the same id as text")
def test_ids_equal_as_text_are_duplicates(tmp_path, capsys):
    entries = [{"id": 1, "file_name": "a.jpg"}, {"id": "1", "file_name": "b.jpg"},
               *[{"id": i, "file_name": f"{i}.jpg"} for i in range(2, 6)]]
    images, annotations = _dataset(tmp_path / "data", entries, [_box(1, 1), _box(2, "1")])
    code, _, err = _run(capsys, images, annotations, tmp_path / "out",
                        "--max-reject-fraction", "0.5")
    assert code == 0, err
    rejects = _rejects(tmp_path / "out")
    duplicates = [r for r in rejects if r["reason"] == "duplicate_image_id"]
    assert sorted(r["source"] for r in duplicates) == ["a.jpg", "b.jpg"]
    assert all("'1' and 1 are the same id as text" in r["detail"] for r in duplicates)
    lost = sorted((r["source"], r["reason"]) for r in rejects if r["kind"] == "annotation")
    assert lost == [("annotation 1", "image_rejected"), ("annotation 2", "image_rejected")]


@CASE("Two annotations with one id",
      "both rejected `duplicate_annotation_id`; their image is written without them")
@pytest.mark.parametrize("spilled", [False, True])
def test_duplicate_annotation_ids_reject_all_copies(tmp_path, capsys, monkeypatch, spilled):
    if spilled:  # ids dealt out to files, as in a file of millions of annotations
        monkeypatch.setattr(input_tasks, "ANNOTATION_BUFFER", 2)
        monkeypatch.setattr(input_tasks, "SPILL_IDS", 3)
    anns = [_box(7, 1), _box(7, 2), _box(8, 2), *[_box(i, 3) for i in range(10, 20)]]
    images, annotations = _dataset(tmp_path / "data", _images(3), anns)
    code, out, err = _run(capsys, images, annotations, tmp_path / "out",
                          "--max-annotation-reject-fraction", "0.2")
    assert code == 0, err
    rejects = [r for r in _rejects(tmp_path / "out") if r["kind"] == "annotation"]
    assert sorted((r["source"], r["reason"]) for r in rejects) == [
        ("annotation 7", "duplicate_annotation_id")] * 2
    assert {"image id 1", "image id 2"} == {
        r["detail"].split("(")[1].split(")")[0] for r in rejects}
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["splits"]["train"]["counts"]["boxes_written"] == 11  # 8 and 10..19


# ----------------------------------------------------------------- reject accounting


@CASE("Annotations of an image rejected while writing (truncated)",
      "each listed `image_rejected`, naming the image's reason")
def test_annotations_of_images_rejected_while_writing_are_listed(tmp_path, capsys):
    files = {f"{i}.jpg": jpeg() for i in range(1, 5)}
    files["2.jpg"] = jpeg()[:200]
    anns = [_box(1, 1), _box(2, 2), _box(3, 2)]
    images, annotations = _dataset(tmp_path / "data", _images(4), anns, files=files)
    code, _, err = _run(capsys, images, annotations, tmp_path / "out",
                        "--max-reject-fraction", "0.5")
    assert code == 0, err
    rejects = _rejects(tmp_path / "out")
    lost = [r for r in rejects if r["kind"] == "annotation"]
    assert sorted((r["source"], r["reason"]) for r in lost) == [
        ("annotation 2", "image_rejected"), ("annotation 3", "image_rejected")]
    assert all("(truncated;" in r["detail"] for r in lost)
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    summary = manifest["splits"]["train"]["rejects"]
    assert summary["by_reason"]["annotation:image_rejected"] == 2
    assert summary["annotation_fraction"] == 0.0  # lost with their image: the image limit's


@CASE("Annotations of an image entry without `file_name`",
      "listed `image_rejected` (not `unknown_image`)")
def test_annotations_of_entries_without_a_file_name_are_image_rejected(tmp_path, capsys):
    entries = [*_images(3), {"id": 9, "width": 32, "height": 24}]
    images, annotations = _dataset(tmp_path / "data", entries, [_box(1, 1), _box(2, 9)])
    code, _, err = _run(capsys, images, annotations, tmp_path / "out",
                        "--max-reject-fraction", "0.5")
    assert code == 0, err
    lost = [r for r in _rejects(tmp_path / "out") if r["kind"] == "annotation"]
    assert [(r["source"], r["reason"]) for r in lost] == [("annotation 2", "image_rejected")]
    assert "missing_field" in lost[0]["detail"]


# ----------------------------------------------------------------- the summary


@CASE("Most images missing, their `file_name`s starting with `--images`' own folder name",
      "the summary and the failure message say so and name the folder to pass")
def test_folder_prefix_of_missing_images_is_pointed_out(tmp_path, capsys):
    entries = [{"id": i, "file_name": f"train2017/{i}.jpg"} for i in range(1, 5)]
    files = {f"{i}.jpg": jpeg() for i in range(1, 5)}
    images, annotations = _dataset(tmp_path / "coco", entries, [], files=files,
                                   images_dir="train2017")
    code, _, err = _run(capsys, images, annotations, tmp_path / "failed")
    assert code == 1
    assert f"pass --images {tmp_path / 'coco'}" in err
    assert f"which is not in the images folder {images}" in err  # the folder looked in
    code, out, err = _run(capsys, images, annotations, tmp_path / "lenient",
                          "--max-reject-fraction", "1")
    assert code == 0, err
    assert "note: 4 of 4 images are missing, and 4 of them have file_names that start" in out
    # When the names are right, no note.
    code, out, err = _run(capsys, str(tmp_path / "coco"), annotations, tmp_path / "right")
    assert code == 0, err
    assert "note:" not in out


@CASE("A `file_name` that differs from the file on disk only in letter case or Unicode "
      "normalisation (NFC and NFD)", "reject `missing` naming the file on disk and how it differs")
def test_a_missing_image_names_the_file_that_differs_only_in_case_or_normalisation(
        tmp_path, capsys):
    nfc, nfd = "caf\u00e9.jpg", "cafe\u0301.jpg"
    names = ["dog.jpg", nfc, "bird.jpg", "Bird.jpg", "OWL.jpg", "owl.jpg"]
    entries = [{"id": i, "file_name": name, "width": 32, "height": 24}
               for i, name in enumerate(names, start=1)]
    files = {name: jpeg() for name in ["Dog.JPG", nfd, "bird.jpg", "Bird.jpg", "owl.jpg"]}
    images, annotations = _dataset(tmp_path / "coco", entries, [], files=files)
    code, _, err = _run(capsys, images, annotations, tmp_path / "out",
                        "--max-reject-fraction", "1")
    assert code == 0, err
    missing = {r["source"]: r["detail"] for r in _rejects(tmp_path / "out")}
    assert set(missing) == {"dog.jpg", nfc, "OWL.jpg"}  # each other entry has its file
    assert missing["dog.jpg"].endswith(
        "on disk: 'Dog.JPG' differs only in letter case; names match exactly: fix the "
        "file_name or rename the file")
    assert (f"on disk: {nfd!r} differs only in Unicode normalisation ('cafe\\u0301.jpg' on "
            "disk, 'caf\\xe9.jpg' in the file_name)") in missing[nfc]
    # owl.jpg is the file of its own entry, so no near match of OWL.jpg
    assert missing["OWL.jpg"].endswith(f"which is not in the images folder {images}")
