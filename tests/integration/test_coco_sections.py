"""Streaming one section of a COCO file: the images pass stops where its list ends."""

from __future__ import annotations

import json

import pytest

from recordbeam.sources import coco

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
    assert list(coco.stream_section(path, "images", stop_early=True)) == IMAGES
    with pytest.raises(coco.CocoFormatError, match="malformed JSON"):
        list(coco.stream_section(path, "images"))


def test_images_after_other_sections_are_all_read(tmp_path, monkeypatch):
    body = _coco("annotations", "categories", "images") + "}"
    path = _write(tmp_path / "b.json", body)
    assert list(coco.stream_section(path, "images", stop_early=True)) == IMAGES
    # Far from the start: the early pass gives up and the whole file is read, each
    # image once.
    monkeypatch.setattr(coco, "SECTION_SEARCH_EVENTS", 100)
    assert list(coco.stream_section(path, "images", stop_early=True)) == IMAGES


def test_images_pass_falls_back_to_the_python_parser_without_repeats(tmp_path):
    odd = [*IMAGES[:10], {"id": 2**70, "file_name": "big.jpg"}, *IMAGES[10:]]
    body = json.dumps({"images": odd, "annotations": ANNOTATIONS})
    path = _write(tmp_path / "c.json", body)
    assert list(coco.stream_section(path, "images", stop_early=True)) == odd


def test_malformed_images_list_names_the_file_and_section(tmp_path):
    path = _write(tmp_path / "d.json", '{"images": [{"id": 1, "file_name": "a.jpg"},, ]}')
    with pytest.raises(coco.CocoFormatError, match=r"d\.json: malformed JSON while reading 'images'"):
        list(coco.stream_section(path, "images", stop_early=True))
