"""Class folders end to end: labels, splits, rejects and fixes, checked against the
generated sample's own expectations."""

from __future__ import annotations

import io
import json
import os

import pytest
from PIL import Image

from recordbeam import pipeline
from recordbeam.cli import main as cli
from recordbeam.images.transcode import ImageFixes
from recordbeam.sources.imagefolder.reader import (
    ImageFolderError,
    ImageFolderOptions,
    ReadImageFolder,
    to_tfrecord,
    val_share,
)
from recordbeam.testing.samples import make_image_folder_sample
from recordbeam.tfrecord.example import decode_example
from recordbeam.tfrecord.framing import open_records
from recordbeam.write.image_encoder import ImageChecks
from recordbeam.write.sink import ShardOptions

IN_MEMORY = ["--direct_running_mode=in_memory", "--direct_num_workers=1"]
LENIENT = ShardOptions(num_shards=2, max_reject_fraction=0.5)


def _convert(output, folder, fixes=None):
    out = os.fspath(output)
    return pipeline.run(
        lambda p: to_tfrecord(p, out, folder, LENIENT, ImageChecks(), fixes),
        out,
        beam_args=IN_MEMORY,
        show_progress=False,
    ).manifest


def _examples(output, split):
    names = sorted(n for n in os.listdir(output) if n.startswith(f"{split}-"))
    return [decode_example(r) for n in names for r in open_records(os.path.join(output, n))]


@pytest.fixture(scope="module")
def flat(tmp_path_factory):
    return make_image_folder_sample(tmp_path_factory.mktemp("folders"))


def test_flat_layout_labels_sorted_classes_and_splits_by_hash(flat, tmp_path):
    manifest = _convert(
        tmp_path / "out", ImageFolderOptions(flat.root, val_fraction=0.3), ImageFixes("jpeg")
    )
    good = flat.expected["good"]
    expected_val = {r for r in good if val_share(r) < 0.3}
    assert 0 < len(expected_val) < len(good)
    written = {}
    for split in ("train", "val"):
        for e in _examples(tmp_path / "out", split):
            written[e["image/source_id"][0].decode()] = (split, e)
    assert set(written) == set(good)
    for relative, (split, example) in written.items():
        assert split == ("val" if relative in expected_val else "train")
        class_name = good[relative]
        assert example["image/class/text"][0].decode() == class_name
        assert example["image/class/label"][0] == sorted(flat.classes).index(class_name)
        image = Image.open(io.BytesIO(example["image/encoded"][0]))
        assert image.format == "JPEG" and image.mode == "RGB"
        assert example["image/format"][0] == b"jpeg"
    assert manifest["label_map"] == {str(i): c for i, c in enumerate(sorted(flat.classes))}
    rejects = {}
    for entry in manifest["splits"].values():
        rejects.update(entry["rejects"]["by_reason"])
    assert sorted(k.split(":")[1] for k in rejects) == sorted(flat.expected["rejected"].values())
    counts = manifest["splits"]["train"]["counts"]
    kinds = list(flat.expected["kinds"].values())
    cmyk_total = sum(e.get("counts", {}).get("fix_cmyk", 0) for e in manifest["splits"].values())
    assert cmyk_total == kinds.count("cmyk_jpeg")
    assert counts["skipped_hidden_files"] == flat.expected["hidden"]
    assert counts["skipped_non_image_files"] == flat.expected["non_image"]


def test_split_folders_classes_file_and_label_offset(tmp_path):
    sample = make_image_folder_sample(tmp_path / "in", split_folders=True, include_bad=False)
    classes = tmp_path / "classes.txt"
    order = list(reversed(sample.classes))[:2]  # the last folder is not listed
    classes.write_text("\n".join(order) + "\n")
    manifest = _convert(
        tmp_path / "out", ImageFolderOptions(sample.root, classes_file=str(classes), label_offset=1)
    )
    assert set(manifest["splits"]) == {"train", "val"}
    unlisted = sample.classes[0]
    for split in ("train", "val"):
        examples = _examples(tmp_path / "out", split)
        expected = {
            r
            for r, s in sample.expected["splits"].items()
            if s == split and sample.expected["good"][r] != unlisted
        }
        assert {e["image/source_id"][0].decode() for e in examples} == expected
        for e in examples:
            name = e["image/class/text"][0].decode()
            assert e["image/class/label"][0] == order.index(name) + 1
        assert manifest["splits"][split]["rejects"]["by_reason"] == {
            "image:unknown_class": sum(
                1
                for r, s in sample.expected["splits"].items()
                if s == split and sample.expected["good"][r] == unlisted
            )
        }
    assert manifest["label_map"] == {"1": order[0], "2": order[1]}


def test_roboflow_valid_split_folder_is_a_split(tmp_path):
    # Roboflow's folder export: train/, valid/, test/; valid/ was rejected image by image
    # (not_in_class_folder) as if it were no split.
    root = tmp_path / "in"
    for relative in ("train/cat/1.jpg", "train/dog/2.jpg", "valid/cat/3.jpg",
                     "valid/dog/4.jpg", "test/cat/5.jpg"):
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        Image.new("RGB", (8, 6), (10, 20, 30)).save(root / relative, "JPEG")
    manifest = _convert(tmp_path / "out", ImageFolderOptions(str(root)))
    assert {split: entry["examples"] for split, entry in manifest["splits"].items()} == {
        "train": 2, "valid": 2, "test": 1}
    assert all(entry["rejects"]["total"] == 0 for entry in manifest["splits"].values())
    assert {e["image/source_id"][0].decode() for e in _examples(tmp_path / "out", "valid")} == {
        "valid/cat/3.jpg", "valid/dog/4.jpg"}
    assert manifest["label_map"] == {"0": "cat", "1": "dog"}


def test_val_fraction_with_split_folders_is_refused(tmp_path):
    sample = make_image_folder_sample(tmp_path / "in", split_folders=True, include_bad=False)
    with pytest.raises(ImageFolderError, match="split folders"):
        ReadImageFolder(ImageFolderOptions(sample.root, val_fraction=0.1))


def test_cli_converts_class_folders(flat, tmp_path, capsys):
    out = tmp_path / "cli"
    code = cli.main(
        [
            "convert",
            "imagefolder",
            "--input",
            flat.root,
            "--output",
            str(out),
            "--label-offset",
            "1",
            "--max-side",
            "20",
            "--quiet",
            "--max-reject-fraction",
            "0.5",
            *IN_MEMORY,
        ]
    )
    assert code == 0
    printed = capsys.readouterr().out
    assert "fix resized" in printed
    examples = _examples(out, "train")
    assert len(examples) == len(flat.expected["good"])
    assert min(e["image/class/label"][0] for e in examples) == 1
    assert all(max(e["image/width"][0], e["image/height"][0]) <= 20 for e in examples)
    assert (
        cli.main(
            [
                "convert",
                "imagefolder",
                "--root",
                str(tmp_path / "nowhere"),
                "--output",
                str(tmp_path / "x"),
                *IN_MEMORY,
            ]
        )
        == cli.EXIT_USAGE
    )


@pytest.mark.case(
    '`.txt`/`.json`/`.xml` notes in class folders',
    'skipped and counted, not rejected as images',
)
def test_note_files_beside_images_are_skipped_and_counted_not_rejected(tmp_path):
    root = tmp_path / "in"
    (root / "cat").mkdir(parents=True)
    (root / "annotations").mkdir()  # a folder of sidecars only: not a class
    image = io.BytesIO()
    Image.new("RGB", (8, 6), (10, 20, 30)).save(image, "JPEG")
    (root / "cat" / "a.jpg").write_bytes(image.getvalue())
    notes = {"cat/notes.txt": "notes", "cat/labels.csv": "name,label\n", "cat/meta.json": "{}",
             "cat/box.XML": "<annotation/>", "annotations/all.json": "[]",
             "synsets.txt": "n01440764 tench\n"}
    for relative, text in notes.items():
        (root / relative).write_text(text)
    manifest = _convert(tmp_path / "out", ImageFolderOptions(str(root)))
    entry = manifest["splits"]["train"]
    assert entry["examples"] == 1
    assert entry["rejects"]["total"] == 0
    assert entry["counts"]["skipped_non_image_files"] == len(notes)
    assert manifest["label_map"] == {"0": "cat"}


@pytest.mark.case(
    "Windows and macOS system files in class folders (`Thumbs.db`, `desktop.ini`, `._a.jpg`)",
    "skipped and counted as hidden files, not rejected as images; a folder holding only "
    "them is no class",
)
def test_system_files_beside_images_are_skipped_as_hidden_files(tmp_path):
    root = tmp_path / "in"
    (root / "cat").mkdir(parents=True)
    (root / "thumbs-only").mkdir()  # only Windows' thumbnail cache: not a class
    Image.new("RGB", (8, 6), (10, 20, 30)).save(root / "cat" / "a.jpg", "JPEG")
    junk = {"cat/Thumbs.db": b"\xd0\xcf\x11\xe0", "cat/desktop.ini": b"[.ShellClassInfo]\r\n",
            "cat/._a.jpg": b"\x00\x05\x16\x07", "thumbs-only/Thumbs.db": b"\xd0\xcf\x11\xe0",
            "cat/ehthumbs.db": b"\xd0\xcf"}
    for relative, data in junk.items():
        (root / relative).write_bytes(data)
    manifest = _convert(tmp_path / "out", ImageFolderOptions(str(root)))
    entry = manifest["splits"]["train"]
    assert entry["examples"] == 1
    assert entry["rejects"]["total"] == 0
    assert entry["counts"]["skipped_hidden_files"] == len(junk)
    assert manifest["label_map"] == {"0": "cat"}


@pytest.mark.parametrize("content,said", [
    (b"\xff\xd8\xff\xe0\x00\x10JFIF", "is not UTF-8 text; --classes takes a text file"),
    (b"cat\ndog\ncat\n", "class 'cat' (line 3) already appears (line 1)"),
])
def test_a_classes_file_that_cannot_be_read_stops_the_command_before_the_job(
        tmp_path, capsys, monkeypatch, content, said):
    sample = make_image_folder_sample(str(tmp_path / "data"))
    classes = tmp_path / "classes.txt"
    classes.write_bytes(content)
    started = []
    monkeypatch.setattr(pipeline, "run", lambda *a, **k: started.append(a))
    argv = ["convert", "imagefolder", "--root", sample.root, "--classes", str(classes),
            "--output", str(tmp_path / "out"), "--quiet", *IN_MEMORY]
    assert cli.main(argv) == cli.EXIT_DATA
    err = capsys.readouterr().err
    assert str(classes) in err and said in err, err
    assert "Traceback" not in err and not started


@pytest.mark.case("A FIFO (or other special file) named like an image in an input folder",
                  "reject `empty`, never opened: the run does not wait for a writer")
def test_a_fifo_named_like_an_image_is_rejected_unopened(tmp_path):
    import subprocess
    import sys

    sample = make_image_folder_sample(str(tmp_path / "data"), include_bad=False)
    cls = sorted(sample.classes)[0]
    os.mkfifo(os.path.join(sample.root, cls, "pipe.jpg"))
    out = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, "-m", "recordbeam", "convert", "imagefolder", "--root", sample.root,
         "--output", str(out), "--quiet", "--max-reject-fraction", "0.5", *IN_MEMORY],
        capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    rejects = [json.loads(line) for line in (out / "rejects.jsonl").read_text().splitlines()]
    assert [(r["source"].rsplit("/", 1)[1], r["reason"]) for r in rejects] == [
        ("pipe.jpg", "empty")]


def test_images_nested_below_their_class_keep_distinct_file_names(tmp_path):
    # Class folders with subfolders (a class per species, a folder per camera): two
    # 0001.jpg of one class are two file names, as they are two ids.
    root = tmp_path / "in"
    for relative in ("train/cat/cam1/0001.jpg", "train/cat/cam2/0001.jpg",
                     "train/dog/0001.jpg", "val/dog/deep/er/0002.jpg"):
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        Image.new("RGB", (8, 6), (10, 20, 30)).save(root / relative, "JPEG")
    _convert(tmp_path / "out", ImageFolderOptions(str(root)))
    written = {e["image/source_id"][0].decode(): e["image/filename"][0].decode()
               for split in ("train", "val") for e in _examples(tmp_path / "out", split)}
    assert written == {"train/cat/cam1/0001.jpg": "cam1/0001.jpg",
                       "train/cat/cam2/0001.jpg": "cam2/0001.jpg",
                       "train/dog/0001.jpg": "0001.jpg",  # one level: its name, as always
                       "val/dog/deep/er/0002.jpg": "deep/er/0002.jpg"}


def test_python_api_writes_the_bytes_the_command_writes(flat, tmp_path, output_at):
    from recordbeam.converter import convert

    out = {"cli": tmp_path / "cli", "api": tmp_path / "api"}
    assert cli.main(["convert", "imagefolder", "--root", flat.root, "--label-offset", "1",
                     "--val-fraction", "0.3", "--max-reject-fraction", "0.5", "--quiet",
                     "--output", str(out["cli"]), *IN_MEMORY]) == 0
    result = convert("imagefolder", input=flat.root, output=str(out["api"]), label_offset=1,
                     val_fraction=0.3, max_reject_fraction=0.5, quiet=True, beam_args=IN_MEMORY)
    assert sorted(result.manifest["splits"]) == ["train", "val"]
    written = output_at(out["cli"]).snapshot()
    assert "manifest.json" in written and output_at(out["api"]).snapshot() == written


@pytest.mark.parametrize(("options", "said"), [
    ({"label_offset": -1}, "label_offset must be between 0 and 9223372036854775807 (labels "
                           "are 64-bit integers), got -1"),
    ({"label_offset": 2**63}, "label_offset must be at most 9223372036854775807"),
    ({"label_offset": True}, "label_offset takes a whole number, got True"),
    ({"val_fraction": 1}, "val_fraction must be a fraction in (0, 1), got 1"),
    ({"root": "x"}, "convert imagefolder takes no option 'root'"),
])
def test_python_api_refuses_what_the_command_refuses(options, said, tmp_path):
    from recordbeam.converter import convert
    from recordbeam.errors import UsageError

    given = {"input": str(tmp_path), **options}
    with pytest.raises(UsageError) as refused:
        convert("imagefolder", output=str(tmp_path / "out"), **given)
    assert said in str(refused.value)
    assert not (tmp_path / "out").exists()
