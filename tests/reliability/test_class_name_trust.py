"""Class names that would break the label files: a line break or nothing visible (every
later line of ``labels.txt`` and the TFDS labels file would name the wrong label), one name
for two classes, two spellings of one name (NFC and NFD), YAML names that are not text.

The policy is :mod:`recordbeam.dataset.class_names`'s: a class list holding such a name
fails the run naming it; a name found on one object rejects that object; one name given to
two ids (COCO, Open Images) is written with a warning; two spellings that differ only in
Unicode normalisation fail the run wherever the name is what identifies the class.
"""

from __future__ import annotations

import json

import pytest
from labelled_datasets import CLASS_NAME_FORMATS, LENIENT, run
from lanes import exhaustive, one_in_make_test

from recordbeam.cli import main as cli

CASE = pytest.mark.case

#: Formats whose names come from a class list, and one hostile name each can carry.
LISTED = {
    "coco": "hot\ndog",
    "yolo": "hot\ndog",
    "cvat": "hot\u2028dog",
    "openimages": "hot\ndog",
    "imagefolder": "hot\ndog",
}
#: Formats whose names are found on objects (a KITTI or box CSV line ends at \n, so
#: their names carry U+2028, which other readers take for a line end); Label Studio's
#: also on choices, classes of the whole image.
FOUND = {
    "voc": "hot\ndog",
    "labelme": "hot\ndog",
    "kitti": "hot\u2028dog",
    "box-csv": "hot\u2028dog",
    "labelstudio": "hot\ndog",
    "labelstudio-choices": "hot\ndog",
}
#: Datasets of a format built another way: the format, and its builder's options.
VARIANTS = {"cvat-shapes": ("cvat", {"declared": False}),
            "labelstudio-choices": ("labelstudio", {"choices": True})}


def _convert(tmp_path, capsys, kind, names, *extra):
    kind, build = VARIANTS.get(kind, (kind, {}))
    argv = CLASS_NAME_FORMATS[kind](tmp_path / "in", names, **build)
    lenient = LENIENT if kind != "imagefolder" else ("--max-reject-fraction", "1")
    return run(capsys, argv, tmp_path / "out", *lenient, *extra)


def _label_lines_match(outcome) -> None:
    """labels.txt holds one line per label of the manifest's map, each its name."""
    manifest = outcome.manifest()
    lines = outcome.text("labels.txt").split("\n")
    assert lines.pop() == ""
    assert lines == manifest["label_names"] == list(manifest["label_map"].values())


@CASE("Class name with a line break (`hot\\ndog`, U+2028) in a class list: COCO "
      "categories, YOLO names, CVAT `<meta>` labels, Open Images class descriptions, class "
      "folders",
      "run fails (exit 1) naming the file, the entry and the character; nothing written")
@pytest.mark.parametrize("kind", one_in_make_test(sorted(LISTED)))
def test_a_listed_name_that_is_not_one_line_fails_the_run(tmp_path, capsys, kind):
    bad = LISTED[kind]
    outcome = _convert(tmp_path, capsys, kind, ["dog", bad, "cat"])
    assert outcome.code == 1, outcome.err
    assert "recordbeam: " in outcome.err and ascii(bad) in outcome.err
    assert f"U+{ord(bad[3]):04X}" in outcome.err and "Traceback" not in outcome.err
    assert outcome.manifest() is None and outcome.text("labels.txt") is None


@CASE("Class name with a line break or a control character on an object: VOC, labelme, "
      "KITTI, box CSV, Label Studio (a region's label or a choice)",
      "annotation reject `invalid_class_name` naming the object; labels.txt holds one line "
      "per label")
@pytest.mark.parametrize("kind", one_in_make_test(sorted(FOUND)))
def test_a_found_name_that_is_not_one_line_rejects_its_object(tmp_path, capsys, kind):
    bad = FOUND[kind]
    outcome = _convert(tmp_path, capsys, kind, ["dog", bad, "cat"])
    assert outcome.code == 0, outcome.err
    invalid = [r for r in outcome.rejects() if r["reason"] == "invalid_class_name"]
    assert len(invalid) == 1 and ascii(bad) in invalid[0]["detail"]
    _label_lines_match(outcome)
    assert outcome.manifest()["label_names"] == ["cat", "dog"]


@CASE("Class name that is only white space: a COCO category, a class folder",
      "run fails (exit 1) naming it: TFDS drops blank lines of its labels file")
@pytest.mark.parametrize("kind", one_in_make_test(["coco", "imagefolder"]))
def test_a_blank_listed_name_fails_the_run(tmp_path, capsys, kind):
    outcome = _convert(tmp_path, capsys, kind, ["dog", " \t", "cat"])
    assert outcome.code == 1, outcome.err
    assert "only white space" in outcome.err and "Traceback" not in outcome.err


@CASE("Two class names that differ only in Unicode normalisation (`café` as NFC and NFD): "
      "class folders, YOLO names, CVAT `<meta>` labels; names found on objects (VOC, "
      "labelme, KITTI, box CSV, CVAT shapes, Label Studio regions and choices)",
      "run fails (exit 1) showing both spellings escaped and where each is; nothing written")
@pytest.mark.parametrize("kind", one_in_make_test(["imagefolder", "yolo", "cvat", "cvat-shapes",
                                                   "voc", "labelme", "kitti", "box-csv",
                                                   "labelstudio", "labelstudio-choices"]))
def test_names_that_differ_only_in_normalisation_fail_the_run(tmp_path, capsys, kind):
    outcome = _convert(tmp_path, capsys, kind, ["caf\u00e9", "cafe\u0301"])
    assert outcome.code == 1, outcome.err
    assert "'caf\\xe9'" in outcome.err and "'cafe\\u0301'" in outcome.err
    assert "Unicode normalisation" in outcome.err and "Traceback" not in outcome.err
    assert outcome.manifest() is None


@CASE("Two COCO categories (different ids) with one name, or names that differ only in "
      "normalisation; two Open Images label ids with one display name",
      "written, each under its own label; warning `duplicate_class_name` in the summary, "
      "the manifest and rejects.jsonl naming both")
@pytest.mark.parametrize("kind", one_in_make_test(["coco", "openimages"]))
@pytest.mark.parametrize("names", [["dog", "dog"], ["caf\u00e9", "cafe\u0301"]],
                         ids=["same", "nfc-nfd"])
def test_one_name_for_two_ids_is_written_with_a_warning(tmp_path, capsys, kind, names):
    argv = CLASS_NAME_FORMATS[kind](tmp_path / "in", names)
    outcome = run(capsys, [a for a in argv if a != "--quiet"], tmp_path / "out")
    assert outcome.code == 0, outcome.err
    manifest = outcome.manifest()
    assert manifest["splits"]["train"]["warnings"] == {"duplicate_class_name": 1}
    assert "warning duplicate_class_name" in outcome.out
    [warning] = [r for r in outcome.rejects() if r["reason"] == "duplicate_class_name"]
    assert warning["kind"] == "warning" and ascii(names[1]) in warning["detail"]
    assert len(manifest["label_map"]) == 2
    _label_lines_match(outcome)


@CASE("YAML class names that are not text: null, a boolean (`no`), a date, a float, a list "
      "or mapping",
      "run fails (exit 1) naming the class and what YAML read; whole numbers are taken as "
      "their digits")
@pytest.mark.parametrize("value, said", [
    ("[dog, null]", "empty (null)"),
    ("[dog, no]", "a boolean"),
    ("[dog, 2024-01-01]", "a date"),
    ("[dog, 1.5]", "a number with a fraction"),
    ("[dog, [a, b]]", "a list"),
    ("{0: dog, 1: {a: b}}", "a mapping"),
    ("[0, 1, 2]", None),
])
def test_yaml_names_that_are_not_text_are_refused(tmp_path, capsys, value, said):
    outcome = _convert(tmp_path, capsys, "yolo", value)
    if said is None:
        assert outcome.code == 0, outcome.err
        assert outcome.text("labels.txt") == "0\n1\n2\n"
        return
    assert outcome.code == 1, outcome.err
    assert f"the name of class 1 is {said}" in outcome.err and "quote it" in outcome.err


@CASE("reshard of a folder whose manifest.json was edited to name a class `hot\\ndog`",
      "run fails (exit 1) naming manifest.json and the name before anything is written")
def test_reshard_checks_the_class_names_it_carries(tmp_path, capsys):
    done = tmp_path / "done"
    assert _convert(tmp_path, capsys, "coco", ["dog"]).code == 0
    (tmp_path / "out").rename(done)
    manifest = json.loads((done / "manifest.json").read_text())
    manifest.update(label_names=["hot\ndog"], label_map={"1": "hot\ndog"})
    (done / "manifest.json").write_text(json.dumps(manifest))
    code = cli.main(["reshard", str(done), str(tmp_path / "again"), "--quiet",
                     "--direct_running_mode=in_memory", "--direct_num_workers=1"])
    err = capsys.readouterr().err
    assert code == 1, err
    assert f"{done / 'manifest.json'}: the class name 'hot\\ndog'" in err
    assert not (tmp_path / "again").exists()


@pytest.mark.parametrize("kind", [
    *(pytest.param(kind, marks=[exhaustive, CASE(
        "Class name holding a lone surrogate (a JSON `\\udcff` escape, which UTF-8 cannot "
        "write) on an object or a choice: Label Studio",
        "annotation reject `invalid_class_name` naming it escaped; the image is written, the "
        "run succeeds (not exit 3)")]) for kind in ("labelstudio", "labelstudio-choices")),
    pytest.param("labelme", marks=[exhaustive, CASE(
        "Class name holding a lone surrogate (a JSON `\\udcff` escape) on a labelme shape",
        "annotation reject `invalid_class_name` naming it escaped; the image is written, the "
        "run succeeds (not exit 3)")]),
])
def test_a_name_that_is_no_unicode_text_rejects_its_object(tmp_path, capsys, kind):
    outcome = _convert(tmp_path, capsys, kind, ["dog", "d\udcffg", "cat"])
    assert outcome.code == 0, outcome.err
    invalid = [r for r in outcome.rejects() if r["reason"] == "invalid_class_name"]
    assert len(invalid) == 1 and "'d\\udcffg'" in invalid[0]["detail"]
    _label_lines_match(outcome)
    assert outcome.manifest()["label_names"] == ["cat", "dog"]
