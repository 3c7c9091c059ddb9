"""Unit tests for the COCO sample generators (`recordbeam.testing.samples.make_coco_sample`, the
demo's, and `make_coco_benchmark` of tests/samples.py): the generated files match what
`expected` promises.

Every claim in `expected` is re-derived here from the files themselves (headers through
recordbeam.images.checks, the JSON through ijson as a converter reads it), not taken on trust.
"""

from __future__ import annotations

import errno
import json
import os
from collections import Counter

import ijson
import pytest
from read_back import folder_files
from samples import make_coco_benchmark

from recordbeam.images.checks import ImageRejected, inspect_file
from recordbeam.testing.samples import ANNOTATION_REASONS, MIN_SAMPLE_IMAGES, make_coco_sample


@pytest.fixture(scope="module")
def sample(tmp_path_factory):
    return make_coco_sample(tmp_path_factory.mktemp("coco"))


@pytest.fixture(scope="module")
def document(sample):
    return {
        key: list(_items(sample.annotations, f"{key}.item"))
        for key in ("images", "annotations", "categories")
    }


def _items(path, prefix):
    with open(path, "rb") as f:
        yield from ijson.items(f, prefix, use_float=True)


def _inspect_all(images_dir, names):
    """{name: ImageInfo or the reject reason} for each name."""
    results = {}
    for name in names:
        try:
            results[name] = inspect_file(os.path.join(images_dir, name))
        except ImageRejected as e:
            results[name] = e.reason
    return results


def test_layout_and_top_level_keys(sample):
    assert sample.images_dir.endswith("images")
    assert sample.annotations.endswith(os.path.join("annotations", "instances.json"))
    with open(sample.annotations, encoding="utf-8") as f:
        raw = json.load(f)
    assert {"info", "images", "annotations", "categories"} <= raw.keys()
    assert sample.num_images == len(raw["images"])


def test_good_and_rejected_images_match_their_files(sample, document):
    listed = [image["file_name"] for image in document["images"]]
    results = _inspect_all(sample.images_dir, listed)
    good = sorted(name for name, r in results.items() if not isinstance(r, str))
    rejected = {name: r for name, r in results.items() if isinstance(r, str)}
    assert good == sample.expected["good_images"]
    assert rejected == sample.expected["rejected_images"]
    assert set(rejected.values()) == {
        "truncated",
        "empty",
        "not_an_image",
        "unsupported_format",
        "corrupt",
        "too_large",
        "missing",
    }
    for name in good:
        info = results[name]
        assert sample.expected["images"][name] == {
            "format": info.format,
            "width": info.width,
            "height": info.height,
            "mode": info.mode,
            "exif_orientation": info.exif_orientation,
        }


def test_good_images_cover_the_promised_variety(sample):
    infos = sample.expected["images"].values()
    assert {i["format"] for i in infos} == {"jpeg", "png"}
    assert {"L", "RGB"} <= {i["mode"] for i in infos}
    assert [i["exif_orientation"] for i in infos if i["exif_orientation"]] == [6]
    png_named_jpg = [
        n
        for n, i in sample.expected["images"].items()
        if n.endswith(".jpg") and i["format"] == "png"
    ]
    assert len(png_named_jpg) == 1


def test_unlisted_files_are_on_disk_but_not_in_the_json(sample, document):
    listed = {image["file_name"] for image in document["images"]}
    on_disk = set(os.listdir(sample.images_dir))
    assert sorted(on_disk - listed) == sample.expected["unlisted_files"] == ["unlisted.jpg"]
    # The listed-but-missing image is the only one in the JSON without a file.
    assert [n for n in listed - on_disk] == ["bad_missing.jpg"]


def test_categories_have_gaps_like_coco(sample, document):
    ids = [c["id"] for c in document["categories"]]
    assert ids == sorted(ids) and len(ids) == 5
    assert ids != list(range(1, 6))
    assert all({"id", "name", "supercategory"} <= c.keys() for c in document["categories"])
    assert sample.expected["categories"] == {c["id"]: c["name"] for c in document["categories"]}


def _classify(annotation, image_ids, category_ids):
    """The reason a converter must drop an annotation, or None when it keeps it."""
    x, y, w, h = annotation["bbox"]
    if annotation["image_id"] not in image_ids:
        return "unknown_image"
    if annotation["category_id"] not in category_ids:
        return "unknown_category"
    if w < 0 or h < 0:
        return "invalid_bbox"
    if w == 0 or h == 0:
        return "empty_bbox"
    return None


def test_annotation_rejections_match(sample, document):
    image_ids = {image["id"] for image in document["images"]}
    category_ids = {c["id"] for c in document["categories"]}
    rejected = {}
    for annotation in document["annotations"]:
        reason = _classify(annotation, image_ids, category_ids)
        if reason:
            rejected[annotation["id"]] = reason
    assert rejected == sample.expected["rejected_annotations"]
    assert sorted(rejected.values()) == sorted(ANNOTATION_REASONS)


def test_annotation_fields_are_complete(document):
    for annotation in document["annotations"]:
        assert {"id", "image_id", "category_id", "bbox", "area", "iscrowd", "segmentation"} <= (
            annotation.keys()
        )
        polygon = annotation["segmentation"][0]
        assert len(polygon) == 8
    ids = [a["id"] for a in document["annotations"]]
    assert len(ids) == len(set(ids))


def test_kept_annotations_per_image_and_clipping(sample, document):
    by_id = {image["id"]: image["file_name"] for image in document["images"]}
    good = set(sample.expected["good_images"])
    image_ids = set(by_id)
    category_ids = {c["id"] for c in document["categories"]}
    headers = _inspect_all(sample.images_dir, good)
    kept = Counter()
    clipped = {}
    for annotation in document["annotations"]:
        if _classify(annotation, image_ids, category_ids):
            continue
        name = by_id[annotation["image_id"]]
        assert name in good  # bad images carry no annotations
        kept[name] += 1
        x, y, w, h = annotation["bbox"]
        width, height = headers[name].width, headers[name].height
        assert x >= 0 and y >= 0
        if x + w > width or y + h > height:
            clipped[annotation["id"]] = [x, y, min(x + w, width) - x, min(y + h, height) - y]
    assert {n: kept[n] for n in good} == sample.expected["annotations_per_image"]
    assert sum(kept.values()) == sample.expected["num_annotations"]
    assert clipped == sample.expected["clipped"]
    assert len(clipped) == sample.expected["clipped_boxes"] == 1
    assert sum(1 for n in good if kept[n] == 0) >= 3


def test_size_mismatch_between_json_and_header(sample, document):
    headers = _inspect_all(sample.images_dir, sample.expected["good_images"])
    mismatched = {
        image["file_name"]: {
            "json": [image["width"], image["height"]],
            "header": [headers[image["file_name"]].width, headers[image["file_name"]].height],
        }
        for image in document["images"]
        if image["file_name"] in headers
        and (image["width"], image["height"])
        != (headers[image["file_name"]].width, headers[image["file_name"]].height)
    }
    assert mismatched == sample.expected["size_mismatch"]
    assert len(mismatched) == 1


def test_same_seed_writes_identical_bytes(tmp_path):
    first = make_coco_sample(tmp_path / "a", num_images=10, seed=3)
    second = make_coco_sample(tmp_path / "b", num_images=10, seed=3)
    other = make_coco_sample(tmp_path / "c", num_images=10, seed=4)
    assert folder_files(tmp_path / "a") == folder_files(tmp_path / "b")
    assert first.expected == second.expected
    assert folder_files(tmp_path / "a") != folder_files(tmp_path / "c")
    assert other.num_images == first.num_images


def test_clean_sample_has_nothing_to_reject(tmp_path):
    clean = make_coco_sample(tmp_path, num_images=MIN_SAMPLE_IMAGES, include_bad=False)
    names = sorted(os.listdir(clean.images_dir))
    assert names == clean.expected["good_images"]
    assert all(not isinstance(r, str) for r in _inspect_all(clean.images_dir, names).values())
    assert clean.expected["rejected_images"] == {}
    assert clean.expected["rejected_annotations"] == {}
    assert clean.expected["unlisted_files"] == []
    assert clean.expected["clipped_boxes"] == 0
    assert clean.num_images == MIN_SAMPLE_IMAGES


def test_sample_options_are_honoured(tmp_path):
    small = make_coco_sample(tmp_path, num_images=9, image_size=(40, 32), num_categories=12)
    assert len(small.expected["good_images"]) == 9
    assert {(i["width"], i["height"]) for i in small.expected["images"].values()} == {(40, 32)}
    ids = list(small.expected["categories"])
    assert len(ids) == len(set(ids)) == 12
    assert len(set(small.expected["categories"].values())) == 12


def test_bad_arguments_are_refused(tmp_path):
    with pytest.raises(ValueError, match="num_images"):
        make_coco_sample(tmp_path / "few", num_images=MIN_SAMPLE_IMAGES - 1)
    make_coco_sample(tmp_path / "used", num_images=MIN_SAMPLE_IMAGES)
    with pytest.raises(FileExistsError, match="already holds files"):
        make_coco_sample(tmp_path / "used", num_images=MIN_SAMPLE_IMAGES)


def test_benchmark_links_few_files_under_many_names(tmp_path):
    bench = make_coco_benchmark(tmp_path, num_images=40, distinct=3, seed=1)
    names = sorted(os.listdir(bench.images_dir))
    assert names == bench.expected["good_images"] and len(names) == 40
    inodes = {os.stat(os.path.join(bench.images_dir, n)).st_ino for n in names}
    assert len(inodes) == 3
    for name in names[:3]:
        info = inspect_file(os.path.join(bench.images_dir, name))
        assert (info.format, info.width, info.height) == ("jpeg", 640, 480)
        assert 80_000 < os.path.getsize(os.path.join(bench.images_dir, name)) < 250_000


def test_benchmark_starts_a_new_file_when_one_reaches_the_link_limit(tmp_path, monkeypatch):
    # ext4 refuses a 65,001st hard link (EMLINK). The generator once copied every name
    # after that, and a 1M-image set of 8 distinct files filled 64 GB of disk.
    links: dict[int, int] = {}
    real_link = os.link

    def link_with_a_limit_of_4(source, target):
        inode = os.stat(source).st_ino
        if links.get(inode, 1) >= 4:
            raise OSError(errno.EMLINK, "Too many links", source)
        real_link(source, target)
        links[inode] = links.get(inode, 1) + 1

    monkeypatch.setattr(os, "link", link_with_a_limit_of_4)
    bench = make_coco_benchmark(tmp_path, num_images=40, distinct=2, seed=1)
    names = sorted(os.listdir(bench.images_dir))
    assert len(names) == 40
    by_inode: dict[int, int] = {}
    for name in names:
        inode = os.stat(os.path.join(bench.images_dir, name)).st_ino
        by_inode[inode] = by_inode.get(inode, 0) + 1
    assert max(by_inode.values()) == 4  # every file used up to the limit
    assert len(by_inode) == 10  # 40 names, 4 per file: one copy per 4 names, not per name


def test_benchmark_annotations_stream_as_valid_coco(tmp_path):
    bench = make_coco_benchmark(tmp_path, num_images=300, distinct=1)
    images = list(_items(bench.annotations, "images.item"))
    annotations = list(_items(bench.annotations, "annotations.item"))
    categories = list(_items(bench.annotations, "categories.item"))
    assert len(images) == bench.num_images == 300
    assert len(annotations) == bench.expected["num_annotations"]
    assert 5 < len(annotations) / len(images) < 9  # about 7 boxes per image
    assert len(categories) == 80 and max(c["id"] for c in categories) == 90
    image_ids = {i["id"] for i in images}
    category_ids = {c["id"] for c in categories}
    assert len({a["id"] for a in annotations}) == len(annotations)
    for a in annotations:
        x, y, w, h = a["bbox"]
        assert a["image_id"] in image_ids and a["category_id"] in category_ids
        assert 0 <= x and 0 <= y and w > 0 and h > 0 and x + w <= 640 and y + h <= 480
