"""labelme parsing: one JSON, shapes and groups, the join by the image a JSON names, the
image embedded in a JSON. The JSONs are written by hand from labelme's published shape."""

from __future__ import annotations

import base64
import io
import json

import numpy as np
import pytest
from apache_beam.pvalue import TaggedOutput
from PIL import Image

from recordbeam.images.checks import inspect_image
from recordbeam.records import ImageRecord
from recordbeam.sources.annotated_files import (
    IMAGE_IN_ANNOTATION,
    AnnotationFile,
    AnnotationFileError,
    ImageFile,
    JoinMessageCoder,
    ParsedAnnotationFile,
    ParsedImage,
    _JoinAndParse,
    _ParseNamingImage,
    build_record,
)
from recordbeam.sources.labelme.reader import (
    LabelmeEncoder,
    LabelmeError,
    LabelmeFormat,
    LabelmeOptions,
    named_image_id,
    parse_labelme_json,
    read_classes,
)


def shape(label, points, shape_type="polygon", group_id=None):
    return {"label": label, "points": points, "group_id": group_id, "description": "",
            "shape_type": shape_type, "flags": {}}


def labelme_json(shapes, image_path="a.jpg", image_data=None, width=64, height=48) -> dict:
    return {"version": "5.4.1", "flags": {}, "shapes": shapes, "imagePath": image_path,
            "imageData": image_data, "imageHeight": height, "imageWidth": width}


def parse(document, path="R/a.json", relative="a.json", images_apart=False):
    data = document if isinstance(document, bytes) else json.dumps(document).encode()
    return parse_labelme_json(data, path, relative, images_apart)


def test_rectangles_any_corner_order_polygons_and_circles_become_objects():
    parsed = parse(labelme_json([
        shape("dog", [[30, 40], [1, 2]], "rectangle"),
        shape("cat", [[10, 10], [20, 12], [15, 30]]),
        shape("ball", [[20, 20], [23, 24]], "circle"),
    ]))
    assert (parsed.filename, parsed.width, parsed.height, parsed.image_id) == (
        "a.jpg", 64, 48, "a")
    assert [(o.source, o.name, o.bbox) for o in parsed.objects] == [
        ("R/a.json: shapes[0]", "dog", (1, 2, 29, 38)),
        ("R/a.json: shapes[1]", "cat", (10, 10, 10, 20)),
        ("R/a.json: shapes[2]", "ball", (15, 15, 10, 10)),
    ]
    dog, cat, ball = parsed.objects
    assert dog.segmentation is None  # a lone rectangle's mask is its box
    assert cat.segmentation == [[10, 10, 20, 12, 15, 30]]
    assert len(ball.segmentation[0]) == 128 and ball.segmentation[0][:2] == [25, 20]
    assert parsed.rejects == () and parsed.counts == ()


def test_rectangles_of_four_corners_as_x_anylabeling_writes_them():
    # X-AnyLabeling saves a rectangle as its 4 corners (top-left, top-right, bottom-right,
    # bottom-left); they were rejected as "needs exactly 2 points". A 4-point rectangle
    # that is not upright would not be its box: still rejected.
    parsed = parse(labelme_json([
        shape("dog", [[1.5, 2], [30, 2], [30, 40], [1.5, 40]], "rectangle"),
        shape("cat", [[10, 10], [20, 12], [18, 30], [8, 28]], "rectangle"),
        shape("cat", [[1, 2], [30, 2], [30, 40]], "rectangle"),
        shape("cat", [[1, 2], [30, 2], [30, 40], [30, 40]], "rectangle"),
    ]))
    assert [(o.source, o.name, o.bbox, o.segmentation) for o in parsed.objects] == [
        ("R/a.json: shapes[0]", "dog", (1.5, 2, 28.5, 38), None)]
    assert [(r.source.split(": ")[1], r.reason) for r in parsed.rejects] == [
        ("shapes[1]", "invalid_shape"), ("shapes[2]", "invalid_shape"),
        ("shapes[3]", "invalid_shape")]
    assert "its 4 corners, axis-aligned" in parsed.rejects[0].detail


def test_point_and_line_shapes_are_counted_and_skipped():
    parsed = parse(labelme_json([
        shape("eye", [[1, 1]], "point"), shape("eye", [[2, 2]], "point"),
        shape("edge", [[1, 1], [5, 5]], "line"), shape("road", [[1, 1], [5, 5], [9, 1]], "linestrip"),
        shape("dog", [[1, 2], [30, 40]], "rectangle"),
    ]))
    assert [o.name for o in parsed.objects] == ["dog"]
    assert dict(parsed.counts) == {"labelme_point_shapes_skipped": 2,
                                   "labelme_line_shapes_skipped": 1,
                                   "labelme_linestrip_shapes_skipped": 1}


def test_shapes_labelled_with_labelmes_reserved_names_are_counted_and_skipped():
    # labelme2coco drops __ignore__ shapes; _background_ is its label 0, no object.
    parsed = parse(labelme_json([
        shape("__ignore__", [[1, 1], [9, 1], [9, 9]]),
        shape("_background_", [[1, 2], [30, 40]], "rectangle"),
        shape("__ignore__", [[2, 2], [8, 8]], "rectangle", group_id=1),
        shape("dog", [[1, 2], [30, 40]], "rectangle", group_id=1),
    ]))
    assert [o.name for o in parsed.objects] == ["dog"] and parsed.rejects == ()
    assert parsed.objects[0].bbox == (1, 2, 29, 38)
    assert dict(parsed.counts) == {"labelme_ignore_shapes_skipped": 2,
                                   "labelme_background_shapes_skipped": 1}


def test_shapes_of_one_label_and_group_are_one_object_other_labels_their_own():
    # labelme keys an instance by (label, group_id): person 1 and car 1 are two objects.
    parsed = parse(labelme_json([
        shape("person", [[10, 10], [20, 10], [20, 20]], group_id=1),
        shape("dog", [[0, 0], [5, 5]], "rectangle", group_id=2),
        shape("person", [[30, 5], [40, 25]], "rectangle", group_id=1),
        shape("cat", [[1, 1], [2, 9]], "rectangle", group_id=2),
        shape("dog", [[50, 40], [60, 45]], "rectangle"),
    ]))
    [person, dog, cat, lone_dog] = parsed.objects
    assert (person.source, person.name, person.bbox) == (
        "R/a.json: shapes[0, 2]", "person", (10, 5, 30, 20))
    assert person.segmentation == [[10, 10, 20, 10, 20, 20], [30, 5, 40, 5, 40, 25, 30, 25]]
    assert (dog.source, dog.name, dog.bbox) == ("R/a.json: shapes[1]", "dog", (0, 0, 5, 5))
    assert (cat.source, cat.name, cat.bbox) == ("R/a.json: shapes[3]", "cat", (1, 1, 1, 8))
    assert (lone_dog.source, lone_dog.bbox) == ("R/a.json: shapes[4]", (50, 40, 10, 5))
    assert parsed.rejects == ()


def test_unusable_shapes_are_rejected_with_their_index():
    parsed = parse(labelme_json([
        shape("dog", [[1, 2]], "rectangle"),
        shape("dog", [[1, 2], [3, 4]]),  # a polygon of 2 points
        shape("dog", [[1, 2], [1, 40]], "rectangle"),  # no width
        shape("", [[1, 2], [30, 40]], "rectangle"),
        shape("dog", [[1, "x"], [30, 40]], "rectangle"),
        shape("dog", [[1, 2], [30, 40]], "cuboid"),
        shape("dog", [[5, 5], [5, 5]], "circle"),
        "not a shape",
        shape("dog", [[1, 2], [30, 40]], "rectangle"),
    ]))
    assert [o.source for o in parsed.objects] == ["R/a.json: shapes[8]"]
    assert [(r.source.split(": ")[1], r.reason) for r in parsed.rejects] == [
        ("shapes[0]", "invalid_shape"), ("shapes[1]", "invalid_shape"),
        ("shapes[2]", "degenerate_bbox"), ("shapes[3]", "missing_field"),
        ("shapes[4]", "invalid_shape"), ("shapes[5]", "unsupported_shape"),
        ("shapes[6]", "degenerate_bbox"), ("shapes[7]", "invalid_shape")]
    assert all(r.kind == "annotation" for r in parsed.rejects)


def test_windows_line_endings_bom_backslashes_and_labels_with_spaces():
    text = json.dumps(labelme_json([shape(" traffic light ", [[1, 2], [30, 40]], "rectangle")],
                                   image_path="..\\images\\A.JPG"), indent=2)
    data = b"\xef\xbb\xbf" + text.replace("\n", "\r\n").encode()
    parsed = parse(data, "R/json/a.json", "json/a.json")
    assert [o.name for o in parsed.objects] == ["traffic light"]
    assert (parsed.filename, parsed.image_id) == ("A.JPG", "images/A")


@pytest.mark.parametrize("data, reason, said", [
    (b'{"shapes": [', "malformed_json", "not valid JSON"),
    (b"\xff\xfe{}", "malformed_json", "not UTF-8"),
    (b'["a"]', "malformed_json", "not a labelme annotation"),
    (b'{"imagePath": "a.jpg"}', "malformed_json", "not a labelme annotation"),
    (b'{"shapes": [], "imagePath": null, "imageData": null}', "missing_field", "no imagePath"),
    (b'{"shapes": [], "imagePath": " "}', "missing_field", "no imagePath"),
])
def test_files_that_cannot_be_used_name_the_file(data, reason, said):
    with pytest.raises(AnnotationFileError) as bad:
        parse(data)
    assert bad.value.reason == reason
    assert bad.value.detail.startswith("R/a.json: ") and said in bad.value.detail
    assert "Error" not in bad.value.detail


@pytest.mark.parametrize("relative, image_path, apart, image_id", [
    ("a.json", "a.jpg", False, "a"),
    ("sub/a.json", "a.jpg", False, "sub/a"),
    ("ann/a.json", "../images/a.jpg", False, "images/a"),
    ("a.json", "../outside/a.jpg", False, None),
    ("a.json", "/home/me/a.jpg", False, None),
    ("a.json", "C:/Users/me/a.jpg", False, None),
    ("sub/a.json", "../images/b c.png", True, "sub/b c"),
])
def test_the_id_of_the_image_a_json_names(relative, image_path, apart, image_id):
    assert named_image_id(relative, image_path, apart) == image_id


def _png(width=32, height=24) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (width, height), (10, 200, 30)).save(buffer, format="PNG")
    return buffer.getvalue()


def test_embedded_image_size_and_a_broken_one_warned():
    data = base64.b64encode(_png()).decode()
    assert parse(labelme_json([], image_data=data)).embedded_image_size == len(_png())
    parsed = parse(labelme_json([], image_data="not base64!"))
    assert parsed.embedded_image_size is None
    assert [(r.kind, r.reason) for r in parsed.rejects] == [("warning", "invalid_image_data")]


def _join(tmp_path, files: dict[str, object], images: list[str], images_dir=None):
    """List nothing: hand the pre-join parse and the join the files given; returns
    (parsed images, rejects)."""
    root = tmp_path / "root"
    fmt = LabelmeFormat(LabelmeOptions(str(root), images_dir), None)
    keyed = []
    for relative, document in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(document))
        own_id = relative.rsplit(".", 1)[0]
        keyed += list(_ParseNamingImage(fmt).process((own_id, AnnotationFile(str(path)))))
    for relative in images:
        folder = tmp_path / (images_dir or "root")
        keyed.append((relative.rsplit(".", 1)[0], ImageFile(str(folder / relative), 7)))
    groups: dict[str, list] = {}
    for key, message in keyed:
        message = JoinMessageCoder().decode(JoinMessageCoder().encode(message))
        groups.setdefault(key, []).append(message)
    out = [o for key in sorted(groups)
           for o in _JoinAndParse(fmt, False).process((key, groups[key]))]
    return ([o for o in out if not isinstance(o, TaggedOutput)],
            [o.value for o in out if isinstance(o, TaggedOutput) and o.tag == "rejects"])


def test_json_joins_the_image_its_imagepath_names_in_another_folder(tmp_path):
    box = [shape("dog", [[1, 2], [30, 40]], "rectangle")]
    parsed, rejects = _join(tmp_path, {
        "ann/a.json": labelme_json(box, "../images/a.jpg"),
        "b.json": labelme_json(box, "b.PNG"),
    }, ["images/a.jpg", "images/c.jpg", "b.PNG", "b.jpg"])
    assert [(p.image_id, p.path.rsplit("/root/", 1)[1], p.filename, len(p.objects))
            for p in parsed] == [("b", "b.PNG", "b.PNG", 1), ("images/a", "images/a.jpg", "a.jpg", 1),
                                 ("images/c", "images/c.jpg", "c.jpg", 0)]
    # images/c.jpg has no JSON: written without objects, warned; nothing else is said.
    assert [(r.kind, r.reason, r.source.rsplit("/root/", 1)[1]) for r in rejects] == [
        ("warning", "no_annotation_file", "images/c.jpg")]


def test_images_option_looks_below_it_as_the_jsons_lie_below_root(tmp_path):
    box = [shape("dog", [[1, 2], [30, 40]], "rectangle")]
    parsed, rejects = _join(tmp_path, {"sub/a.json": labelme_json(box, "../../x/a.jpg")},
                            ["sub/a.jpg"], images_dir="pictures")
    assert [(p.image_id, p.path.split(str(tmp_path))[1]) for p in parsed] == [
        ("sub/a", "/pictures/sub/a.jpg")]
    assert rejects == []


def test_json_without_image_uses_embedded_data_else_is_rejected(tmp_path):
    data = base64.b64encode(_png()).decode()
    box = [shape("dog", [[1, 2], [30, 40]], "rectangle")]
    parsed, rejects = _join(tmp_path, {
        "a.json": labelme_json(box, "a.png", image_data=data),
        "b.json": labelme_json(box, "b.jpg"),
        "c.json": labelme_json(box, "../c.jpg", image_data=data),  # outside ROOT: embedded
    }, [])
    assert [(p.image_id, p.path.rsplit("/", 1)[1], p.filename, p.embedded, p.size)
            for p in parsed] == [("a", "a.json", "a.png", True, len(_png())),
                                 ("c", "c.json", "c.jpg", True, len(_png()))]
    assert [(r.kind, r.reason, r.source.rsplit("/", 1)[1]) for r in rejects] == [
        ("image", "missing", "b.json")]
    assert "'b.jpg'" in rejects[0].detail and "no imageData" in rejects[0].detail


def test_two_jsons_naming_one_image_are_both_rejected(tmp_path):
    box = [shape("dog", [[1, 2], [30, 40]], "rectangle")]
    parsed, rejects = _join(tmp_path, {"a.json": labelme_json(box, "x.jpg"),
                                       "b.json": labelme_json(box, "x.jpg")}, ["x.jpg"])
    assert parsed == []
    assert [(r.reason, "name the image 'x'" in r.detail) for r in rejects] == [
        ("duplicate_file_name", True)]


def test_malformed_json_rejects_the_image_beside_it(tmp_path):
    root = tmp_path / "root"
    fmt = LabelmeFormat(LabelmeOptions(str(root)), None)
    root.mkdir()
    (root / "a.json").write_text('{"shapes": [')
    [(key, message)] = _ParseNamingImage(fmt).process(("a", AnnotationFile(str(root / "a.json"))))
    assert (key, type(message), message.failure[0]) == ("a", ParsedAnnotationFile, "malformed_json")
    out = list(_JoinAndParse(fmt, False).process(("a", [message, ImageFile(str(root / "a.jpg"), 5)])))
    assert [(o.value.kind, o.value.reason) for o in out] == [("image", "malformed_json")]


def test_embedded_image_is_written_from_the_json_and_counted(tmp_path):
    png = _png(32, 24)
    path = tmp_path / "a.json"
    path.write_text(json.dumps(labelme_json(
        [shape("dog", [[8, 6], [24, 18]], "rectangle")], "a.png",
        image_data=base64.b64encode(png).decode(), width=32, height=24)))
    parsed = parse_labelme_json(path.read_bytes(), str(path), "a.json")
    image = ParsedImage("a", "train", str(path), len(png), "a.png", 32, 24, parsed.objects,
                        str(path), embedded=True)
    [record] = [o for o in build_record(image, ["dog"]) if isinstance(o, ImageRecord)]
    assert record.labels[IMAGE_IN_ANNOTATION] is True
    encoded = LabelmeEncoder().encode(record)
    assert encoded.rejects == ()
    assert encoded.features["image/encoded"] == png
    assert encoded.features["image/filename"] == "a.png"
    assert encoded.features["image/object/bbox/xmin"] == [0.25]
    assert encoded.counts["labelme_embedded_images_used"] == 1


def test_records_of_image_files_carry_no_embedded_flag(tmp_path):
    path = tmp_path / "a.png"
    path.write_bytes(_png())
    image = ParsedImage("a", "train", str(path), path.stat().st_size, "a.png", 32, 24, (),
                        "a.json")
    [record] = [o for o in build_record(image, []) if isinstance(o, ImageRecord)]
    assert IMAGE_IN_ANNOTATION not in record.labels
    encoded = LabelmeEncoder().encode(record)
    assert encoded.features["image/encoded"] == path.read_bytes()
    assert "labelme_embedded_images_used" not in encoded.counts


def test_masks_of_a_group_are_the_union_of_its_polygons(tmp_path):
    path = tmp_path / "a.png"
    path.write_bytes(_png(40, 20))
    parsed = parse(labelme_json([
        shape("cat", [[0, 0], [10, 0], [10, 10], [0, 10]], group_id="7"),
        shape("cat", [[30, 10], [40, 20]], "rectangle", group_id="7")], width=40, height=20))
    image = ParsedImage("a", "train", str(path), 1, "a.png", 40, 20, parsed.objects, "a.json")
    [image_record] = [o for o in build_record(image, ["cat"]) if isinstance(o, ImageRecord)]
    encoder = LabelmeEncoder(include_masks=True)
    features, _kinds, rejects, counts = encoder.label_features(
        image_record, inspect_image(path.read_bytes()))
    [mask_png] = features["image/object/mask"]
    mask = np.array(Image.open(io.BytesIO(mask_png)))
    assert rejects == [] and counts["masks_from_boxes"] == 0
    assert mask[5, 5] and mask[15, 35] and not mask[15, 5] and not mask[5, 35]
    assert features["image/object/bbox/xmax"] == [1.0]


def test_classes_file_skips_labelmes_reserved_names(tmp_path):
    classes = tmp_path / "labels.txt"
    classes.write_text("__ignore__\r\n_background_\r\ndog\r\ntraffic light\r\n")
    assert read_classes(LabelmeOptions(str(tmp_path), classes_file=str(classes))) == [
        "dog", "traffic light"]
    classes.write_text("__ignore__\n_background_\n")
    with pytest.raises(LabelmeError, match="lists no classes"):
        read_classes(LabelmeOptions(str(tmp_path), classes_file=str(classes)))


def test_broken_image_data_is_still_said_when_the_image_is_missing(tmp_path):
    box = [shape("dog", [[1, 2], [30, 40]], "rectangle")]
    parsed, rejects = _join(tmp_path, {"d.json": labelme_json(box, "d.jpg", image_data="%%")}, [])
    assert parsed == []
    assert sorted((r.kind, r.reason) for r in rejects) == [
        ("image", "missing"), ("warning", "invalid_image_data")]


def test_parsed_annotations_survive_the_join_coder_even_with_non_utf8_text():
    parsed = parse(labelme_json([shape("caf\udce9", [[1, 2], [3, 4], [1, 9]]),
                                 shape("dog", [[1, 2], [3, 4]], "rectangle"),
                                 shape("eye", [[1, 1]], "point")], image_data="%%"))
    coder = JoinMessageCoder()
    for message in (ParsedAnnotationFile("R/\udcff.json", "val", parsed),
                    ParsedAnnotationFile("R/a.json", "", failure=("malformed_json", "R/a.json: x"))):
        assert coder.decode(coder.encode(message)) == message


def test_outlines_are_dropped_without_masks_boxes_unchanged():
    document = labelme_json([shape("cat", [[10, 10], [20, 12], [15, 30]], group_id=1),
                             shape("cat", [[0, 0], [5, 5]], "rectangle", group_id=1)])
    with_outlines = parse(document)
    without = parse_labelme_json(json.dumps(document).encode(), "R/a.json", "a.json",
                                 outlines=False)
    assert [o.segmentation for o in without.objects] == [None]
    assert [o.bbox for o in without.objects] == [o.bbox for o in with_outlines.objects] == [
        (0, 0, 20, 30)]


def _mask_shape(label, points, pixels, group_id=None, mode="L"):
    """A labelme 5 ``mask`` shape: its PNG as labelme writes it (0/1 pixels, base64)."""
    buffer = io.BytesIO()
    Image.fromarray(np.asarray(pixels, dtype=np.uint8), mode).save(buffer, format="PNG")
    return {**shape(label, points, "mask", group_id),
            "mask": base64.b64encode(buffer.getvalue()).decode()}


def _written_masks(tmp_path, parsed, width, height, classes):
    path = tmp_path / "a.png"
    path.write_bytes(_png(width, height))
    image = ParsedImage("a", "train", str(path), 1, "a.png", width, height, parsed.objects,
                        "a.json")
    [record] = [o for o in build_record(image, classes) if isinstance(o, ImageRecord)]
    features, _kinds, rejects, counts = LabelmeEncoder(include_masks=True).label_features(
        record, inspect_image(path.read_bytes()))
    masks = [np.array(Image.open(io.BytesIO(png))) for png in features["image/object/mask"]]
    return features, masks, rejects, counts


def test_mask_shapes_become_objects_with_their_pixels_and_box(tmp_path):
    patch = np.zeros((5, 7), dtype=np.uint8)
    patch[1:4, 2:6] = 1  # the PNG spans the box of its two points; its pixels less
    patch[4, 6] = 1
    document = labelme_json([_mask_shape("blob", [[10, 4], [16, 8]], patch)], width=40,
                            height=20)
    parsed = parse(document)
    [blob] = parsed.objects
    assert parsed.rejects == ()
    assert blob.bbox == (12, 5, 5, 4)  # x 12..16 inclusive, y 5..8 inclusive
    features, [mask], rejects, counts = _written_masks(tmp_path, parse_labelme_json(
        json.dumps(document).encode(), "R/a.json", "a.json", outlines=True), 40, 20, ["blob"])
    expected = np.zeros((20, 40), dtype=np.uint8)
    expected[4:9, 10:17] = patch
    assert rejects == [] and counts["masks_from_boxes"] == 0
    assert mask.tolist() == expected.tolist()
    assert features["image/object/bbox/xmin"] == [pytest.approx(12 / 40)]
    # Without masks, only the box travels.
    plain = parse_labelme_json(json.dumps(document).encode(), "R/a.json", "a.json",
                               outlines=False)
    assert plain.objects[0].bbox == blob.bbox and plain.objects[0].segmentation is None


def test_a_mask_shape_grouped_with_a_polygon_is_their_union(tmp_path):
    patch = np.ones((2, 2), dtype=np.uint8)
    parsed = parse(labelme_json([
        _mask_shape("cat", [[30, 10], [31, 11]], patch, group_id=3),
        shape("cat", [[0, 0], [10, 0], [10, 10], [0, 10]], group_id=3)], width=40, height=20))
    [cat] = parsed.objects
    assert cat.bbox == (0, 0, 32, 12)
    _features, [mask], rejects, _counts = _written_masks(tmp_path, parsed, 40, 20, ["cat"])
    assert rejects == [] and mask[10:12, 30:32].all() and mask[5, 5] and not mask[15, 20]


@pytest.mark.parametrize(("change", "reason", "said"), [
    ({"mask": None}, "invalid_mask", "it has no mask"),
    ({"mask": "%%%"}, "invalid_mask", "not base64"),
    ({"mask": base64.b64encode(b"not a png").decode()}, "invalid_mask", "not a readable PNG"),
    ({"points": [[1, 1]]}, "invalid_shape", "exactly 2 points"),
])
def test_mask_shapes_that_cannot_be_used_are_rejected(change, reason, said):
    bad = {**_mask_shape("blob", [[1, 1], [2, 2]], np.ones((2, 2))), **change}
    parsed = parse(labelme_json([bad], width=40, height=20))
    [reject] = parsed.rejects
    assert parsed.objects == () and reject.reason == reason and said in reject.detail, reject
    assert " at 0x" not in reject.detail  # no object's address: the same input, the same bytes


def test_mask_shapes_refuse_a_png_larger_than_the_image_and_an_empty_one():
    too_big = _mask_shape("blob", [[0, 0], [1, 1]], np.ones((30, 50)))
    empty = _mask_shape("blob", [[0, 0], [1, 1]], np.zeros((2, 2)))
    rgb = _mask_shape("blob", [[0, 0], [1, 1]], np.ones((2, 2, 3)), mode="RGB")
    parsed = parse(labelme_json([too_big, empty, rgb], width=40, height=20))
    said = [("invalid_mask", "the mask PNG is 50x30, more than the 800 pixels allowed"),
            ("degenerate_bbox", "the mask has no pixel set; the image was written without"),
            ("invalid_mask", "the mask PNG has RGB pixels; a mask has one channel")]
    assert [r.reason for r in parsed.rejects] == [reason for reason, _text in said]
    for reject, (_reason, text) in zip(parsed.rejects, said, strict=True):
        assert text in reject.detail, reject.detail
    no_size = {**labelme_json([empty]), "imageWidth": None}
    [reject] = parse(no_size).rejects
    assert reject.reason == "missing_field" and "imageWidth and imageHeight" in reject.detail
