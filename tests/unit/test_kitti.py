"""KITTI label files, split folders and the encoder's features, without a pipeline."""

from __future__ import annotations

import io

import pytest
from apache_beam.pvalue import TaggedOutput
from PIL import Image

from recordbeam.images.checks import inspect_image
from recordbeam.records import ImageRecord
from recordbeam.sources.annotated_files import (
    AnnotationFile,
    AnnotationFileError,
    ImageFile,
    _JoinAndParse,
)
from recordbeam.sources.detection import DetectionObject
from recordbeam.sources.kitti.reader import (
    KittiEncoder,
    KittiError,
    KittiFormat,
    KittiOptions,
    KittiSplit,
    find_splits,
    parse_kitti_labels,
)

CAR = "Car 0.50 1 -1.57 10.25 20.00 110.75 80.00 1.50 1.60 3.70 -2.10 1.80 13.40 -1.60"


def test_a_line_gives_its_box_and_the_od_api_values():
    parsed = parse_kitti_labels(CAR.encode(), "training/label_2/000001.txt")
    [car] = parsed.objects
    assert car.source == "training/label_2/000001.txt:1"
    assert car.name == "Car"
    assert car.bbox == (10.25, 20.0, 100.5, 60.0)  # pixel corners -> x, y, width, height
    assert car.extra == (0.5, 1, -1.57, 1.5, 1.6, 3.7, -2.1, 1.8, 13.4, -1.6)
    assert (parsed.rejects, parsed.counts) == ((), ())


def test_crlf_bom_score_and_kitti_type_names():
    text = ("\ufeff" + CAR + "\r\n"
            "Person_sitting 0.00 0 0.30 5 6 25 46 1.2 0.6 0.8 1 1.5 9 0.2 0.93\r\n"
            "Misc 0 0 0 1 1 9 9 -1 -1 -1 -1000 -1000 -1000 -10\r\n\r\n")
    parsed = parse_kitti_labels(text.encode(), "l.txt")
    assert [(o.name, o.source) for o in parsed.objects] == [
        ("Car", "l.txt:1"), ("Person_sitting", "l.txt:2"), ("Misc", "l.txt:3")]
    assert parsed.objects[1].extra[-1] == 0.2  # rotation_y, not the score after it
    assert parsed.rejects == ()


def test_type_names_with_spaces_are_the_tokens_before_the_numbers():
    line = "traffic light 0 0 -1 1 2 11 22 -1 -1 -1 -1 -1 -1 -1 1.0"  # as Datumaro writes it
    [obj] = parse_kitti_labels(line.encode(), "l.txt").objects
    assert (obj.name, obj.bbox) == ("traffic light", (1.0, 2.0, 10.0, 20.0))


def test_dontcare_is_skipped_and_counted_in_any_case():
    text = CAR + "\nDontCare -1 -1 -10 500 170 590 190 -1 -1 -1 -1000 -1000 -1000 -10\n" \
        "dontcare -1 -1 -10 1 1 2 2 -1 -1 -1 -1000 -1000 -1000 -10\n"
    parsed = parse_kitti_labels(text.encode(), "l.txt")
    assert [o.name for o in parsed.objects] == ["Car"]
    assert parsed.counts == (("kitti_dontcare_skipped", 2),)


@pytest.mark.parametrize("data", [b"", b"\r\n  \r\n", b"\xef\xbb\xbf"])
def test_empty_label_file_has_no_objects_and_is_counted(data):
    parsed = parse_kitti_labels(data, "l.txt")
    assert (parsed.objects, parsed.rejects, parsed.counts) == (
        (), (), (("kitti_empty_label_files", 1),))


@pytest.mark.parametrize("line, reason, said", [
    ("Car 0 0 0 1 2 3", "malformed_line", "found 7 fields"),
    (CAR + " 0.9 7", "malformed_line", "found 17 fields"),
    ("Car 0 0 0 1 2 x 4 1 1 1 1 1 1 1", "malformed_line", "'x' is not a finite number"),
    ("Car 0 0 0 1 2 nan 4 1 1 1 1 1 1 1", "malformed_line", "'nan' is not a finite number"),
    ("Car 0 0.5 0 1 2 3 4 1 1 1 1 1 1 1", "malformed_line", "occluded is '0.5', not a whole number"),
    ("Car 0 0 0 10 2 10 4 1 1 1 1 1 1 1", "degenerate_bbox", "left=10 top=2 right=10"),
    ("Car 0 0 0 1 9 5 4 1 1 1 1 1 1 1", "degenerate_bbox", "bottom above top"),
])
def test_unusable_lines_are_rejected_with_file_and_line(line, reason, said):
    parsed = parse_kitti_labels(f"{CAR}\n{line}\n".encode(), "training/label_2/7.txt")
    assert [o.source for o in parsed.objects] == ["training/label_2/7.txt:1"]
    [reject] = parsed.rejects
    assert (reject.kind, reject.source, reject.reason) == (
        "annotation", "training/label_2/7.txt:2", reason)
    assert said in reject.detail
    assert "Traceback" not in reject.detail and "Error" not in reject.detail


def test_label_file_that_is_not_text_names_the_file():
    with pytest.raises(AnnotationFileError) as raised:
        parse_kitti_labels(CAR.encode() + b"\xff\xfe", "l.txt")
    assert raised.value.reason == "malformed_label_file"
    assert raised.value.detail.startswith("l.txt: not UTF-8 text")


def _touch(path, data=b"x"):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def test_split_folders_are_the_splits_named_as_they_are(tmp_path):
    _touch(tmp_path / "training/image_2/000000.png")
    _touch(tmp_path / "training/label_2/000000.txt")
    _touch(tmp_path / "testing/image_2/000000.png")  # KITTI ships testing/ without labels
    _touch(tmp_path / "notes/readme.txt")
    splits = find_splits(KittiOptions(str(tmp_path)))
    assert [(s.name, s.labels is not None, s.shown) for s in splits] == [
        ("testing", False, "testing/"), ("training", True, "training/")]
    assert splits[1].images == str(tmp_path / "training/image_2")


def test_images_elsewhere_and_a_flat_root(tmp_path):
    _touch(tmp_path / "labels/training/label_2/000000.txt")
    _touch(tmp_path / "data_object_image_2/training/image_2/000000.png")
    [split] = find_splits(KittiOptions(str(tmp_path / "labels"),
                                       str(tmp_path / "data_object_image_2")))
    assert split.images == str(tmp_path / "data_object_image_2/training/image_2")
    _touch(tmp_path / "flat/image_2/a.png")
    _touch(tmp_path / "flat/label_2/a.txt")
    assert find_splits(KittiOptions(str(tmp_path / "flat"), split="val")) == [KittiSplit(
        "val", str(tmp_path / "flat/image_2"), str(tmp_path / "flat/label_2"), "")]


def test_a_split_folder_name_that_cannot_be_a_split_name_says_rename(tmp_path):
    _touch(tmp_path / "my-split/image_2/a.png")
    with pytest.raises(KittiError, match="'my-split' becomes the split's name"):
        find_splits(KittiOptions(str(tmp_path)))


def _join(tmp_path, split: KittiSplit, image_id, tagged):
    fmt = KittiFormat(KittiOptions(str(tmp_path)), [split])
    out = list(_JoinAndParse(fmt, False).process((image_id, tagged)))
    parsed = [o for o in out if not isinstance(o, TaggedOutput)]
    rejects = [o.value for o in out if isinstance(o, TaggedOutput) and o.tag == "rejects"]
    counts = [o.value for o in out if isinstance(o, TaggedOutput) and o.tag == "counts"]
    return parsed, rejects, counts


def test_image_of_an_unlabeled_split_is_counted_not_warned(tmp_path):
    testing = KittiSplit("testing", str(tmp_path / "testing/image_2"), None, "testing/")
    image = str(tmp_path / "testing/image_2/000001.PNG")
    parsed, rejects, counts = _join(tmp_path, testing, "testing/000001",
                                    [ImageFile(image, 10, "testing")])
    assert [(p.split, p.path, p.objects) for p in parsed] == [("testing", image, ())]
    assert (rejects, counts) == ([], [("kitti_unlabeled_images", 1)])


def test_image_without_label_file_is_warned_naming_the_label_file(tmp_path):
    training = KittiSplit("training", str(tmp_path / "training/image_2"),
                          str(tmp_path / "training/label_2"), "training/")
    image = str(tmp_path / "training/image_2/000001.JPG")
    parsed, rejects, counts = _join(tmp_path, training, "training/000001",
                                    [ImageFile(image, 10, "training")])
    assert [p.objects for p in parsed] == [()]
    assert [(r.kind, r.reason, r.source) for r in rejects] == [
        ("warning", "no_annotation_file", image)]
    assert "no training/label_2/000001.txt" in rejects[0].detail


def test_label_file_without_image_is_an_image_reject_naming_its_split_folder(tmp_path):
    training, testing = (
        KittiSplit(name, str(tmp_path / name / "image_2"), str(tmp_path / name / "label_2"),
                   f"{name}/") for name in ("training", "testing"))
    label = tmp_path / "training/label_2/000002.txt"
    _touch(label, CAR.encode())
    fmt = KittiFormat(KittiOptions(str(tmp_path)), [testing, training])
    out = list(_JoinAndParse(fmt, False).process(
        ("training/000002", [AnnotationFile(str(label), "training")])))
    rejects = [o.value for o in out if isinstance(o, TaggedOutput) and o.tag == "rejects"]
    assert [(r.kind, r.source, r.reason, r.split) for r in rejects] == [
        ("image", str(label), "missing", "training")]
    assert f"no 000002.* in {tmp_path}/training/image_2 " in rejects[0].detail


def _jpeg(width: int, height: int) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (width, height)).save(buffer, format="JPEG")
    return buffer.getvalue()


def test_encoder_writes_the_od_api_kitti_keys(tmp_path):
    path = tmp_path / "a.jpg"
    path.write_bytes(_jpeg(200, 100))
    [car, bad] = parse_kitti_labels(
        f"{CAR}\nVan 0 0 0 300 10 320 20 1 1 1 1 1 1 1\n".encode(), "l.txt").objects
    objects = tuple(DetectionObject(o.source, 1, o.name, o.bbox, o.extra) for o in (car, bad))
    record = ImageRecord("a", str(path), path.stat().st_size, "training",
                         {"source_id": "a", "filename": "a.jpg", "width": None,
                          "height": None, "objects": objects})
    features, kinds, rejects, counts = KittiEncoder().label_features(
        record, inspect_image(path.read_bytes()))
    assert features["image/object/bbox/xmin"] == [pytest.approx(10.25 / 200)]
    assert features["image/object/bbox/ymax"] == [pytest.approx(0.8)]
    assert features["image/object/truncated"] == [0.5]
    assert features["image/object/occluded"] == [1]
    assert features["image/object/alpha"] == [-1.57]
    assert [features[f"image/object/3d_bbox/{k}"] for k in (
        "height", "width", "length", "x", "y", "z", "rot_y")] == [
        [1.5], [1.6], [3.7], [-2.1], [1.8], [13.4], [-1.6]]
    assert kinds["image/object/truncated"] == "float"
    assert kinds["image/object/occluded"] == "int64"
    assert [(r.source, r.reason) for r in rejects] == [("l.txt:2", "empty_bbox")]
    assert counts == {"boxes_written": 1, "boxes_clipped": 0}
