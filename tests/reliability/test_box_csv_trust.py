"""Untrusted box CSV tables: rows naming images that are not there or lie outside the
export."""

from __future__ import annotations

import json
import os

import pytest
from PIL import Image

from recordbeam.cli import main as cli

CASE = pytest.mark.case
IN_MEMORY = ["--direct_running_mode=in_memory", "--direct_num_workers=1"]
CSV_HEADER = "filename,width,height,class,xmin,ymin,xmax,ymax"


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
def box_csv(tmp_path_factory):
    root = tmp_path_factory.mktemp("boxcsv")
    secret = root.parent / f"{root.name}-secret.jpg"
    _image(secret)
    rows = [CSV_HEADER, "good.jpg,32,32,dog,1,1,9,9",
            f"../{secret.name},32,32,dog,1,1,9,9",  # outside the split folder
            "gone.jpg,32,32,dog,1,1,9,9"]
    (root / "train").mkdir()
    (root / "train" / "_annotations.csv").write_text("\n".join(rows) + "\n")
    _image(root / "train" / "good.jpg")
    return _run("box-csv", root, "--max-reject-fraction", "1")


@CASE("Box CSV row naming an image that is not in its split folder",
      "image reject `missing` naming `_annotations.csv:<line>`; the other rows are written")
def test_box_csv_row_without_image(box_csv):
    code, rejects, shards = box_csv
    assert code == 0
    by_source = {os.path.basename(r["source"]): r for r in rejects}
    assert (by_source["_annotations.csv:4"]["kind"], by_source["_annotations.csv:4"]["reason"]) \
        == ("image", "missing")
    assert b"good.jpg" in shards


@CASE("Box CSV row naming ../<file> outside the export",
      "image reject `missing` naming the line; rows only meet images listed inside the "
      "split folder, so nothing outside is read")
def test_box_csv_row_outside_the_folder_is_never_read(box_csv):
    _code, rejects, shards = box_csv
    by_source = {os.path.basename(r["source"]): r for r in rejects}
    assert by_source["_annotations.csv:3"]["reason"] == "missing"
    assert b"-secret.jpg" not in shards


@CASE("Box CSV whose lines end in a carriage return alone (classic Mac line ends)",
      "the run stops before it starts (exit 1), naming the table and the line ends to save "
      "it with")
def test_box_csv_with_carriage_return_line_ends_is_refused_naming_them(tmp_path, capsys):
    root = tmp_path / "export"
    _image(root / "train" / "a.jpg")
    (root / "train" / "_annotations.csv").write_bytes(
        f"{CSV_HEADER}\ra.jpg,32,32,dog,1,1,9,9\r".encode())
    code, _rejects, shards = _run("box-csv", root)
    err = capsys.readouterr().err
    assert code == cli.EXIT_DATA and shards == b""
    assert "_annotations.csv: its lines end in a carriage return alone" in err
    assert "Traceback" not in err
