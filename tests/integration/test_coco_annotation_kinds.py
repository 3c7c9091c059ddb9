"""COCO person keypoints, captions and LVIS files converted end to end: values checked
against the JSON they came from, rejects and counts against the broken cases the sample
holds (see ``make_coco_extras_sample``)."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
from samples import EXTRAS_KEYPOINT_NAMES, EXTRAS_SKELETON, make_coco_extras_sample

from recordbeam import pipeline
from recordbeam.cli.main import main as cli_main
from recordbeam.images.transcode import ImageFixes
from recordbeam.sources.coco.input_tasks import DENSEPOSE_NOT_WRITTEN, KEYPOINTS_NOT_WRITTEN
from recordbeam.sources.coco.reader import CocoOptions
from recordbeam.sources.coco.reader import to_tfrecord as coco_to_tfrecord
from recordbeam.testing.samples import make_coco_sample
from recordbeam.tfrecord.example import decode_example
from recordbeam.tfrecord.framing import open_records
from recordbeam.write.image_encoder import ImageChecks
from recordbeam.write.sink import ShardOptions

IN_MEMORY = ["--direct_running_mode=in_memory", "--direct_num_workers=1"]
KINDS = {
    "image/object/bbox/xmin": "float", "image/object/bbox/xmax": "float",
    "image/object/bbox/ymin": "float", "image/object/bbox/ymax": "float",
    "image/object/class/label": "int64", "image/object/is_crowd": "int64",
    "image/object/keypoint/x": "float", "image/object/keypoint/y": "float",
    "image/object/keypoint/visibility": "int64", "image/object/keypoint/num": "int64",
    "image/object/keypoint/text": "bytes", "image/caption": "bytes",
    "image/neg_category_ids": "int64", "image/not_exhaustive_category_ids": "int64",
}


def _convert(output, coco, fixes=None):
    out = os.fspath(output)
    shards = ShardOptions(num_shards=1, max_reject_fraction=1.0)
    pipeline.run(lambda p: coco_to_tfrecord(p, out, coco, shards, ImageChecks(), fixes),
                 out, beam_args=IN_MEMORY, show_progress=False)
    path = os.path.join(out, "train-00000-of-00001.tfrecord")
    with open(os.path.join(out, "manifest.json"), encoding="utf-8") as f:
        manifest = json.load(f)
    with open(os.path.join(out, "rejects.jsonl"), encoding="utf-8") as f:
        rejects = [json.loads(line) for line in f]
    examples = {e["image/filename"][0].decode(): e
                for e in (decode_example(r, KINDS) for r in open_records(path))}
    return examples, manifest, rejects


def _reasons(rejects):
    return sorted((r["source"], r["reason"]) for r in rejects)


@pytest.fixture(scope="module")
def sample(tmp_path_factory):
    return make_coco_extras_sample(tmp_path_factory.mktemp("coco-extras"))


@pytest.fixture(scope="module")
def keypoints_and_captions(sample, tmp_path_factory):
    coco = CocoOptions(sample.images_dir, sample.keypoints, include_keypoints=True,
                       captions=sample.captions)
    return _convert(tmp_path_factory.mktemp("out") / "kc", coco)


def _expected_points(annotation, width=64, height=48):
    values = annotation.get("keypoints") or [0] * (3 * len(EXTRAS_KEYPOINT_NAMES))
    xs = [x / width if v else 0.0 for x, v in zip(values[0::3], values[2::3], strict=True)]
    ys = [y / height if v else 0.0 for y, v in zip(values[1::3], values[2::3], strict=True)]
    return xs, ys, list(values[2::3])


def test_keypoints_are_written_per_object_as_the_od_api_writes_them(sample,
                                                                    keypoints_and_captions):
    examples, _, _ = keypoints_and_captions
    with open(sample.keypoints, encoding="utf-8") as f:
        document = json.load(f)
    by_id = {a["id"]: a for a in document["annotations"]}
    names = [n.encode() for n in EXTRAS_KEYPOINT_NAMES]
    # per image, the annotations written, in id order (13, 14, 15 are malformed)
    written = {"a.png": [10, 11], "b.png": [12, 17], "c.png": [], "d.png": [16]}
    for file_name, ids in written.items():
        e = examples[file_name]
        people = [by_id[i] for i in ids if by_id[i]["category_id"] == 1]
        xs, ys, visibility = (sum((_expected_points(a)[k] for a in people), [])
                              for k in range(3))
        np.testing.assert_allclose(e["image/object/keypoint/x"], xs, rtol=1e-6)
        np.testing.assert_allclose(e["image/object/keypoint/y"], ys, rtol=1e-6)
        assert e["image/object/keypoint/visibility"].tolist() == visibility
        assert e["image/object/keypoint/text"].tolist() == names * len(people)
        # one num per object: COCO's num_keypoints, 0 for the dog and for 16 (none given)
        assert e["image/object/keypoint/num"].tolist() == [
            by_id[i].get("num_keypoints", 0) for i in ids]
        assert e["image/object/class/label"].tolist() == [by_id[i]["category_id"] for i in ids]


def test_malformed_keypoints_reject_their_annotation(keypoints_and_captions):
    _, manifest, rejects = keypoints_and_captions
    keypoint_rejects = [r for r in rejects if r["reason"] == "invalid_keypoints"]
    assert sorted(r["source"] for r in keypoint_rejects) == [
        "annotation 13", "annotation 14", "annotation 15"]
    assert all(r["kind"] == "annotation" for r in keypoint_rejects)
    assert "names 3" in next(r["detail"] for r in keypoint_rejects
                             if r["source"] == "annotation 14")


def test_manifest_holds_the_keypoint_names_and_skeleton(keypoints_and_captions):
    _, manifest, _ = keypoints_and_captions
    assert manifest["keypoints"] == {"1": {
        "names": list(EXTRAS_KEYPOINT_NAMES),
        "skeleton": [list(pair) for pair in EXTRAS_SKELETON]}}
    assert manifest["task"] == "detection"


def test_densepose_not_written_is_counted_once(keypoints_and_captions):
    _, manifest, _ = keypoints_and_captions
    assert manifest["splits"]["train"]["counts"][DENSEPOSE_NOT_WRITTEN] == 1


def test_captions_join_by_image_id_in_caption_id_order(keypoints_and_captions):
    examples, manifest, rejects = keypoints_and_captions
    captions = {name: e["image/caption"].tolist() for name, e in examples.items()}
    assert captions == {
        "a.png": [b"Two friends outside.", b"A person walks a dog."],
        "b.png": [b"Someone stands still."], "c.png": [], "d.png": []}
    assert ("caption 103", "unknown_image") in _reasons(rejects)
    assert any(r["reason"] == "missing_field" and "captions.json: annotations[4]" in r["source"]
               for r in rejects)
    assert manifest["splits"]["train"]["counts"]["captions_written"] == 3


def test_keypoints_not_asked_for_are_counted_and_their_boxes_written(sample, tmp_path):
    examples, manifest, rejects = _convert(tmp_path / "k", CocoOptions(
        sample.images_dir, sample.keypoints))
    assert manifest["splits"]["train"]["counts"][KEYPOINTS_NOT_WRITTEN] == 6
    assert "keypoints" not in manifest
    assert not any(k.startswith("image/object/keypoint") for e in examples.values() for k in e)
    assert sum(len(e["image/object/class/label"]) for e in examples.values()) == 8
    assert rejects == []


def test_a_captions_file_alone_converts_its_images(sample, tmp_path):
    examples, manifest, rejects = _convert(tmp_path / "c", CocoOptions(
        sample.images_dir, None, captions=sample.captions))
    assert sorted(examples) == ["a.png", "b.png", "c.png", "d.png"]
    assert examples["b.png"]["image/caption"].tolist() == [b"Someone stands still."]
    assert not any(k.startswith("image/object/") for e in examples.values() for k in e)
    assert (manifest["task"], manifest["label_map"]) == ("captioning", {})
    assert ("caption 103", "unknown_image") in _reasons(rejects)


def test_written_captions_count_in_the_annotation_reject_fraction(sample, tmp_path):
    # A caption of an unknown image is an annotation reject; the fraction it is checked
    # against is over every caption, not over the objects alone (none here: it was 1 of 1,
    # 100%, and any such caption failed a captions-only run).
    _, manifest, rejects = _convert(tmp_path / "c", CocoOptions(
        sample.images_dir, None, captions=sample.captions))
    split = manifest["splits"]["train"]
    written = split["counts"]["captions_written"]
    caption_rejects = sum(1 for r in rejects if r["kind"] == "annotation")
    assert written > 0 and caption_rejects > 0
    assert split["rejects"]["annotations_seen"] == written + caption_rejects
    assert split["rejects"]["annotation_fraction"] < 1.0


def test_lvis_images_named_by_url_with_their_category_lists(sample, tmp_path):
    examples, manifest, rejects = _convert(tmp_path / "l", CocoOptions(
        sample.images_dir, sample.lvis, contiguous_labels=True))
    assert sorted(examples) == ["a.png", "b.png", "c.png", "d.png"]
    first = examples["a.png"]
    # contiguous labels: person (id 1) is 1, dog (id 3) is 2; the lists use them too
    assert first["image/neg_category_ids"].tolist() == [2]
    assert first["image/not_exhaustive_category_ids"].tolist() == [1]
    assert first["image/object/is_crowd"].tolist() == [0]
    assert examples["b.png"]["image/neg_category_ids"].tolist() == []
    assert examples["c.png"]["image/object/class/label"].tolist() == [2]
    assert _reasons(rejects) == [("image 2 neg_category_ids", "unknown_category")]
    assert manifest["label_map"] == {"1": "person", "2": "dog"}


def test_lvis_images_found_below_a_coco_root_by_their_url_folder(sample, tmp_path):
    # --images the COCO root (val2017/ inside), as Detectron2's LVIS datasets take it.
    root = tmp_path / "coco"
    (root / "val2017").mkdir(parents=True)
    for name in os.listdir(sample.images_dir):
        os.link(os.path.join(sample.images_dir, name), root / "val2017" / name)
    examples, _manifest, rejects = _convert(tmp_path / "l", CocoOptions(
        str(root), sample.lvis, contiguous_labels=True))
    assert sorted(examples) == [f"val2017/{n}" for n in ("a.png", "b.png", "c.png", "d.png")]
    assert [r["reason"] for r in rejects] == ["unknown_category"]


@pytest.fixture(scope="module")
def exif_sample(tmp_path_factory):
    """The COCO sample with two keypoints per object, on its box's top-left and
    bottom-right corners."""
    sample = make_coco_sample(tmp_path_factory.mktemp("coco-kp"), num_images=8, seed=3)
    with open(sample.annotations, encoding="utf-8") as f:
        document = json.load(f)
    for category in document["categories"]:
        category.update(keypoints=["top_left", "bottom_right"], skeleton=[[1, 2]])
    for annotation in document["annotations"]:
        bbox = annotation.get("bbox")
        if isinstance(bbox, list) and len(bbox) == 4:
            x, y, w, h = bbox
            annotation.update(keypoints=[x, y, 2, x + w, y + h, 2], num_keypoints=2)
    with open(sample.annotations, "w", encoding="utf-8") as f:
        json.dump(document, f)
    return sample


def test_apply_exif_moves_keypoints_as_it_moves_boxes(exif_sample, tmp_path):
    name = next(n for n, i in exif_sample.expected["images"].items()
                if i["exif_orientation"] == 6)
    coco = CocoOptions(exif_sample.images_dir, exif_sample.annotations, include_keypoints=True)
    examples, _, _ = _convert(tmp_path / "x", coco, ImageFixes(apply_exif=True, max_side=40))
    e = examples[name]
    boxes = list(zip(e["image/object/bbox/xmin"], e["image/object/bbox/ymin"],
                     e["image/object/bbox/xmax"], e["image/object/bbox/ymax"], strict=True))
    assert boxes
    points = list(zip(e["image/object/keypoint/x"], e["image/object/keypoint/y"], strict=True))
    for (xmin, ymin, xmax, ymax), top_left, bottom_right in zip(
            boxes, points[0::2], points[1::2], strict=True):
        # turned clockwise: the stored top-left corner is the displayed top-right one
        np.testing.assert_allclose(top_left, (xmax, ymin), atol=1e-6)
        np.testing.assert_allclose(bottom_right, (xmin, ymax), atol=1e-6)


def test_convert_coco_needs_annotations_or_captions(sample, tmp_path, capsys):
    code = cli_main(["convert", "coco", "--images", sample.images_dir,
                     "--output", str(tmp_path / "none")])
    assert code == 2
    assert "--annotations FILE, --captions FILE or both" in capsys.readouterr().err


def test_the_command_passes_keypoints_and_captions_on(sample, tmp_path, capsys):
    out = tmp_path / "cli"
    code = cli_main(["convert", "coco", "--images", sample.images_dir, "--annotations",
                     sample.keypoints, "--include-keypoints", "--captions", sample.captions,
                     "--output", str(out), "--shards", "1", "--max-reject-fraction", "1",
                     "--quiet", *IN_MEMORY])
    assert code == 0
    printed = capsys.readouterr().out
    assert "annotations with densepose not written  1" in printed
    with open(out / "manifest.json", encoding="utf-8") as f:
        manifest = json.load(f)
    assert manifest["splits"]["train"]["counts"]["captions_written"] == 3
    assert manifest["keypoints"]["1"]["names"] == list(EXTRAS_KEYPOINT_NAMES)


def test_a_category_with_no_keypoint_names_converts_beside_the_skeletons(sample, tmp_path):
    # Keypoints files where every category carries "keypoints" and "skeleton" keys, the
    # categories without points an empty list beside a skeleton copied from the person's.
    with open(sample.keypoints, encoding="utf-8") as f:
        document = json.load(f)
    for category in document["categories"]:
        if not category.get("keypoints"):
            category["keypoints"], category["skeleton"] = [], [list(p) for p in EXTRAS_SKELETON]
    path = tmp_path / "keypoints.json"
    path.write_text(json.dumps(document))
    coco = CocoOptions(sample.images_dir, str(path), include_keypoints=True)
    examples, manifest, _rejects = _convert(tmp_path / "out", coco)
    dogs = [num for e in examples.values() for label, num in zip(
        e["image/object/class/label"].tolist(), e["image/object/keypoint/num"].tolist(),
        strict=True) if label == 3]
    assert dogs == [0]  # the dog is written, with no keypoints
    assert list(manifest["keypoints"]) == ["1"]


def test_label_studio_coco_export_with_category_id_0_is_said(tmp_path, capsys):
    # Label Studio's COCO export: result.json beside images/, file_names "images/<name>",
    # categories numbered from 0.
    from PIL import Image

    root = tmp_path / "project-1-at-2024"
    (root / "images").mkdir(parents=True)
    Image.new("RGB", (64, 48)).save(root / "images" / "8f3a-cat.jpg")
    (root / "result.json").write_text(json.dumps({
        "images": [{"id": 0, "file_name": "images/8f3a-cat.jpg", "width": 64, "height": 48}],
        "categories": [{"id": 0, "name": "Airplane"}, {"id": 1, "name": "Car"}],
        "annotations": [
            {"id": 0, "image_id": 0, "category_id": 0, "bbox": [1, 2, 10, 12], "area": 120,
             "segmentation": [], "ignore": 0, "iscrowd": 0},
            {"id": 1, "image_id": 0, "category_id": 1, "bbox": [20, 2, 10, 12], "area": 120,
             "segmentation": [], "ignore": 0, "iscrowd": 0}],
        "info": {"year": 2024, "contributor": "Label Studio"}}))
    argv = ["convert", "coco", "--images", str(root), "--annotations", str(root / "result.json"),
            "--quiet", *IN_MEMORY]
    assert cli_main([*argv, "--output", str(tmp_path / "ids")]) == 0
    err = capsys.readouterr().err
    assert "1 object has category id 0, written as label 0" in err and "--contiguous-labels" in err
    assert cli_main([*argv, "--output", str(tmp_path / "labels"), "--contiguous-labels"]) == 0
    assert "category id 0" not in capsys.readouterr().err
    with open(tmp_path / "labels" / "manifest.json", encoding="utf-8") as f:
        assert json.load(f)["label_map"] == {"1": "Airplane", "2": "Car"}
