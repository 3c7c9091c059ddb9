"""Pascal VOC parsing: one XML, the label map, the join of XMLs, images and split lists."""

from __future__ import annotations

import io
import os

import pytest
from apache_beam.pvalue import TaggedOutput
from PIL import Image

from recordbeam.images.checks import inspect_image
from recordbeam.records import ImageRecord
from recordbeam.sources.annotated_files import (
    AnnotationFile,
    AnnotationFileError,
    ImageFile,
    JoinMessageCoder,
    ParsedImage,
    SplitEntry,
    _JoinAndParse,
    _List,
    build_record,
)
from recordbeam.sources.detection import DetectionObject
from recordbeam.sources.voc.reader import (
    VocEncoder,
    VocError,
    VocFormat,
    VocOptions,
    parse_labelmap,
    parse_voc_xml,
    split_list_id,
    split_lists,
)


def voc_xml(objects: str, filename: str = "a.jpg", width: int = 64, height: int = 48) -> str:
    return (f"<annotation><folder>VOC</folder><filename>{filename}</filename>"
            f"<size><width>{width}</width><height>{height}</height><depth>3</depth></size>"
            f"{objects}</annotation>")


def voc_object(name: str, box: tuple, difficult: int = 0, truncated: int = 0,
               pose: str = "Unspecified") -> str:
    xmin, ymin, xmax, ymax = box
    return (f"<object><name>{name}</name><pose>{pose}</pose><truncated>{truncated}</truncated>"
            f"<difficult>{difficult}</difficult><bndbox><xmin>{xmin}</xmin><ymin>{ymin}</ymin>"
            f"<xmax>{xmax}</xmax><ymax>{ymax}</ymax></bndbox></object>")


def test_objects_flags_and_size_are_read():
    xml = voc_xml(voc_object("dog", (1, 2, 30, 40), difficult=1, pose="Frontal")
                  + voc_object("cat", (5.5, 6, 7, 8), truncated=1))
    parsed = parse_voc_xml(xml.encode(), "Annotations/a.xml")
    assert (parsed.filename, parsed.width, parsed.height) == ("a.jpg", 64, 48)
    assert [(o.name, o.bbox, o.extra) for o in parsed.objects] == [
        ("dog", (1, 2, 29, 38), (1, 0, "Frontal")), ("cat", (5.5, 6, 1.5, 2), (0, 1, "Unspecified"))]
    assert parsed.rejects == ()


def test_flags_written_as_words_are_read():
    # <difficult>true</difficult> was read as 0: a difficult object written as not.
    xml = voc_xml(voc_object("dog", (1, 2, 30, 40), difficult="true", truncated="True")
                  + voc_object("cat", (1, 2, 30, 40), difficult="false", truncated=" 1.0 "))
    parsed = parse_voc_xml(xml.encode(), "Annotations/a.xml")
    assert [o.extra[:2] for o in parsed.objects] == [(1, 1), (0, 1)]


def test_windows_line_endings_bom_and_class_names_with_spaces():
    xml = voc_xml(voc_object(" traffic light ", (1, 2, 30, 40))).replace("><", ">\r\n  <")
    parsed = parse_voc_xml(b"\xef\xbb\xbf" + xml.encode(), "Annotations/a.xml")
    assert [o.name for o in parsed.objects] == ["traffic light"]
    assert parsed.filename == "a.jpg"


@pytest.mark.parametrize("doctype", [
    '<!DOCTYPE annotation [<!ENTITY who "expanded-dog">]>',
    '<!DOCTYPE annotation [<!ENTITY who SYSTEM "file:///etc/passwd">]>',
])
def test_doctype_with_entities_is_refused_not_expanded(doctype):
    xml = doctype + voc_xml(voc_object("&who;", (1, 2, 30, 40)))
    with pytest.raises(AnnotationFileError) as refused:
        parse_voc_xml(xml.encode(), "Annotations/a.xml")
    assert refused.value.reason == "unsafe_xml"
    assert "Annotations/a.xml" in refused.value.detail
    assert "expanded-dog" not in refused.value.detail and "root:" not in refused.value.detail


@pytest.mark.parametrize("data, where", [
    (b"<annotation><filename>a.jpg</filename", "not well-formed"),
    (b"<labelme><shape/></labelme>", "<labelme>"),
])
def test_malformed_xml_names_the_file(data, where):
    with pytest.raises(AnnotationFileError) as bad:
        parse_voc_xml(data, "Annotations/a.xml")
    assert bad.value.reason == "malformed_xml"
    assert bad.value.detail.startswith("Annotations/a.xml: ") and where in bad.value.detail


def test_unusable_objects_are_rejected_with_their_element():
    xml = voc_xml(voc_object("dog", (1, 2, 30, 40))
                  + voc_object("", (1, 2, 30, 40))
                  + voc_object("cat", ("x", 2, 30, 40))
                  + voc_object("cow", (30, 2, 30, 40))
                  + voc_object("hen", (1, 50, 30, 40)))
    parsed = parse_voc_xml(xml.encode(), "A/a.xml")
    assert [o.name for o in parsed.objects] == ["dog"]
    assert [(r.kind, r.source, r.reason) for r in parsed.rejects] == [
        ("annotation", "A/a.xml: object[1]", "missing_field"),
        ("annotation", "A/a.xml: object[2]", "invalid_bbox"),
        ("annotation", "A/a.xml: object[3]", "degenerate_bbox"),
        ("annotation", "A/a.xml: object[4]", "degenerate_bbox"),
    ]


def test_labelmap_plain_and_datumaro_forms():
    assert parse_labelmap("dog\r\ntraffic light\r\n\r\ncat\r\n", "l.txt") == [
        "dog", "traffic light", "cat"]
    datumaro = ("# label:color_rgb:parts:actions\nbackground:0,0,0::\n"
                "person:192,128,128::\ntraffic light:0,64,0::\n")
    assert parse_labelmap(datumaro, "l.txt") == ["person", "traffic light"]


@pytest.mark.parametrize("text, problem", [
    ("dog\ncat\ndog\n", "already appears on line 1"),
    ("# only a comment\nbackground\n", "lists no classes"),
    (":0,0,0::\n", "line 1 has no class name"),
])
def test_labelmap_problems_name_file_and_line(text, problem):
    with pytest.raises(VocError, match=problem):
        parse_labelmap(text, "ROOT/labelmap.txt")


def test_split_lists_skip_class_lists_and_trainval_beside_train_and_val(tmp_path):
    main = tmp_path / "ImageSets" / "Main"
    main.mkdir(parents=True)
    for name in ("train", "val", "trainval", "dog_train"):
        (main / f"{name}.txt").write_text("a\n")
    assert list(split_lists(VocOptions(str(tmp_path)))) == ["train", "val"]
    (main / "val.txt").unlink()
    assert list(split_lists(VocOptions(str(tmp_path)))) == ["train", "trainval"]


def test_join_messages_and_records_survive_their_coders():
    from recordbeam.sources.record_coder import ImageRecordCoder

    coder = JoinMessageCoder()
    for message in (AnnotationFile("A/\udcff.xml"), ImageFile("J/a b.JPG", 12345),
                    SplitEntry("train", "ImageSets/Main/train.txt:7")):
        assert coder.decode(coder.encode(message)) == message
    xml = voc_xml(voc_object("traffic light", (1, 2, 30, 40), difficult=1, pose="Left"))
    objects = parse_voc_xml(xml.encode(), "A/a.xml").objects
    image = ParsedImage("a", "val", "J/a.jpg", 10, "a.jpg", 64, 48, objects, "A/a.xml")
    [record] = [o for o in build_record(image, ["traffic light"], "labelmap.txt") if isinstance(o, ImageRecord)]
    decoded = ImageRecordCoder().decode(ImageRecordCoder().encode(record))
    assert VocEncoder().objects(decoded) == VocEncoder().objects(record) == (
        DetectionObject("A/a.xml: object[0]", 1, "traffic light", (1.0, 2.0, 29.0, 38.0),
                        (1, 0, "Left")),)


def _join(tmp_path, tagged, has_split_lists=True):
    """Run the join by id on one image id; returns (parsed images, rejects, counts)."""
    options = VocOptions(str(tmp_path))
    fmt = VocFormat(options, {}, None)
    out = list(_JoinAndParse(fmt, has_split_lists).process(("a", tagged)))
    parsed = [o for o in out if not isinstance(o, TaggedOutput)]
    rejects = [o.value for o in out if isinstance(o, TaggedOutput) and o.tag == "rejects"]
    counts = [o.value for o in out if isinstance(o, TaggedOutput) and o.tag == "counts"]
    return parsed, rejects, counts


def test_xml_without_image_rejects_the_image_naming_the_xml(tmp_path):
    xml = tmp_path / "a.xml"
    xml.write_text(voc_xml(voc_object("dog", (1, 2, 30, 40))))
    parsed, rejects, _ = _join(tmp_path, [AnnotationFile(str(xml)), SplitEntry("train", "train.txt:1")])
    assert parsed == []
    assert [(r.kind, r.source, r.reason, r.split) for r in rejects] == [
        ("image", str(xml), "missing", "train")]
    assert "'a.jpg'" in rejects[0].detail


def test_image_without_xml_is_kept_without_objects_and_warned(tmp_path):
    image = str(tmp_path / "a.JPG")  # upper-case extension: still the image of id "a"
    parsed, rejects, _ = _join(tmp_path, [ImageFile(image, 10), SplitEntry("val", "val.txt:3")])
    assert [(p.image_id, p.split, p.path, p.objects) for p in parsed] == [("a", "val", image, ())]
    assert [(r.kind, r.reason, r.source) for r in rejects] == [
        ("warning", "no_annotation_file", image)]


def test_image_in_no_split_list_is_counted_not_written(tmp_path):
    parsed, rejects, counts = _join(tmp_path, [ImageFile(str(tmp_path / "a.jpg"), 10)])
    assert (parsed, rejects, counts) == ([], [], [("voc_images_in_no_split_list", 1)])


def test_xml_filename_picks_among_images_of_one_id(tmp_path):
    xml = tmp_path / "a.xml"
    xml.write_text(voc_xml("", filename="a.png"))
    tagged = [AnnotationFile(str(xml)), ImageFile(str(tmp_path / "a.jpg"), 1),
              ImageFile(str(tmp_path / "a.png"), 2)]
    parsed, rejects, _ = _join(tmp_path, tagged, has_split_lists=False)
    assert [(p.path, p.split) for p in parsed] == [(str(tmp_path / "a.png"), "train")]
    assert rejects == []


def test_unknown_class_is_rejected_other_objects_labelled_from_one():
    xml = voc_xml(voc_object("dog", (1, 2, 30, 40)) + voc_object("yak", (1, 2, 3, 4)))
    objects = parse_voc_xml(xml.encode(), "A/a.xml").objects
    image = ParsedImage("a", "train", "J/a.jpg", 10, "a.jpg", 64, 48, objects, "A/a.xml")
    out = list(build_record(image, ["cat", "dog"], "labelmap.txt"))
    rejects = [o.value for o in out if isinstance(o, TaggedOutput)]
    [record] = [o for o in out if not isinstance(o, TaggedOutput)]
    assert [(r.source, r.reason) for r in rejects] == [("A/a.xml: object[1]", "unknown_category")]
    assert VocEncoder().objects(record) == (
        DetectionObject("A/a.xml: object[0]", 2, "dog", (1.0, 2.0, 29.0, 38.0),
                        (0, 0, "Unspecified")),)


def _jpeg(width: int, height: int) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (width, height)).save(buffer, format="JPEG")
    return buffer.getvalue()


def test_encoder_writes_od_api_keys_and_clips_boxes(tmp_path):
    path = tmp_path / "a.jpg"
    path.write_bytes(_jpeg(100, 50))
    objects = (
        DetectionObject("A/a.xml: object[0]", 1, "dog", (10.0, 5.0, 40.0, 20.0), (1, 0, "Left")),
        DetectionObject("A/a.xml: object[1]", 2, "cat", (90.0, 40.0, 30.0, 30.0), (0, 1, "Rear")),
        DetectionObject("A/a.xml: object[2]", 2, "cat", (200.0, 5.0, 10.0, 10.0), (0, 0, "X")),
    )
    record = ImageRecord("a", str(path), path.stat().st_size, "train",
                         {"source_id": "a", "filename": "a.jpg", "width": 100, "height": 50,
                          "objects": objects})
    info = inspect_image(path.read_bytes())
    features, kinds, rejects, counts = VocEncoder().label_features(record, info)
    assert features["image/object/bbox/xmin"] == [0.1, 0.9]
    assert features["image/object/bbox/xmax"] == [0.5, 1.0]
    assert features["image/object/bbox/ymin"] == [0.1, 0.8]
    assert features["image/object/bbox/ymax"] == [0.5, 1.0]
    assert features["image/object/class/text"] == ["dog", "cat"]
    assert features["image/object/difficult"] == [1, 0]
    assert features["image/object/truncated"] == [0, 1]
    assert features["image/object/view"] == ["Left", "Rear"]
    assert kinds["image/object/view"] == "bytes"
    assert [(r.source, r.reason) for r in rejects] == [("A/a.xml: object[2]", "empty_bbox")]
    assert counts == {"boxes_written": 2, "boxes_clipped": 1}


@pytest.mark.parametrize("line, image_id", [
    ("2008_000123\r\n", "2008_000123"),
    ("  my photo 1 \r\n", "my photo 1"),
    ("   \n", ""),
])
def test_split_list_ids_keep_spaces(line, image_id):
    assert split_list_id(line) == image_id


def test_boxes_drawn_on_the_exif_rotated_image_are_not_rotated_again(tmp_path):
    from recordbeam.images.transcode import ImageFixes

    exif = Image.Exif()
    exif[0x0112] = 6  # displayed rotated 90 degrees clockwise: 100x50 stored, 50x100 shown
    path = tmp_path / "a.jpg"
    Image.new("RGB", (100, 50)).save(path, format="JPEG", exif=exif)
    objects = (DetectionObject("A/a.xml: object[0]", 1, "dog", (10.0, 20.0, 20.0, 40.0),
                               (0, 0, "Unspecified")),)
    # The XML's <size> is the displayed one: the tool showed the rotated image.
    record = ImageRecord("a", str(path), path.stat().st_size, "train",
                         {"source_id": "a", "filename": "a.jpg", "width": 50, "height": 100,
                          "objects": objects})
    info = inspect_image(path.read_bytes())
    encoder = VocEncoder(fixes=ImageFixes(apply_exif=True))
    features, _kinds, rejects, _counts = encoder.label_features(record, info)
    assert [features[f"image/object/bbox/{k}"][0] for k in ("xmin", "ymin", "xmax", "ymax")] \
        == pytest.approx([0.2, 0.2, 0.6, 0.6])
    assert rejects == []


def test_file_names_that_are_not_utf8_are_rejected_not_crashing_the_listing(tmp_path):
    images = tmp_path / "JPEGImages"
    images.mkdir()
    (images / "good.jpg").write_bytes(b"x")
    with open(os.path.join(os.fsencode(images), b"\xff.jpg"), "wb") as f:
        f.write(b"x")
    fmt = VocFormat(VocOptions(str(tmp_path)), {}, None)
    [_annotations, image_listing] = fmt.listings()
    out = list(_List(fmt, None).process(image_listing))
    keyed = [o for o in out if not isinstance(o, TaggedOutput)]
    rejects = [o.value for o in out if isinstance(o, TaggedOutput) and o.tag == "rejects"]
    inputs = [o.value for o in out if isinstance(o, TaggedOutput) and o.tag == "inputs"]
    assert [key for key, _value in keyed] == ["good"]
    assert [(r.reason, r.source.rsplit("/", 1)[-1]) for r in rejects] == [
        ("invalid_file_name", "\\udcff.jpg")]
    for meta in inputs:  # every path Beam encodes must be UTF-8
        meta.path.encode("utf-8")
