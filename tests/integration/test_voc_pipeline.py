"""`recordbeam convert voc` end to end on a small hand-written VOC folder with the messy
cases real exports have."""

from __future__ import annotations

import json
import os

import pytest
from PIL import Image
from read_back import split_examples

from recordbeam.cli import main as cli

IN_MEMORY = ["--direct_running_mode=in_memory", "--direct_num_workers=1"]


def _xml(filename: str, objects: list[tuple], width: int = 80, height: int = 40) -> str:
    body = "".join(
        f"<object><name>{name}</name><pose>Frontal</pose><truncated>{truncated}</truncated>"
        f"<difficult>{difficult}</difficult><bndbox><xmin>{x0}</xmin><ymin>{y0}</ymin>"
        f"<xmax>{x1}</xmax><ymax>{y1}</ymax></bndbox></object>"
        for name, (x0, y0, x1, y1), difficult, truncated in objects)
    return (f"<annotation><filename>{filename}</filename><size><width>{width}</width>"
            f"<height>{height}</height><depth>3</depth></size>{body}</annotation>")


@pytest.fixture(scope="module")
def voc_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("voc")
    for folder in ("Annotations", "JPEGImages", "ImageSets/Main"):
        (root / folder).mkdir(parents=True)

    def image(name):
        Image.new("RGB", (80, 40), (90, 20, 200)).save(root / "JPEGImages" / name, format="JPEG")

    def annotation(stem, text, crlf_bom=False):
        data = text.replace("><", ">\r\n<").encode() if crlf_bom else text.encode()
        (root / "Annotations" / f"{stem}.xml").write_bytes(
            (b"\xef\xbb\xbf" + data) if crlf_bom else data)

    image("a.jpg")
    annotation("a", _xml("a.jpg", [("dog", (8, 4, 40, 20), 1, 0),
                                  ("traffic light", (60, 10, 100, 30), 0, 1)]))
    image("b.JPG")
    annotation("b", _xml("b.JPG", [("cat", (4, 4, 4, 9), 0, 0), ("dog", (0, 0, 80, 40), 0, 0)]),
               crlf_bom=True)
    image("c.jpg")  # no XML: written with no objects
    annotation("d", _xml("d.jpg", [("dog", (1, 1, 5, 5), 0, 0)]))  # no image
    image("e.jpg")
    annotation("e", "<annotation><filename>e.jpg</filename")  # malformed
    image("f.jpg")
    annotation("f", '<!DOCTYPE annotation [<!ENTITY x "dog">]>'
               + _xml("f.jpg", [("&x;", (1, 1, 5, 5), 0, 0)]))  # refused
    image("g.jpg")
    annotation("g", _xml("g.jpg", [("yak", (1, 1, 5, 5), 0, 0)]))  # not in labelmap
    (root / "ImageSets/Main/train.txt").write_bytes(b"a\r\nb\r\nc\r\nd\r\ne\r\nf\r\n")
    (root / "ImageSets/Main/val.txt").write_text("g\nmissing\n")
    (root / "labelmap.txt").write_text(
        "# label:color_rgb:parts:actions\nbackground:0,0,0::\ndog:1,2,3::\ntraffic light:4,5,6::\n"
        "cat:7,8,9::\n")
    return root


def _examples(output, split):
    return split_examples(output, split, kinds={"image/object/class/label": "int64",
                                                    "image/object/bbox/xmin": "float"})


def test_voc_folder_converts_with_every_reject_named(voc_root, tmp_path):
    out = tmp_path / "out"
    code = cli.main(["convert", "voc", "--input", str(voc_root), "--output", str(out),
                     "--max-reject-fraction", "1", "--max-annotation-reject-fraction", "1",
                     "--quiet", *IN_MEMORY])
    assert code == 0
    train, val = _examples(out, "train"), _examples(out, "val")
    assert set(train) == {"a", "b", "c"} and set(val) == {"g"}
    a = train["a"]
    assert a["image/object/class/text"].tolist() == [b"dog", b"traffic light"]
    assert a["image/object/class/label"].tolist() == [1, 2]
    assert a["image/object/bbox/xmin"].tolist() == pytest.approx([0.1, 0.75])
    assert a["image/object/bbox/xmax"].tolist() == pytest.approx([0.5, 1.0])  # clipped
    assert a["image/object/bbox/ymin"].tolist() == pytest.approx([0.1, 0.25])
    assert a["image/object/difficult"].tolist() == [1, 0]
    assert a["image/object/truncated"].tolist() == [0, 1]
    assert a["image/object/view"].tolist() == [b"Frontal", b"Frontal"]
    assert train["b"]["image/object/class/label"].tolist() == [1]
    assert train["c"]["image/object/class/label"].tolist() == []
    assert val["g"]["image/object/class/label"].tolist() == []
    rejects = {(r["reason"], os.path.basename(r["source"].split(":")[0]))
               for r in map(json.loads, (out / "rejects.jsonl").read_text().splitlines())}
    assert rejects == {
        ("degenerate_bbox", "b.xml"), ("no_annotation_file", "c.jpg"), ("missing", "d.xml"),
        ("malformed_xml", "e.xml"), ("unsafe_xml", "f.xml"), ("unknown_category", "g.xml"),
        ("missing", "val.txt"),
    }
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["label_map"] == {"1": "dog", "2": "traffic light", "3": "cat"}
    assert manifest["splits"]["train"]["counts"]["boxes_clipped"] == 1
    assert manifest["splits"]["train"]["counts"]["images_without_objects"] == 1  # c
    assert manifest["splits"]["val"]["counts"]["images_without_objects"] == 1  # g: yak rejected
    assert (out / "labels.txt").read_text().split("\n")[:3] == ["dog", "traffic light", "cat"]


def test_without_labelmap_classes_are_the_sorted_names_found(voc_root, tmp_path):
    root = tmp_path / "voc"
    for folder in ("Annotations", "JPEGImages"):
        (root / folder).mkdir(parents=True)
        for name in ("a.jpg", "b.JPG", "g.jpg") if folder == "JPEGImages" else ("a.xml", "b.xml", "g.xml"):
            (root / folder / name).write_bytes((voc_root / folder / name).read_bytes())
    out = tmp_path / "out"
    code = cli.main(["convert", "voc", "--input", str(root), "--output", str(out),
                     "--split", "val", "--max-annotation-reject-fraction", "1", "--quiet",
                     *IN_MEMORY])
    assert code == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["label_map"] == {"1": "dog", "2": "traffic light", "3": "yak"}
    assert _examples(out, "val")["g"]["image/object/class/text"].tolist() == [b"yak"]


def test_split_option_beside_split_lists_is_refused(voc_root, tmp_path):
    code = cli.main(["convert", "voc", "--input", str(voc_root), "--output",
                     str(tmp_path / "out"), "--split", "holdout", "--quiet", *IN_MEMORY])
    assert code == 2


def test_if_changed_skips_a_rerun_until_an_xml_changes(voc_root, tmp_path, capsys):
    args = ["convert", "voc", "--input", str(voc_root), "--output", str(tmp_path / "out"),
            "--max-reject-fraction", "1", "--max-annotation-reject-fraction", "1",
            "--quiet", "--if-changed", *IN_MEMORY]
    assert cli.main(args) == 0
    capsys.readouterr()
    assert cli.main(args) == 0
    assert "is up to date" in capsys.readouterr().out
    xml = voc_root / "Annotations" / "c.xml"
    xml.write_text(_xml("c.jpg", [("cat", (1, 1, 9, 9), 0, 0)]))
    try:
        assert cli.main(args) == 0
        assert "is up to date" not in capsys.readouterr().out
    finally:
        xml.unlink()


@pytest.mark.case("A split list that is not text (binary, bytes that are not UTF-8, control "
                  "characters)",
                  "reject `malformed_line` for the file (NUL bytes) or for each bad line, "
                  "with no raw bytes in the message; the run goes on")
def test_split_lists_that_are_not_text_are_rejected_without_raw_bytes(voc_root, tmp_path):
    import shutil

    root = tmp_path / "voc"
    shutil.copytree(voc_root, root)
    (root / "ImageSets/Main/train.txt").write_bytes(b"a\nb\xff\xfe\nc\x07\nd\n")
    (root / "ImageSets/Main/val.txt").write_bytes(b"\xff\xd8\xff\xe0\x00\x10JFIF\x00\x01g\n")
    out = tmp_path / "out"
    code = cli.main(["convert", "voc", "--input", str(root), "--output", str(out),
                     "--max-reject-fraction", "1", "--max-annotation-reject-fraction", "1",
                     "--quiet", *IN_MEMORY])
    assert code == 0
    rejects = [json.loads(line) for line in (out / "rejects.jsonl").read_text().splitlines()]
    bad = {r["source"].rsplit("/", 1)[1]: r for r in rejects if r["reason"] == "malformed_line"}
    assert sorted(bad) == ["train.txt:2", "train.txt:3", "val.txt"]
    assert "is not a text file (it holds NUL bytes)" in bad["val.txt"]["detail"]
    assert "the line is not text" in bad["train.txt:2"]["detail"]
    assert not any(ch in json.dumps(r) for r in rejects for ch in ("\\u0000", "\\ufffd", "\\u0007"))


def _small_voc(root, stems=("a", "b")):
    for folder in ("Annotations", "JPEGImages", "ImageSets/Main"):
        (root / folder).mkdir(parents=True)
    for stem in stems:
        Image.new("RGB", (80, 40), (90, 20, 200)).save(root / "JPEGImages" / f"{stem}.jpg")
        (root / "Annotations" / f"{stem}.xml").write_text(
            _xml(f"{stem}.jpg", [("dog", (8, 4, 40, 20), 0, 0)]))
    return root


def test_comment_and_blank_lines_of_a_split_list_name_no_image(tmp_path):
    root = _small_voc(tmp_path / "voc")
    (root / "ImageSets/Main/train.txt").write_text("# a comment\na\n\n  # indented comment\nb\n")
    out = tmp_path / "out"
    code = cli.main(["convert", "voc", "--input", str(root), "--output", str(out), "--quiet",
                     *IN_MEMORY])
    assert code == 0
    assert set(_examples(out, "train")) == {"a", "b"}
    assert (out / "rejects.jsonl").read_text() == ""


def test_a_listed_id_without_files_names_the_images_folder_once(tmp_path):
    root = _small_voc(tmp_path / "voc")
    (root / "ImageSets/Main/train.txt").write_text("a\nb\nghost\n")
    out = tmp_path / "out"
    code = cli.main(["convert", "voc", "--input", str(root), "--output", str(out), "--quiet",
                     "--max-reject-fraction", "1", *IN_MEMORY])
    assert code == 0
    [reject] = map(json.loads, (out / "rejects.jsonl").read_text().splitlines())
    assert reject["reason"] == "missing"
    images = str(root / "JPEGImages")
    assert reject["detail"].count(images) == 1, reject["detail"]
    assert f"no image named ghost.* in {images}" in reject["detail"]


def _labelimg_xml(folder: str, filename: str, objects: list[tuple], width=80, height=40,
                  database: str = "Unknown") -> str:
    """An XML as labelImg's Pascal VOC writer and Roboflow's VOC export lay it out (tabs,
    <path>, <source>, <segmented>, integer corners)."""
    body = "".join(
        f"\t<object>\n\t\t<name>{name}</name>\n\t\t<pose>Unspecified</pose>\n"
        f"\t\t<truncated>0</truncated>\n\t\t<difficult>0</difficult>\n\t\t<bndbox>\n"
        f"\t\t\t<xmin>{x0}</xmin>\n\t\t\t<ymin>{y0}</ymin>\n\t\t\t<xmax>{x1}</xmax>\n"
        f"\t\t\t<ymax>{y1}</ymax>\n\t\t</bndbox>\n\t</object>\n"
        for name, (x0, y0, x1, y1) in objects)
    return (f"<annotation>\n\t<folder>{folder}</folder>\n\t<filename>{filename}</filename>\n"
            f"\t<path>/home/user/{folder}/{filename}</path>\n\t<source>\n"
            f"\t\t<database>{database}</database>\n\t</source>\n\t<size>\n"
            f"\t\t<width>{width}</width>\n\t\t<height>{height}</height>\n\t\t<depth>3</depth>\n"
            f"\t</size>\n\t<segmented>0</segmented>\n{body}</annotation>\n")


def test_roboflow_voc_export_reads_its_split_folders(tmp_path):
    # Roboflow's "Pascal VOC" download: train/, valid/, test/, each <name>.xml beside its
    # image, READMEs at the top; no Annotations/ or JPEGImages/.
    root = tmp_path / "roboflow"
    for split, stems in {"train": ["a_jpg.rf.1", "b_jpg.rf.2"], "valid": ["a_jpg.rf.1"],
                         "test": ["c_jpg.rf.3"]}.items():
        (root / split).mkdir(parents=True)
        for stem in stems:
            Image.new("RGB", (80, 40), (90, 20, 200)).save(root / split / f"{stem}.jpg")
            (root / split / f"{stem}.xml").write_text(_labelimg_xml(
                "", f"{stem}.jpg", [("dog", (8, 4, 40, 20)), ("cat", (50, 10, 70, 30))],
                database="roboflow.com"))
    (root / "README.roboflow.txt").write_text("exported from roboflow.com\n")
    (root / "README.dataset.txt").write_text("a dataset\n")
    out = tmp_path / "out"
    code = cli.main(["convert", "voc", "--input", str(root), "--output", str(out), "--quiet",
                     *IN_MEMORY])
    assert code == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert sorted(manifest["splits"]) == ["test", "train", "valid"]
    assert manifest["label_map"] == {"1": "cat", "2": "dog"}
    train = _examples(out, "train")
    assert set(train) == {"train/a_jpg.rf.1", "train/b_jpg.rf.2"}
    assert set(_examples(out, "valid")) == {"valid/a_jpg.rf.1"}
    assert train["train/a_jpg.rf.1"]["image/object/class/text"].tolist() == [b"dog", b"cat"]
    assert train["train/a_jpg.rf.1"]["image/object/bbox/xmin"].tolist() == pytest.approx(
        [0.1, 0.625])
    assert (out / "rejects.jsonl").read_text() == ""
    code = cli.main(["convert", "voc", "--input", str(root), "--output", str(tmp_path / "o2"),
                     "--split", "train", "--quiet", *IN_MEMORY])
    assert code == 2  # the split folders name the splits


def test_labelimg_folder_with_each_xml_beside_its_image_is_one_split(tmp_path):
    # labelImg's default: the XML saved beside the image, in the folder opened.
    root = tmp_path / "images"
    (root / "more").mkdir(parents=True)
    for stem in ("a", "more/b"):
        Image.new("RGB", (80, 40), (90, 20, 200)).save(root / f"{stem}.jpg")
        (root / f"{stem}.xml").write_text(_labelimg_xml("images", f"{stem}.jpg".split("/")[-1],
                                                       [("dog", (8, 4, 40, 20))]))
    Image.new("RGB", (80, 40)).save(root / "c.jpg")  # not labelled yet
    out = tmp_path / "out"
    code = cli.main(["convert", "voc", "--input", str(root), "--output", str(out), "--split",
                     "val", "--quiet", "--max-reject-fraction", "1", *IN_MEMORY])
    assert code == 0
    val = _examples(out, "val")
    assert set(val) == {"a", "more/b", "c"}
    assert val["more/b"]["image/object/class/text"].tolist() == [b"dog"]
    [warning] = map(json.loads, (out / "rejects.jsonl").read_text().splitlines())
    assert warning["reason"] == "no_annotation_file"
    assert "c.xml beside it" in warning["detail"]


def test_a_jfif_image_pairs_with_its_xml(tmp_path):
    # Windows saves a JPEG downloaded from the web as .jfif; labelImg labels it as any JPEG.
    root = tmp_path / "images"
    root.mkdir()
    Image.new("RGB", (80, 40), (90, 20, 200)).save(root / "a.jfif", format="JPEG")
    (root / "a.xml").write_text(_labelimg_xml("images", "a.jfif", [("dog", (8, 4, 40, 20))]))
    out = tmp_path / "out"
    assert cli.main(["convert", "voc", "--input", str(root), "--output", str(out), "--quiet",
                     *IN_MEMORY]) == 0
    [example] = _examples(out, "train").values()
    assert example["image/object/class/text"].tolist() == [b"dog"]
    assert (out / "rejects.jsonl").read_text() == ""


def test_label_studio_voc_export_has_its_images_in_images(tmp_path):
    # Label Studio's "Pascal VOC XML" export: Annotations/ and images/ (no JPEGImages/).
    root = tmp_path / "project-3-at-2024-05-02"
    (root / "Annotations").mkdir(parents=True)
    (root / "images").mkdir()
    Image.new("RGB", (80, 40)).save(root / "images" / "1a2b3c4d-a.jpg")
    (root / "Annotations" / "1a2b3c4d-a.xml").write_text(_labelimg_xml(
        "images", "1a2b3c4d-a.jpg", [("Airplane", (8, 4, 40, 20))], database="MyDatabase"))
    out = tmp_path / "out"
    code = cli.main(["convert", "voc", "--input", str(root), "--output", str(out), "--quiet",
                     *IN_MEMORY])
    assert code == 0
    [example] = _examples(out, "train").values()
    assert example["image/object/class/text"].tolist() == [b"Airplane"]


def test_xmls_in_a_folder_of_their_own_are_read_with_images_as_the_refusal_says(
        tmp_path, capsys):
    # Kaggle's VOC datasets: annotations/ and images/ (lower case, no JPEGImages/). The
    # refusal named only the layouts it reads; it now says how to read this one.
    root = tmp_path / "kaggle"
    (root / "annotations").mkdir(parents=True)
    (root / "images").mkdir()
    Image.new("RGB", (80, 40)).save(root / "images" / "maksssksksss0.png")
    (root / "annotations" / "maksssksksss0.xml").write_text(_labelimg_xml(
        "images", "maksssksksss0.png", [("with_mask", (8, 4, 40, 20))]))
    out = tmp_path / "out"
    assert cli.main(["convert", "voc", "--input", str(root), "--output", str(out), "--quiet",
                     *IN_MEMORY]) == 2
    assert ("with the XMLs in a folder of their own (annotations/ beside images/), pass "
            "--input that folder and --images the images' folder") in capsys.readouterr().err
    assert cli.main(["convert", "voc", "--input", str(root / "annotations"), "--images",
                     str(root / "images"), "--output", str(out), "--quiet", *IN_MEMORY]) == 0
    [example] = _examples(out, "train").values()
    assert example["image/object/class/text"].tolist() == [b"with_mask"]


def test_labelimg_folder_with_xmls_only_in_subfolders_is_read(tmp_path):
    # labelImg saves each XML beside its image, at any depth; a ROOT holding only
    # subfolders (a folder per batch) was refused as holding no XML at all.
    root = tmp_path / "batches"
    for stem in ("batch1/a", "batch2/b"):
        (root / stem).parent.mkdir(parents=True, exist_ok=True)
        Image.new("RGB", (80, 40), (90, 20, 200)).save(root / f"{stem}.jpg")
        (root / f"{stem}.xml").write_text(_labelimg_xml(stem.split("/")[0], f"{stem[-1]}.jpg",
                                                        [("dog", (8, 4, 40, 20))]))
    out = tmp_path / "out"
    code = cli.main(["convert", "voc", "--input", str(root), "--output", str(out), "--quiet",
                     *IN_MEMORY])
    assert code == 0
    train = _examples(out, "train")
    assert set(train) == {"batch1/a", "batch2/b"}
    assert train["batch2/b"]["image/object/class/text"].tolist() == [b"dog"]
    # The same XMLs with the images in a folder of their own, laid out alike (--images).
    pictures = tmp_path / "pictures"
    for stem in ("batch1/a", "batch2/b"):
        (pictures / stem).parent.mkdir(parents=True, exist_ok=True)
        (root / f"{stem}.jpg").rename(pictures / f"{stem}.jpg")
    code = cli.main(["convert", "voc", "--input", str(root), "--images", str(pictures),
                     "--output", str(tmp_path / "o2"), "--quiet", *IN_MEMORY])
    assert code == 0
    assert set(_examples(tmp_path / "o2", "train")) == {"batch1/a", "batch2/b"}
