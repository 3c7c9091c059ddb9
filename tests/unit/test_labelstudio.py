"""Label Studio's JSON export, parsed as a worker parses it (plain Python, no pipeline):
image references, which annotation is written, regions in percent, choices, and the
rejects; and the pairing of entries with files that ``sources.exports`` shares."""

from __future__ import annotations

import io
import json
import math
from collections import Counter

import apache_beam as beam
import pytest
from apache_beam.pvalue import TaggedOutput

from recordbeam.records import Reject
from recordbeam.sources import byte_ranges
from recordbeam.sources.annotated_files import ImageFile, JoinMessage, NamedObject
from recordbeam.sources.exports import (
    ExportEntry,
    ExportEntryCoder,
    ExportError,
    Joined,
    Unusable,
    _Pair,
    _ParseArrayRange,
    _StreamExport,
)
from recordbeam.sources.labelstudio.reader import (
    LabelStudioExport,
    LabelStudioOptions,
    image_key,
    written_name,
)

ROOTS = ("media/", "/abs/media/")


def _parse(tasks, **options):
    """Entries, rejects and counts of an export holding ``tasks``."""
    fmt = LabelStudioExport(LabelStudioOptions("export.json", "media", **options))
    data = io.BytesIO(b"\xef\xbb\xbf" + json.dumps(tasks).encode())
    entries, rejects, counts = [], [], {}
    for item in fmt.parse("export.json", data):
        if isinstance(item, ExportEntry):
            entries.append(item)
        elif isinstance(item, Reject):
            rejects.append(item)
        else:
            counts[item[0]] = counts.get(item[0], 0) + item[1]
    return entries, rejects, counts


def _box(x, y, w, h, label="dog", rotation=0, rid="r1", size=(200, 100)):
    return {"id": rid, "type": "rectanglelabels", "from_name": "label", "to_name": "image",
            "original_width": size[0], "original_height": size[1],
            "value": {"x": x, "y": y, "width": w, "height": h, "rotation": rotation,
                      "rectanglelabels": [label]}}


def _task(*results, annotations=None, task_id=1, image="/data/upload/1/0a1b2c3d-a.jpg", **more):
    annotations = [{"id": 1, "result": list(results)}] if annotations is None else annotations
    return {"id": task_id, "data": {"image": image}, "annotations": annotations, **more}


def _close(box, expected):
    return all(math.isclose(a, b, abs_tol=1e-9) for a, b in zip(box, expected, strict=True))


# --- image references --------------------------------------------------------------------


@pytest.mark.parametrize(("reference", "key"), [
    ("/data/upload/7/5f2c9a1e-cat%20one.jpg", "upload/7/5f2c9a1e-cat one.jpg"),
    ("http://localhost:8080/data/upload/7/5f2c9a1e-a.jpg", "upload/7/5f2c9a1e-a.jpg"),
    ("/data/local-files/?d=photos/2024/a%2Bb%20c.jpg", "photos/2024/a+b c.jpg"),
    ("/data/local-files/?d=photos/a+b.jpg", "photos/a b.jpg"),  # as Django reads the query
    ("/data/local-files/?d=/abs/media/x/y.png", "x/y.png"),
    ("/data?d=/abs/media/old.jpg", "old.jpg"),
    # Below the document root (--images), its leading / dropped, as Label Studio reads it.
    ("/data/local-files/?d=/photos/a.jpg", "photos/a.jpg"),
    ("sub/../rel.jpg", "rel.jpg"),
])
def test_each_kind_of_image_reference_becomes_its_path_below_images(reference, key):
    assert image_key(reference, ROOTS) == key


def test_a_bucket_url_is_its_path_below_the_bucket_folder_given():
    assert image_key("s3://b/data/sub/z.jpg", ("s3://b/data/",)) == "sub/z.jpg"
    assert image_key("gs://b/data/z%20.jpg", ("gs://b/data/",)) == "z%20.jpg"  # a key as named


@pytest.mark.parametrize(("reference", "reason"), [
    ("s3://other-bucket/z.jpg", "outside_root"),
    ("gs://bucket/z.jpg", "outside_root"),
    ("/data/local-files/?d=../secret.jpg", "outside_root"),
    ("/elsewhere/a.jpg", "outside_root"),
    ("https://example.com/a.jpg", "unsupported_url"),
    ("http://[::1/data/upload/1/a.jpg", "unsupported_url"),  # no URL: an unclosed [
])
def test_a_reference_outside_images_or_on_the_web_is_refused_with_its_reason(reference, reason):
    with pytest.raises(Unusable) as refused:
        image_key(reference, ROOTS)
    assert refused.value.reason == reason
    assert reference in refused.value.detail


def test_an_upload_is_written_under_the_name_uploaded_other_files_under_their_own():
    assert written_name("upload/7/5f2c9a1e-cat one.jpg") == "cat one.jpg"
    assert written_name("upload/7/cat.jpg") == "cat.jpg"  # no prefix of Label Studio's
    assert written_name("photos/5f2c9a1e-x.jpg") == "5f2c9a1e-x.jpg"  # not an upload


# --- regions, choices, annotations ----------------------------------------------------------


def test_a_rectangle_is_fractions_of_the_image_and_the_task_gives_key_size_and_name():
    (entry,), rejects, _ = _parse([_task(_box(10, 20, 30, 40))])
    assert not rejects
    assert (entry.key, entry.where, entry.width, entry.height, entry.source_id) == (
        "upload/1/0a1b2c3d-a.jpg", "export.json: task 1", 200, 100, "1")
    (obj,) = entry.objects
    assert obj.normalized and obj.name == "dog" and obj.source == "export.json: task 1 result r1"
    assert _close(obj.bbox, (0.1, 0.2, 0.3, 0.4))


def test_a_turned_rectangle_is_the_upright_box_around_it_turned_about_its_top_left_corner():
    # 60x40 pixels at (20, 20) of a 200x100 image, turned 30 degrees clockwise on screen.
    (entry,), _, counts = _parse([_task(_box(10, 20, 30, 40, rotation=30))], include_masks=True)
    c, s = math.cos(math.radians(30)), math.sin(math.radians(30))
    xs = [20, 20 + 60 * c, 20 + 60 * c - 40 * s, 20 - 40 * s]
    ys = [20, 20 + 60 * s, 20 + 60 * s + 40 * c, 20 + 40 * c]
    (obj,) = entry.objects
    assert _close(obj.bbox, (min(xs) / 200, min(ys) / 100, (max(xs) - min(xs)) / 200,
                             (max(ys) - min(ys)) / 100))
    outline = [v for x, y in zip(xs, ys, strict=True) for v in (x / 200, y / 100)]
    assert _close(obj.segmentation[0], outline)
    assert counts["labelstudio_rotated_boxes_enclosed"] == 1


def test_a_box_drawn_upward_with_a_negative_height_is_the_same_box():
    (entry,), rejects, _ = _parse([_task(_box(10, 60, 30, -40))])
    assert not rejects and _close(entry.objects[0].bbox, (0.1, 0.2, 0.3, 0.4))


def test_a_polygon_gives_its_box_and_with_masks_its_outline_in_fractions():
    polygon = {"id": "p", "type": "polygonlabels",
               "value": {"points": [[10, 10], [50, 10], [30, 60]], "polygonlabels": ["cat"]}}
    (plain,), _, _ = _parse([_task(polygon)])
    assert _close(plain.objects[0].bbox, (0.1, 0.1, 0.4, 0.5))
    assert plain.objects[0].segmentation is None
    (masked,), _, _ = _parse([_task(polygon)], include_masks=True)
    assert _close(masked.objects[0].segmentation[0], [0.1, 0.1, 0.5, 0.1, 0.3, 0.6])


def test_choices_are_classes_of_the_whole_image_and_other_results_are_counted():
    choice = {"id": "c", "type": "choices", "value": {"choices": ["indoor", "night"]}}
    point = {"id": "k", "type": "keypointlabels",
             "value": {"x": 5, "y": 5, "width": 1, "keypointlabels": ["nose"]}}
    text = {"id": "t", "type": "textarea", "value": {"text": ["a note"]}}
    relation = {"from_id": "c", "to_id": "k", "type": "relation", "direction": "right"}
    (entry,), rejects, counts = _parse([_task(choice, point, text, relation)])
    assert not rejects and entry.objects == ()
    assert entry.image_labels == (("indoor", "export.json: task 1 result c"),
                                  ("night", "export.json: task 1 result c"))
    assert counts == {"labelstudio_keypointlabels_results_skipped": 1,
                      "labelstudio_textarea_results_skipped": 1,
                      "labelstudio_relation_results_skipped": 1}


def test_choices_of_a_region_or_of_another_tag_are_counted_not_image_classes():
    geometry = {"x": 10, "y": 10, "width": 10, "height": 10, "rotation": 0}
    per_region = [{"id": "r1", "type": "choices", "to_name": "image",
                   "value": {**geometry, "choices": ["blurry"]}},
                  {"id": "r1", "type": "choices", "to_name": "image",
                   "value": {"choices": ["occluded"]}}]
    of_text = {"id": "c2", "type": "choices", "to_name": "caption",
               "value": {"choices": ["correct"]}}
    of_image = {"id": "c3", "type": "choices", "to_name": "image",
                "value": {"choices": ["indoor"]}}
    spans = {"id": "s", "type": "labels", "to_name": "caption",
             "value": {"start": 0, "end": 3, "labels": ["noun"]}}
    box = {**_box(10, 10, 10, 10), "to_name": "image"}
    (entry,), rejects, counts = _parse([_task(box, *per_region, of_text, of_image, spans)])
    assert not rejects and [o.name for o in entry.objects] == ["dog"]
    assert [name for name, _ in entry.image_labels] == ["indoor"]
    assert counts == {"labelstudio_region_choices_skipped": 2,
                      "labelstudio_choices_of_other_tags_skipped": 1,
                      "labelstudio_labels_results_skipped": 1}


def test_a_task_whose_regions_name_two_image_tags_is_rejected_not_merged():
    results = [{**_box(1, 1, 5, 5), "to_name": "left"},
               {**_box(1, 1, 5, 5, rid="r2"), "to_name": "right"}]
    annotations = [{"id": 1, "result": results}, {"id": 2, "result": [], "was_cancelled": True}]
    entries, (reject,), counts = _parse([_task(annotations=annotations)])
    assert not entries
    assert (reject.kind, reject.reason) == ("image", "several_images")
    assert "left, right" in reject.detail and "data.image" in reject.detail
    assert counts == {"labelstudio_cancelled_annotations_skipped": 1}


def test_of_several_tags_the_one_named_as_the_image_field_is_the_images():
    results = [{**_box(1, 1, 5, 5, label="dog"), "to_name": "image"},
               {**_box(1, 1, 5, 5, label="cat", rid="r2"), "to_name": "image2"},
               {"id": "c", "type": "choices", "to_name": "image2", "value": {"choices": ["x"]}}]
    (entry,), rejects, counts = _parse([_task(*results)])
    assert not rejects and [o.name for o in entry.objects] == ["dog"]
    assert entry.image_labels == ()
    assert counts == {"labelstudio_regions_of_other_tags_skipped": 1,
                      "labelstudio_choices_of_other_tags_skipped": 1}


def test_choices_of_several_tags_without_regions_are_counted_and_the_image_written():
    results = [{"id": "a", "type": "choices", "to_name": "img", "value": {"choices": ["dog"]}},
               {"id": "b", "type": "choices", "to_name": "caption",
                "value": {"choices": ["english"]}}]
    (entry,), rejects, counts = _parse([_task(*results)])
    assert not rejects and entry.image_labels == ()
    assert counts == {"labelstudio_choices_of_other_tags_skipped": 2}
    task = _task(*results)
    task["data"] = {"img": task["data"]["image"]}  # <Image name="img" value="$img">
    (entry,), _, counts = _parse([task], image_key="img")
    assert [name for name, _ in entry.image_labels] == ["dog"]
    assert counts == {"labelstudio_choices_of_other_tags_skipped": 1}


def test_results_of_odd_types_tags_or_ids_are_counted_never_a_crash():
    choice = {"id": "c1", "type": "choices", "value": {"choices": ["indoor"]}}
    results = [{"type": [], "to_name": "img", "value": {}}, {"type": {"a": 1}},
               {"type": "choices", "to_name": None, "value": {"choices": ["day"]}},
               {"id": "c1", "type": "textarea", "value": {"text": ["same id"]}}, choice]
    (entry,), rejects, counts = _parse([_task(*results)])
    assert not rejects
    assert [name for name, _ in entry.image_labels] == ["day", "indoor"]
    assert counts == {"labelstudio_unknown_results_skipped": 2,
                      "labelstudio_textarea_results_skipped": 1}


def _annotation(annotation_id, label, updated, created=None, **flags):
    return {"id": annotation_id, "result": [_box(1, 1, 5, 5, label)], "updated_at": updated,
            "created_at": created or updated, **flags}


ANNOTATIONS = [
    _annotation(1, "first", "2024-01-02T00:00:00Z", "2024-01-01T00:00:00Z"),
    _annotation(2, "marked", "2024-01-03T00:00:00Z", ground_truth=True),
    _annotation(3, "latest", "2024-01-05T00:00:00Z", "2024-01-02T00:00:00Z"),
    _annotation(4, "cancelled", "2024-01-09T00:00:00Z", was_cancelled=True),
]


@pytest.mark.parametrize(("which", "written"), [
    ("ground-truth", "marked"), ("latest", "latest"), ("first", "first")])
def test_one_annotation_is_written_as_asked_never_a_cancelled_one(which, written):
    (entry,), _, counts = _parse([_task(annotations=ANNOTATIONS)], annotation=which)
    assert [o.name for o in entry.objects] == [written]
    assert counts == {"labelstudio_cancelled_annotations_skipped": 1,
                      "labelstudio_annotations_not_written": 2}


def test_without_a_ground_truth_the_latest_is_written():
    (entry,), _, _ = _parse([_task(annotations=[ANNOTATIONS[0], ANNOTATIONS[2]])])
    assert [o.name for o in entry.objects] == ["latest"]


def test_a_task_without_annotation_is_counted_not_written_unless_its_prediction_is_asked_for():
    predictions = [{"id": 8, "result": [_box(1, 1, 5, 5, "old")], "created_at": "2024-01-01"},
                   {"id": 9, "result": [_box(1, 1, 5, 5, "new")], "created_at": "2024-01-02"}]
    cancelled = [{"id": 1, "was_cancelled": True, "result": [_box(1, 1, 5, 5)]}]
    task = _task(annotations=cancelled, predictions=predictions)
    (entry,), _, counts = _parse([task])
    assert entry.skipped == "labelstudio_tasks_not_annotated" and entry.objects == ()
    assert counts == {"labelstudio_cancelled_annotations_skipped": 1,
                      "labelstudio_predictions_not_written": 2}
    (entry,), _, counts = _parse([task], use_predictions=True)
    assert entry.skipped is None and [o.name for o in entry.objects] == ["new"]
    assert counts["labelstudio_predictions_written"] == 1
    assert counts["labelstudio_predictions_not_written"] == 1


def test_predictions_are_not_written_beside_an_annotation():
    task = _task(_box(1, 1, 5, 5), predictions=[{"result": [_box(1, 1, 5, 5, "cat")]}])
    (entry,), _, counts = _parse([task], use_predictions=True)
    assert [o.name for o in entry.objects] == ["dog"]
    assert counts == {"labelstudio_predictions_not_written": 1}


# --- rejects ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("result", "reason", "says"), [
    ({"id": "r1", "type": "rectanglelabels"}, "missing_field", "has no value"),
    ({**_box(1, 1, 5, 5), "value": {"x": 1, "y": 1, "width": 5, "height": 5,
                                     "rectanglelabels": []}}, "missing_field", "no labels"),
    (_box(150, 1, 5, 5), "invalid_bbox", "x=150"),
    ({**_box(1, 1, 5, 5), "value": {"x": "1", "y": 1, "width": 5, "height": 5,
                                     "rectanglelabels": ["dog"]}}, "invalid_bbox", "numbers"),
    ({**_box(1, 1, 5, 5), "value": {"x": 10**400, "y": 1, "width": 5, "height": 5,
                                     "rectanglelabels": ["dog"]}}, "invalid_bbox", "numbers"),
    (_box(1, 1, 0, 5), "degenerate_bbox", "no area"),
    ({**_box(1, 1, 5, 5, rotation=10), "original_width": None}, "missing_field",
     "original_width"),
    ({"id": "r1", "type": "polygonlabels", "value": {"points": [[1, 1], [2, 2]],
                                                     "polygonlabels": ["dog"]}},
     "malformed_points", "3 or more"),
    ({"id": "r1", "type": "polygonlabels", "value": {"points": [[1, 1], [2, 2], [1, 120]],
                                                     "polygonlabels": ["dog"]}},
     "malformed_points", "outside the image"),
    ({"id": "r1", "type": "polygonlabels", "value": {"points": [[1, 1], [2, 2]] * 50_001,
                                                     "polygonlabels": ["dog"]}},
     "malformed_points", "100,002 vertices, more than the 100,000"),
    ({"id": "r1", "type": "rectangle", "value": {"x": 1, "y": 1, "width": 5, "height": 5}},
     "missing_field", "value.rectangle"),
])
def test_a_result_that_cannot_be_used_is_rejected_naming_export_task_and_result(
        result, reason, says):
    (entry,), (reject,), _ = _parse([_task(result, _box(1, 1, 5, 5, rid="ok"))])
    assert (reject.kind, reject.reason, reject.split) == ("annotation", reason, "train")
    assert reject.source == "export.json: task 1 result r1"
    assert says in reject.detail and reject.detail.startswith(reject.source)
    assert len(entry.objects) == 1  # the image keeps its other objects


def test_a_task_without_its_image_field_or_with_an_unusable_one_is_an_image_reject():
    tasks = [{"id": 5, "data": {"img": "/data/upload/1/a.jpg"}}, "not a task",
             _task(image="https://example.com/a.jpg", task_id=7)]
    entries, rejects, _ = _parse(tasks)
    assert not entries
    assert [(r.kind, r.source, r.reason) for r in rejects] == [
        ("image", "export.json: task 5", "missing_field"),
        ("image", "export.json: task [1]", "missing_field"),
        ("image", "export.json: task 7", "unsupported_url")]
    assert "--image-key" in rejects[0].detail
    (entry,), _, _ = _parse(tasks[:1], image_key="img")
    assert entry.key == "upload/1/a.jpg"


def test_text_that_utf8_cannot_write_is_rejected_or_shown_escaped():
    # JSON's \udcxx escapes are lone surrogates: no later step could carry them.
    named = _task(_box(1, 1, 5, 5), image="/data/upload/1/0a1b2c3d-\udcff.jpg")
    labelled = _task(_box(1, 1, 5, 5, label="d\udcffg"), _box(1, 1, 5, 5, rid="ok"),
                     task_id="2\udcfe")
    entries, rejects, _ = _parse([named, labelled])
    assert [(r.kind, r.reason, r.source) for r in rejects] == [
        ("image", "invalid_file_name", "export.json: task 1"),
        ("annotation", "invalid_class_name", "export.json: task 2\\udcfe result r1")]
    assert "0a1b2c3d-\\udcff.jpg" in rejects[0].detail and "'d\\udcffg'" in rejects[1].detail
    (entry,) = entries
    assert [o.name for o in entry.objects] == ["dog"] and entry.source_id == "2\\udcfe"
    assert all(f.encode("utf-8") for r in rejects for f in (r.source, r.detail))


def test_result_ids_that_are_no_text_or_number_are_results_of_their_own():
    labels = {"id": ["r"], "type": "labels", "value": {"x": 1, "y": 1, "width": 5,
                                                      "height": 5, "labels": ["dog"]}}
    (entry,), rejects, _ = _parse([_task(labels, {**_box(1, 1, 5, 5), "id": {"r": 1}})])
    assert not rejects and [o.name for o in entry.objects] == ["dog", "dog"]


@pytest.mark.parametrize(("text", "says"), [
    (b'{"images": []}', "holds no JSON array"),
    (b'"' + b"a" * 70_000 + b'"', "holds no JSON array"),  # past the 64 KiB looked at
    (b'"\\udcff"', "holds no JSON array"),
    (b'[{"id": 1, "data": }]', "malformed JSON"),
    (b"[" * 200 + b"]" * 200, "levels deep"),
])
def test_an_export_that_cannot_be_read_stops_the_run_naming_it(text, says):
    fmt = LabelStudioExport(LabelStudioOptions("export.json", "media"))
    with pytest.raises(ExportError, match=says) as stopped:
        list(fmt.parse("export.json", io.BytesIO(text)))
    assert str(stopped.value).startswith("export.json")


def test_json_the_c_parser_refuses_is_read_by_the_python_parser():
    tasks = [_task(task_id=2**70), _task(task_id=2, image="/data/upload/1/\udcff.jpg")]
    text = json.dumps(tasks).encode()  # \udcff escaped, as Python writes it
    fmt = LabelStudioExport(LabelStudioOptions("export.json", "media"))
    items = list(fmt.parse("export.json", io.BytesIO(text)))
    entries = [e for e in items if isinstance(e, ExportEntry)]
    assert [e.where for e in entries] == [f"export.json: task {2**70}"]
    # Read on past the escape; a name UTF-8 cannot write is no file's: rejected.
    assert [(r.source, r.reason) for r in items if isinstance(r, Reject)] == [
        ("export.json: task 2", "invalid_file_name")]


# --- pairing entries with files (sources.exports) -------------------------------------------


def _pair(entries, files, splits=("train",)):
    fmt = LabelStudioExport(LabelStudioOptions("export.json", "media"))
    fmt.splits = splits
    # As the join hands them over: each value in its registered coder.
    coders = [beam.coders.registry.get_coder(kind) for kind in (ExportEntry, JoinMessage)]
    joined = [Joined(side, coders[side].encode(value))
              for side, values in enumerate((entries, files)) for value in values]
    out = list(_Pair(fmt, coders).process(("upload/1/0a1b2c3d-a.jpg", joined)))
    parsed = [o for o in out if not hasattr(o, "tag")]
    return parsed, [o.value for o in out if hasattr(o, "tag")]


FILE = ImageFile("media/upload/1/0a1b2c3d-a.jpg", 10, "", 1.5)


def test_an_entry_and_its_file_make_one_image_written_under_its_name():
    entry = ExportEntry("upload/1/0a1b2c3d-a.jpg", "export.json: task 1", "train",
                        objects=(NamedObject("s", "dog", (0, 0, 1, 1)),),
                        image_labels=(("indoor", "s"),))
    (image,), tagged = _pair([entry._replace(source_id="1")], [FILE])
    assert not tagged
    assert (image.path, image.filename, image.modified, image.image_labels, image.source_id) == (
        FILE.path, "a.jpg", 1.5, (("indoor", "s"),), "1")


def test_missing_duplicate_unnamed_and_skipped_entries():
    entry = ExportEntry("upload/1/0a1b2c3d-a.jpg", "export.json: task 1", "train")
    _, (missing,) = _pair([entry], [])
    assert (missing.reason, missing.source) == ("missing", "export.json: task 1")
    assert "media folder" in missing.detail
    twin = entry._replace(where="export.json: task 2")
    parsed, (duplicate,) = _pair([entry, twin], [FILE])
    assert not parsed and duplicate.reason == "duplicate_file_name"
    assert "task 1" in duplicate.detail and "task 2" in duplicate.detail
    # A file no task names (another project's upload, in a shared media folder): counted.
    parsed, tagged = _pair([], [FILE])
    assert not parsed and tagged == [("labelstudio_files_named_by_no_task", 1)]
    not_annotated = entry._replace(skipped="labelstudio_tasks_not_annotated")
    parsed, tagged = _pair([not_annotated], [FILE])
    assert not parsed and tagged == [("labelstudio_tasks_not_annotated", 1)]
    # The image imported twice, one task annotated: that one is written, the other counted.
    (image,), tagged = _pair([twin, not_annotated], [FILE])
    assert image.annotation == "export.json: task 2"
    assert tagged == [("labelstudio_tasks_not_annotated", 1)]


def test_an_export_entry_crosses_the_shuffle_whole_even_with_names_that_are_not_utf8():
    coder = ExportEntryCoder()
    for key in ("a.jpg", "b\udcff.jpg"):
        entry = ExportEntry(key, f"e.json: task {key}", "train", 40, 30, (NamedObject(
            "s", "dog", (0.1, 0.2, 0.3, 0.4), (), [[0.1, 0.2, 0.3, 0.4, 0.5, 0.6]], True),),
            (("indoor", "s"),), "counter", "12")
        assert coder.decode(coder.encode(entry)) == entry


def test_two_files_of_one_image_are_one_written_and_one_rejected():
    # Keys that drop the extension (a video's frames) can meet two files of one split.
    entry = ExportEntry("upload/1/0a1b2c3d-a.jpg", "export.json: task 1", "train")
    other = ImageFile("media/upload/1/0a1b2c3d-a.jpg.png", 10, "", 1.5)
    (image,), (reject,) = _pair([entry], [FILE, other])
    assert image.path == FILE.path
    assert (reject.reason, reject.source) == ("duplicate_file_name", other.path)
    assert FILE.path in reject.detail and "not written" in reject.detail


def _read(path: str, range_bytes: int | None) -> tuple:
    """What the export's read gives, streamed (``range_bytes`` None) or in ranges of
    ``range_bytes``, each pass run here as the workers run it: entries, rejects and parts
    (sorted), the counts summed, and the inputs; or the error it raises."""
    fmt = LabelStudioExport(LabelStudioOptions(path, "media"))
    try:
        if range_bytes is None:
            items = list(_StreamExport(fmt).process(path))
        else:
            ranges = [rng for _index, rng in byte_ranges.file_ranges(path, range_bytes,
                                                                     range_bytes)]
            entry = byte_ranges.entry_of_ranges(byte_ranges.summarize_range(rng, path)
                                                for rng in ranges)
            plan = byte_ranges.plan_of([byte_ranges.marks_of_range(rng, path, entry)
                                        for rng in ranges], path)
            parse = _ParseArrayRange(fmt, path)
            items = [item for rng in ranges for item in parse.process(rng, plan)]
    except ExportError as error:
        return ("error", str(error))
    found, counts = {}, Counter()
    for item in items:
        tag, value = (item.tag, item.value) if isinstance(item, TaggedOutput) else ("", item)
        if tag == "counts":
            counts[value[0]] += value[1]
        else:
            found.setdefault(tag, []).append(repr(value))
    return {tag: sorted(values) for tag, values in found.items()}, counts


_TASK = ('{"data": {"image": "a%d.jpg", "note": "],\\\\\\"[{"}, "annotations": [{"result": '
         '[{"id": "r", "type": "rectanglelabels", "value": {"x": 1, "y": 2, "width": 3, '
         '"height": 4, "rectanglelabels": ["dog"]}}]}]}')


@pytest.mark.parametrize("document", [
    "[" + ", ".join(_TASK % i for i in range(4)) + "]",  # tasks named by their index
    "\ufeff \n[" + _TASK % 0 + "]\n ",  # a byte order mark, white space around
    "[ ]", "[" + _TASK % 0 + ",\f" + _TASK % 1 + "]",  # a form feed between tasks
    '[{"id": "\\ud800", "data": {"image": "a.jpg"}}]',  # a lone high surrogate
    '[{"id": "\\ud83d\\ude00", "data": {"image": "a.jpg"}}]',
    "[" + _TASK % 0 + "," + _TASK % 1 + ",]", "[" + _TASK % 0 + ",," + _TASK % 1 + "]",
    '[{"id": 1e400, "data": {"image": "a.jpg"}}]', "[" + _TASK % 0 + "}",
    '[{"id": NaN}]', '{"tasks": []}', "[1] [2]",
], ids=["tasks", "bom", "empty", "form-feed", "high-surrogate", "pair", "trailing-comma",
        "double-comma", "overflow", "brace", "nan", "object", "two-arrays"])
def test_an_export_read_in_ranges_gives_what_its_stream_gives(tmp_path, document):
    path = tmp_path / "export.json"
    path.write_bytes(document.encode("utf-8", "surrogatepass"))
    streamed = _read(str(path), None)
    for range_bytes in sorted({1, 2, 3, 5, 8, 13, 40, 97, len(document) // 2 + 1}):
        assert _read(str(path), range_bytes) == streamed, range_bytes
