"""YOLO parsing: label lines, class names, list lines, the two layouts, the join hooks it
adds to annotated_files, and boxes on EXIF-rotated images."""

from __future__ import annotations

import pytest
from apache_beam.pvalue import TaggedOutput
from PIL import Image

from recordbeam.images.checks import inspect_image
from recordbeam.images.transcode import ImageFixes
from recordbeam.records import ImageRecord
from recordbeam.sources.annotated_files import (
    AnnotationFile,
    ImageFile,
    SplitEntry,
    SplitList,
    _JoinAndParse,
    _List,
)
from recordbeam.sources.detection import DetectionObject, object_fields
from recordbeam.sources.yolo.reader import (
    YoloEncoder,
    YoloError,
    YoloFormat,
    YoloOptions,
    label_key,
    line_key,
    parse_label_file,
    parse_names,
    read_layout,
    yaml_names,
)

CLASSES = ("person", "traffic light", "dog")


def _tagged(out, tag):
    return [o.value for o in out if isinstance(o, TaggedOutput) and o.tag == tag]


# --- label files ---------------------------------------------------------------------


def test_box_and_segment_lines_with_crlf_and_bom():
    data = ("\ufeff1 0.5 0.5 0.2 0.4\r\n\r\n"
            "2 0.1 0.2 0.3 0.2 0.2 0.6\r\n").encode()
    parsed = parse_label_file(data, "labels/a.txt", CLASSES)
    assert parsed.rejects == () and parsed.counts == ()
    box, segment = parsed.objects
    assert (box.source, box.name, box.normalized, box.segmentation) == (
        "labels/a.txt:1", "traffic light", True, None)
    assert box.bbox == pytest.approx((0.4, 0.3, 0.2, 0.4))
    assert (segment.source, segment.name) == ("labels/a.txt:3", "dog")
    assert segment.bbox == pytest.approx((0.1, 0.2, 0.2, 0.4))  # the polygon's bounds
    assert segment.segmentation == [[0.1, 0.2, 0.3, 0.2, 0.2, 0.6]]


@pytest.mark.parametrize("line, reason, says", [
    ("0 0.5 0.5 0.2 abc", "malformed_line", "'abc' is not a number"),
    ("0 0.5 0.5 0.2 nan", "malformed_line", "'nan' is not a number"),
    ("dog 0.5 0.5 0.2 0.2", "malformed_line", "'dog' is not a number"),
    ("0.5 0.5 0.5 0.2 0.2", "malformed_line", "class id '0.5' is not a whole number"),
    ("0 0.5 0.5 0.2", "malformed_line", "4 values"),
    ("0 0.1 0.1 0.2 0.2 0.3", "malformed_line", "6 values"),  # odd coordinate count
    ("0 0.1 0.1 0.2 0.2 0.3 0.3 0.4", "malformed_line", "8 values"),  # odd count
    ("3 0.5 0.5 0.2 0.2", "unknown_category", "class id 3 is not in the class names"),
])
def test_unusable_lines_are_rejected_naming_file_and_line(line, reason, says):
    data = f"0 0.5 0.5 0.1 0.1\n{line}\n".encode()
    parsed = parse_label_file(data, "labels/b.txt", CLASSES)
    assert len(parsed.objects) == 1
    [reject] = parsed.rejects
    assert (reject.kind, reject.source, reject.reason) == ("annotation", "labels/b.txt:2", reason)
    assert says in reject.detail and reject.detail.startswith("labels/b.txt:2: ")


def test_whole_class_ids_written_as_floats_are_read():
    [obj] = parse_label_file(b"2.0 0.5 0.5 0.2 0.2", "a.txt", CLASSES).objects
    assert obj.name == "dog"


@pytest.mark.parametrize("data", [b"", b"\r\n  \n", b"\xef\xbb\xbf"])
def test_empty_label_files_give_no_objects_and_are_counted(data):
    parsed = parse_label_file(data, "a.txt", CLASSES)
    assert (parsed.objects, parsed.rejects, parsed.counts) == (
        (), (), (("yolo_empty_label_files", 1),))


def test_pose_lines_keep_their_box_and_count_the_keypoints_not_written():
    data = b"0 0.5 0.5 0.2 0.2 0.1 0.1 2 0.2 0.2 1\n0 0.5 0.5 0.2 0.2 0.1 0.1\n"
    parsed = parse_label_file(data, "a.txt", CLASSES, keypoint_values=6)
    [obj] = parsed.objects
    assert obj.bbox == pytest.approx((0.4, 0.4, 0.2, 0.2)) and obj.segmentation is None
    assert [(r.source, r.reason) for r in parsed.rejects] == [("a.txt:2", "malformed_line")]
    assert parsed.counts == (("yolo_keypoints_not_written", 1),)


def test_kpt_shape_sets_the_values_after_the_box(tmp_path):
    layout = _ultralytics(tmp_path, "train: images/train\nval: images/val\nkpt_shape: [17, 3]\n"
                          "names: [person]\n")
    assert layout.keypoint_values == 51
    (tmp_path / "data.yaml").write_text("train: images/train\nkpt_shape: [17]\nnames: [a]\n")
    with pytest.raises(YoloError, match="kpt_shape must be"):
        read_layout(YoloOptions(str(tmp_path)))


# --- class names ---------------------------------------------------------------------


def test_obj_names_keep_spaces_and_drop_bom_crlf_and_trailing_blank_lines():
    text = "\ufeffperson\r\ntraffic light \r\n dog\r\n\r\n"
    assert parse_names(text, "obj.names") == CLASSES


@pytest.mark.parametrize("text, says", [
    ("a\n\nb\n", "line 2 is blank"),
    ("a\nb\na\n", "class 2 and class 0 are both named 'a'"),
    ("\n\n", "names no classes"),
])
def test_obj_names_problems_name_the_file(text, says):
    with pytest.raises(YoloError, match=says):
        parse_names(text, "ROOT/obj.names")


def test_yaml_names_as_list_as_dict_or_from_nc():
    assert yaml_names(["person", "traffic light", "dog"], 3, "d.yaml") == CLASSES
    assert yaml_names({2: "dog", 0: "person", 1: "traffic light"}, None, "d.yaml") == CLASSES
    assert yaml_names({"0": "person", "1": "traffic light", "2": "dog"}, None, "d") == CLASSES
    assert yaml_names(None, 2, "d.yaml") == ("class_0", "class_1")


@pytest.mark.parametrize("names, count, says", [
    ({0: "a", 2: "c"}, None, r"ids \[0, 2\]"),
    (["a", "b"], 3, "nc is 3 but names lists 2"),
    ("a b", None, "names must be a list"),
    (None, None, "names must be a list"),
])
def test_yaml_names_problems(names, count, says):
    with pytest.raises(YoloError, match=says):
        yaml_names(names, count, "ROOT/data.yaml")


# --- where labels are, and list lines ---------------------------------------------------


@pytest.mark.parametrize("relative, key", [
    ("images/train/a.jpg", "labels/train/a"),
    ("labels/train/a.txt", "labels/train/a"),
    ("train/images/b c.JPG", "train/labels/b c"),  # Roboflow's shape; upper-case extension
    ("images/x/images/a.png", "images/x/labels/a"),  # the last images/ folder
    ("obj_train_data/a.jpeg", "obj_train_data/a"),  # darknet: beside the image
    ("obj_train_data/a.txt", "obj_train_data/a"),
    ("images.jpg", "images"),
])
def test_label_key_is_where_ultralytics_looks_for_the_label(relative, key):
    assert label_key(relative) == key


@pytest.mark.parametrize("line, key", [
    ("data/obj_train_data/a.jpg\r\n", "obj_train_data/a"),
    ("\ufeffdata/obj_train_data/a.jpg", "obj_train_data/a"),
    ("data\\obj_train_data\\b.JPG", "obj_train_data/b"),
    ("obj_train_data/a.jpg", "obj_train_data/a"),
    ("/data/set/obj_train_data/a.jpg", "obj_train_data/a"),  # below ROOT
    ("/home/u/darknet/data/obj/a.jpg", "obj/a"),  # another machine's darknet folder
    ("C:\\darknet\\data\\obj\\a.jpg", "obj/a"),
    ("./images/train/a.jpg", "lists/labels/train/a"),  # beside the list
    ("  ", None),
])
def test_list_lines_resolve_below_root(line, key):
    assert line_key("/data/set", "lists", True, line) == key


def test_absolute_lines_below_root_spelled_another_way(tmp_path, monkeypatch):
    (tmp_path / "set").mkdir()
    monkeypatch.chdir(tmp_path)
    spellings = YoloFormat(YoloOptions("set"), read_layout_stub(tmp_path / "set")) \
        .split_lists()[0].image_id.args[0]
    line = f"{tmp_path}/set/obj/images/a.jpg"  # ROOT given as the relative path "set"
    assert line_key(spellings, "", True, line) == "obj/labels/a"


@pytest.mark.parametrize("line, reason", [
    ("../elsewhere/a.jpg", "outside_root"),
    ("/mnt/photos/a.jpg", "outside_root"),
    ("obj_train_data/a.txt", "malformed_line"),
    ("obj_train_data/", "malformed_line"),
])
def test_list_lines_naming_no_image_of_root_raise(line, reason):
    from recordbeam.sources.annotated_files import SplitLineError

    with pytest.raises(SplitLineError) as raised:
        line_key("/data/set", "", True, line)
    assert raised.value.reason == reason


def test_unusable_list_lines_are_rejects_naming_list_and_line(tmp_path):
    listed = tmp_path / "train.txt"
    listed.write_bytes(b"data/obj/a.jpg\r\n../b.jpg\r\n\r\nobj/c.png\r\n")
    fmt = YoloFormat(YoloOptions(str(tmp_path)), read_layout_stub(tmp_path))
    task = SplitList("train", str(listed), fmt.split_lists()[0].image_id)
    out = list(_List(fmt, None).process(task))
    keyed = [o for o in out if not isinstance(o, TaggedOutput)]
    assert keyed == [("obj/a", SplitEntry("train", f"{listed}:1")),
                     ("obj/c", SplitEntry("train", f"{listed}:4"))]
    [reject] = _tagged(out, "rejects")
    assert (reject.kind, reject.source, reject.reason, reject.split) == (
        "image", f"{listed}:2", "outside_root", "train")
    assert "'../b.jpg'" in reject.detail


def read_layout_stub(root):
    (root / "obj.names").write_text("dog\n")
    (root / "obj.data").write_text("classes = 1\ntrain = data/train.txt\nnames = data/obj.names\n")
    if not (root / "train.txt").exists():
        (root / "train.txt").write_text("")
    return read_layout(YoloOptions(str(root)))


# --- layouts ----------------------------------------------------------------------------


def test_darknet_layout_from_obj_data(tmp_path):
    (tmp_path / "obj.names").write_text("person\ntraffic light\ndog\n")
    (tmp_path / "obj.data").write_bytes(
        b"classes= 3\r\ntrain  = data/train.txt\r\nvalid = data\\valid.txt\r\n"
        b"names = data/obj.names\r\nbackup = backup/\r\n")
    for name in ("train.txt", "valid.txt"):
        (tmp_path / name).write_text("")
    layout = read_layout(YoloOptions(str(tmp_path)))
    assert (layout.kind, layout.classes, layout.splits) == ("darknet", CLASSES, ("train", "val"))
    assert layout.lists == (("train", (str(tmp_path / "train.txt"),)),
                            ("val", (str(tmp_path / "valid.txt"),)))


@pytest.mark.parametrize("text, says", [
    ("classes = 3\nnames = data/obj.names\ntrain = data/none.txt\n",
     "train = data/none.txt is not a file"),
    ("classes = 2\nnames = data/obj.names\n", "classes = 2 but"),
])
def test_darknet_problems_name_obj_data(tmp_path, text, says):
    (tmp_path / "obj.names").write_text("person\ntraffic light\ndog\n")
    (tmp_path / "obj.data").write_text(text)
    with pytest.raises(YoloError, match=says):
        read_layout(YoloOptions(str(tmp_path)))


def _ultralytics(tmp_path, yaml_text, folders=("images/train", "images/val")):
    for folder in folders:
        (tmp_path / folder).mkdir(parents=True)
        (tmp_path / folder / "a.jpg").write_bytes(b"x")
    (tmp_path / "data.yaml").write_text(yaml_text)
    return read_layout(YoloOptions(str(tmp_path)))


def test_ultralytics_layout_with_folders_and_dict_names(tmp_path):
    layout = _ultralytics(tmp_path, "path: ../datasets/x\ntrain: images/train\nval: images/val\n"
                          "names:\n  0: person\n  1: traffic light\n  2: dog\n")
    assert (layout.kind, layout.classes, layout.splits) == (
        "ultralytics", CLASSES, ("train", "val"))
    fmt = YoloFormat(YoloOptions(str(tmp_path)), layout)
    listed = [(listing.folder[len(str(tmp_path)) + 1:], listing.split, listing.images,
               listing.annotation_suffixes) for listing in fmt.listings()]
    assert listed == [("images/train", "train", True, ()), ("labels/train", "train", False, (".txt",)),
                      ("images/val", "val", True, ()), ("labels/val", "val", False, (".txt",))]


def test_roboflow_shape_with_parent_relative_folders(tmp_path):
    layout = _ultralytics(tmp_path, "train: ../train/images\nval: ../valid/images\nnc: 1\n"
                          "names: ['dog']\n", folders=("train/images", "valid/images"))
    assert layout.folders == (("train", (str(tmp_path / "train/images"),)),
                              ("val", (str(tmp_path / "valid/images"),)))


def test_split_folders_below_the_yaml_path(tmp_path):
    layout = _ultralytics(tmp_path, "path: pets\ntrain: ./images/train\nval: images/val\n"
                          "names: [dog]\n", folders=("pets/images/train", "pets/images/val"))
    assert layout.folders == (("train", (str(tmp_path / "pets/images/train"),)),
                              ("val", (str(tmp_path / "pets/images/val"),)))


def test_ultralytics_lists_of_list_files(tmp_path):
    (tmp_path / "train.txt").write_text("./images/train/a.jpg\n")
    (tmp_path / "extra.txt").write_text("./images/train/a.jpg\n")
    layout = _ultralytics(tmp_path, "train: [train.txt, extra.txt]\nnames: [dog]\n",
                          folders=("images/train",))
    assert layout.lists == (("train", (str(tmp_path / "train.txt"), str(tmp_path / "extra.txt"))),)


@pytest.mark.parametrize("yaml_text, says", [
    ("train: images/nowhere\nnames: [dog]\n", "images/nowhere is neither a folder"),
    ("train: images/train\nval: val.txt\nnames: [dog]\n", "some splits are folders"),
    ("train: [images/train\nnames: [dog]\n", "is not valid YAML"),
    ("- a\n- b\n", "must be a mapping"),
])
def test_ultralytics_problems_name_data_yaml(tmp_path, yaml_text, says):
    (tmp_path / "val.txt").write_text("")
    with pytest.raises(YoloError, match=says):
        _ultralytics(tmp_path, yaml_text, folders=("images/train",))


def test_a_folder_without_description_is_refused(tmp_path):
    with pytest.raises(YoloError, match="neither data.yaml .* nor obj.data"):
        read_layout(YoloOptions(str(tmp_path)))


def test_a_dataset_yaml_of_another_name_is_named_in_the_refusal(tmp_path):
    # Ultralytics reads a dataset YAML of any name (coco8.yaml); here it must be data.yaml.
    (tmp_path / "coco8.yaml").write_text("train: images/train\nnames: [a]\n")
    with pytest.raises(YoloError, match=r"coco8.yaml is not read: .* rename it"):
        read_layout(YoloOptions(str(tmp_path)))


def test_a_split_folder_given_as_root_names_the_data_yaml_above(tmp_path):
    # Roboflow's YOLOv8 export: data.yaml beside train/, valid/; --input train/ is a mistake.
    (tmp_path / "data.yaml").write_text("train: ../train/images\nnames: [a]\n")
    (tmp_path / "train" / "images").mkdir(parents=True)
    with pytest.raises(YoloError, match=r"data.yaml is in the folder above: pass .* as --input"):
        read_layout(YoloOptions(str(tmp_path / "train")))


def test_yaml_is_loaded_safely(tmp_path):
    with pytest.raises(YoloError, match="not valid YAML"):
        _ultralytics(tmp_path, "train: !!python/object/apply:os.system ['true']\nnames: [a]\n")


# --- the join hooks -----------------------------------------------------------------------


def test_listing_keys_pair_images_and_labels_and_skip_root_lists(tmp_path):
    for path in ("images/train/a.JPG", "labels/train/a.txt", "train.txt", "notes.yaml",
                 "labels/train.cache"):
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_bytes(b"x")
    (tmp_path / "obj.names").write_text("dog\n")
    fmt = YoloFormat(YoloOptions(str(tmp_path)), read_layout_stub(tmp_path))
    [listing] = fmt.listings()
    out = list(_List(fmt, None).process(listing))
    keyed = sorted((key, type(message).__name__) for key, message in
                   (o for o in out if not isinstance(o, TaggedOutput)))
    assert keyed == [("labels/train/a", "AnnotationFile"), ("labels/train/a", "ImageFile")]
    assert sum(n for _name, n in _tagged(out, "counts")) == 5  # lists, yaml, names, data, cache


def test_hidden_files_are_skipped_and_counted_as_ultralytics_skips_them(tmp_path):
    # macOS writes ._a.jpg (AppleDouble) beside a.jpg on other file systems, and .DS_Store.
    for path in ("images/train/a.jpg", "images/train/._a.jpg", "images/train/.DS_Store",
                 "images/train/.thumbs/b.jpg", "labels/train/a.txt", "labels/train/._a.txt"):
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_bytes(b"x")
    (tmp_path / "data.yaml").write_text("train: images/train\nnames: [dog]\n")
    fmt = YoloFormat(YoloOptions(str(tmp_path)), read_layout(YoloOptions(str(tmp_path))))
    out = [o for listing in fmt.listings() for o in _List(fmt, None).process(listing)]
    keyed = sorted((key, type(message).__name__) for key, message in
                   (o for o in out if not isinstance(o, TaggedOutput)))
    assert keyed == [("labels/train/a", "AnnotationFile"), ("labels/train/a", "ImageFile")]
    assert sum(n for _name, n in _tagged(out, "counts")) == 4


def _join(fmt, tagged, has_split_lists):
    out = list(_JoinAndParse(fmt, has_split_lists).process(("labels/a", tagged)))
    return ([o for o in out if not isinstance(o, TaggedOutput)], _tagged(out, "rejects"),
            _tagged(out, "counts"))


def test_a_folder_of_two_splits_writes_its_images_to_both(tmp_path):
    label = tmp_path / "labels" / "a.txt"
    label.parent.mkdir()
    label.write_text("0 0.5 0.5 0.1 0.1\n")
    image = str(tmp_path / "images" / "a.jpg")
    fmt = YoloFormat(YoloOptions(str(tmp_path)), read_layout_stub(tmp_path))
    tagged = [AnnotationFile(str(label), "train"), AnnotationFile(str(label), "val"),
              ImageFile(image, 3, "val"), ImageFile(image, 3, "train")]
    parsed, rejects, _ = _join(fmt, tagged, False)
    assert [(p.split, p.path, len(p.objects)) for p in parsed] == [
        ("train", image, 1), ("val", image, 1)]
    assert rejects == []


def test_label_without_image_is_rejected_even_in_no_list(tmp_path):
    label = tmp_path / "labels" / "a.txt"
    label.parent.mkdir()
    label.write_text("0 0.5 0.5 0.1 0.1\n")
    fmt = YoloFormat(YoloOptions(str(tmp_path)), read_layout_stub(tmp_path))
    parsed, rejects, counts = _join(fmt, [AnnotationFile(str(label))], True)
    assert (parsed, counts) == ([], [])
    [reject] = rejects
    assert (reject.kind, reject.source, reject.reason) == ("image", str(label), "missing")
    assert "no images/a.* in" in reject.detail
    assert "--images" not in reject.detail  # convert yolo has no such option


def test_listed_image_without_label_is_written_and_warned(tmp_path):
    fmt = YoloFormat(YoloOptions(str(tmp_path)), read_layout_stub(tmp_path))
    image = str(tmp_path / "images" / "a.PNG")
    parsed, rejects, _ = _join(fmt, [ImageFile(image, 3), SplitEntry("train", "t.txt:1")], True)
    assert [(p.path, p.objects, p.split) for p in parsed] == [(image, (), "train")]
    assert [(r.kind, r.reason) for r in rejects] == [("warning", "no_annotation_file")]
    assert "label file labels/a.txt" in rejects[0].detail


def test_listed_line_naming_nothing_is_a_missing_reject(tmp_path):
    fmt = YoloFormat(YoloOptions(str(tmp_path)), read_layout_stub(tmp_path))
    _, rejects, _ = _join(fmt, [SplitEntry("train", "t.txt:4")], True)
    [reject] = rejects
    assert (reject.source, reject.reason) == ("t.txt:4", "missing")
    assert "no image named images/a.*" in reject.detail


# --- EXIF ---------------------------------------------------------------------------------


@pytest.fixture()
def rotated_image(tmp_path):
    """100x50 stored, EXIF orientation 6: shown 50x100 (turned 90 degrees clockwise)."""
    exif = Image.Exif()
    exif[0x0112] = 6
    path = tmp_path / "a.jpg"
    Image.new("RGB", (100, 50)).save(path, format="JPEG", exif=exif)
    return path


def _features(path, fixes, include_masks=False):
    # A box on the image as shown (50x100): x 10..30 px, y 20..60 px.
    obj = DetectionObject("labels/a.txt:1", 1, "dog", (0.2, 0.2, 0.4, 0.4),
                          segmentation=[[0.2, 0.2, 0.6, 0.2, 0.6, 0.6, 0.2, 0.6]],
                          normalized=True)
    record = ImageRecord("a", str(path), path.stat().st_size, "train",
                         {"source_id": "a", "filename": "a.jpg", "width": None,
                          "height": None, "objects": (object_fields(obj),)})
    encoder = YoloEncoder(fixes=fixes, include_masks=include_masks)
    features, _kinds, rejects, _counts = encoder.label_features(
        record, inspect_image(path.read_bytes()))
    assert rejects == []
    return features


def _box(features):
    return [features[f"image/object/bbox/{k}"][0] for k in ("xmin", "ymin", "xmax", "ymax")]


def test_boxes_are_fractions_of_the_exif_rotated_image_when_it_is_written(rotated_image):
    features = _features(rotated_image, ImageFixes(apply_exif=True))
    assert _box(features) == pytest.approx([0.2, 0.2, 0.6, 0.6])


def test_boxes_move_to_the_stored_pixels_when_written_unrotated(rotated_image):
    import io

    import numpy as np

    features = _features(rotated_image, None, include_masks=True)
    # Shown (x, y) is stored (y, 1 - x): x 0.2..0.6 shown -> stored y 0.4..0.8.
    assert _box(features) == pytest.approx([0.2, 0.4, 0.6, 0.8])
    mask = np.array(Image.open(io.BytesIO(features["image/object/mask"][0])))
    assert mask.shape == (50, 100)  # the stored pixels' size
    rows, columns = np.nonzero(mask)
    assert (columns.min(), columns.max() + 1) == (20, 60)
    assert (rows.min(), rows.max() + 1) == (20, 40)
