"""Streaming one section of a COCO file: the images pass stops where its list ends."""

from __future__ import annotations

import json

import pytest

from recordbeam.sources.coco import input_tasks, json_stream
from recordbeam.sources.coco.options import CocoOptions
from recordbeam.sources.coco.records import Category

IMAGES = [{"id": i, "file_name": f"{i:04d}.jpg", "width": 4, "height": 3} for i in range(50)]
ANNOTATIONS = [{"id": i, "image_id": i % 50, "category_id": 1, "bbox": [0, 0, 1, 1]}
               for i in range(400)]


def _write(path, body: str) -> str:
    path.write_text(body)
    return str(path)


def _coco(*order: str) -> str:
    parts = {"images": IMAGES, "annotations": ANNOTATIONS,
             "categories": [{"id": 1, "name": "one"}]}
    return "{" + ", ".join(f'"{k}": {json.dumps(parts[k])}' for k in order)


def test_images_pass_stops_where_the_list_ends(tmp_path):
    # Anything after the images list is left unread: here it is not even valid JSON,
    # which the pass over the whole file reports.
    path = _write(tmp_path / "a.json", _coco("images", "annotations") + ', "x": [1,, }')
    assert list(json_stream.stream_section(path, "images", stop_early=True)) == IMAGES
    with pytest.raises(json_stream.CocoFormatError, match="malformed JSON"):
        list(json_stream.stream_section(path, "images"))


def test_images_after_other_sections_are_all_read(tmp_path, monkeypatch):
    body = _coco("annotations", "categories", "images") + "}"
    path = _write(tmp_path / "b.json", body)
    assert list(json_stream.stream_section(path, "images", stop_early=True)) == IMAGES
    # Far from the start: the early pass gives up and the whole file is read, each
    # image once.
    monkeypatch.setattr(json_stream, "SECTION_SEARCH_EVENTS", 100)
    assert list(json_stream.stream_section(path, "images", stop_early=True)) == IMAGES


def test_images_pass_falls_back_to_the_python_parser_without_repeats(tmp_path):
    odd = [*IMAGES[:10], {"id": 2**70, "file_name": "big.jpg"}, *IMAGES[10:]]
    body = json.dumps({"images": odd, "annotations": ANNOTATIONS})
    path = _write(tmp_path / "c.json", body)
    assert list(json_stream.stream_section(path, "images", stop_early=True)) == odd


def test_malformed_images_list_names_the_file_and_section(tmp_path):
    path = _write(tmp_path / "d.json", '{"images": [{"id": 1, "file_name": "a.jpg"},, ]}')
    with pytest.raises(json_stream.CocoFormatError, match=r"d\.json: malformed JSON while reading 'images'"):
        list(json_stream.stream_section(path, "images", stop_early=True))


CATEGORIES = [{"id": 1, "name": "one"}, {"id": 2, "name": "two", "supercategory": "x"}]


def _coco_with_categories(*order: str, categories=CATEGORIES) -> str:
    parts = {"images": IMAGES, "annotations": ANNOTATIONS, "categories": categories}
    return "{" + ", ".join(f'"{k}": {json.dumps(parts[k])}' for k in order) + "}"


def test_categories_at_the_end_are_read_without_parsing_the_annotations(tmp_path, monkeypatch):
    # COCO's own order: the categories pass reads the file's end, and never parses the
    # annotations before it (which the annotations pass parses).
    path = _write(tmp_path / "e.json", _coco_with_categories("images", "annotations", "categories"))
    parsed: list[str] = []
    monkeypatch.setattr(input_tasks, "stream_section",
                        lambda p, section, stop_early=False: parsed.append(section) or iter(()))
    monkeypatch.setattr(json_stream, "TAIL_BYTES", 200)
    monkeypatch.setattr(json_stream, "READ_BYTES", 64)  # the key read over several reads
    read = input_tasks.ReadInputs(CocoOptions(str(tmp_path), path))
    found = [output.value for output in read.process("categories")]
    assert found == [Category(1, "one"), Category(2, "two")]
    assert parsed == []


@pytest.mark.parametrize("body", [
    # The key also inside an annotation: which one is the file's is not certain.
    '{"annotations": [{"id": 1, "categories": [9]}], "categories": %s}',
    # Early in a file larger than the tail kept (the whole file fits when it is small).
    '{"categories": %s, "annotations": [{"id": 1}, {"id": 2}, {"id": 3}, {"id": 4}]}',
    # Only inside an object, not at the top level.
    '{"info": {"categories": %s}, "annotations": []}',
    # A key ending in an escaped quote and "categories".
    '{"annotations": [], "say \\"categories": %s}',
])
def test_categories_elsewhere_are_left_to_the_whole_file_pass(tmp_path, monkeypatch, body):
    path = _write(tmp_path / "f.json", body % json.dumps(CATEGORIES))
    monkeypatch.setattr(json_stream, "TAIL_BYTES", 40)
    monkeypatch.setattr(json_stream, "READ_BYTES", 8)
    assert json_stream.section_at_end(path, "categories") is None


def test_categories_at_the_end_match_the_whole_file_pass(tmp_path):
    odd = [{"id": 1, "name": "caf\u00e9 \"one\""}, {"id": 2, "name": "two", "x": [1.5, None]}]
    for order in (("images", "annotations", "categories"), ("categories", "images")):
        path = _write(tmp_path / "g.json", _coco_with_categories(*order, categories=odd))
        assert json_stream.section_at_end(path, "categories") == odd
        assert list(json_stream.stream_section(path, "categories")) == odd
    # A value the fast C parser refuses: left to the whole-file pass and its fallback.
    big = [{"id": 2**70, "name": "big"}]
    path = _write(tmp_path / "h.json", _coco_with_categories("images", "categories", categories=big))
    assert json_stream.section_at_end(path, "categories") is None
    assert list(json_stream.stream_section(path, "categories")) == big


def test_malformed_file_before_the_categories_is_reported_by_the_annotations_pass(tmp_path):
    path = _write(tmp_path / "i.json", '{"annotations": [{"id": 1},, ], "categories": []}')
    assert json_stream.section_at_end(path, "categories") == []
    with pytest.raises(json_stream.CocoFormatError, match="malformed JSON while reading 'annotations'"):
        list(json_stream.stream_section(path, "annotations"))
