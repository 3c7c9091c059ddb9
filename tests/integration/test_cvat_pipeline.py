"""`recordbeam convert cvat` end to end on a hand-written CVAT project export with the
messy cases real exports have."""

from __future__ import annotations

import io
import json
import os

import numpy as np
import pytest
from lanes import exhaustive
from PIL import Image
from read_back import split_examples

from recordbeam.cli import main as cli

IN_MEMORY = ["--direct_running_mode=in_memory", "--direct_num_workers=1"]
KINDS = {"image/object/class/label": "int64", "image/object/bbox/xmin": "float",
         "image/object/bbox/xmax": "float", "image/object/bbox/ymin": "float",
         "image/object/bbox/ymax": "float", "image/object/class/text": "bytes",
         "image/object/occluded": "int64", "image/object/mask": "bytes"}

ANNOTATIONS = """<?xml version="1.0" encoding="utf-8"?>
<annotations>
  <version>1.1</version>
  <meta>
    <project>
      <name>p</name>
      <labels>
        <label><name>dog</name><type>any</type></label>
        <label><name>traffic light</name><type>any</type></label>
        <label><name>cat</name><type>any</type></label>
      </labels>
      <subsets>Train
Validation</subsets>
    </project>
  </meta>
  <image id="0" name="a.jpg" subset="Train" width="80" height="40">
    <box label="dog" occluded="1" xtl="8" ytl="4" xbr="40" ybr="20" z_order="0"/>
    <polygon label="traffic light" occluded="0" points="60,10;70,10;70,30;60,30" group_id="3"/>
    <box label="traffic light" occluded="0" xtl="60" ytl="10" xbr="70" ybr="30" group_id="3"/>
    <polyline label="dog" points="1,1;5,5"/>
  </image>
  <image id="1" name="B.JPG" subset="Train" width="80" height="40">
    <mask label="cat" occluded="0" rle="2, 2, 2, 2" left="10" top="10" width="4" height="2"/>
    <box label="yak" xtl="1" ytl="1" xbr="5" ybr="5"/>
    <box label="dog" xtl="5" ytl="5" xbr="5" ybr="9"/>
  </image>
  <image id="2" name="missing.jpg" subset="Train" width="80" height="40">
    <box label="dog" xtl="1" ytl="1" xbr="5" ybr="5"/>
  </image>
  <image id="3" name="a.jpg" subset="Validation" width="80" height="40">
    <box label="cat" xtl="0" ytl="0" xbr="80" ybr="40"/>
  </image>
</annotations>
"""


@pytest.fixture(scope="module")
def cvat_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("cvat")
    for folder in ("images/Train", "images/Validation"):
        (root / folder).mkdir(parents=True)

    def image(name, colour):
        Image.new("RGB", (80, 40), colour).save(root / "images" / name, format="JPEG")

    image("Train/a.jpg", (90, 20, 200))
    image("Train/B.JPG", (20, 90, 200))
    image("Validation/a.jpg", (200, 20, 90))
    image("Validation/unannotated.jpg", (9, 9, 9))  # no element: written with no objects
    (root / "images" / "Train" / "notes.txt").write_text("not an image")
    data = ANNOTATIONS.replace("\n", "\r\n").encode()
    (root / "annotations.xml").write_bytes(b"\xef\xbb\xbf" + data)
    return root


def _examples(output, split):
    return split_examples(output, split, kinds=KINDS)


@pytest.fixture(scope="module")
def converted(cvat_root, tmp_path_factory):
    out = tmp_path_factory.mktemp("out") / "out"
    code = cli.main(["convert", "cvat", "--input", str(cvat_root), "--output", str(out),
                     "--include-masks", "--max-reject-fraction", "1",
                     "--max-annotation-reject-fraction", "1", "--quiet", *IN_MEMORY])
    assert code == 0
    return out


def test_subsets_become_splits_with_boxes_groups_and_occluded(converted):
    train = _examples(converted, "Train")
    assert set(train) == {"a.jpg", "B.JPG"}
    a = train["a.jpg"]
    assert [t.decode() for t in a["image/object/class/text"]] == ["dog", "traffic light"]
    assert list(a["image/object/class/label"]) == [1, 2]  # <meta>'s order
    assert list(a["image/object/occluded"]) == [1, 0]
    assert list(a["image/object/bbox/xmin"]) == pytest.approx([8 / 80, 60 / 80])
    assert list(a["image/object/bbox/ymax"]) == pytest.approx([20 / 40, 30 / 40])
    masks = [np.array(Image.open(io.BytesIO(m))) for m in a["image/object/mask"]]
    assert masks[1][10:30, 60:70].min() == 1 and masks[1].sum() < 300  # from the polygon
    b = train["B.JPG"]
    assert [t.decode() for t in b["image/object/class/text"]] == ["cat"]
    assert list(b["image/object/bbox/xmin"]) == pytest.approx([12 / 80])  # its pixels' box
    mask = np.array(Image.open(io.BytesIO(b["image/object/mask"][0])))
    assert np.argwhere(mask).tolist() == [[10, 12], [10, 13], [11, 12], [11, 13]]
    validation = _examples(converted, "Validation")
    assert set(validation) == {"a.jpg", "unannotated.jpg"}
    assert list(validation["unannotated.jpg"]["image/object/class/label"]) == []
    assert [t.decode() for t in validation["a.jpg"]["image/object/class/text"]] == ["cat"]


def test_every_problem_is_a_reject_with_its_element(converted, cvat_root):
    rejects = [json.loads(line) for line in
               (converted / "rejects.jsonl").read_text().splitlines()]
    found = sorted((r["reason"], r["source"].replace(str(cvat_root), "ROOT"), r["split"])
                   for r in rejects)
    assert found == [
        ("degenerate_bbox", "ROOT/annotations.xml: <image name='B.JPG'> <box>[1]", "Train"),
        ("missing", "ROOT/annotations.xml: <image name='missing.jpg'>", "Train"),
        ("no_annotation_element", "ROOT/images/Validation/unannotated.jpg", "Validation"),
        ("unknown_category", "ROOT/annotations.xml: <image name='B.JPG'> <box>[0]", "Train"),
    ]
    manifest = json.loads((converted / "manifest.json").read_text())
    assert manifest["label_map"] == {"1": "dog", "2": "traffic light", "3": "cat"}
    counts = manifest["splits"]["Train"]["counts"]
    assert counts["cvat_polyline_skipped"] == 1
    assert counts["cvat_non_image_files_skipped"] == 1


def test_second_run_writes_the_same_bytes(converted, cvat_root, tmp_path):
    again = tmp_path / "again"
    code = cli.main(["convert", "cvat", "--input", str(cvat_root), "--output", str(again),
                     "--include-masks", "--max-reject-fraction", "1",
                     "--max-annotation-reject-fraction", "1", "--quiet", *IN_MEMORY])
    assert code == 0
    for name in sorted(os.listdir(converted)):
        if name.endswith(".tfrecord"):
            assert (again / name).read_bytes() == (converted / name).read_bytes(), name


def test_split_option_against_declared_subsets_is_refused(cvat_root, tmp_path, capsys):
    code = cli.main(["convert", "cvat", "--input", str(cvat_root), "--output",
                     str(tmp_path / "o"), "--split", "val", "--quiet", *IN_MEMORY])
    assert code == 2
    assert "--split val would be ignored" in capsys.readouterr().err


@exhaustive  # --if-changed over any format: test_voc_pipeline.py, test_incremental.py
def test_if_changed_skips_a_rerun_until_the_xml_changes(cvat_root, tmp_path, capsys):
    args = ["convert", "cvat", "--input", str(cvat_root), "--output", str(tmp_path / "out"),
            "--max-reject-fraction", "1", "--max-annotation-reject-fraction", "1",
            "--quiet", "--if-changed", *IN_MEMORY]
    assert cli.main(args) == 0
    capsys.readouterr()
    assert cli.main(args) == 0
    assert "is up to date" in capsys.readouterr().out
    xml = cvat_root / "annotations.xml"
    before = xml.read_bytes()
    xml.write_bytes(before.replace(b'occluded="1"', b'occluded="0"'))
    try:
        assert cli.main(args) == 0
        assert "is up to date" not in capsys.readouterr().out
    finally:
        xml.write_bytes(before)


@pytest.mark.case("CVAT `--split` where every `<image>` carries its own subset",
                  "the run says on stderr that --split placed no image; never silently unused")
def test_a_split_option_that_placed_no_image_is_said(cvat_root, tmp_path, capsys):
    argv = ["convert", "cvat", "--input", str(cvat_root), "--split", "Validation",
            "--max-reject-fraction", "1", "--max-annotation-reject-fraction", "1", "--quiet",
            *IN_MEMORY]
    assert cli.main([*argv, "--output", str(tmp_path / "every")]) == 0
    assert ("warning: --split Validation placed no image: every <image> of the XMLs carries "
            "its own subset") in capsys.readouterr().err
    # One <image> without a subset: --split places it, and nothing is said.
    root = tmp_path / "cvat"
    import shutil

    shutil.copytree(cvat_root, root)
    xml = (root / "annotations.xml").read_bytes()
    (root / "annotations.xml").write_bytes(xml.replace(b' subset="Validation"', b"", 1))
    argv[argv.index(str(cvat_root))] = str(root)
    assert cli.main([*argv, "--output", str(tmp_path / "one")]) == 0
    assert "placed no image" not in capsys.readouterr().err
    manifest = json.loads((tmp_path / "one" / "manifest.json").read_text())
    counts = [e.get("counts", {}) for e in manifest["splits"].values()]
    assert sum(c.get("cvat_images_placed_by_split", 0) for c in counts) == 1


DATA = os.path.join(os.path.dirname(os.path.dirname(__file__)), "data")
VIDEO_KINDS = {**KINDS, "image/object/track_id": "int64", "image/filename": "bytes"}


def _frames(root, numbers, size, ext=".png"):
    (root / "images").mkdir(parents=True, exist_ok=True)
    for number in numbers:
        Image.new("RGB", size, (90, 20, 200)).save(root / "images" / f"frame_{number:06d}{ext}",
                                                   format="PNG")


def test_datumaros_cvat_for_video_sample_gives_each_frame_its_tracks_shapes(tmp_path):
    # Datumaro's own "CVAT for video" sample (tests/data/README.md): frames 10, 13, 16 of a
    # 25x20 video; a box track visible on frame 10 only, points, polyline and skeleton
    # tracks (no area: counted, skipped). Its frames are frame_<number>.png, as Datumaro
    # names them.
    root = tmp_path / "video"
    root.mkdir()
    xml = os.path.join(DATA, "datumaro_cvat_for_video", "annotations.xml")
    (root / "annotations.xml").write_bytes(open(xml, "rb").read())
    _frames(root, (10, 13, 16), (25, 20))
    out = tmp_path / "out"
    code = cli.main(["convert", "cvat", "--input", str(root), "--output", str(out),
                     "--quiet", *IN_MEMORY])
    assert code == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["label_map"] == {"1": "klhg", "2": "z U k", "3": "II", "4": "skeleton"}
    counts = manifest["splits"]["train"]["counts"]
    assert (counts["cvat_points_skipped"], counts["cvat_polyline_skipped"],
            counts["cvat_skeleton_skipped"], counts["cvat_frames_without_shapes"]) == (1, 1, 3, 2)
    frames = split_examples(out, "train", kinds=VIDEO_KINDS)
    assert set(frames) == {"frame_000010", "frame_000013", "frame_000016"}
    first = frames["frame_000010"]
    assert first["image/object/class/text"].tolist() == [b"II"]
    assert first["image/object/track_id"].tolist() == [0]
    assert first["image/object/occluded"].tolist() == [1]
    assert [first[f"image/object/bbox/{k}"][0] for k in ("xmin", "ymin", "xmax", "ymax")] == (
        pytest.approx([3 / 25, 4 / 20, 10 / 25, 5 / 20]))
    assert first["image/filename"].tolist() == [b"frame_000010.png"]
    assert frames["frame_000013"]["image/object/class/text"].tolist() == []
    assert (out / "rejects.jsonl").read_text() == ""


def _track(track_id, label, shapes, group=None):
    attributes = f' group_id="{group}"' if group else ""
    return (f'  <track id="{track_id}" label="{label}" source="manual"{attributes}>\n'
            + "".join(f"    {shape}\n" for shape in shapes) + "  </track>\n")


def _box(frame, x0, y0, x1, y1, outside=0, keyframe=1, occluded=0):
    return (f'<box frame="{frame}" keyframe="{keyframe}" outside="{outside}" '
            f'occluded="{occluded}" xtl="{x0:.2f}" ytl="{y0:.2f}" xbr="{x1:.2f}" '
            f'ybr="{y1:.2f}" z_order="0"></box>')


def _polygon(frame, points, outside=0, keyframe=1):
    text = ";".join(f"{x:.2f},{y:.2f}" for x, y in points)
    return (f'<polygon frame="{frame}" keyframe="{keyframe}" outside="{outside}" '
            f'occluded="0" points="{text}" z_order="0"></polygon>')


VIDEO_META = """<?xml version="1.0" encoding="utf-8"?>
<annotations>
  <version>1.1</version>
  <meta>
    <task>
      <id>7</id><name>street</name><size>5</size><mode>interpolation</mode>
      <start_frame>0</start_frame><stop_frame>4</stop_frame><frame_filter></frame_filter>
      <labels>
        <label><name>car</name><color>#fa3253</color><type>any</type><attributes/></label>
        <label><name>person</name><color>#24b353</color><type>any</type><attributes/></label>
      </labels>
      <original_size><width>64</width><height>48</height></original_size>
    </task>
    <dumped>2024-05-02 10:00:00.000000+00:00</dumped>
    <source>street.mp4</source>
  </meta>
"""


def _convert_frames(tmp_path, xml, frames, *options):
    """A video task's export: ``xml`` beside images/frame_<number>.PNG, converted."""
    root = tmp_path / "street"
    root.mkdir()
    (root / "annotations.xml").write_text(xml)
    _frames(root, range(frames), (64, 48), ext=".PNG")
    out = tmp_path / "out"
    code = cli.main(["convert", "cvat", "--input", str(root), "--output", str(out),
                     *options, "--quiet", *IN_MEMORY])
    assert code == 0
    return out


def test_cvat_for_video_export_as_cvat_writes_it(tmp_path):
    # As CVAT's "CVAT for video 1.1" dumps a task: every frame of a track, keyframes and
    # interpolated ones, and an outside keyframe where the object leaves; a lone shape as a
    # one-frame track; tracks of one group_id; frames as images/frame_<number>.PNG.
    square = [(10, 10), (20, 10), (20, 20), (10, 20)]
    xml = VIDEO_META + "".join([
        _track(0, "car", [_box(0, 1, 2, 11, 12), _box(1, 3, 2, 13, 12, keyframe=0),
                          _box(2, 5, 2, 15, 12, occluded=1), _box(3, 5, 2, 15, 12, outside=1)]),
        _track(1, "person", [_polygon(1, square), _polygon(2, square, keyframe=0),
                             _polygon(3, square, outside=1)]),
        _track(2, "person", [_box(2, 30, 30, 40, 44)], group=5),
        _track(3, "person", [_polygon(2, [(30, 30), (40, 30), (35, 44)])], group=5),
        _track(4, "car", [_box(4, 50, 0, 60, 8)]),
    ]) + "</annotations>\n"
    out = _convert_frames(tmp_path, xml, 5, "--include-masks")
    frames = split_examples(out, "train", kinds=VIDEO_KINDS)
    shown = {name: list(zip(e["image/object/class/text"].tolist(),
                            e["image/object/track_id"].tolist(), strict=True))
             for name, e in frames.items()}
    assert shown == {
        "frame_000000": [(b"car", 0)],
        "frame_000001": [(b"car", 0), (b"person", 1)],
        "frame_000002": [(b"car", 0), (b"person", 1), (b"person", 2)],
        "frame_000003": [],
        "frame_000004": [(b"car", 4)],
    }
    interpolated = frames["frame_000001"]
    assert interpolated["image/object/bbox/xmin"][0] == pytest.approx(3 / 64)
    assert frames["frame_000002"]["image/object/occluded"].tolist() == [1, 0, 0]
    [_car, person, grouped] = [np.array(Image.open(io.BytesIO(png)))
                               for png in frames["frame_000002"]["image/object/mask"]]
    assert person[15, 15] and not person[25, 25]
    assert grouped[32, 35] and not grouped[15, 15]  # the group's polygon, not its box
    counts = json.loads((out / "manifest.json").read_text())["splits"]["train"]["counts"]
    assert counts["cvat_frames_without_shapes"] == 1
    assert counts["cvat_grouped_shapes_merged"] == 1
    assert (out / "rejects.jsonl").read_text() == ""


def test_cvat_for_images_export_of_a_video_task_finds_its_frames(tmp_path):
    # A video task exported as "CVAT for images": <image name="frame_000000"> without the
    # extension its file, images/frame_000000.PNG, has.
    xml = VIDEO_META + "".join(
        f'  <image id="{n}" name="frame_{n:06d}" width="64" height="48">\n'
        f'    <box label="car" source="manual" occluded="0" xtl="1.00" ytl="2.00" '
        f'xbr="11.00" ybr="12.00" z_order="0"></box>\n  </image>\n' for n in range(3)
    ) + "</annotations>\n"
    out = _convert_frames(tmp_path, xml, 3)
    frames = split_examples(out, "train", kinds=KINDS)
    assert {name: e["image/object/class/text"].tolist() for name, e in frames.items()} == {
        f"frame_{n:06d}": [b"car"] for n in range(3)}
    assert (out / "rejects.jsonl").read_text() == ""


def test_a_hidden_file_named_like_an_image_is_skipped_not_written(tmp_path):
    # macOS leaves ._a.jpg (AppleDouble: no image) beside a.jpg when a folder is copied
    # from a Mac; no <image> names it, and it must not be written as an image without one.
    root = tmp_path / "cvat"
    (root / "images").mkdir(parents=True)
    Image.new("RGB", (40, 30)).save(root / "images" / "a.jpg")
    (root / "images" / "._a.jpg").write_bytes(b"\x00\x05\x16\x07\x00\x02\x00\x00Mac OS X")
    (root / "annotations.xml").write_text(
        '<annotations><version>1.1</version><meta><task><labels><label><name>dog</name>'
        '</label></labels></task></meta><image id="0" name="a.jpg" width="40" height="30">'
        '<box label="dog" xtl="1" ytl="1" xbr="20" ybr="20" occluded="0"/></image>'
        "</annotations>")
    out = tmp_path / "out"
    assert cli.main(["convert", "cvat", "--input", str(root), "--output", str(out), "--quiet",
                     *IN_MEMORY]) == 0
    split = json.loads((out / "manifest.json").read_text())["splits"]["train"]
    assert split["examples"] == 1
    assert split["counts"]["cvat_non_image_files_skipped"] == 1
    assert (out / "rejects.jsonl").read_text() == ""
