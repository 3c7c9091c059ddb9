"""Manifest reading and schema inference, on small files written by each test."""

from __future__ import annotations

import json

import pytest

from recordbeam.sources.tabular import (
    TableError,
    TableOptions,
    convert_value,
    infer_schema,
    iter_rows,
    merge_types,
    parse_split_fractions,
    split_by_fraction,
    value_type,
)


def _write(tmp_path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


CSV = (
    "image,label,score,caption,tags\n"
    'a.jpg,1,0.5,"hello, world","[""x"", ""y""]"\n'
    "b.png,2,1,plain,[]\n"
    'c.JPEG,3,2.25,"two\nlines","[""z""]"\n'
)


def test_csv_types_are_inferred_with_int_widening_to_float(tmp_path):
    schema = infer_schema(TableOptions(_write(tmp_path, "m.csv", CSV)))
    assert schema.types == {
        "image": "image",
        "label": "int64",
        "score": "float",
        "caption": "bytes",
        "tags": "bytes_list",
    }
    assert schema.image_columns == ("image",)


def test_jsonl_keeps_json_types(tmp_path):
    rows = [
        {"img": "x/1.jpg", "n": 1, "f": [1, 2.5], "ok": True, "s": "12"},
        {"img": "x/2.png", "n": 2, "f": [3], "ok": False, "s": "a"},
    ]
    path = _write(tmp_path, "m.jsonl", "".join(json.dumps(r) + "\n" for r in rows))
    schema = infer_schema(TableOptions(path))
    assert schema.types == {
        "img": "image",
        "n": "int64",
        "f": "float_list",
        "ok": "int64",
        "s": "bytes",
    }


def test_a_type_disagreement_names_the_first_row_that_does_not_agree(tmp_path):
    text = "image,label\na.jpg,1\nb.jpg,2\nc.jpg,3\nd.jpg,four\ne.jpg,five\n"
    with pytest.raises(TableError) as error:
        infer_schema(TableOptions(_write(tmp_path, "m.csv", text)))
    message = str(error.value)
    assert "m.csv:5:" in message and "'label'" in message and "line 2" in message


def test_jsonl_disagreement_between_list_and_scalar(tmp_path):
    lines = ['{"i": "a.jpg", "v": [1]}', '{"i": "b.jpg", "v": 2}']
    with pytest.raises(TableError, match=r"m.jsonl:2: column 'v' is int64"):
        infer_schema(TableOptions(_write(tmp_path, "m.jsonl", "\n".join(lines) + "\n")))


def test_bad_rows_are_reported_with_their_line_and_skipped_by_inference(tmp_path):
    text = 'image,label\na.jpg,1\nb.jpg,2,extra\n"c.jpg",3\n'
    path = _write(tmp_path, "m.csv", text)
    rows = list(iter_rows(path))
    assert [(line, isinstance(row, str)) for line, row in rows] == [
        (2, False),
        (3, True),
        (4, False),
    ]
    assert infer_schema(TableOptions(path)).types["label"] == "int64"
    jsonl = _write(tmp_path, "m.jsonl", '{"i": "a.jpg"}\n\n[1, 2]\n{"i": \n')
    problems = {line: row for line, row in iter_rows(jsonl) if isinstance(row, str)}
    assert set(problems) == {3, 4} and "not an object" in problems[3]


def test_multiline_csv_cells_keep_line_numbers_right(tmp_path):
    rows = list(iter_rows(_write(tmp_path, "m.csv", CSV)))
    assert [line for line, _ in rows] == [2, 3, 4]
    assert rows[2][1]["caption"] == "two\nlines"


def test_schema_file_wins_and_must_name_every_column(tmp_path):
    path = _write(tmp_path, "m.csv", "pic,label\na.jpg,1\n")
    schema_path = _write(tmp_path, "s.json", json.dumps({"pic": "image", "label": "float"}))
    assert infer_schema(TableOptions(path, schema=schema_path)).types == {
        "pic": "image",
        "label": "float",
    }
    partial = _write(tmp_path, "p.json", json.dumps({"pic": "image"}))
    with pytest.raises(TableError, match="'label' is not in the schema"):
        infer_schema(TableOptions(path, schema=partial))
    wrong = _write(tmp_path, "w.json", json.dumps({"pic": "picture", "label": "int64"}))
    with pytest.raises(TableError, match="type 'picture'"):
        infer_schema(TableOptions(path, schema=wrong))


def test_no_image_column_is_an_error_unless_named(tmp_path):
    path = _write(tmp_path, "m.csv", "ref,label\nabc,1\n")
    with pytest.raises(TableError, match="no column holds image paths"):
        infer_schema(TableOptions(path))
    assert infer_schema(TableOptions(path, image_columns=("ref",))).image_columns == ("ref",)


def test_split_column_values_are_collected(tmp_path):
    path = _write(tmp_path, "m.csv", "image,split\na.jpg,train\nb.jpg,val\nc.jpg,train\n")
    assert infer_schema(TableOptions(path, split_column="split")).splits == ("train", "val")
    bad = _write(tmp_path, "b.csv", "image,split\na.jpg,tr ain\n")
    with pytest.raises(TableError, match="b.csv:2"):
        infer_schema(TableOptions(bad, split_column="split"))


def test_value_types_and_merges():
    assert value_type("12", True) == "int64" and value_type("1e3", True) == "float"
    assert value_type("", True) is None and value_type("x.png", False) == "image"
    assert value_type([1, "a"], False) == "invalid" and value_type([], False) == "list"
    assert merge_types("list", "int64_list") == "int64_list"
    assert merge_types("image", "bytes") == "bytes"
    with pytest.raises(ValueError):
        merge_types("int64", "bytes")


def test_convert_value_checks_the_type():
    assert convert_value("3", "int64", True) == 3 and convert_value("3", "float", True) == 3.0
    assert convert_value('["a"]', "bytes_list", True) == ["a"]
    assert convert_value("", "int64", True) is None
    for value, kind in (("x", "int64"), (1.5, "int64"), ("[1", "int64_list"), ({"a": 1}, "bytes")):
        with pytest.raises(ValueError):
            convert_value(value, kind, isinstance(value, str))


def test_split_fractions_parse_and_split_deterministically():
    fractions = parse_split_fractions("train=0.8, val=0.1,test=0.1")
    assert fractions == (("train", 0.8), ("val", 0.1), ("test", 0.1))
    names = [split_by_fraction(f"img/{i}.jpg", fractions) for i in range(2000)]
    assert names == [split_by_fraction(f"img/{i}.jpg", fractions) for i in range(2000)]
    assert 0.75 < names.count("train") / 2000 < 0.85 and names.count("test") > 100
    with pytest.raises(TableError):
        parse_split_fractions("train")
    with pytest.raises(TableError):
        TableOptions("m.csv", split_fractions=(("train", 0.5), ("val", 0.2)))
