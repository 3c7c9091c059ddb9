"""CVAT for images 1.1 XML: the head the launcher reads, the stream a worker reads, the
shapes and CVAT's mask RLE."""

from __future__ import annotations

import io

import apache_beam as beam
import numpy as np
import pytest

from recordbeam.images.masks import segmentation_to_mask
from recordbeam.records import Reject
from recordbeam.sources.cvat.reader import (
    CvatError,
    CvatExport,
    CvatOptions,
    CvatTrackShape,
    CvatTrackShapeCoder,
    cvat_mask,
    parse_points,
    pixel_box,
    plan,
    read_meta,
    stream_images,
)
from recordbeam.sources.exports import ExportEntry, ExportEntryCoder, Part

META = ("<annotations><version>1.1</version><meta><task><name>t</name><subset>{subset}</subset>"
        "<labels><label><name>traffic light</name></label><label><name>dog</name></label>"
        "<label><name>eye</name><parent>dog</parent></label></labels></task></meta>")


def _sorted_out(outs) -> tuple[list[ExportEntry], list[Part], list[Reject], dict[str, int]]:
    """What the stream yields, by type: entries, parts, rejects, counts (summed); nothing
    else."""
    entries, parts, rejects, counts = [], [], [], {}
    for out in outs:
        if isinstance(out, ExportEntry):
            entries.append(out)
        elif isinstance(out, Part):
            parts.append(out)
        elif isinstance(out, Reject):
            rejects.append(out)
        else:
            assert type(out) is tuple and len(out) == 2, out
            counter, n = out
            counts[counter] = counts.get(counter, 0) + n
    return entries, parts, rejects, counts


def _stream(body: str, subset: str | None = None, splits=("train",), masks=False,
            path="a/annotations.xml"):
    data = io.BytesIO(("\ufeff" + META.format(subset="") + body + "</annotations>").encode())
    images, parts, rejects, counts = _sorted_out(
        stream_images(path, data, subset, splits, "train", masks))
    assert parts == []  # only a video's tracks are parts
    return images, rejects, counts


def test_meta_labels_in_order_with_spaces_bom_and_without_sublabels(tmp_path):
    path = tmp_path / "annotations.xml"
    # Only the head is read: what follows the first <image> may even be broken.
    path.write_bytes(b"\xef\xbb\xbf" + META.format(subset="Train").encode()
                     + b'<image name="a.jpg"><box label=')
    meta = read_meta(str(path))
    assert meta.labels == ("traffic light", "dog")
    assert meta.subsets == ("Train",)


def test_project_meta_subsets_become_splits(tmp_path):
    (tmp_path / "annotations.xml").write_text(
        "<annotations><meta><project><labels><label><name>cat</name></label></labels>"
        "<subsets>Train\nValidation</subsets></project></meta></annotations>")
    (tmp_path / "images").mkdir()
    planned = plan(CvatOptions(str(tmp_path)))
    assert planned.splits == ("Train", "Validation")
    assert planned.classes == ["cat"]


def test_datumaro_subset_files_are_splits_and_must_agree_on_labels(tmp_path):
    (tmp_path / "val.xml").write_text(META.format(subset="") + "</annotations>")
    (tmp_path / "train.xml").write_text(META.format(subset="") + "</annotations>")
    planned = plan(CvatOptions(str(tmp_path)))
    assert planned.splits == ("train", "val")
    assert planned.classes == ["traffic light", "dog"]
    (tmp_path / "test.xml").write_text(
        "<annotations><meta><task><labels><label><name>cat</name></label></labels></task>"
        "</meta></annotations>")
    with pytest.raises(CvatError, match=r"train.xml declares the labels .*, but .*test.xml declares"):
        plan(CvatOptions(str(tmp_path)))


@pytest.mark.parametrize("head, expected", [
    ('<!DOCTYPE annotations [<!ENTITY x "dog">]><annotations/>', "declares entities"),
    ('<?xml version="1.0"?><!DOCTYPE annotations [<!ENTITY s SYSTEM "file:///etc/hostname">]>'
     "<annotations>&s;</annotations>", "declares entities"),
    ("<annotations><meta>", "not well-formed XML at line 1"),
    ("<annotation><filename>a.jpg</filename></annotation>", "not <annotations>"),
])
def test_unusable_xml_is_refused_with_its_file(tmp_path, head, expected):
    path = tmp_path / "annotations.xml"
    path.write_text(head)
    with pytest.raises(CvatError, match=expected) as refused:
        read_meta(str(path))
    assert str(path) in str(refused.value)


def test_shapes_become_objects_and_groups_merge():
    images, rejects, counts = _stream(
        '<image id="0" name="sub/A.JPG" width="20" height="10">'
        '<box label="dog" xtl="1" ytl="2" xbr="5" ybr="6" occluded="1" z_order="0"/>'
        '<polygon label="traffic light" points="10,1;14,1;14,5" occluded="0" group_id="7"/>'
        '<box label="traffic light" xtl="9.5" ytl="0.5" xbr="14.5" ybr="5.5" group_id="7"/>'
        '<polyline label="dog" points="1,1;2,2"/><points label="dog" points="1,1"/>'
        '<tag label="dog"/><skeleton label="dog"/>'
        "</image>", masks=True)
    assert rejects == []
    [parsed] = images
    assert parsed.key == "sub/A.JPG" and parsed.export == "a/annotations.xml"
    assert (parsed.split, parsed.width, parsed.height) == ("train", 20, 10)
    dog, light = parsed.objects
    assert (dog.name, dog.bbox, dog.extra, dog.segmentation) == ("dog", (1, 2, 4, 4), (1,), None)
    # The group: box from its <box>, mask from its polygon.
    assert light.name == "traffic light" and light.bbox == (9.5, 0.5, 5, 5)
    assert light.segmentation == [[10, 1, 14, 1, 14, 5]] and light.extra == (0,)
    assert counts == {"cvat_polyline_skipped": 1, "cvat_points_skipped": 1,
                      "cvat_tag_skipped": 1, "cvat_skeleton_skipped": 1,
                      "cvat_grouped_shapes_merged": 1}


def test_polygons_are_kept_only_for_masks():
    images, _rejects, _counts = _stream(
        '<image name="a.jpg" width="20" height="10">'
        '<polygon label="dog" points="10,1;14,1;14,5"/></image>', masks=False)
    [obj] = images[0].objects
    assert obj.bbox == (10, 1, 4, 4) and obj.segmentation is None


def test_broken_shapes_are_rejected_with_file_and_element():
    _images, rejects, _counts = _stream(
        '<image name="a.jpg" width="20" height="10">'
        '<box label="dog" xtl="5" ytl="2" xbr="5" ybr="6"/>'
        '<box label="dog" xtl="x" ytl="2" xbr="5" ybr="6"/>'
        '<polygon label="dog" points="1,1;2"/>'
        '<polygon label="dog" points="1,1;2,2"/>'
        '<mask label="dog" rle="1, 2" left="0" top="0" width="2" height="2"/>'
        '<mask label="dog" rle="4" left="0" top="0" width="2" height="2"/>'
        '<box xtl="1" ytl="2" xbr="5" ybr="6"/>'
        '<box label="dog" xtl="1" ytl="1" xbr="3" ybr="3" group_id="2"/>'
        '<polygon label="cat" points="1,1;3,1;3,3" group_id="2"/>'
        "</image>")
    found = [(r.source, r.reason) for r in rejects]
    where = "a/annotations.xml: <image name='a.jpg'>"
    assert found == [
        (f"{where} <box>[0]", "degenerate_bbox"), (f"{where} <box>[1]", "invalid_bbox"),
        (f"{where} <polygon>[0]", "malformed_points"),
        (f"{where} <polygon>[1]", "malformed_points"),
        (f"{where} <mask>[0]", "malformed_rle"), (f"{where} <mask>[1]", "degenerate_bbox"),
        (f"{where} <box>[2]", "missing_field"),
        (f"{where} group_id=2", "group_label_conflict"),
    ]
    assert all(r.split == "train" and "Traceback" not in r.detail for r in rejects)
    assert "cover 3 pixels but the mask is 2x2 = 4" in rejects[4].detail


def test_image_without_name_or_in_undeclared_subset_is_rejected():
    images, rejects, _counts = _stream(
        '<image id="3" width="4" height="4"/><image name="b.jpg" subset="Test"/>'
        '<image name="c.jpg" subset="train"/>')
    assert [image.key for image in images] == ["c.jpg"]
    assert [(r.source, r.reason) for r in rejects] == [
        ("a/annotations.xml: <image>[0]", "missing_field"),
        ("a/annotations.xml: <image name='b.jpg'>", "undeclared_subset")]


def test_the_file_name_fixes_the_subset_and_tracks_are_counted():
    images, _rejects, counts = _stream(
        '<track id="0" label="dog"><box frame="0" xtl="1" ytl="1" xbr="2" ybr="2"/></track>'
        '<image name="a.jpg" subset="other"/>', subset="val", splits=("train", "val"))
    assert images[0].split == "val"
    assert counts == {"cvat_tracks_skipped": 1}


def test_rotated_box_is_enclosed():
    images, _rejects, counts = _stream(
        '<image name="a.jpg" width="20" height="20">'
        '<box label="dog" xtl="4" ytl="8" xbr="12" ybr="10" rotation="90"/></image>')
    x, y, w, h = images[0].objects[0].bbox
    assert (x, y, w, h) == pytest.approx((7, 5, 2, 8))
    assert counts == {"cvat_rotated_boxes_enclosed": 1}


def test_cvat_rle_decodes_to_the_hand_built_mask():
    # A 3x2 box at (2, 1) of a 6x4 image, rows "0 1 1" and "1 1 0": runs 1, 4, 1 as
    # CVAT writes them, starting with 0s.
    mask = cvat_mask("1, 4, 1", 2, 1, 3, 2, 6, 4)
    expected = np.zeros((4, 6), dtype=np.uint8)
    expected[1, 3:5] = 1
    expected[2, 2:4] = 1
    assert segmentation_to_mask(mask, 6, 4).tolist() == expected.tolist()
    assert pixel_box(mask) == (2, 1, 3, 2)


@pytest.mark.parametrize("runs, box", [
    ("6, 2, 7", (1, 1, 2, 1)),  # one run inside row 1 of a 5-wide box
    ("3, 4, 8", (0, 0, 5, 2)),  # a run over row 0's end into row 1
    ("15", None),
])
def test_pixel_box_comes_from_the_runs(runs, box):
    mask = cvat_mask(runs, 0, 0, 5, 3, 5, 3)
    assert pixel_box(mask) == box
    pixels = segmentation_to_mask(mask, 5, 3)
    rows, columns = np.flatnonzero(pixels.any(axis=1)), np.flatnonzero(pixels.any(axis=0))
    drawn = (columns[0], rows[0], columns[-1] + 1 - columns[0], rows[-1] + 1 - rows[0]) \
        if rows.size else None
    assert drawn == box


def test_mask_element_gives_its_pixel_box_and_mask():
    images, rejects, _counts = _stream(
        '<image name="a.jpg" width="6" height="4">'
        '<mask label="dog" rle="1, 4, 1" left="2" top="1" width="3" height="2" occluded="1"/>'
        "</image>", masks=True)
    assert rejects == []
    [obj] = images[0].objects
    assert obj.bbox == (2, 1, 3, 2) and obj.extra == (1,)
    pixels = segmentation_to_mask(obj.segmentation, 6, 4)
    assert pixels[1:3, 2:5].tolist() == [[0, 1, 1], [1, 1, 0]]


def test_cvat_rle_outside_the_image_or_not_numbers_is_refused():
    with pytest.raises(ValueError, match="outside the 6x4 image"):
        cvat_mask("0, 6", 4, 0, 3, 2, 6, 4)
    with pytest.raises(ValueError, match="not a number"):
        cvat_mask("1, a", 0, 0, 1, 1, 6, 4)


def test_points_parse():
    assert parse_points("1.5,2;3,4") == [1.5, 2, 3, 4]
    assert parse_points("1,2;3") is None and parse_points("1,nan") is None


def test_group_of_polygon_and_mask_gives_the_union_of_their_pixels():
    images, rejects, _counts = _stream(
        '<image name="a.jpg" width="6" height="4">'
        '<mask label="dog" rle="0, 1" left="0" top="0" width="1" height="1" group_id="5"/>'
        '<polygon label="dog" points="3,2;5,2;5,4;3,4" group_id="5"/>'
        "</image>", masks=True)
    assert rejects == []
    [obj] = images[0].objects
    assert obj.bbox == (0, 0, 5, 4)  # around both outlines
    pixels = segmentation_to_mask(obj.segmentation, 6, 4)
    assert pixels[0, 0] == 1 and pixels[3, 4] == 1 and pixels[0, 4] == 0


def test_what_cvat_hands_the_join_crosses_it_as_it_was(tmp_path):
    # What CvatExport.parse yields goes through Beam's join with the coders registered for
    # its types: a video export's <image> (objects with masks, occluded, track id -1) and
    # a <track>'s shapes (a polygon and a mask), from an XML whose path is not UTF-8.
    head = ("<annotations><meta><task><mode>interpolation</mode><original_size><width>6"
            "</width><height>4</height></original_size><labels><label><name>dog</name>"
            "</label></labels></task></meta>")
    body = ('<track id="3" label="dog"><polygon frame="0" outside="0" occluded="1" '
            'points="3,2;5,2;5,4"/><mask frame="1" outside="0" rle="0, 1" left="0" top="0" '
            'width="1" height="1"/></track>'
            '<image name="frame_000002" width="6" height="4">'
            '<polygon label="dog" points="3,2;5,2;5,4" occluded="1"/>'
            '<mask label="dog" rle="0, 1" left="0" top="0" width="1" height="1"/></image>'
            "</annotations>")
    (tmp_path / "annotations.xml").write_text(head + body)
    export = CvatExport(CvatOptions(str(tmp_path), include_masks=True))
    assert export.tracks and export.part_type is CvatTrackShape
    for path in ("a/annotations.xml", "odd-\udcff/annotations.xml"):
        outs = list(export.parse(path, io.BytesIO((head + body).encode())))
        [entry] = [o for o in outs if isinstance(o, ExportEntry)]
        parts = [o.value for o in outs if isinstance(o, Part)]
        assert [o.extra for o in entry.objects] == [(1, -1), (0, -1)]
        assert [type(o.segmentation) for o in entry.objects] == [list, dict]
        assert [type(p.shape.segmentation) for p in parts] == [list, dict]
        for value, coder_type in ((entry, ExportEntryCoder),
                                  *((part, CvatTrackShapeCoder) for part in parts)):
            coder = beam.coders.registry.get_coder(type(value))
            assert isinstance(coder, coder_type)
            assert coder.decode(coder.encode(value)) == value


def _stream_tracks(body: str, splits=("train",), subset=None):
    head = ("<annotations><meta><task><mode>interpolation</mode><original_size><width>64"
            "</width><height>48</height></original_size></task></meta>")
    data = io.BytesIO((head + body + "</annotations>").encode())
    images, tracks, rejects, counts = _sorted_out(
        stream_images("v.xml", data, subset, splits, "train", False, frames=True))
    assert images == []  # a track's shapes are no entries of their own
    return tracks, rejects, counts


def test_track_shapes_are_keyed_by_frame_outside_ones_left_out():
    tracks, rejects, counts = _stream_tracks(
        '<track id="7" label="car" group_id="2" subset="Validation">'
        '<box frame="0" outside="0" occluded="1" keyframe="1" xtl="1" ytl="2" xbr="11" ybr="12"/>'
        '<box frame="1" outside="0" occluded="0" keyframe="0" xtl="2" ytl="2" xbr="12" ybr="12">'
        '<attribute name="color">red</attribute></box>'
        '<box frame="2" outside="1" occluded="0" keyframe="1" xtl="3" ytl="2" xbr="13" ybr="12"/>'
        '</track>'
        '<track id="8" label="car" subset="Train"><points frame="0" outside="0" points="1,1"/>'
        '<box frame="x" outside="0" xtl="1" ytl="2" xbr="11" ybr="12"/></track>',
        splits=("Train", "Validation"))
    assert [(key, shape.split, shape.track_id, shape.shape.label, shape.shape.group,
             shape.shape.box, shape.shape.occluded, (shape.width, shape.height))
            for key, shape in tracks] == [
        ("frame_000000", "Validation", 7, "car", "2", (1, 2, 10, 10), 1, (64, 48)),
        ("frame_000001", "Validation", 7, "car", "2", (2, 2, 10, 10), 0, (64, 48))]
    [no_frame] = rejects
    assert no_frame.reason == "missing_field" and "<track id=8> <box frame='x'>" in no_frame.source
    assert counts == {"cvat_points_skipped": 1}


def test_tracks_outside_frame_mode_are_counted_and_skipped():
    data = io.BytesIO((META.format(subset="") + '<track id="0" label="dog"><box frame="0" '
                       'outside="0" xtl="1" ytl="2" xbr="11" ybr="12"/></track>'
                       "</annotations>").encode())
    outs = list(stream_images("a.xml", data, None, ("train",), "train", False))
    assert [(type(o), o) for o in outs] == [(tuple, ("cvat_tracks_skipped", 1))]


@pytest.mark.parametrize(("name", "key"), [
    ("frame_000012.PNG", "frame_000012"), ("frame_000012", "frame_000012"),
    ("frame_12.jpg", "frame_12"), ("sub/frame_000012.png", "sub/frame_000012.png"),
    ("a.jpg", "a.jpg"), ("frame_x.png", "frame_x.png"),
])
def test_frame_key_drops_the_extension_of_frame_names_only(name, key):
    from recordbeam.sources.cvat.reader import frame_key

    assert frame_key(name) == key


def test_plan_sees_a_video_task_by_its_mode_or_its_first_track(tmp_path):
    head = "<annotations><meta><task><mode>{mode}</mode></task></meta>{first}</annotations>"
    (tmp_path / "annotations.xml").write_text(head.format(mode="annotation", first=""))
    assert plan(CvatOptions(str(tmp_path)))[3:] == (False, False)
    (tmp_path / "annotations.xml").write_text(head.format(
        mode="interpolation", first='<image id="0" name="frame_000000"/>'))
    assert plan(CvatOptions(str(tmp_path)))[3:] == (True, False)
    (tmp_path / "annotations.xml").write_text(head.format(
        mode="interpolation", first='<track id="0" label="a"/>'))
    assert plan(CvatOptions(str(tmp_path)))[3:] == (True, True)


def test_an_image_named_in_two_exports_is_a_duplicate_naming_both(tmp_path):
    (tmp_path / "annotations.xml").write_text("<annotations><image name=\"a.jpg\"/></annotations>")
    export = CvatExport(CvatOptions(str(tmp_path)))
    entries = [ExportEntry("a.jpg", f"{name}: <image> 0", "default", export=name)
               for name in ("one.xml", "two.xml", "two.xml")]
    said = export.duplicated("a.jpg", "default", entries)
    assert said.startswith("3 <image> elements") and "(one.xml, two.xml)" in said
