"""Manifest reading and schema inference, on small files written by each test."""

from __future__ import annotations

import io
import json
import math
import os

import pytest
from apache_beam.pvalue import TaggedOutput

from recordbeam import filesystems
from recordbeam.errors import UsageError
from recordbeam.sources.manifest.reader import (
    DEFAULT_RANGE_BYTES,
    MIN_RANGE_BYTES,
    MIN_RANGES,
    ManifestRange,
    TableError,
    TableOptions,
    _NumberRows,
    _ReadRange,
    convert_value,
    infer_schema,
    iter_rows,
    merge_types,
    parse_split_fractions,
    plan_ranges,
    range_count,
    range_lines,
    split_by_fraction,
    value_type,
)


def _write(tmp_path, name: str, text: str) -> str:
    path = tmp_path / name
    # A lone surrogate in ``text`` writes the byte it stands for: bytes that are not UTF-8.
    path.write_text(text, encoding="utf-8", errors="surrogateescape")
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


def test_rows_that_are_not_utf8_are_problems_at_their_line(tmp_path):
    csv_path = _write(tmp_path, "m.csv", "image,label\na.jpg,1\nb\udcff.jpg,2\nc.jpg,3\n")
    jsonl = _write(tmp_path, "m.jsonl", '{"image": "a.jpg"}\n{"image": "\udce9.jpg"}\n')
    for path, bad_line in ((csv_path, 3), (jsonl, 2)):
        problems = {line: row for line, row in iter_rows(path) if isinstance(row, str)}
        assert list(problems) == [bad_line] and "not UTF-8" in problems[bad_line], path
        assert infer_schema(TableOptions(path)).types["image"] == "image"


def test_a_file_that_is_no_manifest_gets_an_error_naming_it(tmp_path):
    binary = "\udcff\udcd8\udcff\udce0\x00\x10JFIF\x00\udc80\n\udcff\n"  # a JPEG's start
    with pytest.raises(TableError, match=r"pic\.csv:1: the header is not UTF-8 text; is this "
                                         r"a CSV file"):
        infer_schema(TableOptions(_write(tmp_path, "pic.csv", binary)))
    with pytest.raises(TableError, match=r"pic\.jsonl: no line of it is a row \(line 1: is not "
                                         r"UTF-8 text.*CSV or JSON Lines manifest"):
        infer_schema(TableOptions(_write(tmp_path, "pic.jsonl", binary)))
    with pytest.raises(TableError, match=r"list\.jsonl: no line of it is a row \(line 1: is a "
                                         r"JSON list"):
        infer_schema(TableOptions(_write(tmp_path, "list.jsonl", "[1, 2]\n")))
    # Bad lines only where the sample stops: the rows after it are not the file's fault.
    late = _write(tmp_path, "late.jsonl", "[1]\n[2]\n" + '{"image": "a.jpg"}\n' * 3)
    with pytest.raises(TableError, match=r"late\.jsonl: none of the first 2 lines read for the "
                                         r"schema is a row \(line 1: is a JSON list.*"
                                         r"--schema-sample-rows"):
        infer_schema(TableOptions(late, schema_sample_rows=2))
    assert infer_schema(TableOptions(late, schema_sample_rows=3)).types == {"image": "image"}
    with pytest.raises(TableError, match=r"blank\.jsonl holds no rows"):
        infer_schema(TableOptions(_write(tmp_path, "blank.jsonl", "\n\n")))


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
    image = _write(tmp_path, "pic.json", "\udcff\udcd8\udcff\udce0")  # a JPEG's first bytes
    with pytest.raises(TableError, match=r"pic\.json: cannot read the schema: it is not UTF-8"):
        infer_schema(TableOptions(path, schema=image))


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
    # A column that is not there is named as such, with those that are.
    for flag, options in (("--split-column", TableOptions(path, split_column="nope")),
                          ("--group-by", TableOptions(path, group_by="nope"))):
        with pytest.raises(TableError, match=rf"m\.csv: {flag} names 'nope', which is not a "
                                             r"column; the columns are 'image', 'split'"):
            infer_schema(options)


def test_options_that_do_not_fit_the_manifest_are_usage_errors(tmp_path):
    from recordbeam.errors import EXIT_DATA, EXIT_USAGE

    path = _write(tmp_path, "m.csv", "image,split\na.jpg,train\n")
    not_json = _write(tmp_path, "s.json", "")
    for options in (TableOptions(path, split_column="nope"), TableOptions(path, group_by="x"),
                    TableOptions(path, image_columns=("x",)), TableOptions(path, schema=not_json)):
        with pytest.raises(TableError) as caught:
            infer_schema(options)
        assert caught.value.exit_code == EXIT_USAGE, caught.value
    with pytest.raises(TableError) as caught:
        TableOptions(path, split_fractions=(("train", 0.8), ("val", 0.3)))
    assert caught.value.exit_code == EXIT_USAGE
    # What the rows hold is the data's fault: exit 1.
    with pytest.raises(TableError) as caught:
        infer_schema(TableOptions(_write(tmp_path, "d.csv", "image,v\na.jpg,1\nb.jpg,x\n")))
    assert caught.value.exit_code == EXIT_DATA


def test_a_csv_manifest_with_another_name_is_told_to_be_named_csv(tmp_path):
    text = _write(tmp_path, "m.txt", "image,label\na.jpg,1\n")
    with pytest.raises(TableError, match=r"m\.txt: no line of it is a row \(line 1: not valid "
                                         r"JSON.*read as JSON Lines.*must be named \.csv"):
        infer_schema(TableOptions(text))


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


# --- a bounded sample on the launcher, byte ranges on the workers ------------------------


def _counting_reads(monkeypatch) -> list[int]:
    """Patch the manifest opener to count the bytes read; returns the running count."""
    read = [0]
    real_open = filesystems.open_read

    class Counting(io.RawIOBase):
        def __init__(self, raw):
            self._raw = raw

        def readable(self):
            return True

        def readinto(self, buffer):
            n = self._raw.readinto(buffer)
            read[0] += n or 0
            return n

        def close(self):
            self._raw.close()
            super().close()

    monkeypatch.setattr(filesystems, "open_read", lambda path: Counting(real_open(path)))
    return read


def test_inference_reads_the_sample_and_not_the_tail(tmp_path, monkeypatch):
    head = "".join(f"images/{i}.jpg,{i}\n" for i in range(50))
    # A tail that would fail inference (text in the int64 column) if it were read.
    tail = "".join(f"images/{i}.jpg,not a number {i}\n" for i in range(200_000))
    path = _write(tmp_path, "big.csv", "image,label\n" + head + tail)
    read = _counting_reads(monkeypatch)
    schema = infer_schema(TableOptions(path, schema_sample_rows=50))
    assert schema.types == {"image": "image", "label": "int64"}
    assert schema.header == ("image", "label") and schema.sample_rows == 50
    assert read[0] < 64 * 1024 < os.path.getsize(path) / 50  # a buffer or so, not the file
    with pytest.raises(TableError, match="big.csv:52: column 'label' is bytes"):
        infer_schema(TableOptions(path, schema_sample_rows=0))  # 0: every row, as before


@pytest.mark.parametrize("text", [
    b"a\nbb\n\nccc\r\ndddd",
    b"\n\n\nx\n",
    b"one line without an end",
    b"",
])
def test_range_lines_read_every_line_exactly_once_whatever_the_cuts(text):
    expected = text.splitlines(keepends=True)
    for size in range(1, len(text) + 2):
        got = []
        for start in range(0, max(len(text), 1), size):
            got += range_lines(io.BytesIO(text), start, min(len(text), start + size))
        assert got == expected, size


def _read_in_ranges(options: TableOptions) -> tuple[list, list, int]:
    """What the workers make of a manifest: ``(line, typed row)``s, rejects, range count."""
    schema = infer_schema(options)
    ranges = plan_ranges(options.manifest, schema, options.range_bytes)
    reader = _ReadRange(options, schema)
    found, counts = [], []
    for piece in ranges:
        for out in reader.process(piece):
            if isinstance(out, TaggedOutput):
                counts.append(out.value)
            else:
                found.append(out)
    rows, rejects = [], []
    numbering = _NumberRows(options.manifest)
    for out in (o for f in found for o in numbering.process(f, counts)):
        (rejects if isinstance(out, TaggedOutput) else rows).append(
            out.value if isinstance(out, TaggedOutput) else out)
    return sorted(rows, key=lambda r: r[0]), sorted(rejects, key=lambda r: r.source), len(ranges)


MESSY_CSV = (
    "\ufeffimage,label,caption\r\n"
    "a.jpg,1,plain\r\n"
    "\r\n"
    'b.jpg,2,"with, comma"\r\n'
    "c.jpg,3\r\n"  # a field short: rejected
    "d.jpg,4,\u00e9t\u00e9\r\n"
    "x.jpg,6,Latin-1 \udce9t\udce9\r\n"  # not UTF-8: rejected at its line
    "\r\n"
    "e.jpg,5,last without an end"
)


@pytest.mark.parametrize("name,text", [
    ("m.csv", MESSY_CSV),
    ("m.jsonl", '{"image": "a.jpg", "label": 1}\n\n{"image": "b.jpg", "label": 2}\n'
                '[1, 2]\n{"image": "c.jpg",\n{"image": "\udcff.jpg", "label": 3}\n'
                '{"image": "d.jpg", "label": 4}'),
])
def test_byte_ranges_give_the_rows_and_lines_of_one_reader(tmp_path, name, text):
    path = _write(tmp_path, name, text)
    whole_rows, whole_rejects, one = _read_in_ranges(TableOptions(path))
    assert one == 1 and whole_rows and whole_rejects
    for range_bytes in (1, 3, 7, 16, 40):
        rows, rejects, count = _read_in_ranges(TableOptions(path, range_bytes=range_bytes))
        assert count > 1
        assert rows == whole_rows, range_bytes
        assert rejects == whole_rejects, range_bytes


def test_rows_disagreeing_with_the_sample_are_rejected_on_the_workers(tmp_path):
    rows = ['{"image": "a.jpg", "label": 1, "split": "train"}'] * 3 + [
        '{"image": "b.jpg", "label": "four", "split": "train"}',
        '{"image": "c.jpg", "label": 2, "split": "train", "extra": 1}',
        '{"label": 3, "split": "train"}',
        '{"image": "d.jpg", "label": 4, "split": "test"}',
        '{"image": "e.jpg", "label": 5, "split": "te st"}',
        '{"image": "f.jpg", "label": 6, "split": "train"}',
    ]
    path = _write(tmp_path, "m.jsonl", "\n".join(rows) + "\n")
    options = TableOptions(path, split_column="split", schema_sample_rows=3, range_bytes=64)
    typed, rejects, _ = _read_in_ranges(options)
    assert [line for line, _ in typed] == [1, 2, 3, 9]
    by_line = {r.source.rsplit(":", 1)[1]: r for r in rejects}
    assert sorted(by_line) == ["4", "5", "6", "7", "8"]
    assert all(r.source.startswith(path + ":") for r in rejects)
    assert "'label'" in by_line["4"].detail and "--schema" in by_line["4"].detail
    assert "'extra'" in by_line["5"].detail and "--schema" in by_line["5"].detail
    assert "no image in column 'image'" in by_line["6"].detail
    assert by_line["7"].reason == "unknown_split" and "--splits train,test" in by_line["7"].detail
    assert by_line["8"].reason == "unknown_split" and "letters, digits" in by_line["8"].detail
    assert {r.reason for k, r in by_line.items() if k in "456"} == {"bad_row"}
    # Declared splits are what the workers accept.
    declared = TableOptions(path, split_column="split", schema_sample_rows=3, splits=("train", "test"))
    assert infer_schema(declared).splits == ("train", "test")
    assert [line for line, _ in _read_in_ranges(declared)[0]] == [1, 2, 3, 7, 9]


def test_quoted_line_breaks_are_read_by_one_worker_or_rejected_with_the_option(tmp_path):
    # In the sample: one reader, chosen by itself, and the cells keep their line breaks.
    path = _write(tmp_path, "m.csv", CSV)
    schema = infer_schema(TableOptions(path, range_bytes=8))
    assert schema.one_reader_reason and "line breaks" in schema.one_reader_reason
    rows, rejects, count = _read_in_ranges(TableOptions(path, range_bytes=8))
    assert count == 1 and not rejects
    assert [(line, row["caption"]) for line, row in rows] == [
        (2, "hello, world"), (3, "plain"), (4, "two\nlines")]
    # After the sample: rejected with the option to pass, never parsed as broken rows.
    late = _write(tmp_path, "late.csv", "image,caption\na.jpg,x\nb.jpg,\"two\nlines\"\nc.jpg,y\n")
    cut = TableOptions(late, schema_sample_rows=1, range_bytes=8)
    rows, rejects, count = _read_in_ranges(cut)
    assert count > 1 and [line for line, _ in rows] == [2, 5]
    assert [r.source.rsplit(":", 1)[1] for r in rejects] == ["3", "4"]
    assert "--csv-multiline" in rejects[0].detail
    rows, rejects, count = _read_in_ranges(
        TableOptions(late, schema_sample_rows=1, range_bytes=8, csv_multiline=True))
    assert count == 1 and not rejects
    assert [row["caption"] for _, row in rows] == ["x", "two\nlines", "y"]


def test_new_options_are_checked(tmp_path):
    with pytest.raises(UsageError, match="--csv-multiline is for CSV"):
        TableOptions("m.jsonl", csv_multiline=True)
    with pytest.raises(UsageError, match="--split-column"):
        TableOptions("m.csv", splits=("train",))
    with pytest.raises(UsageError, match="--schema-sample-rows"):
        TableOptions("m.csv", schema_sample_rows=-1)


def test_a_small_manifest_is_still_cut_for_several_workers(tmp_path, monkeypatch):
    mib = 1024 * 1024
    # A 3 MiB manifest: 12 ranges of 256 KiB, not one 64 MiB range.
    assert range_count(3 * mib, DEFAULT_RANGE_BYTES) == 12
    assert range_count(MIN_RANGE_BYTES - 1, DEFAULT_RANGE_BYTES) == 1
    assert range_count(100 * mib, DEFAULT_RANGE_BYTES) == MIN_RANGES
    assert range_count(10_000 * mib, DEFAULT_RANGE_BYTES) == 157  # 64 MiB at most
    assert range_count(3 * mib, 1000) == math.ceil(3 * mib / 1000)  # a smaller cap wins
    path = _write(tmp_path, "m.csv", "image,label\na.jpg,1\n")
    schema = infer_schema(TableOptions(path))
    size = 5 * MIN_RANGE_BYTES + 3
    monkeypatch.setattr(filesystems, "size_of", lambda _path: size)
    ranges = plan_ranges(path, schema, DEFAULT_RANGE_BYTES)
    assert [r.index for r in ranges] == list(range(5))
    assert ranges[0].start == 0 and ranges[-1].end == size
    assert all(a.end == b.start for a, b in zip(ranges, ranges[1:], strict=False))
    assert {r.end - r.start for r in ranges} <= {size // 5, size // 5 + 1}


def test_a_manifest_of_unknown_size_is_read_whole(tmp_path, monkeypatch):
    path = _write(tmp_path, "m.csv", "image,label\na.jpg,1\nb.jpg,2\n")
    schema = infer_schema(TableOptions(path))
    monkeypatch.setattr(filesystems, "size_of", lambda _path: None)
    assert plan_ranges(path, schema, 4) == [ManifestRange(0, 0, -1)]


def test_rows_that_do_not_parse_count_in_the_sample(tmp_path, monkeypatch):
    broken = "".join("{not json\n" for _ in range(100_000))
    path = _write(tmp_path, "m.jsonl", '{"image": "a.jpg"}\n' + broken)
    read = _counting_reads(monkeypatch)
    assert infer_schema(TableOptions(path, schema_sample_rows=10)).image_columns == ("image",)
    assert read[0] < 64 * 1024 < os.path.getsize(path)
