"""COCO's keypoints, captions and LVIS pieces: checks, records, coders and the encoder's
keypoint geometry, each on hand-made values."""

from __future__ import annotations

import itertools
import json
import pickle

import pytest

from recordbeam.images.transcode import orient_box, orient_point
from recordbeam.records import ImageRecord, Reject
from recordbeam.sources.coco.checks import check_annotation, check_category, check_image
from recordbeam.sources.coco.encoder import CocoEncoder
from recordbeam.sources.coco.input_tasks import CAPTIONS_TASK, ReadInputs
from recordbeam.sources.coco.json_stream import CocoFormatError
from recordbeam.sources.coco.labels import keypoints_metadata, label_map
from recordbeam.sources.coco.reader import CocoOptions, coco_settings
from recordbeam.sources.coco.records import (
    Annotation,
    CaptionBatch,
    Category,
    ImageCategoryLists,
    ImageEntry,
    JoinMessageCoder,
    Keypoints,
    NamedKeypoints,
    ObjectLabel,
    pack_annotations,
    unpack_annotations,
)
from recordbeam.sources.detection import Geometry
from recordbeam.write.image_encoder import ImageChecks
from recordbeam.write.sink import ShardOptions

PERSON = {"id": 1, "name": "person", "keypoints": ["nose", "eye"], "skeleton": [[1, 2]]}


def _annotation(**more):
    return {"id": 7, "image_id": 1, "category_id": 1, "bbox": [1, 2, 3, 4], **more}


@pytest.mark.parametrize("orientation", range(1, 9))
def test_orient_point_moves_as_a_box_of_no_size(orientation):
    for x, y in itertools.product((0.0, 0.25, 0.7, 1.0), (0.0, 0.4, 1.0)):
        moved = orient_point(x, y, orientation)
        xmin, ymin, xmax, ymax = orient_box(x, y, x, y, orientation)
        assert moved == (xmin, ymin) == (xmax, ymax)


def test_orient_point_turns_clockwise_for_orientation_6():
    # the top-left corner of the stored image is the top-right of the displayed one
    assert orient_point(0.0, 0.0, 6) == (1.0, 0.0)
    assert orient_point(0.25, 0.75, 6) == (0.25, 0.25)


def test_keypoints_are_kept_only_when_asked():
    item = _annotation(keypoints=[1, 2, 2, 0, 0, 0], num_keypoints=1)
    _, without = check_annotation(item, "k.json", 0)
    _, kept = check_annotation(item, "k.json", 0, include_keypoints=True)
    assert without.keypoints is None
    assert kept.keypoints == Keypoints((1.0, 2.0, 2.0, 0.0, 0.0, 0.0), 1)


def test_num_keypoints_defaults_to_the_labeled_points():
    _, kept = check_annotation(_annotation(keypoints=[1, 2, 1, 3, 4, 2, 0, 0, 0]),
                               "k.json", 0, include_keypoints=True)
    assert kept.keypoints.num == 2


@pytest.mark.parametrize("keypoints, num, problem", [
    ([1, 2, 2, 3], 1, "multiple of 3"),
    ("1 2 2", 1, "multiple of 3"),
    ([1, "x", 2], 1, "not finite numbers"),
    ([1, None, 2], 1, "not finite numbers"),
    ([1, 2, 3], 1, "not 0, 1 or 2"),
    ([1, 2, 2], "one", "not a count"),
])
def test_malformed_keypoints_reject_the_annotation_by_id(keypoints, num, problem):
    item = _annotation(keypoints=keypoints, num_keypoints=num)
    reject = check_annotation(item, "k.json", 4, include_keypoints=True)
    assert isinstance(reject, Reject)
    assert (reject.kind, reject.source, reject.reason) == (
        "annotation", "annotation 7", "invalid_keypoints")
    assert problem in reject.detail and "k.json: annotations[4]" in reject.detail


def test_categories_carry_keypoint_names_and_skeleton_when_asked():
    assert check_category(PERSON, "k.json: categories[0]") == Category(1, "person")
    assert check_category(PERSON, "k.json: categories[0]", True) == Category(
        1, "person", ("nose", "eye"), ((1, 2),))


def test_a_category_name_with_a_lone_surrogate_is_named_as_such():
    # json.dump writes a name that was not UTF-8 as a \\udcff escape: the category has its
    # id and its name, and the message says what is wrong with the name.
    with pytest.raises(CocoFormatError, match=r"category 1\): the name '\\udcff' holds a "
                                              r"lone surrogate") as error:
        check_category({"id": 1, "name": "\udcff"}, "k.json: categories[0]")
    assert "needs an 'id'" not in str(error.value)


def test_a_skeleton_naming_a_missing_keypoint_is_a_broken_file():
    with pytest.raises(CocoFormatError, match="from 1 to 2"):
        check_category({**PERSON, "skeleton": [[1, 3]]}, "k.json: categories[0]", True)


def test_a_category_without_keypoint_names_has_no_skeleton_to_check():
    # Categories other than the skeleton's in a keypoints file: "keypoints": [] beside a
    # skeleton copied from the person's.
    bare = {"id": 2, "name": "dog", "keypoints": [], "skeleton": [[16, 14], [14, 12]]}
    assert check_category(bare, "k.json: categories[1]", True) == Category(2, "dog")


def test_iscrowd_written_as_text_reads_as_its_number():
    # pycocotools reads int(iscrowd): "0" is not a crowd (it was 1, a non-empty string).
    crowd = [check_annotation({"id": 1, "image_id": 1, "category_id": 2, "bbox": [1, 1, 2, 2],
                               "iscrowd": value}, "i.json", 0)[1].iscrowd
             for value in ("0", "1", " 0 ", 0, 1, True, False, None)]
    assert crowd == [0, 1, 0, 0, 1, 1, 0, 0]


def test_an_annotation_without_bbox_is_a_label_of_the_whole_image():
    image_id, annotation = check_annotation(
        {"id": 3, "image_id": 1, "category_id": 2}, "l.json", 0)
    assert (image_id, annotation.bbox, annotation.area) == (1, None, 0.0)
    _image_id, empty = check_annotation(
        {"id": 4, "image_id": 1, "category_id": 2, "bbox": []}, "l.json", 1)
    assert empty.bbox is None
    # A region outlined without its box stays an object (its box then rejected).
    outlined = check_annotation({"id": 5, "image_id": 1, "category_id": 2,
                                 "segmentation": [[1, 1, 5, 1, 5, 5]]}, "l.json", 2)
    assert isinstance(outlined, Reject) and outlined.reason == "missing_field"
    assert "lacks bbox" in outlined.detail


def test_a_captions_file_given_as_annotations_is_named():
    with pytest.raises(CocoFormatError, match=r"this is a COCO captions file .*--captions"):
        check_annotation({"id": 3, "image_id": 1, "caption": "a dog"}, "c.json", 0)


def test_image_labels_are_features_and_lost_with_their_image():
    record = ImageRecord("1", "a.jpg", 10, "train", {
        "source_id": "1", "filename": "a.jpg", "width": 20, "height": 10,
        "objects": pack_annotations([]), "image_labels": ((8, 2, "dog"), (3, 1, "cat"))})
    lost = CocoEncoder().lost_with(record, Reject("image", "a.jpg", "truncated", "cut", "train"))
    assert [(r.source, r.reason) for r in lost] == [
        ("annotation 8", "image_rejected"), ("annotation 3", "image_rejected")]


def test_keypoints_metadata_is_keyed_by_the_written_label():
    categories = [Category(5, "dog"), Category(3, "person", ("nose",), ())]
    labels = label_map(categories, contiguous=True)
    assert keypoints_metadata(categories, labels) == {
        "1": {"names": ["nose"], "skeleton": []}}


def test_annotations_without_keypoints_pack_as_before():
    plain = Annotation(1, 2, (0, 0, 1, 1), 1.0, 0)
    assert pickle.loads(pack_annotations([plain])) == ((1, 2, (0, 0, 1, 1), 1.0, 0),)
    with_points = plain._replace(keypoints=Keypoints((1.0, 2.0, 2.0), 1))
    assert unpack_annotations(pack_annotations([with_points])) == (with_points,)


@pytest.mark.parametrize("message", [
    CaptionBatch(4, ((2, "a dog"), ("x", "caf\u00e9"))),
    ImageCategoryLists((3, 5), ()),
])
def test_new_join_messages_cross_the_coder(message):
    coder = JoinMessageCoder()
    assert coder.decode(coder.encode(message)) == message


def _images_of(item):
    return list(check_image(item, "l.json: images[0]"))


def test_lvis_images_are_named_by_their_coco_url():
    out = _images_of({"id": 9, "coco_url": "http://images.cocodataset.org/val2017/x.jpg",
                      "width": 4, "height": 3})
    assert [m for _k, m in out] == [ImageEntry(9, "x.jpg", 4, 3)]


def test_a_file_name_starting_with_dot_slash_names_the_file_below_the_images_folder():
    # pycocotools and Detectron2 join file_name to the images folder: ./a.jpg is a.jpg.
    out = _images_of({"id": 9, "file_name": "./sub/a.jpg", "width": 4, "height": 3})
    assert [(k.text, m) for k, m in out] == [("sub/a.jpg", ImageEntry(9, "sub/a.jpg", 4, 3))]
    [reject, _lost] = _images_of({"id": 9, "file_name": "./../a.jpg"})
    assert reject.value.reason == "outside_root"


def test_lvis_images_keep_their_url_folder_when_the_images_folder_holds_it():
    # LVIS v1 val names images of COCO's train2017 and val2017: Detectron2 looks for them
    # below the COCO root, as <folder>/<file>; a folder of one split takes the last part.
    item = {"id": 9, "coco_url": "http://images.cocodataset.org/train2017/x.jpg"}
    held = list(check_image(item, "l.json: images[0]", url_folder_kept={"train2017"}.__contains__))
    assert [m.file_name for _k, m in held] == ["train2017/x.jpg"]
    alone = list(check_image(item, "l.json: images[0]", url_folder_kept=set().__contains__))
    assert [m.file_name for _k, m in alone] == ["x.jpg"]
    named = {"id": 9, "file_name": "x.jpg", "coco_url": "http://h/train2017/y.jpg"}
    assert [m.file_name for _k, m in check_image(
        named, "l.json: images[0]", url_folder_kept=lambda _folder: True)] == ["x.jpg"]


def test_lvis_category_lists_ride_the_join_by_image_id():
    out = _images_of({"id": 9, "file_name": "x.jpg", "neg_category_ids": [3],
                      "not_exhaustive_category_ids": []})
    assert out[0][0].by_image_id and out[0][1] == ImageCategoryLists((3,), ())


def test_a_category_list_that_is_no_list_rejects_the_image():
    out = _images_of({"id": 9, "file_name": "x.jpg", "neg_category_ids": 3})
    reject = out[0].value
    assert reject.reason == "missing_field" and "neg_category_ids" in reject.detail


def test_options_need_annotations_or_captions():
    with pytest.raises(ValueError, match="captions"):
        CocoOptions("images", None)
    assert CocoOptions("images", None, captions="c.json").images_file == "c.json"


def _obj(keypoints):
    return ObjectLabel(1, 1, "person", (0, 0, 10, 10), 100.0, 0, None, keypoints)


def test_encoder_normalizes_and_moves_keypoints_with_the_pixels():
    encoder = CocoEncoder(include_keypoints=True)
    points = NamedKeypoints((10.0, 5.0, 2.0, 0.0, 0.0, 0.0, 40.0, 20.0, 1.0), 2,
                            ("a", "b", "c"))
    upright = Geometry((40, 20), 1, (40, 20), (40, 20), False)
    assert encoder.flat_values(_obj(points), upright) == (
        [0.25, 0.0, 1.0], [0.25, 0.0, 1.0], [2, 0, 1], ["a", "b", "c"])
    turned = Geometry((40, 20), 6, (20, 40), (20, 40), False)
    xs, ys, visibility, _names = encoder.flat_values(_obj(points), turned)
    # x' = 1 - y, y' = x; the point not labeled stays at 0, 0 as COCO writes it
    assert (xs, ys, visibility) == ([0.75, 0.0, 0.0], [0.25, 0.0, 1.0], [2, 0, 1])
    assert encoder.extra_values(_obj(points), upright)[-1] == 2
    assert encoder.flat_values(_obj(None), upright) == ([], [], [], [])


def test_captions_of_an_image_rejected_while_writing_are_rejected_with_it():
    record = ImageRecord(identity="1", path="/d/a.jpg", size=3, split="train", labels={
        "objects": pack_annotations([]), "captions": ((5, "a dog"), (6, "a cat"))})
    lost = CocoEncoder(captions=True).lost_with(
        record, Reject("image", "/d/a.jpg", "truncated", "cut short"))
    assert [(r.source, r.reason) for r in lost] == [
        ("caption 5", "image_rejected"), ("caption 6", "image_rejected")]


def test_settings_name_the_new_options_only_when_set():
    shards, checks = ShardOptions(), ImageChecks()
    plain = coco_settings(CocoOptions("i", "a.json"), shards, checks)["coco"]
    assert "include_keypoints" not in plain and "captions" not in plain
    both = coco_settings(CocoOptions("i", "a.json", include_keypoints=True, captions="c.json"),
                         shards, checks)["coco"]
    assert (both["include_keypoints"], both["captions"]) == (True, "c.json")


def _read_captions(tmp_path, document):
    path = tmp_path / "captions.json"
    path.write_text(json.dumps(document), encoding="utf-8")
    options = CocoOptions(str(tmp_path), None, captions=str(path))
    return list(ReadInputs(options).process(CAPTIONS_TASK))


def test_captions_leave_batched_by_image_id(tmp_path):
    out = _read_captions(tmp_path, {"annotations": [
        {"id": 1, "image_id": 4, "caption": "a"}, {"id": 2, "image_id": 4, "caption": "b"},
        {"id": 3, "image_id": 5, "caption": 7}]})
    batches = [m for k, m in (o for o in out if isinstance(o, tuple))]
    assert batches == [CaptionBatch(4, ((1, "a"), (2, "b")))]
    rejects = [o.value for o in out if not isinstance(o, tuple)]
    assert [r.reason for r in rejects] == ["missing_field"]


def test_a_captions_file_without_captions_is_refused(tmp_path):
    with pytest.raises(CocoFormatError, match="holds no captions"):
        _read_captions(tmp_path, {"images": [], "annotations": []})
