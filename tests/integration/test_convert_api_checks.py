"""``recordbeam.convert`` checks a declared format's inputs as ``recordbeam convert`` does:
the same refusals, in the same words, before any job."""

from __future__ import annotations

import pytest

from recordbeam import converter as convert
from recordbeam.cli import main as cli
from recordbeam.errors import UsageError
from recordbeam.options import find
from recordbeam.sources.format import formats

#: Declared formats whose input is --input.
WITH_INPUT = [name for name, fmt in formats().items() if find(fmt.options, "input")]

def _cvat_subset(name: str) -> str:
    """A CVAT XML of one task whose subset is ``name``, without images."""
    return (f"<annotations><version>1.1</version><meta><task><name>t</name><subset>{name}"
            "</subset><labels><label><name>dog</name></label></labels></task></meta>"
            "</annotations>")


#: A small input per format, and the splits a run of it writes.
INPUTS = {
    "labelme": ({"a.jpg": "", "a.json": "{}"}, ["train"]),
    "labelstudio": ({"export.json": "[]", "upload/1/0c5e1d7a-a.jpg": ""}, ["train"]),
    "yolo": ({"data.yaml": "train: images/train\nval: images/val\nnames: [dog]\n",
              "images/train/a.jpg": "", "labels/train/a.txt": "", "images/val/b.jpg": ""},
             ["train", "val"]),
    "box-csv": ({"val/_annotations.csv": "filename,width,height,class,xmin,ymin,xmax,ymax\n",
                 "val/a.jpg": ""}, ["val"]),
    "openimages": ({"test-annotations-bbox.csv": "ImageID,LabelName,XMin,XMax,YMin,YMax\n",
                    "class-descriptions-boxable.csv": "/m/a,A\n", "images/test/a.jpg": ""},
                   ["test"]),
    "imagefolder": ({"train/cat/a.jpg": "", "val/dog/b.jpg": ""}, ["train", "val"]),
    "kitti": ({"training/image_2/a.jpg": "", "training/label_2/a.txt": "",
               "testing/image_2/b.jpg": ""}, ["testing", "training"]),
    "cvat": ({"train.xml": _cvat_subset("train"), "val.xml": _cvat_subset("val"),
              "images/a.jpg": ""}, ["train", "val"]),
}
#: The file --input names in the small input's folder, for formats whose input is a file.
INPUT_FILES = {"labelstudio": "export.json"}


@pytest.mark.parametrize("kind", WITH_INPUT)
def test_a_missing_input_is_refused_from_python_as_by_the_command(kind, tmp_path, capsys):
    missing, out = tmp_path / "missing", tmp_path / "out"
    assert cli.main(["convert", kind, "--input", str(missing), "--output", str(out)]) == 2
    said = capsys.readouterr().err.strip().removeprefix("recordbeam: ")
    with pytest.raises(UsageError) as refused:
        convert.convert(kind, input=str(missing), output=str(out))
    assert str(refused.value) == said
    assert not out.exists()


def _input(kind: str, root) -> list[str]:
    """Write the small input of ``kind`` under ``root``; its splits."""
    files, splits = INPUTS[kind]
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return splits


def _started(monkeypatch) -> list:
    """Stand in for the run: the splits each conversion would start a job for."""
    started = []

    def record(fmt, conversion, values, beam_options):
        started.append(list(conversion.splits))
        return convert.UpToDate(values["output"], tuple(conversion.splits))

    monkeypatch.setattr(convert, "execute", record)
    return started


@pytest.mark.parametrize("kind", list(INPUTS))
def test_python_starts_the_splits_the_command_would(kind, tmp_path, monkeypatch):
    splits = _input(kind, tmp_path / "in")
    given = str(tmp_path / "in" / INPUT_FILES.get(kind, ""))
    started = _started(monkeypatch)
    convert.convert(kind, input=given, output=str(tmp_path / "out"))
    assert cli.main(["convert", kind, "--input", given, "--output", str(tmp_path / "out"),
                     "--quiet"]) == 0
    assert started == [splits, splits]


@pytest.mark.parametrize("kind", ["yolo", "box-csv", "openimages", "imagefolder", "kitti",
                                  "cvat"])
def test_python_refuses_a_split_the_inputs_name_themselves(kind, tmp_path, monkeypatch):
    # It would be ignored: the files name the splits, as the command says of --split.
    _input(kind, tmp_path / "in")
    started = _started(monkeypatch)
    with pytest.raises(UsageError, match="^--split holdout would be ignored: "):
        convert.convert(kind, input=str(tmp_path / "in"), output=str(tmp_path / "out"),
                        split="holdout")
    assert started == []


def test_python_split_names_the_one_split_of_labelme(tmp_path, monkeypatch):
    _input("labelme", tmp_path / "in")
    started = _started(monkeypatch)
    convert.convert("labelme", input=str(tmp_path / "in"), output=str(tmp_path / "out"),
                    split="holdout")
    assert started == [["holdout"]]
