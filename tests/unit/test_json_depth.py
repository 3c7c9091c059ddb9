"""The nesting bound a streamed JSON file is read under: strings and escapes do not count,
reads of any size give the same depth."""

from __future__ import annotations

import io
import json

import ijson
import pytest

from recordbeam.sources.json_depth import DepthLimitedReader, JsonTooDeep


class _Pieces:
    """A file that returns at most ``size`` bytes per read."""

    def __init__(self, data: bytes, size: int) -> None:
        self._data, self._size = io.BytesIO(data), size

    def read(self, _n: int = -1) -> bytes:
        return self._data.read(self._size)


def _read_all(data: bytes, size: int, limit: int) -> None:
    reader = DepthLimitedReader(_Pieces(data, size), limit)
    while reader.read(size):
        pass


@pytest.mark.parametrize("size", [1, 2, 3, 7, 64, 1 << 16])
def test_brackets_in_strings_and_escapes_do_not_count(size):
    text = {"a": "[[[[{{{{" * 50, "b": 'x\\"[[[[', "c": "\\\\", "d": "]]]]" * 50, "e": [[[1]]]}
    data = json.dumps(text).encode()
    _read_all(data, size, 4)  # the document nests 4 deep: {"e": [[[1]]]}
    with pytest.raises(JsonTooDeep):
        _read_all(data, size, 3)


@pytest.mark.parametrize("size", [1, 5, 1 << 16])
def test_closing_brackets_hidden_in_strings_do_not_hide_depth(size):
    data = b'{"x": "' + b"]" * 1000 + b'", "y": ' + b"[" * 200 + b"]" * 200 + b"}"
    with pytest.raises(JsonTooDeep, match="more than 128 levels"):
        _read_all(data, size, 128)


def test_ijson_reads_through_it_and_stops_early():
    good = json.dumps({"annotations": [{"id": 1, "segmentation": [[1, 2, 3]]}]}).encode()
    items = list(ijson.items(DepthLimitedReader(io.BytesIO(good)), "annotations.item"))
    assert items == [{"id": 1, "segmentation": [[1, 2, 3]]}]
    deep = b'{"annotations": [' + b"[" * 100_000 + b"]" * 100_000 + b"]}"
    with pytest.raises(JsonTooDeep) as error:
        list(ijson.items(DepthLimitedReader(io.BytesIO(deep)), "annotations.item"))
    assert error.value.offset <= 1 << 16  # the first read, not the whole file
