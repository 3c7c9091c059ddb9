"""Untrusted Open Images tables: a row broken by a quoted line break, tables naming images
that were not downloaded."""

from __future__ import annotations

import json
import os

import pytest
from PIL import Image

from recordbeam.cli import main as cli

CASE = pytest.mark.case
IN_MEMORY = ["--direct_running_mode=in_memory", "--direct_num_workers=1"]
BOX_HEADER = ("ImageID,Source,LabelName,Confidence,XMin,XMax,YMin,YMax,IsOccluded,"
              "IsTruncated,IsGroupOf,IsDepiction,IsInside")


def _image(path):
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (32, 32)).save(path, format="JPEG")


def _run(kind, root, *options):
    out = root.parent / f"{root.name}-out"
    code = cli.main(["convert", kind, "--input", str(root), "--output", str(out), "--quiet",
                     *options, *IN_MEMORY])
    rejects_file = out / "rejects.jsonl"
    rejects = ([json.loads(line) for line in rejects_file.read_text().splitlines()]
               if rejects_file.exists() else [])
    shards = b"".join((out / name).read_bytes() for name in os.listdir(out)
                      if name.endswith(".tfrecord")) if out.exists() else b""
    return code, rejects, shards


@pytest.fixture(scope="module")
def open_images(tmp_path_factory):
    root = tmp_path_factory.mktemp("oid")
    (root / "class-descriptions-boxable.csv").write_text("/m/dog,Dog\n")
    rows = [BOX_HEADER, "good,xclick,/m/dog,1,0.1,0.5,0.1,0.5,0,0,0,0,0",
            'quoted,xclick,"/m/dog\nsecond half",1,0.1,0.5,0.1,0.5,0,0,0,0,0',
            "after,xclick,/m/dog,1,0.1,0.5,0.1,0.5,0,0,0,0,0"]
    latin1 = b"latin,xclick,/m/d\xe9g,1,0.1,0.5,0.1,0.5,0,0,0,0,0\n"  # not UTF-8
    (root / "train-annotations-bbox.csv").write_bytes(
        ("\n".join(rows) + "\n").encode() + latin1)
    for stem in ("good", "quoted", "after", "latin"):
        _image(root / "images" / "train" / f"{stem}.jpg")
    return _run("openimages", root, "--max-reject-fraction", "1",
                "--max-annotation-reject-fraction", "1")


@CASE("Open Images bbox table with a quoted line break (not in the real tables)",
      "each half is an annotation reject `malformed_row` naming the table and the row's "
      "text; the other rows are written")
def test_open_images_quoted_line_break_is_named_not_merged(open_images):
    code, rejects, shards = open_images
    assert code == 0
    malformed = sorted(r["source"] for r in rejects
                       if r["reason"] == "malformed_row" and "latin" not in r["source"])
    assert len(malformed) == 2
    assert all("train-annotations-bbox.csv: row " in source for source in malformed)
    assert any("second half" in source for source in malformed)
    assert b"good.jpg" in shards and b"after.jpg" in shards


@CASE("Open Images tables for every image, only part of the images downloaded",
      "one image reject `missing` per absent ImageID, naming its rows; past "
      "--max-reject-fraction the run fails (exit 1), never a silently smaller dataset")
def test_open_images_partial_download_fails_loudly(tmp_path):
    root = tmp_path / "oid"
    root.mkdir()
    (root / "class-descriptions-boxable.csv").write_text("/m/dog,Dog\n")
    rows = [BOX_HEADER] + [f"img{i},xclick,/m/dog,1,0.1,0.5,0.1,0.5,0,0,0,0,0"
                           for i in range(10)]
    (root / "train-annotations-bbox.csv").write_text("\n".join(rows) + "\n")
    _image(root / "images" / "train" / "img0.jpg")  # 1 of 10 downloaded
    code, _rejects, _shards = _run("openimages", root)
    assert code == 1
    code, rejects, shards = _run("openimages", root, "--max-reject-fraction", "1")
    assert code == 0
    missing = sorted(r["source"] for r in rejects if r["reason"] == "missing")
    assert [source.split("row '")[1].split(",")[0] for source in missing] == [
        f"img{i}" for i in range(1, 10)]
    assert b"img0.jpg" in shards


@CASE("Open Images bbox table with a row that is not UTF-8",
      "annotation reject `malformed_row` naming the table and the row (bytes escaped); the "
      "run goes on (Beam's text reader alone would fail the whole run)")
def test_open_images_row_not_utf8_is_a_reject(open_images):
    code, rejects, shards = open_images
    assert code == 0
    (reject,) = [r for r in rejects if "latin" in r["source"]]
    assert reject["reason"] == "malformed_row" and "\\xe9" in reject["source"]
    assert b"latin.jpg" in shards  # its image is written, without the row's box


@CASE("Open Images table whose lines end in a carriage return alone (classic Mac line ends)",
      "the run stops before it starts (exit 1), naming the table and the line ends to save "
      "it with")
def test_open_images_carriage_return_line_ends_are_refused_naming_them(tmp_path, capsys):
    root = tmp_path / "oid"
    root.mkdir()
    (root / "class-descriptions-boxable.csv").write_text("/m/dog,Dog\n")
    rows = [BOX_HEADER, "img0,xclick,/m/dog,1,0.1,0.5,0.1,0.5,0,0,0,0,0"]
    (root / "train-annotations-bbox.csv").write_bytes(("\r".join(rows) + "\r").encode())
    _image(root / "images" / "train" / "img0.jpg")
    code, _rejects, shards = _run("openimages", root)
    err = capsys.readouterr().err
    assert code == cli.EXIT_DATA and shards == b""
    assert "train-annotations-bbox.csv: its lines end in a carriage return alone" in err
    assert "Traceback" not in err
