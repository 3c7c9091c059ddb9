"""Annotations that cost far more memory than their size: masks declared larger than their
image, outlines of a million vertices, YAML aliases and ``nc`` that stand for billions of
values, JSON nested 100,000 deep.

Each run is a ``recordbeam convert`` in a child process whose address space is capped at
:data:`ADDRESS_SPACE` (a small run needs about 600 MiB of it), so a bomb that would
allocate gigabytes fails the test quickly instead of the machine; every bomb here asks for
more than the cap. One bad file or row is one reject, naming it; a bad class list or
annotation file fails the run (exit 1) naming the file. ``make test`` runs one bomb (a COCO
polygon of a million vertices); the others run in ``make test-all``.
"""

from __future__ import annotations

import base64
import io
import json
import os
import subprocess
from pathlib import Path

import pytest
from in_new_processes import set_up_then_exec
from labelled_datasets import (
    IN_MEMORY,
    LENIENT,
    Outcome,
    coco,
    cvat,
    edit_json,
    jpeg,
    labelme,
    labelstudio,
    yolo,
)
from lanes import exhaustive, one_in_make_test
from PIL import Image

CASE = pytest.mark.case

#: The address space a bounded run may use: room for Beam and one small image, a
#: fraction of any bomb here.
ADDRESS_SPACE = 1 << 30
TIMEOUT = 240


#: The child caps its own address space before it becomes the command.
BOUNDED = set_up_then_exec(
    "import resource; cap = int(sys.argv[1]); resource.setrlimit(resource.RLIMIT_AS, (cap, cap))")


def run_bounded(argv: list[str], output, *extra: str) -> Outcome:
    """``recordbeam convert ARGV`` in a child process within :data:`ADDRESS_SPACE`."""
    done = subprocess.run(
        [*BOUNDED, str(ADDRESS_SPACE), "-m", "recordbeam", "convert", *argv, "--output",
         str(output), "--quiet", *extra, *IN_MEMORY],
        capture_output=True, text=True, timeout=TIMEOUT,
        env={**os.environ, "OPENBLAS_NUM_THREADS": "1"}, check=False)
    return Outcome(done.returncode, done.stdout, done.stderr, output)


def _reasons(outcome: Outcome) -> dict[str, str]:
    return {r["reason"]: r["detail"] for r in outcome.rejects()}


@CASE("CVAT `<mask>` on an `<image>` declared 40000x40000 (its file is 32x24): a 1.6 G "
      "pixel mask from an RLE of two runs",
      "never drawn at parse; with `--include-masks` the object is rejected "
      "`mask_size_mismatch` against the image's header; run succeeds within 1 GiB")
@pytest.mark.parametrize("masks", [pytest.param(True, id="masks", marks=exhaustive),
                                   pytest.param(False, id="boxes", marks=exhaustive)])
def test_a_cvat_mask_declared_huge_is_checked_before_it_is_drawn(tmp_path, masks):
    shape = ('<mask label="dog" rle="0, 1600000000" left="0" top="0" width="40000" '
             'height="40000"/>')
    argv = cvat(tmp_path / "in", ["dog"], shapes=shape, width=40000, height=40000)
    outcome = run_bounded(argv + (["--include-masks"] if masks else []), tmp_path / "out",
                          *LENIENT)
    assert outcome.code == 0, outcome.err
    reasons = _reasons(outcome)
    assert "size_mismatch" in reasons  # the <image>'s size against the header, a warning
    if masks:
        assert "40000x40000 but the image is 32x24" in reasons["mask_size_mismatch"]
    else:
        assert "mask_size_mismatch" not in reasons
        assert outcome.manifest()["splits"]["train"]["counts"]["boxes_written"] == 1


@CASE("labelme `mask` shape in a JSON declaring a 13000x13000 image (its file is 32x24): a "
      "169 M pixel mask under the pixel limit",
      "kept as its patch at parse; with `--include-masks` the object is rejected "
      "`mask_size_mismatch` against the image's header; run succeeds within 1 GiB")
@exhaustive
def test_a_labelme_mask_in_a_json_declaring_a_huge_image_is_not_drawn_at_parse(tmp_path):
    argv = labelme(tmp_path / "in", ["dog"])
    buffer = io.BytesIO()
    Image.new("L", (8, 8), 1).save(buffer, "PNG")
    patch = base64.b64encode(buffer.getvalue()).decode()

    def huge(document: dict) -> None:
        document.update(imageWidth=13000, imageHeight=13000)
        document["shapes"][0].update(shape_type="mask", points=[[2, 2], [9, 9]], mask=patch)

    edit_json(tmp_path / "in" / "a0.json", huge)
    outcome = run_bounded(argv + ["--include-masks"], tmp_path / "out", *LENIENT)
    assert outcome.code == 0, outcome.err
    assert "13000x13000 but the image is 32x24" in _reasons(outcome)["mask_size_mismatch"]
    assert outcome.manifest()["splits"]["train"]["examples"] == 1


@CASE("COCO RLE segmentation of 30000x30000 on a 32x24 image (0.9 G pixels)",
      "annotation reject `mask_size_mismatch` before any pixel is made; the image is "
      "written; run succeeds within 1 GiB")
@exhaustive
def test_a_coco_rle_larger_than_its_image_is_refused_before_decoding(tmp_path):
    argv = coco(tmp_path / "in", ["dog"],
                segmentation={"size": [30000, 30000], "counts": [0, 900_000_000]})
    outcome = run_bounded(argv + ["--include-masks"], tmp_path / "out", *LENIENT)
    assert outcome.code == 0, outcome.err
    assert "30000x30000 but the image is 32x24" in _reasons(outcome)["mask_size_mismatch"]
    assert outcome.manifest()["splits"]["train"]["examples"] == 1


def _zigzag(vertices: int) -> list[float]:
    """An outline crossing a 32x24 image corner to corner at every edge."""
    return [value for i in range(vertices) for value in ((0.0, 0.0) if i % 2 else (31.0, 23.0))]


def _polygon_dataset(root, kind: str, points: list[float]) -> list[str]:
    """One image, one object of class dog outlined by ``points`` (x, y, x, y...)."""
    pairs = list(zip(points[::2], points[1::2], strict=True))
    if kind == "coco":
        return coco(root, ["dog"], segmentation=[points])
    if kind == "cvat":
        text = ";".join(f"{x:g},{y:g}" for x, y in pairs)
        return cvat(root, ["dog"], shapes=f'<polygon label="dog" points="{text}"/>')
    if kind == "labelstudio":  # in percent of the image
        argv = labelstudio(root, ["dog"])
        value = {"points": [[x / 32 * 100, y / 24 * 100] for x, y in pairs], "closed": True,
                 "polygonlabels": ["dog"]}
        edit_json(Path(argv[argv.index("--input") + 1]),
                  lambda tasks: tasks[0]["annotations"][0].update(result=[{
                      "id": "p", "type": "polygonlabels", "from_name": "label",
                      "to_name": "image", "original_width": 32, "original_height": 24,
                      "image_rotation": 0, "value": value}]))
        return argv
    if kind == "yolo":
        argv = yolo(root, ["dog"])
        line = " ".join(f"{x / 32:.4f} {y / 24:.4f}" for x, y in pairs)
        (root / "labels" / "train" / "a.txt").write_text(f"0 {line}\n")
        return argv
    argv = labelme(root, ["dog"])
    document = json.loads((root / "a0.json").read_text())
    document["shapes"][0].update(shape_type="polygon", points=[list(p) for p in pairs])
    (root / "a0.json").write_text(json.dumps(document))
    return argv


@CASE("Polygon of a million vertices (COCO, CVAT, labelme, Label Studio; a YOLO segment "
      "line of two million values)",
      "that object is rejected, naming the count (COCO `invalid_mask`, CVAT and Label Studio "
      "`malformed_points`, labelme `invalid_shape`, YOLO `malformed_line`); the image is "
      "written; run succeeds within 1 GiB")
@pytest.mark.parametrize("kind, reason", one_in_make_test([
    ("coco", "invalid_mask"), ("cvat", "malformed_points"), ("labelme", "invalid_shape"),
    ("yolo", "malformed_line"), ("labelstudio", "malformed_points")]))
def test_a_polygon_of_a_million_vertices_is_one_reject(tmp_path, kind, reason):
    argv = _polygon_dataset(tmp_path / "in", kind, _zigzag(1_000_000))
    outcome = run_bounded(argv + ["--include-masks"], tmp_path / "out", *LENIENT)
    assert outcome.code == 0, outcome.err
    assert "1,000,000 vertices, more than the 100,000" in _reasons(outcome)[reason]
    assert outcome.manifest()["splits"]["train"]["examples"] == 1


@CASE("Polygon of 90,000 vertices zigzagging corner to corner of a 32x24 image (an outline "
      "2.8 M pixels long), `--include-masks`",
      "annotation reject `invalid_mask` naming the outline's length, never traced; the "
      "image is written; run succeeds within 1 GiB")
@pytest.mark.parametrize("kind", [pytest.param(k, marks=exhaustive)
                                  for k in ("coco", "cvat", "labelme", "yolo", "labelstudio")])
def test_an_outline_far_longer_than_its_image_is_not_traced(tmp_path, kind):
    argv = _polygon_dataset(tmp_path / "in", kind, _zigzag(90_000))
    outcome = run_bounded(argv + ["--include-masks"], tmp_path / "out", *LENIENT)
    assert outcome.code == 0, outcome.err
    assert "(90000 vertices) is" in _reasons(outcome)["invalid_mask"]
    assert outcome.manifest()["splits"]["train"]["examples"] == 1


_LAUGHS = "\n".join(
    ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    + [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 10)])


@CASE("data.yaml whose `names` is a YAML alias bomb (9 levels of 9 aliases: 10^9 names)",
      "run fails (exit 1) naming data.yaml: it expands past 1,000,000 values; nothing is "
      "expanded")
@CASE("data.yaml with `nc: 1000000000` and no `names`",
      "run fails (exit 1) naming data.yaml: at most 100,000 class names are made up from `nc`")
@pytest.mark.parametrize("document, said", [
    (f"{_LAUGHS}\ntrain: images/train\nnames: *a8\n", "expands to more than 1,000,000 values"),
    ("train: images/train\nnc: 1000000000\n", "at most 100,000 class names"),
], ids=["aliases", "nc"])
@exhaustive
def test_yaml_that_stands_for_billions_of_names_is_refused(tmp_path, document, said):
    argv = yolo(tmp_path / "in", ["dog"])
    (tmp_path / "in" / "data.yaml").write_text(document)
    outcome = run_bounded(argv, tmp_path / "out")
    assert outcome.code == 1, outcome.err
    assert "data.yaml" in outcome.err and said in outcome.err
    assert "Traceback" not in outcome.err


_DEEP = "[" * 100_000 + "]" * 100_000


@CASE("labelme JSON nested 100,000 deep beside a good one",
      "image reject `malformed_json` naming the file; the other image is written")
@CASE("JSON Lines manifest row nested 100,000 deep",
      "reject `bad_row` naming `<manifest>:<line>`; the other rows are written")
@pytest.mark.parametrize("kind", [pytest.param(k, marks=exhaustive) for k in ("labelme", "jsonl")])
def test_one_deeply_nested_file_or_row_is_one_reject(tmp_path, kind):
    if kind == "labelme":
        argv = labelme(tmp_path / "in", ["dog", "cat"])
        bad = tmp_path / "in" / "a1.json"
        bad.write_text(_DEEP)
        source, reason = str(bad), "malformed_json"
    else:
        (tmp_path / "in").mkdir()
        (tmp_path / "in" / "a.jpg").write_bytes(b"")  # rejected `empty`: rows are what count
        manifest = tmp_path / "in" / "m.jsonl"
        manifest.write_text(json.dumps({"image": "a.jpg", "label": 1}) + "\n"
                            + '{"image": "a.jpg", "label": ' + _DEEP + "}\n")
        argv = ["manifest", "--manifest", str(manifest)]
        source, reason = f"{manifest}:2", "bad_row"
    outcome = run_bounded(argv, tmp_path / "out", "--max-reject-fraction", "1")
    assert outcome.code == 0, outcome.err
    [deep] = [r for r in outcome.rejects() if r["source"] == source]
    assert deep["reason"] == reason and "too deeply" in deep["detail"]


@CASE("COCO annotation file or Label Studio export with a value nested 100,000 deep",
      "run fails (exit 1) naming the file and the byte range; parsing stops at 128 levels, "
      "within 1 GiB")
@pytest.mark.parametrize("kind", [pytest.param(k, marks=exhaustive)
                                  for k in ("coco", "labelstudio")])
def test_a_deeply_nested_export_fails_naming_it(tmp_path, kind):
    if kind == "coco":
        argv = coco(tmp_path / "in", ["dog"])
        path = tmp_path / "in" / "instances.json"
        edit_json(path, lambda d: d["annotations"][0].update(attributes="DEEP"))
    else:  # a task's data holds any fields the project imported
        argv = labelstudio(tmp_path / "in", ["dog"])
        path = Path(argv[argv.index("--input") + 1])
        edit_json(path, lambda tasks: tasks[0]["data"].update(meta="DEEP"))
    path.write_text(path.read_text().replace('"DEEP"', _DEEP))
    outcome = run_bounded(argv, tmp_path / "out")
    assert outcome.code == 1, outcome.err
    assert str(path) in outcome.err and "more than 128 levels deep" in outcome.err
    assert outcome.manifest() is None


@CASE("COCO category id 2^40 (legal: ids fit 64 bits)",
      "written; TFDS's files give that label as a plain integer instead of a ClassLabel of "
      "2^40 names; run succeeds within 1 GiB")
@exhaustive
def test_a_category_id_far_from_zero_is_no_list_of_names(tmp_path):
    argv = coco(tmp_path / "in", ["dog"])

    def far_id(document: dict) -> None:
        document["categories"][0]["id"] = document["annotations"][0]["category_id"] = 2**40

    edit_json(tmp_path / "in" / "instances.json", far_id)
    outcome = run_bounded(argv, tmp_path / "out")
    assert outcome.code == 0, outcome.err
    assert outcome.manifest()["label_map"] == {str(2**40): "dog"}
    features = json.loads(outcome.text("features.json"))
    label = features["featuresDict"]["features"]["image/object/class/label"]
    assert "classLabel" not in json.dumps(label)


@CASE("JSON Lines manifest with a row of 200 MB on one line",
      "reject `bad_row` naming `<manifest>:<line>` and its length, read past in pieces "
      "(rows are at most 64 MiB); the other rows are written; within 1 GiB")
@exhaustive
def test_a_row_of_200_mb_is_read_past_not_held(tmp_path):
    folder = tmp_path / "in"
    folder.mkdir()
    for name in ("a.jpg", "b.jpg"):
        (folder / name).write_bytes(jpeg())
    manifest = folder / "m.jsonl"
    with open(manifest, "w", encoding="utf-8") as f:
        f.write(json.dumps({"image": "a.jpg", "label": 1}) + "\n")
        f.write('{"image": "b.jpg", "label": 2, "note": "')
        for _ in range(200):
            f.write("z" * (1 << 20))
        f.write('"}\n')
        f.write(json.dumps({"image": "b.jpg", "label": 3}) + "\n")
    outcome = run_bounded(["manifest", "--manifest", str(manifest)], tmp_path / "out",
                          "--max-reject-fraction", "1")
    manifest.unlink()
    assert outcome.code == 0, outcome.err
    [long] = outcome.rejects()
    assert long["source"] == f"{manifest}:2" and long["reason"] == "bad_row"
    assert "more than the 67,108,864 a row may be" in long["detail"]
    assert outcome.manifest()["splits"]["train"]["examples"] == 2
