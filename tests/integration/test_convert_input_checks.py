"""The checks every ``convert <format>`` makes before Beam starts, message by message:
they share one code path (``cli/pipeline_commands.py``), and each format's wording must
stay what users and scripts already see."""

from __future__ import annotations

import pytest

from recordbeam import converter as convert
from recordbeam.cli import main as cli

NO_FILES = "no such folder, or it holds no files"


def _refused(capsys, argv: list[str], out) -> str:
    """Run ``argv`` into ``out``; it must be refused as a usage error (exit 2) and write
    nothing. Returns the message."""
    assert cli.main([*argv, "--output", str(out), "--quiet"]) == 2
    assert not out.exists()
    return capsys.readouterr().err.strip()


@pytest.mark.parametrize(("kind", "advice"), [
    ("voc", f"{NO_FILES}; --input takes a Pascal VOC folder holding Annotations/ and "
     "JPEGImages/, or a flat export with each <name>.xml beside its image"),
    ("labelme", f"{NO_FILES}; --input takes the folder labelme saved its JSONs into"),
    ("openimages", f"{NO_FILES}; --input takes an Open Images folder holding the "
     "*-annotations-bbox.csv tables (or annotations/ with them) and images/"),
    ("box-csv", f"{NO_FILES}; --input takes the folder a box CSV export holds: "
     "<split>/_annotations.csv beside the images"),
    ("yolo", f"{NO_FILES}; --input takes a YOLO folder holding obj.data (darknet), "
     "data.yaml (Ultralytics), or images and labels with a classes.txt"),
    ("cvat", f"{NO_FILES}; --input takes the CVAT export folder holding "
     "annotations.xml (or <subset>.xml files) and images/"),
    ("kitti", "no <split>/image_2/ or <split>/label_2/ folder with files; --input takes "
     "a KITTI folder such as the one holding training/image_2/ and training/label_2/ "
     "(--images if the images are elsewhere)"),
])
def test_a_missing_input_folder_says_what_input_takes(kind, advice, tmp_path, capsys):
    missing = tmp_path / "missing"
    message = _refused(capsys, ["convert", kind, "--input", str(missing)], tmp_path / "out")
    assert message == f"recordbeam: {missing}: {advice}"


@pytest.mark.parametrize(("argv", "taken"), [
    *((["convert", kind, "--input"], "a folder: extract it and pass the folder it holds")
      for kind in ("voc", "labelme", "openimages", "box-csv", "yolo", "cvat", "kitti",
                   "imagefolder")),
    (["convert", "labelstudio", "--input"], "a JSON array: extract it and pass the JSON file"),
    (["convert", "coco", "--images", ".", "--annotations"],
     "a JSON object: extract it and pass the JSON file"),
])
def test_an_archive_given_for_a_folder_or_a_json_file_is_named_as_one(argv, taken, tmp_path,
                                                                      capsys):
    import zipfile

    archive = tmp_path / "export.zip"
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("annotations.xml", "<annotations/>")
    message = _refused(capsys, [*argv, str(archive)], tmp_path / "out")
    assert message.startswith(f"recordbeam: {archive} is a zip archive, not {taken}"), message


#: Commands and the option that names their image folder (the annotations: a file that exists).
IMAGE_FOLDER_OPTIONS = [
    (["convert", "imagefolder", "--input"], "--input"),
    (["convert", "imagefolder", "--root"], "--input"),  # another name of --input
    (["convert", "coco", "--annotations", __file__, "--images"], "--images"),
]


@pytest.mark.parametrize(("argv", "flag"), IMAGE_FOLDER_OPTIONS)
def test_a_missing_image_folder_names_its_option(argv, flag, tmp_path, capsys):
    missing = tmp_path / "missing"
    message = _refused(capsys, [*argv, str(missing)], tmp_path / "out")
    assert message == f"recordbeam: {missing}: {NO_FILES} (check {flag})"


@pytest.mark.parametrize(("kind", "said"), [
    ("yolo", "holds neither data.yaml (Ultralytics) nor obj.data (darknet), nor a class "
             "names file (classes.txt, obj.names, _darknet.labels) in it, in labels/ or in its "
             "split folders; --input takes the YOLO folder as exported, or pass --classes"),
    ("box-csv", "has no <split>/_annotations.csv; --input takes the folder a box CSV export "
                "holds"),
    ("openimages", "--input takes the Open Images folder holding the box tables"),
    ("voc", "has no Annotations/ folder with files, and no .xml file in it or in its train/, "
            "valid/, val/, test/ folders; --input takes a Pascal VOC folder"),
])
def test_an_input_folder_of_another_layout_is_a_usage_error(kind, said, tmp_path, capsys):
    # Exit 2, as VOC, KITTI and CVAT give for a folder that is not theirs (it was 1 here).
    (tmp_path / "input").mkdir()
    (tmp_path / "input" / "a.jpg").write_bytes(b"not read")
    message = _refused(capsys, ["convert", kind, "--input", str(tmp_path / "input")],
                       tmp_path / "out")
    assert said in message, message


@pytest.mark.parametrize("kind", ["kitti", "openimages", "box-csv"])
def test_a_missing_images_option_folder_is_named_before_the_job(kind, tmp_path, capsys):
    # Before: the whole job ran, to reject every image as missing.
    (tmp_path / "input").mkdir()
    (tmp_path / "input" / "any.txt").write_text("x")
    missing = tmp_path / "missing"
    message = _refused(capsys, ["convert", kind, "--input", str(tmp_path / "input"),
                                "--images", str(missing)], tmp_path / "out")
    assert message == f"recordbeam: {missing}: {NO_FILES} (check --images)"


@pytest.mark.parametrize(("argv", "flag"), IMAGE_FOLDER_OPTIONS)
def test_a_file_given_as_a_folder_is_called_a_file(argv, flag, tmp_path, capsys):
    given = tmp_path / "a.jpg"
    given.write_bytes(b"x")
    message = _refused(capsys, [*argv, str(given)], tmp_path / "out")
    assert message == f"recordbeam: {given} is a file, not a folder (check {flag})"


def test_labelme_images_folder_is_checked_when_given(tmp_path, capsys):
    (tmp_path / "jsons").mkdir()
    (tmp_path / "jsons" / "a.json").write_text("{}")
    missing = tmp_path / "missing"
    message = _refused(capsys, ["convert", "labelme", "--input", str(tmp_path / "jsons"),
                                "--images", str(missing)], tmp_path / "out")
    assert message == f"recordbeam: {missing}: {NO_FILES} (check --images)"


def test_voc_without_its_images_folder_points_to_images_option(tmp_path, capsys):
    (tmp_path / "voc" / "Annotations").mkdir(parents=True)
    (tmp_path / "voc" / "Annotations" / "a.xml").write_text("<annotation/>")
    message = _refused(capsys, ["convert", "voc", "--input", str(tmp_path / "voc")],
                       tmp_path / "out")
    assert message == (f"recordbeam: {tmp_path / 'voc' / 'JPEGImages'}: {NO_FILES} "
                       "(pass --images if the images are elsewhere)")


def test_voc_split_option_beside_split_lists_names_the_lists(tmp_path, capsys):
    voc = tmp_path / "voc"
    for folder, name, text in [("Annotations", "a.xml", "<annotation/>"),
                               ("JPEGImages", "a.jpg", "not read before the run"),
                               ("ImageSets/Main", "trainval.txt", "a\n")]:
        (voc / folder).mkdir(parents=True)
        (voc / folder / name).write_text(text)
    message = _refused(capsys, ["convert", "voc", "--input", str(voc), "--split", "holdout"],
                       tmp_path / "out")
    assert message == (f"recordbeam: --split holdout would be ignored: {voc}/ImageSets/Main "
                       "lists the splits (trainval); drop --split")


def test_box_csv_split_option_names_where_the_splits_come_from(tmp_path, capsys):
    (tmp_path / "boxes" / "valid").mkdir(parents=True)
    (tmp_path / "boxes" / "valid" / "_annotations.csv").write_text(
        "filename,width,height,class,xmin,ymin,xmax,ymax\n")
    message = _refused(capsys, ["convert", "box-csv", "--input", str(tmp_path / "boxes"),
                                "--split", "holdout"], tmp_path / "out")
    assert message == ("recordbeam: --split holdout would be ignored: the splits come from "
                       "the folders holding _annotations.csv (valid); drop --split")


@pytest.mark.parametrize("split", ["holdout", "training", "train"])
def test_kitti_split_option_beside_several_split_folders_is_refused(split, tmp_path, capsys):
    # Even a --split naming one of the folders: the folders name every split themselves.
    for name in ("training", "testing"):
        for folder, file in (("image_2", "a.png"), ("label_2", "a.txt")):
            (tmp_path / "kitti" / name / folder).mkdir(parents=True)
            (tmp_path / "kitti" / name / folder / file).write_text("")
    message = _refused(capsys, ["convert", "kitti", "--input", str(tmp_path / "kitti"),
                                "--split", split], tmp_path / "out")
    assert message == (f"recordbeam: --split {split} would be ignored: the split folders name "
                       "the splits (testing, training); drop --split")


# --- a --split naming one of the input's own splits is ignored too: refused ----------

CVAT_HEAD = ('<annotations><version>1.1</version><meta><project><labels><label><name>dog'
             '</name></label></labels><subsets>{}</subsets></project></meta>')


def _files(root, files: dict[str, str]) -> None:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)


SPLITS = ("train", "val")


def _voc(root, splits=SPLITS):
    _files(root, {"Annotations/a.xml": "<annotation/>", "JPEGImages/a.jpg": "not read"}
           | {f"ImageSets/Main/{split}.txt": "a\n" for split in splits})
    return ["convert", "voc", "--input", str(root)], f"{root}/ImageSets/Main lists the splits"


def _yolo(root, splits=SPLITS):
    _files(root, {"data.yaml": "".join(f"{split}: images/{split}\n" for split in splits)
                  + "names: [dog]\n"}
           | {f"{kind}/{split}/a.{ext}": "" for split in splits
              for kind, ext in (("images", "jpg"), ("labels", "txt"))})
    return ["convert", "yolo", "--input", str(root)], f"{root}/data.yaml names the splits"


def _cvat(root, splits=SPLITS):
    _files(root, {f"{split}.xml": CVAT_HEAD.format("") + "</annotations>" for split in splits}
           | {"images/a.jpg": ""})
    return ["convert", "cvat", "--input", str(root)], "the XMLs name the subsets"


def _box_csv(root, splits=SPLITS):
    header = "filename,width,height,class,xmin,ymin,xmax,ymax\n"
    _files(root, {f"{split}/_annotations.csv": header for split in splits})
    return (["convert", "box-csv", "--input", str(root)],
            "the splits come from the folders holding _annotations.csv")


def _openimages(root, splits=SPLITS):
    header = "ImageID,Source,LabelName,Confidence,XMin,XMax,YMin,YMax\n"
    _files(root, {"class-descriptions-boxable.csv": "/m/01,dog\n"}
           | {f"{split}-annotations-bbox.csv": header for split in splits}
           | {f"images/{split}/a.jpg": "" for split in splits})
    return (["convert", "openimages", "--input", str(root)],
            "the splits come from the tables' names")


def _imagefolder(root, splits=SPLITS):
    _files(root, {f"{split}/dog/a.jpg": "" for split in splits})
    return (["convert", "imagefolder", "--root", str(root)],
            f"the split folders of {root} name the splits")


def _manifest(root, splits=SPLITS):
    _files(root, {"data.csv": "path,split\n" + "".join(f"{s}.jpg,{s}\n" for s in splits)}
           | {f"{split}.jpg": "" for split in splits})
    return (["convert", "manifest", "--manifest", str(root / "data.csv"), "--split-column",
             "split"], "the column 'split' (--split-column) names each row's split")


@pytest.mark.parametrize("split", ["val", "train"])
@pytest.mark.parametrize("layout", [_voc, _yolo, _cvat, _box_csv, _openimages, _imagefolder,
                                    _manifest])
def test_split_option_naming_one_of_the_inputs_splits_is_refused(layout, split, tmp_path,
                                                                 capsys):
    # It would be ignored: every split of the input is written, and a val already in OUT
    # (or, with --split train typed, a train) replaced. The default train stays silent.
    argv, named_by = layout(tmp_path / "in")
    message = _refused(capsys, [*argv, "--split", split], tmp_path / "out")
    assert message == (f"recordbeam: --split {split} would be ignored: {named_by} "
                       "(train, val); drop --split")


def _started(monkeypatch) -> list:
    """Stand in for the run: the splits each command would start a job for."""
    started = []

    def record_declared(fmt, conversion, values, beam_options):
        started.append(list(conversion.splits))
        return convert.UpToDate(values["output"], tuple(conversion.splits))

    monkeypatch.setattr(convert, "execute", record_declared)
    return started


def test_cvat_split_option_places_images_without_subset_in_annotations_xml(tmp_path,
                                                                          monkeypatch):
    # CVAT's own annotations.xml: an <image> without subset= goes to --split, so a --split
    # naming a declared subset is used, not ignored.
    _files(tmp_path / "in", {"annotations.xml": CVAT_HEAD.format("train\nval")
                             + '<image id="0" name="a.jpg"/></annotations>',
                             "images/a.jpg": ""})
    started = _started(monkeypatch)
    assert cli.main(["convert", "cvat", "--input", str(tmp_path / "in"), "--split", "val",
                     "--output", str(tmp_path / "out"), "--quiet"]) == 0
    assert started == [["train", "val"]]


@pytest.mark.parametrize("layout", [_voc, _yolo, _cvat, _box_csv, _openimages, _imagefolder])
def test_split_option_naming_the_inputs_one_split_is_accepted(layout, tmp_path, monkeypatch):
    # Nothing is ignored: the one split written is the one asked for.
    argv, _named_by = layout(tmp_path / "in", splits=("val",))
    started = _started(monkeypatch)
    assert cli.main([*argv, "--split", "val", "--output", str(tmp_path / "out"),
                     "--quiet"]) == 0
    assert started == [["val"]]


def test_imagefolder_val_fraction_into_split_val_is_refused(tmp_path, capsys):
    # The held-out share goes to val: with --split val the rest went there too, each image
    # written twice under one name.
    _files(tmp_path / "in", {"dog/a.jpg": "", "cat/b.jpg": ""})
    message = _refused(capsys, ["convert", "imagefolder", "--root", str(tmp_path / "in"),
                                "--split", "val", "--val-fraction", "0.3"], tmp_path / "out")
    assert message == ("recordbeam: --split val with --val-fraction would write the held-out "
                       "share and the rest both to split val; name the rest's split with "
                       "--split (default train), or drop --val-fraction")


# --- no annotation file at all: every image would be written without objects ----------

NO_OBJECTS = ("so every image would be written without objects; {} (to write unlabeled "
              "images, use convert imagefolder)")


@pytest.mark.parametrize("files", [
    {"a.jpg": "", "b.jpg": ""},  # a folder of images
    {"Annotations/a.xml": "<annotation/>", "JPEGImages/a.jpg": ""},  # a VOC folder
])
def test_labelme_without_any_json_is_refused(files, tmp_path, capsys):
    _files(tmp_path / "in", files)
    message = _refused(capsys, ["convert", "labelme", "--input", str(tmp_path / "in")],
                       tmp_path / "out")
    assert message == f"recordbeam: {tmp_path / 'in'}: no .json file below it, " + NO_OBJECTS.format(
        "--input takes the folder labelme saved its JSONs into")


def test_voc_whose_annotations_hold_no_xml_is_refused(tmp_path, capsys):
    _files(tmp_path / "voc", {"Annotations/README": "labels come later", "JPEGImages/a.jpg": ""})
    message = _refused(capsys, ["convert", "voc", "--input", str(tmp_path / "voc")],
                       tmp_path / "out")
    assert message == (f"recordbeam: {tmp_path / 'voc'}/Annotations: no .xml annotation file, "
                       + NO_OBJECTS.format("--input takes a Pascal VOC folder holding "
                                           "Annotations/<id>.xml"))


def test_yolo_without_any_label_file_is_refused(tmp_path, capsys):
    # labels/ misspelled label/: no image finds its label file.
    root = tmp_path / "yolo"
    _files(root, {"data.yaml": "train: images/train\nval: images/val\nnames: [dog]\n",
                  "images/train/a.jpg": "", "images/val/b.jpg": "",
                  "label/train/a.txt": "0 0.5 0.5 0.1 0.1\n", "label/val/b.txt": ""})
    message = _refused(capsys, ["convert", "yolo", "--input", str(root)], tmp_path / "out")
    assert message == (f"recordbeam: {root}/labels/train, {root}/labels/val: no label file "
                       "(.txt), " + NO_OBJECTS.format(
                           "an image's labels are its path with images/ as labels/ and .txt "
                           "as extension (labels/<split>/<id>.txt), or beside it"))


def test_darknet_lists_in_root_are_no_label_files(tmp_path, capsys):
    root = tmp_path / "yolo"
    _files(root, {"obj.data": "classes = 1\ntrain = train.txt\nnames = obj.names\n",
                  "obj.names": "dog\n", "train.txt": "obj_train_data/a.jpg\n",
                  "obj_train_data/a.jpg": ""})
    message = _refused(capsys, ["convert", "yolo", "--input", str(root)], tmp_path / "out")
    assert message.startswith(f"recordbeam: {root}: no label file (.txt), so every image")


def test_one_annotation_file_is_enough_to_start(tmp_path, monkeypatch):
    # Images without an annotation file beside one with it stay warnings of the run.
    _files(tmp_path / "in", {"a.jpg": "", "b.jpg": "", "b.json": "{}"})
    started = _started(monkeypatch)
    assert cli.main(["convert", "labelme", "--input", str(tmp_path / "in"), "--output",
                     str(tmp_path / "out"), "--quiet"]) == 0
    assert started == [["train"]]
