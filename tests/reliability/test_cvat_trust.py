"""Untrusted CVAT exports: hostile or broken XML, elements and images that do not pair,
and an XML too large to hold in memory."""

from __future__ import annotations

import io
import json
import os
import tracemalloc

import pytest
from PIL import Image

from recordbeam.cli import main as cli
from recordbeam.sources.cvat.reader import stream_images
from recordbeam.sources.exports import ExportEntry

CASE = pytest.mark.case
IN_MEMORY = ["--direct_running_mode=in_memory", "--direct_num_workers=1"]

_META = ("<annotations><version>1.1</version><meta><task><labels><label><name>dog</name>"
         "</label></labels></task></meta>")
_LAUGHS = ('<?xml version="1.0"?><!DOCTYPE annotations [<!ENTITY lol "lol">'
           + "".join(f'<!ENTITY lol{i} "{("&lol" + str(i - 1) + ";") * 10 if i else "&lol;" * 10}">'
                     for i in range(9))
           + ']><annotations><meta><task><labels><label><name>&lol8;</name></label></labels>'
           "</task></meta></annotations>")
_EXTERNAL = ('<?xml version="1.0"?><!DOCTYPE annotations [<!ENTITY secret SYSTEM '
             '"file:///etc/hostname">]><annotations><meta><task><labels><label><name>&secret;'
             "</name></label></labels></task></meta></annotations>")


def _export(root, xml: str, images=("good.jpg",)) -> None:
    (root / "images").mkdir(parents=True, exist_ok=True)
    for name in images:
        Image.new("RGB", (32, 32)).save(root / "images" / name, format="JPEG")
    (root / "annotations.xml").write_text(xml)


def _convert(root, out) -> int:
    return cli.main(["convert", "cvat", "--input", str(root), "--output", str(out),
                     "--max-reject-fraction", "1", "--max-annotation-reject-fraction", "1",
                     "--quiet", *IN_MEMORY])


@CASE("CVAT XML with a billion-laughs DOCTYPE (entities nested 10^9 deep)",
      "refused before any work: exit 1 naming the XML; never expanded, nothing written")
@CASE("CVAT XML with an external entity (file:///etc/hostname)",
      "refused before any work: exit 1 naming the XML; the file is never read")
@pytest.mark.parametrize("xml", [_LAUGHS, _EXTERNAL], ids=["laughs", "external"])
def test_xml_entities_are_refused_never_expanded(tmp_path, capsys, xml):
    _export(tmp_path / "cvat", xml)
    code = _convert(tmp_path / "cvat", tmp_path / "out")
    err = capsys.readouterr().err
    assert code == 1
    assert "annotations.xml: the XML declares entities" in err
    assert "Traceback" not in err and "CvatError" not in err
    assert not (tmp_path / "out").exists() or not any(
        n.endswith(".tfrecord") for n in os.listdir(tmp_path / "out"))


@CASE("CVAT XML broken after its <meta> (cut off mid-stream on the worker)",
      "the run fails, exit 1, naming the XML and the line; nothing written")
def test_xml_broken_mid_stream_fails_the_run(tmp_path, capsys):
    good = '<image name="good.jpg" width="32" height="32"><box label="dog" xtl="1" ytl="1" xbr="9" ybr="9"/></image>'
    _export(tmp_path / "cvat", _META + "\n" + good + "\n<image name='x.jpg'><box label=")
    code = _convert(tmp_path / "cvat", tmp_path / "out")
    err = capsys.readouterr().err
    assert code == 1
    assert "annotations.xml: not well-formed XML at line 3" in err
    assert "Traceback" not in err and "CvatError" not in err
    assert not (tmp_path / "out" / "manifest.json").exists()


@CASE("CVAT subset that cannot be a split name (`my-split`, `../../evil`), declared in "
      "<meta> or by a `<subset>.xml` file name", "refused before any work: exit 2 naming the "
      "XML, the subset and what to rename; nothing written")
@pytest.mark.parametrize(("subset", "xml_name", "said"), [
    ("../../evil", "annotations.xml", "its <meta> declares the subset '../../evil'"),
    ("my-split", "annotations.xml", "its <meta> declares the subset 'my-split'"),
    (None, "my-split.xml", "its file name makes the subset 'my-split'"),
], ids=["meta-path", "meta-dash", "file-name"])
def test_a_subset_that_cannot_be_a_split_is_refused_naming_its_xml(tmp_path, capsys, subset,
                                                                    xml_name, said):
    declared = f"<subset>{subset}</subset>" if subset else ""
    xml = (_META.replace("</labels>", f"</labels>{declared}")
           + '<image name="good.jpg" width="32" height="32"/></annotations>')
    _export(tmp_path / "cvat", xml)
    os.rename(tmp_path / "cvat" / "annotations.xml", tmp_path / "cvat" / xml_name)
    code = _convert(tmp_path / "cvat", tmp_path / "out")
    err = capsys.readouterr().err
    assert code == 2
    assert f"{tmp_path / 'cvat' / xml_name}: {said}" in err
    assert "must be letters, digits and underscores" in err and ": rename the " in err
    assert "Traceback" not in err
    assert not (tmp_path / "out").exists()


@CASE("CVAT <image> element without its file; image file without an <image> element",
      "image reject `missing` naming the XML and element; the image is written with no "
      "objects and a `no_annotation_element` warning")
@CASE("CVAT shapes that cannot be used (unknown label, degenerate box, malformed points or "
      "rle)", "annotation rejects `unknown_category`, `degenerate_bbox`, `malformed_points`, "
      "`malformed_rle` naming the XML, image and shape; the image is written without them")
def test_unpaired_and_broken_elements_are_rejects(tmp_path):
    xml = (_META
           + '<image name="good.jpg" width="32" height="32">'
           '<box label="dog" xtl="1" ytl="1" xbr="9" ybr="9"/>'
           '<box label="yak" xtl="1" ytl="1" xbr="9" ybr="9"/>'
           '<box label="dog" xtl="9" ytl="1" xbr="1" ybr="9"/>'
           '<polygon label="dog" points="1,1;9"/>'
           '<mask label="dog" rle="3, x" left="0" top="0" width="2" height="2"/></image>'
           '<image name="gone.jpg" width="32" height="32"/></annotations>')
    _export(tmp_path / "cvat", xml, images=("good.jpg", "extra.jpg"))
    out = tmp_path / "out"
    assert _convert(tmp_path / "cvat", out) == 0
    rejects = {(r["kind"], r["reason"]): r for line in
               (out / "rejects.jsonl").read_text().splitlines() for r in [json.loads(line)]}
    assert set(rejects) == {
        ("image", "missing"), ("warning", "no_annotation_element"),
        ("annotation", "unknown_category"), ("annotation", "degenerate_bbox"),
        ("annotation", "malformed_points"), ("annotation", "malformed_rle")}
    assert rejects["image", "missing"]["source"].endswith("annotations.xml: <image name='gone.jpg'>")
    assert rejects["annotation", "malformed_rle"]["source"].endswith(
        "annotations.xml: <image name='good.jpg'> <mask>[0]")
    shards = b"".join((out / n).read_bytes() for n in os.listdir(out) if n.endswith(".tfrecord"))
    assert b"extra.jpg" in shards and b"good.jpg" in shards


@CASE("CVAT XML of 20,000 images", "streamed element by element on one worker: peak "
      "memory does not grow with the number of images")
def test_large_xml_is_streamed_in_flat_memory():
    def peak(images: int) -> int:
        body = "".join(f'<image name="{i}.jpg" width="64" height="48"><box label="dog" '
                       f'xtl="1" ytl="2" xbr="30" ybr="40" occluded="0"/></image>'
                       for i in range(images))
        data = io.BytesIO((_META + body + "</annotations>").encode())
        tracemalloc.start()
        kept = 0
        for entry in stream_images("a.xml", data, None, ("train",), "train", False):
            assert isinstance(entry, ExportEntry)  # one per <image>, nothing else
            kept += 1  # consumed as a Beam worker does: nothing held
        _size, top = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        assert kept == images
        return top

    small, large = peak(2_000), peak(20_000)
    assert large < small * 2, (small, large)
