"""Untrusted Pascal VOC folders: hostile or broken XML, XMLs and images that do not pair."""

from __future__ import annotations

import json
import os

import pytest
from PIL import Image

from recordbeam.cli import main as cli

CASE = pytest.mark.case
IN_MEMORY = ["--direct_running_mode=in_memory", "--direct_num_workers=1"]

_LAUGHS = ('<?xml version="1.0"?><!DOCTYPE annotation [<!ENTITY lol "lol">'
           + "".join(f'<!ENTITY lol{i} "{("&lol" + str(i - 1) + ";") * 10 if i else "&lol;" * 10}">'
                     for i in range(9))
           + ']><annotation><filename>{name}</filename><object><name>&lol8;</name>'
           "<bndbox><xmin>1</xmin><ymin>1</ymin><xmax>5</xmax><ymax>5</ymax></bndbox></object>"
           "</annotation>")
_EXTERNAL = ('<?xml version="1.0"?><!DOCTYPE annotation [<!ENTITY secret SYSTEM '
             '"file:///etc/hostname">]><annotation><filename>{name}</filename><object>'
             "<name>&secret;</name><bndbox><xmin>1</xmin><ymin>1</ymin><xmax>5</xmax>"
             "<ymax>5</ymax></bndbox></object></annotation>")
_GOOD = ("<annotation><filename>{name}</filename><size><width>32</width><height>32</height>"
         "</size><object><name>dog</name><bndbox><xmin>1</xmin><ymin>1</ymin><xmax>9</xmax>"
         "<ymax>9</ymax></bndbox></object></annotation>")


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    root = tmp_path_factory.mktemp("voc")
    (root / "Annotations").mkdir()
    (root / "JPEGImages").mkdir()
    xmls = {"laughs": _LAUGHS, "external": _EXTERNAL, "broken": "<annotation><object>",
            "good": _GOOD, "no_image": _GOOD}
    for stem, text in xmls.items():
        (root / "Annotations" / f"{stem}.xml").write_text(text.format(name=f"{stem}.jpg"))
    for stem in ("laughs", "external", "broken", "good", "no_xml"):
        Image.new("RGB", (32, 32)).save(root / "JPEGImages" / f"{stem}.jpg", format="JPEG")
    out = root.parent / f"{root.name}-out"
    code = cli.main(["convert", "voc", "--input", str(root), "--output", str(out),
                     "--max-reject-fraction", "1", "--quiet", *IN_MEMORY])
    rejects = [json.loads(line) for line in (out / "rejects.jsonl").read_text().splitlines()]
    shards = b"".join((out / name).read_bytes() for name in os.listdir(out)
                      if name.endswith(".tfrecord"))
    return code, {os.path.basename(r["source"]): r for r in rejects}, shards


@CASE("VOC XML with a billion-laughs DOCTYPE (entities nested 10^9 deep)",
      "image reject `unsafe_xml` naming the XML; never expanded; run succeeds")
@CASE("VOC XML with an external entity (file:///etc/hostname)",
      "image reject `unsafe_xml`; the file is never read")
def test_xml_entities_are_refused_never_expanded(converted):
    code, rejects, shards = converted
    assert code == 0
    for stem in ("laughs", "external"):
        assert rejects[f"{stem}.xml"]["reason"] == "unsafe_xml"
        assert rejects[f"{stem}.xml"]["kind"] == "image"
    assert b"lollol" not in shards
    with open("/etc/hostname", "rb") as f:
        hostname = f.read().strip()
    assert not hostname or hostname not in shards


@CASE("Malformed VOC XML (unclosed elements)", "image reject `malformed_xml` naming the file")
def test_malformed_xml_is_an_image_reject(converted):
    _code, rejects, _shards = converted
    assert rejects["broken.xml"]["reason"] == "malformed_xml"
    assert "broken.xml" in rejects["broken.xml"]["detail"]


@CASE("VOC XML without its image; image without its XML",
      "image reject `missing` naming the XML; the image is written with no objects and a "
      "`no_annotation_file` warning")
def test_unpaired_xml_and_image(converted):
    _code, rejects, shards = converted
    assert (rejects["no_image.xml"]["kind"], rejects["no_image.xml"]["reason"]) == (
        "image", "missing")
    assert (rejects["no_xml.jpg"]["kind"], rejects["no_xml.jpg"]["reason"]) == (
        "warning", "no_annotation_file")
    assert b"no_xml.jpg" in shards and b"good.jpg" in shards
