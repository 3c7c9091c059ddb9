"""Paths in a stranger's dataset, in every input format alike: symbolic links leading out of
the folders named on the command line, folder names holding glob characters, YOLO
``data.yaml`` entries naming folders elsewhere.

Each dataset comes from :mod:`format_datasets`; expectations come from how it was built
(which bytes lie where), never from the code under test.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from format_datasets import FORMATS, build
from lanes import exhaustive, one_in_make_test
from reliability_data import jpeg

from recordbeam.cli import main as cli

CASE = pytest.mark.case
#: Paths are the shared plumbing's: one format in `make test`, every one in `make test-all`.
EVERY_FORMAT = pytest.mark.parametrize("kind", one_in_make_test(FORMATS))
#: Formats whose images sit in a folder below the one named on the command line (COCO's
#: --images names the images folder itself); class folders in `make test`.
_FOLDER_BELOW = [k for k in FORMATS if k != "coco"]
FOLDER_BELOW = pytest.mark.parametrize("kind", one_in_make_test(
    _FOLDER_BELOW, keep=_FOLDER_BELOW.index("imagefolder")))
#: Bytes that lie outside every dataset: they must never reach a shard.
SECRET = jpeg(32, 24, (1, 2, 3))


def _shard_bytes(out: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(out.glob("*.tfrecord")))


def _rejects(out: Path, reason: str) -> list[dict]:
    path = out / "rejects.jsonl"
    lines = path.read_text(encoding="utf-8").splitlines() if path.exists() else []
    return [r for r in map(json.loads, lines) if r["reason"] == reason]


def _secret_file(tmp_path: Path) -> Path:
    outside = tmp_path / "outside"
    outside.mkdir(exist_ok=True)
    secret = outside / "secret.jpg"
    secret.write_bytes(SECRET)
    return secret


def _link_image_out(dataset, tmp_path: Path) -> Path:
    """Replace ``a.jpg`` of ``dataset`` by a link to the secret file outside it."""
    secret = _secret_file(tmp_path)
    dataset.image("a.jpg").unlink()
    dataset.image("a.jpg").symlink_to(secret)
    return secret


def _link_folder_out(dataset, tmp_path: Path) -> Path:
    """Move the images folder of ``dataset`` out of it, leaving a link in its place."""
    elsewhere = tmp_path / "elsewhere"
    shutil.move(dataset.image_folder, elsewhere)
    dataset.image_folder.symlink_to(elsewhere, target_is_directory=True)
    return elsewhere


@CASE("Image file that is a symbolic link leading out of the input, in every format",
      "reject `outside_root` naming the link and `--allow-outside-root`; the target is never "
      "read; the other images are written")
@EVERY_FORMAT
def test_a_file_linked_out_of_the_input_is_refused(tmp_path, kind):
    dataset = build(kind, tmp_path / "data")
    secret = _link_image_out(dataset, tmp_path)
    out = tmp_path / "out"

    code = cli.main(dataset.argv(out, "--max-reject-fraction", "1"))

    assert code == 0
    assert SECRET not in _shard_bytes(out)
    refused = _rejects(out, "outside_root")
    assert [os.path.basename(r["source"]) for r in refused] == ["a.jpg"]
    assert str(secret) in refused[0]["detail"] and "--allow-outside-root" in refused[0]["detail"]
    assert dataset.image("b.jpg").read_bytes() in _shard_bytes(out)


@CASE("Image folder (a split or class folder) that is a symbolic link leading out of the "
      "input, in every format with such folders",
      "each of its images rejected `outside_root`; none is read (box CSV, whose table lies "
      "in that folder: refused before the job, exit 1)")
@FOLDER_BELOW
def test_a_folder_linked_out_of_the_input_is_refused(tmp_path, capsys, kind):
    dataset = build(kind, tmp_path / "data")
    elsewhere = _link_folder_out(dataset, tmp_path)
    out = tmp_path / "out"

    code = cli.main(dataset.argv(out, "--max-reject-fraction", "1"))

    if dataset.whole_file is not None and dataset.image_folder in dataset.whole_file.parents:
        assert code == 1 and "outside" in capsys.readouterr().err and not out.exists()
        return
    assert code == 0
    shards = _shard_bytes(out)
    assert not any((elsewhere / name).read_bytes() in shards for name in ("a.jpg", "b.jpg"))
    refused = sorted(os.path.basename(r["source"]) for r in _rejects(out, "outside_root"))
    assert refused == ["a.jpg", "b.jpg"]


@CASE("`--allow-outside-root` in every format",
      "files and folders linked out of the input are read and written")
@EVERY_FORMAT
def test_allow_outside_root_reads_what_links_lead_to(tmp_path, kind):
    dataset = build(kind, tmp_path / "data")
    elsewhere = _link_folder_out(dataset, tmp_path)  # for COCO, --images itself
    _link_image_out(dataset, tmp_path)  # a.jpg of the linked folder leads further out
    out = tmp_path / "out"

    code = cli.main(dataset.argv(out, "--allow-outside-root"))

    assert code == 0
    assert SECRET in _shard_bytes(out)
    assert (elsewhere / "b.jpg").read_bytes() in _shard_bytes(out)
    assert not _rejects(out, "outside_root")


def _colour_images(folder: Path, colour: tuple[int, int, int]) -> list[bytes]:
    """Give the dataset's images in ``folder`` a colour of their own; their new bytes."""
    found = []
    for name in ("a.jpg", "b.jpg"):
        data = jpeg(32, 24, colour)
        (folder / name).write_bytes(data)
        found.append(data)
    return found


@CASE("Glob characters (`[`, `]`, `*`, `?`) in the input and output folder names, beside "
      "a folder the name matches as a glob (`photos [1]` beside `photos 1`), in every format",
      "read and written as literal names: the dataset's own images, never the sibling's; a "
      "rerun into `out [v2]` succeeds and equals the first run; no temp folder left")
@EVERY_FORMAT
def test_glob_characters_in_folder_names_are_literal(tmp_path, kind):
    dataset = build(kind, tmp_path / "photos [1]*?")
    own = _colour_images(dataset.image_folder, (10, 200, 10))
    sibling = build(kind, tmp_path / "photos 1xy")  # what "photos [1]*?" matches as a glob
    theirs = _colour_images(sibling.image_folder, (200, 10, 200))
    out = tmp_path / "out [v2]"

    assert cli.main(dataset.argv(out)) == 0
    first = _shard_bytes(out)
    assert all(data in first for data in own)
    assert not any(data in first for data in theirs)

    assert cli.main(dataset.argv(out)) == 0
    assert _shard_bytes(out) == first
    assert not [p.name for p in out.iterdir() if p.name.startswith(".")]


def _yolo_with_outside_images(tmp_path: Path) -> tuple[Path, Path]:
    """A YOLO folder whose data.yaml is to name images outside it; that outside folder."""
    dataset = build("yolo", tmp_path / "yolo")
    root = dataset.image_folder.parent.parent
    outside = tmp_path / "outside" / "images"
    outside.mkdir(parents=True)
    (outside / "secret.jpg").write_bytes(SECRET)
    return root, outside


@CASE("YOLO data.yaml naming a split folder outside ROOT (an absolute path, or `../`)",
      "refused before the job (exit 1) naming data.yaml, the entry and `--allow-outside-root`; "
      "nothing there is read")
@pytest.mark.parametrize("spelling", ["absolute", "dotdot"])
def test_yaml_entries_leading_out_of_root_are_refused(tmp_path, capsys, spelling):
    root, outside = _yolo_with_outside_images(tmp_path)
    entry = str(outside) if spelling == "absolute" else "../outside/images"
    (root / "data.yaml").write_text(f"names: [dog]\ntrain: images/train\nval: {entry}\n")
    out = tmp_path / "out"

    code = cli.main(["convert", "yolo", "--input", str(root), "--output", str(out), "--quiet",
                     "--direct_running_mode=in_memory", "--direct_num_workers=1"])

    assert code == 1
    err = capsys.readouterr().err
    assert "data.yaml" in err and entry in err and "--allow-outside-root" in err
    assert not out.exists()


@CASE("YOLO data.yaml naming a split folder outside ROOT, with `--allow-outside-root`",
      "the folder's images are read and written to their split")
@pytest.mark.parametrize("spelling", ["absolute", "dotdot"])
def test_yaml_entries_leading_out_of_root_are_read_when_allowed(tmp_path, spelling):
    root, outside = _yolo_with_outside_images(tmp_path)
    entry = str(outside) if spelling == "absolute" else "../outside/images"
    (root / "data.yaml").write_text(f"names: [dog]\ntrain: images/train\nval: {entry}\n")
    out = tmp_path / "out"

    code = cli.main(["convert", "yolo", "--input", str(root), "--output", str(out), "--quiet",
                     "--allow-outside-root", "--direct_running_mode=in_memory",
                     "--direct_num_workers=1"])

    assert code == 0
    assert SECRET in b"".join(p.read_bytes() for p in out.glob("val-*.tfrecord"))


@CASE("`verify`, `inspect`, `index`, `reshard` of an output folder (or a shard) whose name "
      "holds glob characters (`out [v2]`), beside a folder the name matches as a glob",
      "the folder (or file) of that very name is read; `reshard` into `new [x]` succeeds")
def test_read_commands_take_bracketed_names_literally(tmp_path, capsys):
    dataset = build("imagefolder", tmp_path / "data")
    out, decoy = tmp_path / "out [v2]", tmp_path / "out v"
    assert cli.main(dataset.argv(out)) == 0
    assert cli.main(build("imagefolder", tmp_path / "other").argv(decoy)) == 0
    shard = next(out.glob("*.tfrecord"))
    capsys.readouterr()

    assert cli.main(["verify", str(out)]) == 0
    assert cli.main(["verify", str(shard)]) == 0
    assert cli.main(["inspect", str(shard), "-n", "1", "--json"]) == 0
    assert str(decoy) not in capsys.readouterr().out
    assert cli.main(["index", str(out)]) == 0
    assert shard.with_name(shard.name + ".idx").exists()
    new = tmp_path / "new [x]"
    assert cli.main(["reshard", str(out), str(new), "--quiet", "--direct_running_mode=in_memory",
                     "--direct_num_workers=1"]) == 0
    assert json.loads((new / "manifest.json").read_text())["totals"]["examples"] == 4


@CASE("`report` of a run that rejected a file linked out of its input (`outside_root`)",
      "the rejected-images gallery never opens it; the report says how many it did not open")
def test_the_report_never_opens_files_the_run_refused(tmp_path):
    from recordbeam.dataset.gallery import rejected_images

    secret = _secret_file(tmp_path)
    link = tmp_path / "images" / "a.jpg"
    link.parent.mkdir()
    link.symlink_to(secret)
    broken = tmp_path / "images" / "b.jpg"
    broken.write_bytes(SECRET)  # rejected for another reason: shown
    lines = [json.dumps({"kind": "image", "source": str(link), "reason": "outside_root",
                         "detail": "links lead it out"}),
             json.dumps({"kind": "image", "source": str(broken), "reason": "too_large",
                         "detail": "too large"})]

    strip = rejected_images(lines, limit=10)

    assert [thumbnail.title for thumbnail, _split in strip.shown] == ["b.jpg"]
    assert strip.refused == 1 and strip.image_rejects == 2 and strip.not_tried == 0


#: YOLO first in each: the case `make test` runs.
PER_IMAGE_ANNOTATIONS = ["yolo", "voc", "kitti", "labelme"]
WHOLE_FILES = ["yolo", "cvat", "box-csv", "openimages"]


def _link_out(path: Path, tmp_path: Path) -> Path:
    """Move ``path`` out of its dataset and leave a link to it in its place."""
    outside = tmp_path / "outside-annotations"
    outside.mkdir(exist_ok=True)
    moved = outside / path.name
    shutil.move(path, moved)
    path.symlink_to(moved)
    return moved


@CASE("Annotation file of one image that is a symbolic link leading out of the input "
      "(VOC XML, YOLO or KITTI label file, labelme JSON)",
      "reject `outside_root` naming the annotation file, never read; its image is not "
      "written (labelme, whose JSON names its image: written without objects, warned "
      "`no_annotation_file`); `--allow-outside-root` reads both")
@pytest.mark.parametrize("kind", one_in_make_test(PER_IMAGE_ANNOTATIONS))
def test_an_annotation_file_linked_out_of_the_input_is_refused(tmp_path, kind):
    dataset = build(kind, tmp_path / "data")
    _link_out(dataset.annotation, tmp_path)
    out = tmp_path / "out"

    assert cli.main(dataset.argv(out, "--max-reject-fraction", "1")) == 0
    refused = _rejects(out, "outside_root")
    assert [r["source"] for r in refused] == [str(dataset.annotation)]
    assert "--allow-outside-root" in refused[0]["detail"]
    shards = _shard_bytes(out)
    if kind == "labelme":  # a JSON that cannot be used pairs with no image
        assert [r["source"] for r in _rejects(out, "no_annotation_file")] == [
            str(dataset.image("a.jpg"))]
    else:
        assert dataset.image("a.jpg").read_bytes() not in shards
    assert dataset.image("b.jpg").read_bytes() in shards

    allowed = tmp_path / "allowed"
    assert cli.main(dataset.argv(allowed, "--allow-outside-root")) == 0
    assert dataset.image("a.jpg").read_bytes() in _shard_bytes(allowed)


@CASE("A file the command needs whole that is a symbolic link leading out of the input "
      "(CVAT XML, box CSV or Open Images table, YOLO data.yaml)",
      "refused before the job (exit 1) naming it, where it leads and `--allow-outside-root`; "
      "never read; `--allow-outside-root` reads it")
@pytest.mark.parametrize("kind", one_in_make_test(WHOLE_FILES))
def test_a_whole_file_linked_out_of_the_input_is_refused(tmp_path, capsys, kind):
    dataset = build(kind, tmp_path / "data")
    moved = _link_out(dataset.whole_file, tmp_path)
    out = tmp_path / "out"

    assert cli.main(dataset.argv(out)) == 1
    err = capsys.readouterr().err
    assert str(dataset.whole_file) in err and str(moved) in err
    assert "--allow-outside-root" in err and not out.exists()

    assert cli.main(dataset.argv(out, "--allow-outside-root")) == 0


@CASE("Class folder that is a symbolic link to a folder inside the root",
      "followed: its images are written under its class (links to folders are followed as "
      "links to files are)")
def test_a_class_folder_linked_inside_the_root_is_read(tmp_path):
    dataset = build("imagefolder", tmp_path / "data")
    pool = tmp_path / "data" / ".pool"  # hidden: no class of its own
    shutil.move(dataset.image_folder, pool)  # .pool/ holds the dog images...
    dataset.image_folder.symlink_to(pool, target_is_directory=True)  # ...and dog/ leads there
    out = tmp_path / "out"

    assert cli.main(dataset.argv(out)) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["label_map"] == {"0": "cat", "1": "dog"}
    assert manifest["splits"]["train"]["examples"] == 4  # cat's two, dog's two
    assert dataset.image("a.jpg").read_bytes() in _shard_bytes(out)


@CASE("CVAT `<image name>` leading out of the images folder (`../../secret.jpg`)",
      "never read: only files listed below the images folder pair with `<image>` elements; "
      "image reject `missing` naming the XML and the element")
def test_a_cvat_image_name_leading_out_is_never_read(tmp_path):
    dataset = build("cvat", tmp_path / "data")
    _secret_file(tmp_path)
    xml = dataset.whole_file.read_text().replace('name="a.jpg"', 'name="../../outside/secret.jpg"')
    dataset.whole_file.write_text(xml)
    out = tmp_path / "out"

    assert cli.main(dataset.argv(out, "--max-reject-fraction", "1")) == 0
    assert SECRET not in _shard_bytes(out)
    missing = _rejects(out, "missing")
    assert len(missing) == 1 and "../../outside/secret.jpg" in missing[0]["detail"]


@CASE("Label Studio task whose image reference leads out of `--images` (`?d=../`, "
      "`/data/upload/../../`, an absolute path or `file://` URL elsewhere, `--images/../`), "
      "or names a local file by an absolute path elsewhere (`?d=/...`)",
      "never read: image reject `outside_root` naming the export and the task (`missing` "
      "for `?d=/...`, which Label Studio's server reads below its document root, "
      "`--images`); the other image is written")
@pytest.mark.parametrize(("reference", "reason"), [
    pytest.param(r, reason, id=i, marks=exhaustive) for i, r, reason in [
        ("dotdot", "/data/local-files/?d=../outside/secret.jpg", "outside_root"),
        ("escaped-dotdot", "/data/local-files/?d=..%2Foutside%2Fsecret.jpg", "outside_root"),
        ("upload-dotdot", "/data/upload/../../outside/secret.jpg", "outside_root"),
        ("absolute", "/data/local-files/?d={secret}", "missing"),
        ("path", "{secret}", "outside_root"),
        ("file-url", "file://{secret}", "outside_root"),
        ("below-then-out", "{images}/../outside/secret.jpg", "outside_root"),
    ]])
def test_a_labelstudio_reference_leading_out_is_never_read(tmp_path, reference, reason):
    dataset = build("labelstudio", tmp_path / "data")
    secret = _secret_file(tmp_path)
    export = Path(dataset.args[dataset.args.index("--input") + 1])
    named = reference.format(secret=secret, images=tmp_path / "data")
    tasks = json.loads(export.read_text())
    tasks[0]["data"]["image"] = named
    export.write_text(json.dumps(tasks))
    out = tmp_path / "out"

    assert cli.main(dataset.argv(out, "--max-reject-fraction", "1")) == 0
    assert SECRET not in _shard_bytes(out)
    [refused] = _rejects(out, reason)
    assert refused["source"] == f"{export}: task 1"
    assert (named if reason == "outside_root" else str(secret).lstrip("/")) in refused["detail"]
    assert dataset.image("b.jpg").read_bytes() in _shard_bytes(out)


@CASE("A folder (or a pipe) in OUT named like a file the run writes there "
      "(`train-00000-of-00001.tfrecord/`, `labels.txt/`), for a full or an incremental run",
      "refused before any work (exit 2) naming each one and what it is; nothing left in OUT")
@pytest.mark.parametrize("incremental", one_in_make_test([False, True]), ids=["full", "incremental"])
def test_a_non_file_named_like_an_output_file_is_refused_up_front(tmp_path, capsys, incremental):
    dataset = build("coco", tmp_path / "in")
    out = tmp_path / "out"
    (out / "train-00000-of-00001.tfrecord").mkdir(parents=True)
    (out / "labels.txt").mkdir()
    os.mkfifo(out / "rejects.jsonl")
    before = sorted(p.name for p in out.iterdir())
    capsys.readouterr()
    assert cli.main(dataset.argv(out, *(["--incremental"] if incremental else []))) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"recordbeam: {out} holds labels.txt (a folder), rejects.jsonl (a pipe), "
        "train-00000-of-00001.tfrecord (a folder), named like files recordbeam writes there: "
        "its commit could not put its files in place; move them away or choose another folder"]
    assert sorted(p.name for p in out.iterdir()) == before
