"""Untrusted labelme folders: broken JSON, imagePath leading out of ROOT, JSONs and images
that do not pair, embedded images, groups that disagree."""

from __future__ import annotations

import base64
import io
import json
import os

import pytest
from PIL import Image

from recordbeam.cli import main as cli

CASE = pytest.mark.case
IN_MEMORY = ["--direct_running_mode=in_memory", "--direct_num_workers=1"]
SECRET = b"labelme-secret-outside-root"


def _shapes(*labels_and_groups):
    return [{"label": label, "points": [[1, 1], [9, 9]], "group_id": group,
             "shape_type": "rectangle", "flags": {}, "description": ""}
            for label, group in labels_and_groups]


def _json(image_path, shapes, image_data=None):
    return json.dumps({"version": "5.4.1", "flags": {}, "shapes": shapes,
                       "imagePath": image_path, "imageData": image_data,
                       "imageHeight": 32, "imageWidth": 32})


def _jpeg() -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (32, 32), (1, 2, 3)).save(buffer, format="JPEG")
    return buffer.getvalue()


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    base = tmp_path_factory.mktemp("labelme")
    root = base / "root"
    root.mkdir()
    (base / "secret.jpg").write_bytes(SECRET)  # outside ROOT: must never be read
    embedded = base64.b64encode(_jpeg()).decode()
    jsons = {
        "broken": "{\"shapes\": [",
        "not_labelme": json.dumps({"categories": []}),
        "escape": _json("../secret.jpg", _shapes(("dog", None))),
        "absolute": _json(str(base / "secret.jpg"), _shapes(("dog", None))),
        "no_image": _json("no_image.jpg", _shapes(("dog", None))),
        "embedded": _json("embedded.jpg", _shapes(("dog", None)), image_data=embedded),
        "bad_data": _json("bad_data.jpg", _shapes(("dog", None)), image_data="%%%"),
        "conflict": _json("conflict.jpg", _shapes(("dog", 4), ("cat", 4), ("dog", None))),
        "good": _json("good.jpg", _shapes(("dog", None))),
    }
    for stem, text in jsons.items():
        (root / f"{stem}.json").write_text(text)
    for stem in ("broken", "not_labelme", "conflict", "good", "no_json"):
        (root / f"{stem}.jpg").write_bytes(_jpeg())
    out = base / "out"
    code = cli.main(["convert", "labelme", "--input", str(root), "--output", str(out),
                     "--max-reject-fraction", "1", "--max-annotation-reject-fraction", "1",
                     "--quiet", *IN_MEMORY])
    rejects = [json.loads(line) for line in (out / "rejects.jsonl").read_text().splitlines()]
    shards = b"".join((out / name).read_bytes() for name in os.listdir(out)
                      if name.endswith(".tfrecord"))
    manifest = json.loads((out / "manifest.json").read_text())
    return code, {(os.path.basename(r["source"]), r["reason"]): r for r in rejects}, shards, \
        manifest["splits"]["train"]["counts"]


@CASE("labelme JSON that is not JSON, or not a labelme annotation",
      "image reject `malformed_json` naming the file; its image is not written; run succeeds")
def test_malformed_json_is_an_image_reject(converted):
    code, rejects, shards, _counts = converted
    assert code == 0
    for stem in ("broken", "not_labelme"):
        reject = rejects[(f"{stem}.json", "malformed_json")]
        assert reject["kind"] == "image" and f"{stem}.json" in reject["detail"]
        assert f"{stem}.jpg".encode() not in shards


@CASE("labelme imagePath leading out of ROOT (`../secret.jpg`, an absolute path)",
      "never read: only listed files below ROOT are images; image reject `missing`")
def test_image_path_out_of_root_is_never_read(converted):
    _code, rejects, shards, _counts = converted
    assert SECRET not in shards
    for stem in ("escape", "absolute"):
        assert rejects[(f"{stem}.json", "missing")]["kind"] == "image"


@CASE("labelme JSON without its image; image without its JSON",
      "image reject `missing` naming the JSON (unless it embeds imageData); the image is "
      "written with no objects and a `no_annotation_file` warning")
def test_unpaired_json_and_image(converted):
    _code, rejects, shards, _counts = converted
    assert "no imageData" in rejects[("no_image.json", "missing")]["detail"]
    assert rejects[("no_json.jpg", "no_annotation_file")]["kind"] == "warning"
    assert b"no_json.jpg" in shards and b"good.jpg" in shards


@CASE("labelme JSON whose image file is absent but embedded as imageData; imageData "
      "that is not base64",
      "the embedded image is written (counted `labelme_embedded_images_used`); broken "
      "imageData is a `invalid_image_data` warning and, without the file, image reject "
      "`missing`")
def test_embedded_images(converted):
    _code, rejects, shards, counts = converted
    assert counts["labelme_embedded_images_used"] == 1
    assert _jpeg() in shards and b"embedded.jpg" in shards
    assert rejects[("bad_data.json", "invalid_image_data")]["kind"] == "warning"
    assert rejects[("bad_data.json", "missing")]["kind"] == "image"


@CASE("labelme shapes sharing a group_id with different labels",
      "one object per label, as labelme's own converters key an instance by label and "
      "group_id; nothing rejected")
def test_group_with_two_labels(converted):
    _code, rejects, shards, _counts = converted
    assert not [key for key in rejects if key[0].startswith("conflict")]
    assert b"conflict.jpg" in shards and b"cat" in shards  # the only cat is the group's
