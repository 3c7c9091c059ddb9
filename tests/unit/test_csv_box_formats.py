"""The CSV box formats' parsing: box CSV tables, Open Images rows and class descriptions,
and the join of rows with images by key (messy exports: CRLF, BOM, quoted names)."""

from __future__ import annotations

import os

import pytest
from apache_beam.pvalue import TaggedOutput

from recordbeam.records import Reject
from recordbeam.sources.annotated_files import ParsedImage
from recordbeam.sources.box_csv.reader import BoxCsvError, column_positions, parse_table
from recordbeam.sources.csv_boxes import (
    BoxRow,
    ImageLabelRow,
    JoinRowsWithImages,
    ListedImage,
    RowMessageCoder,
    csv_fields,
)
from recordbeam.sources.openimages.reader import (
    OpenImagesError,
    OpenImagesOptions,
    Table,
    build_openimages_record,
    find_tables,
    parse_box_line,
    parse_image_label_line,
    read_class_descriptions,
)

HEADER = "filename,width,height,class,xmin,ymin,xmax,ymax"
OID_HEADER = ("ImageID,Source,LabelName,Confidence,XMin,XMax,YMin,YMax,IsOccluded,"
              "IsTruncated,IsGroupOf,IsDepiction,IsInside").split(",")


def _split(outputs):
    kept, rejects, counts = [], [], []
    for out in outputs:
        if isinstance(out, TaggedOutput):
            (rejects if out.tag == "rejects" else counts).append(out.value)
        else:
            kept.append(out)
    return kept, rejects, counts


# --- box CSV ------------------------------------------------------------------------


def test_box_csv_table_with_bom_crlf_and_quoted_names():
    data = ("\ufeff" + "\r\n".join([
        HEADER.upper(),
        'a b.JPG,80,40,"traffic light, red",1,2,11,22',
        "",
        "a b.JPG,80,40,dog,0,0,5,5",
    ]) + "\r\n").encode()
    kept, rejects, _ = _split(parse_table(data, "train/_annotations.csv", "train"))
    assert rejects == []
    assert [key for key, _row in kept] == ["train/a b.JPG", "train/a b.JPG"]
    first = kept[0][1]
    assert (first.where, first.name, first.bbox) == (
        "train/_annotations.csv:2", "traffic light, red", (1.0, 2.0, 10.0, 20.0))
    assert (first.width, first.height, first.normalized) == (80, 40, False)
    assert kept[1][1].where == "train/_annotations.csv:4"  # blank line 3 skipped, counted in lines


def test_box_csv_rows_that_cannot_be_used_are_rejected_with_their_line():
    data = "\n".join([HEADER, "a.jpg,80,40,dog,5,5,5,9", "a.jpg,80,40,dog,x,1,2,3",
                      "a.jpg,80,40", ",80,40,dog,1,1,2,2", "a.jpg,80,40,,1,1,2,2"]).encode()
    kept, rejects, _ = _split(parse_table(data, "t.csv", "train"))
    assert kept == []
    assert [(r.source, r.reason) for r in rejects] == [
        ("t.csv:2", "degenerate_bbox"), ("t.csv:3", "invalid_bbox"), ("t.csv:4", "malformed_row"),
        ("t.csv:5", "missing_field"), ("t.csv:6", "missing_field")]
    assert all(r.kind == "annotation" and r.split == "train" for r in rejects)


def test_box_csv_header_without_its_columns_is_refused_naming_them():
    with pytest.raises(BoxCsvError, match=r"t.csv:1: .*no column class, xmax"):
        column_positions(["filename", "width", "height", "label", "xmin", "ymin", "x2", "ymax"],
                         "t.csv")


# --- Open Images ------------------------------------------------------------------------


def _table(path="train-annotations-bbox.csv", header=OID_HEADER):
    return Table(path, "train", {name: i for i, name in enumerate(header)})


def test_open_images_box_line_is_normalized_with_its_flags():
    line = "000a,xclick,/m/dog,1,0.1,0.5,0.2,0.6,1,0,1,-1,0"
    kept, rejects, _ = _split(parse_box_line(_table(), line))
    assert rejects == []
    ((key, row),) = kept
    assert key == "train/000a"
    assert row.name == "/m/dog" and row.normalized
    assert row.bbox == pytest.approx((0.1, 0.2, 0.4, 0.4))
    assert row.extra == (1, 1, 0, -1)  # group_of, occluded, truncated, depiction
    assert row.where == f"train-annotations-bbox.csv: row {line!r}"


def test_open_images_table_without_flag_columns_writes_unknown():
    header = ["ImageID", "LabelName", "XMin", "XMax", "YMin", "YMax"]
    kept, _, _ = _split(parse_box_line(_table(header=header), "000a,/m/dog,0,1,0,1"))
    assert kept[0][1].extra == (-1, -1, -1, -1)


@pytest.mark.parametrize(("line", "reason"), [
    ("000a,xclick,/m/dog,1,0.1,0.5", "malformed_row"),
    ('000a,xclick,"/m/dog,1,0.1,0.5,0.2,0.6,1,0,1,0,0', "malformed_row"),  # open quote
    ("000a,xclick,/m/dog,1,0.5,0.5,0.2,0.6,1,0,1,0,0", "degenerate_bbox"),
    ("000a,xclick,/m/dog,1,a,0.5,0.2,0.6,1,0,1,0,0", "invalid_bbox"),
    (",xclick,/m/dog,1,0.1,0.5,0.2,0.6,1,0,1,0,0", "missing_field"),
    ("000a,xclick,/m/dog,1,0.1,0.5,0.2,0.6,yes,0,1,0,0", "malformed_row"),
])
def test_open_images_bad_lines_are_rejects_naming_table_and_row(line, reason):
    kept, rejects, _ = _split(parse_box_line(_table(), line))
    assert kept == []
    assert [(r.reason, r.source) for r in rejects] == [
        (reason, f"train-annotations-bbox.csv: row {line!r}")]


def test_open_images_image_labels_positive_kept_negative_counted():
    table = _table("train-annotations-human-imagelabels.csv",
                   ["ImageID", "Source", "LabelName", "Confidence"])
    kept, _, _ = _split(parse_image_label_line(table, "000a,human,/m/dog,1"))
    assert kept == [("train/000a", ImageLabelRow(
        "train-annotations-human-imagelabels.csv: row '000a,human,/m/dog,1'", "/m/dog"))]
    kept, _, counts = _split(parse_image_label_line(table, "000a,human,/m/cat,0"))
    # Filed under the split of the table the label was in.
    assert kept == [] and counts == [(("train", "openimages_negative_image_labels_skipped"), 1)]
    _, rejects, _ = _split(parse_image_label_line(table, "000a,human,/m/cat,0.5"))
    assert [r.reason for r in rejects] == ["malformed_row"]


def test_box_csv_split_folder_given_as_input_is_named_in_the_refusal(tmp_path):
    from recordbeam.sources.box_csv import reader as boxcsv

    (tmp_path / "_annotations.csv").write_text("filename,width,height,class,xmin,ymin,xmax,ymax\n")
    with pytest.raises(boxcsv.NotABoxCsvFolder, match="holds _annotations.csv itself, so it "
                                                      "is a split folder: pass the folder above"):
        boxcsv.ReadBoxCsv(boxcsv.BoxCsvOptions(str(tmp_path)))


def test_class_descriptions_with_and_without_header(tmp_path):
    v5 = tmp_path / "class-descriptions-boxable.csv"
    v5.write_bytes(b'/m/a,Apple\r\n/m/t,"Traffic light, red"\r\n')
    assert read_class_descriptions(str(v5)) == (
        ["/m/a", "/m/t"], ["Apple", "Traffic light, red"], [])
    v7 = tmp_path / "oidv7-class-descriptions.csv"
    v7.write_bytes(b"\xef\xbb\xbfLabelName,DisplayName\n/m/a,Apple\n")
    assert read_class_descriptions(str(v7)) == (["/m/a"], ["Apple"], [])
    twice = tmp_path / "twice.csv"
    twice.write_text("/m/a,Apple\n/m/a,Pear\n")
    with pytest.raises(OpenImagesError, match=r"twice.csv:2: /m/a already appears on line 1"):
        read_class_descriptions(str(twice))


def test_tables_are_found_by_name_and_boxable_classes_preferred(tmp_path):
    annotations = tmp_path / "annotations"
    annotations.mkdir()
    (annotations / "oidv6-train-annotations-bbox.csv").write_text(",".join(OID_HEADER) + "\n")
    (tmp_path / "test-annotations-bbox.csv").write_text(",".join(OID_HEADER) + "\n")
    (annotations / "oidv7-train-annotations-human-imagelabels.csv").write_text(
        "ImageID,Source,LabelName,Confidence\n")
    (annotations / "oidv7-class-descriptions.csv").write_text("LabelName,DisplayName\n")
    (annotations / "oidv7-class-descriptions-boxable.csv").write_text("/m/a,Apple\n")
    tables = find_tables(OpenImagesOptions(str(tmp_path)))
    assert tables.splits == ("test", "train")
    assert [t.split for t in tables.image_labels] == ["train"]
    assert tables.class_descriptions.endswith("oidv7-class-descriptions-boxable.csv")
    assert [os.path.basename(path) for path in tables.not_read] == [
        "oidv7-class-descriptions.csv"]


def test_v7_val_image_labels_join_the_validation_boxes(tmp_path):
    # The v7 download: validation-annotations-bbox.csv beside
    # oidv7-val-annotations-human-imagelabels.csv; "val" is the same split.
    (tmp_path / "validation-annotations-bbox.csv").write_text(",".join(OID_HEADER) + "\n")
    (tmp_path / "oidv7-val-annotations-human-imagelabels.csv").write_text(
        "ImageID,Source,LabelName,Confidence\n")
    (tmp_path / "oidv7-class-descriptions-boxable.csv").write_text("/m/a,Apple\n")
    tables = find_tables(OpenImagesOptions(str(tmp_path)))
    assert tables.splits == ("validation",)
    assert [t.split for t in tables.image_labels] == ["validation"]


def test_box_table_without_its_columns_is_refused(tmp_path):
    (tmp_path / "train-annotations-bbox.csv").write_text("ImageID,LabelName,XMin\n")
    (tmp_path / "class-descriptions.csv").write_text("/m/a,Apple\n")
    with pytest.raises(OpenImagesError, match=r"train-annotations-bbox.csv:1: .*XMax, YMin, YMax"):
        find_tables(OpenImagesOptions(str(tmp_path)))


# --- the join ------------------------------------------------------------------------


def _joined(messages, key="train/000a"):
    return _split(JoinRowsWithImages("openimages", "images").process((key, messages)))


def test_rows_join_their_image_in_table_order():
    rows = [BoxRow("t.csv:3", "/m/b", (0.1, 0.1, 0.2, 0.2), (0, 0, 0, 0), True),
            BoxRow("t.csv:2", "/m/a", (0.0, 0.0, 0.5, 0.5), (1, 0, 0, 0), True),
            ImageLabelRow("l.csv:4", "/m/a"), ListedImage("images/train/000a.JPG", 123)]
    (joined,), rejects, _ = _joined(rows)
    assert rejects == []
    assert [o.name for o in joined.objects] == ["/m/a", "/m/b"]
    assert joined.path == "images/train/000a.JPG" and joined.size == 123
    assert joined.image_labels == (("/m/a", "l.csv:4"),)


def test_rows_without_image_are_one_image_reject_naming_them():
    rows = [BoxRow("t.csv:2", "/m/a", (0.0, 0.0, 0.5, 0.5)),
            BoxRow("t.csv:3", "/m/a", (0.0, 0.0, 0.5, 0.5))]
    kept, (reject,), _ = _joined(rows)
    assert kept == []
    assert (reject.kind, reject.source, reject.reason, reject.split) == (
        "image", "t.csv:2", "missing", "train")
    assert "t.csv:2, t.csv:3" in reject.detail and "'000a'" in reject.detail


def test_image_without_rows_is_kept_and_counted():
    (joined,), rejects, counts = _joined([ListedImage("images/train/000a.jpg", 9)])
    assert joined.objects == () and rejects == []
    assert counts == [(("train", "openimages_images_without_rows"), 1)]


def test_row_messages_survive_their_coder():
    coder = RowMessageCoder()
    for message in (ListedImage("a/b.jpg", 7), ImageLabelRow("x.csv:1", "/m/a"),
                    BoxRow("x.csv:2", "dog", (1.0, 2.0, 3.0, 4.0), (1, -1), True, 80, 40)):
        assert coder.decode(coder.encode(message)) == message


def test_csv_fields_quotes_and_open_quotes():
    assert csv_fields('a,"b, c",d') == ["a", "b, c", "d"]
    assert csv_fields('a,"b') is None


def test_open_images_record_labels_by_class_order_and_display_names():
    rows = [BoxRow("t.csv:2", "/m/b", (0.1, 0.1, 0.2, 0.2), (0, 0, 0, 0), True),
            BoxRow("t.csv:3", "/m/x", (0.1, 0.1, 0.2, 0.2), (0, 0, 0, 0), True),
            ImageLabelRow("l.csv:2", "/m/a"), ImageLabelRow("l.csv:3", "/m/zz"),
            ListedImage("images/train/000a.jpg", 9)]
    (joined,), _, _ = _joined(rows)
    assert isinstance(joined, ParsedImage)
    records, rejects, counts = _split(build_openimages_record(
        joined, ["/m/a", "/m/b"], ["Apple", "Banana"], "class-descriptions.csv"))
    (record,) = records
    assert [obj[1:3] for obj in record.labels["objects"]] == [(2, "Banana")]
    assert record.labels["image_labels"] == ((1, "Apple"),)
    assert record.labels["source_id"] == "000a" and record.identity == "train/000a"
    assert [r.reason for r in rejects] == ["unknown_category"]
    assert isinstance(rejects[0], Reject) and rejects[0].source == "t.csv:3"
    assert counts == [(("train", "openimages_image_labels_not_in_classes"), 1)]


def test_box_csv_open_quote_names_the_lines_it_swallowed():
    data = "\n".join([HEADER, 'a.jpg,80,40,"dog,1,1,5,5', "a.jpg,80,40,cat,1,1,5,5",
                      'a.jpg,80,40,cow",1,1,5,5', "a.jpg,80,40,owl,1,1,5,5"]).encode()
    kept, rejects, _ = _split(parse_table(data, "t.csv", "train"))
    assert [row.where for _key, row in kept] == ["t.csv:5"]
    assert [(r.source, r.reason) for r in rejects] == [("t.csv:2", "malformed_row")]
    assert "lines 2-4" in rejects[0].detail


def test_lines_that_are_not_utf8_are_rejected_not_garbled():
    from recordbeam.sources.openimages.reader import parse_table_line

    kept, rejects, _ = _split(parse_table_line(
        _table(), b"000a,xclick,/m/d\xe9g,1,0.1,0.5,0.2,0.6,1,0,1,-1,0", True))
    assert kept == [] and [r.reason for r in rejects] == ["malformed_row"]
    assert "\\xe9" in rejects[0].source and "not UTF-8" in rejects[0].detail
    data = HEADER.encode() + b"\na.jpg,80,40,caf\xe9,1,1,5,5\na.jpg,80,40,dog,1,1,5,5\n"
    kept, rejects, _ = _split(parse_table(data, "t.csv", "train"))
    assert [row.name for _key, row in kept] == ["dog"]
    assert [(r.source, r.reason) for r in rejects] == [("t.csv:2", "malformed_row")]


def test_launcher_reads_only_the_header_line_of_a_bbox_table(tmp_path, monkeypatch):
    from recordbeam import filesystems
    from recordbeam.sources.openimages.reader import ReadOpenImages

    table = tmp_path / "train-annotations-bbox.csv"
    row = "000a,xclick,/m/a,1,0.1,0.5,0.2,0.6,1,0,1,-1,0\n"
    table.write_text(",".join(OID_HEADER) + "\n" + row * 20000)  # ~1 MB
    (tmp_path / "class-descriptions.csv").write_text("/m/a,Apple\n")
    handed_out: dict[str, int] = {}
    real_open, real_read = filesystems.open_read, filesystems.read_bytes

    class Counting:
        def __init__(self, path):
            self._file, self._path = real_open(path), path

        def __getattr__(self, name):
            method = getattr(self._file, name)
            if name not in ("read", "readline", "readlines", "__iter__"):
                return method

            def counted(*args):
                data = method(*args)
                handed_out[self._path] = handed_out.get(self._path, 0) + len(
                    data if isinstance(data, bytes) else b"".join(data))
                return data
            return counted

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self._file.close()

    def read_bytes(path):
        data = real_read(path)
        handed_out[path] = handed_out.get(path, 0) + len(data)
        return data

    monkeypatch.setattr(filesystems, "open_read", Counting)
    monkeypatch.setattr(filesystems, "read_bytes", read_bytes)
    read = ReadOpenImages(OpenImagesOptions(str(tmp_path)))
    assert read.splits == ("train",) and read.display_names == ["Apple"]
    assert handed_out[str(table)] == len(",".join(OID_HEADER)) + 1  # the header line only


def test_box_csv_table_is_streamed_on_the_worker_not_read_whole(tmp_path, monkeypatch):
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions
    from apache_beam.testing.util import assert_that

    from recordbeam import filesystems
    from recordbeam.sources.box_csv import reader as boxcsv

    (tmp_path / "train").mkdir()
    rows = [f"{i:04d}.jpg,80,40,dog,1,2,11,22" for i in range(3000)]
    # A non-UTF-8 byte far into the table: the streamed decoder still replaces it.
    (tmp_path / "train" / "_annotations.csv").write_bytes(
        ("\ufeff" + HEADER + "\n" + "\n".join(rows) + "\n").encode() + b"\xff.jpg,80,40,dog,1,1,2,2\n")

    def whole_file(path):
        raise AssertionError(f"{path} was read whole into one worker's memory")

    def every_row_read(rejects):
        # No image is there: each row read names its missing image, lines 2-3001.
        missing = sorted(int(r.source.rsplit(":", 1)[1]) for r in rejects
                         if r.reason == "missing")
        assert missing == list(range(2, 3002))
        assert [(r.source.rsplit("/", 1)[-1], r.reason) for r in rejects
                if r.reason != "missing"] == [("_annotations.csv:3002", "malformed_row")]

    monkeypatch.setattr(filesystems, "read_bytes", whole_file)
    options = PipelineOptions(["--direct_running_mode=in_memory", "--direct_num_workers=1"])
    with beam.Pipeline(options=options) as p:
        read = p | boxcsv.ReadBoxCsv(boxcsv.BoxCsvOptions(str(tmp_path)))
        assert_that(read.rejects, every_row_read)
