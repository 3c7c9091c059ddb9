"""CSV and JSONL manifests end to end: features per column, splits, rejects, groups as
SequenceExamples; expectations come from the generated rows."""

from __future__ import annotations

import os

import pytest

from recordbeam import pipeline
from recordbeam.cli import main as cli
from recordbeam.images.transcode import ImageFixes
from recordbeam.sources.manifest import reader
from recordbeam.sources.manifest.reader import ReadTable, TableOptions, split_by_fraction
from recordbeam.testing.samples import make_manifest_sample
from recordbeam.tfrecord.example import decode_example, decode_sequence_example
from recordbeam.tfrecord.framing import open_records
from recordbeam.write.image_encoder import ImageChecks
from recordbeam.write.sink import ShardOptions

IN_MEMORY = ["--direct_running_mode=in_memory", "--direct_num_workers=1"]
LENIENT = ShardOptions(num_shards=2, max_reject_fraction=0.5)


def _convert(output, table, fixes=None):
    out = os.fspath(output)
    return pipeline.run(
        lambda p: reader.to_tfrecord(p, out, table, LENIENT, ImageChecks(), fixes),
        out,
        beam_args=IN_MEMORY,
        show_progress=False,
    ).manifest


def _records(output, split):
    names = sorted(n for n in os.listdir(output) if n.startswith(f"{split}-"))
    return [r for n in names for r in open_records(os.path.join(output, n))]


@pytest.mark.parametrize("fmt", ["csv", "jsonl"])
def test_rows_become_examples_split_by_column(fmt, tmp_path):
    sample = make_manifest_sample(tmp_path / "in", fmt=fmt)
    manifest = _convert(tmp_path / "out", TableOptions(sample.manifest, split_column="split"))
    by_image = {r["image"].rsplit("/", 1)[1]: r for r in sample.rows}
    seen = set()
    for split in ("train", "val"):
        for record in _records(tmp_path / "out", split):
            e = decode_example(record)
            row = by_image[e["image/filename"][0].decode()]
            seen.add(row["image"])
            assert row["split"] == split and "split" not in e
            assert e["label"].tolist() == [row["label"]]
            assert e["score"][0] == pytest.approx(row["score"], rel=1e-6)
            assert e["caption"][0].decode() == row["caption"]
            assert [t.decode() for t in e["tags"]] == row["tags"]
            assert e["box"].tolist() == pytest.approx(row["box"])
            with open(os.path.join(tmp_path / "in", row["image"]), "rb") as f:
                assert e["image/encoded"][0] == f.read()
    assert seen == {r["image"] for r in sample.rows}
    rejects = manifest["splits"]["train"]["rejects"]["by_reason"]
    assert rejects == {
        "image:bad_row": len(sample.expected["bad_lines"]),
        "image:missing": len(sample.expected["missing"]),
    }
    assert manifest["schema"]["columns"]["box"] == "float_list"
    # List columns are lists even though every row holds 4 boxes values and 2 tags.
    features = manifest["features"]
    for column in ("box", "tags"):
        assert features[column]["list"] is True and features[column]["fixed_length"] is None
    assert features["label"]["list"] is False and features["label"]["fixed_length"] == 1
    with open(os.path.join(tmp_path / "out", "rejects.jsonl"), encoding="utf-8") as f:
        text = f.read()
    for line in sample.expected["bad_lines"]:
        assert f"manifest.{fmt}:{line}" in text


def test_split_fractions_follow_the_hash_of_the_image_path(tmp_path):
    sample = make_manifest_sample(tmp_path / "in", include_bad=False, num_rows=16)
    fractions = (("train", 0.5), ("val", 0.5))
    manifest = _convert(
        tmp_path / "out",
        TableOptions(sample.manifest, split_fractions=fractions),
        ImageFixes("jpeg"),
    )
    for split in ("train", "val"):
        names = {
            decode_example(r)["image/filename"][0].decode()
            for r in _records(tmp_path / "out", split)
        }
        expected = {
            r["image"].rsplit("/", 1)[1]
            for r in sample.rows
            if split_by_fraction(r["image"], fractions) == split
        }
        assert names == expected
    assert sum(e["examples"] for e in manifest["splits"].values()) == 16


def test_group_by_writes_sequence_examples(tmp_path):
    sample = make_manifest_sample(tmp_path / "in", fmt="jsonl", include_bad=False, num_rows=9)
    manifest = _convert(tmp_path / "out", TableOptions(sample.manifest, group_by="video"))
    groups = {}
    for row in sample.rows:
        groups.setdefault(row["video"], []).append(row)
    records = _records(tmp_path / "out", "train")
    assert len(records) == len(groups)
    for record in records:
        context, lists = decode_sequence_example(record)
        rows = groups[context["video"][0].decode()]
        assert [int(v[0]) for v in lists["frame"]] == [r["frame"] for r in rows]
        assert [v[0].decode() for v in lists["image/filename"]] == [
            r["image"].rsplit("/", 1)[1] for r in rows
        ]
        assert len(lists["image/encoded"]) == len(rows)
    entry = manifest["splits"]["train"]
    assert set(entry["features"]) == {"video"}  # the only column constant within groups
    assert entry["feature_lists"]["frame"]["present_in"] == len(sample.rows)
    assert entry["counts"]["sequences_written"] == len(groups)


def test_cli_reports_a_type_disagreement_with_its_line(tmp_path, capsys):
    folder = tmp_path / "in"
    make_manifest_sample(folder, include_bad=False, num_rows=3)
    path = folder / "typed.csv"
    path.write_text("image,label\nimages/img_0000.jpg,1\nimages/img_0001.png,one\n")
    code = cli.main(
        [
            "convert",
            "manifest",
            "--manifest",
            str(path),
            "--output",
            str(tmp_path / "out"),
            "--quiet",
            *IN_MEMORY,
        ]
    )
    assert code == cli.EXIT_DATA
    assert "typed.csv:3:" in capsys.readouterr().err
    code = cli.main(
        [
            "convert",
            "manifest",
            "--manifest",
            str(folder / "manifest.csv"),
            "--output",
            str(tmp_path / "ok"),
            "--split",
            "train=0.6,val=0.4",
            "--quiet",
            *IN_MEMORY,
        ]
    )
    assert code == 0
    assert {n.split("-")[0] for n in os.listdir(tmp_path / "ok") if ".tfrecord" in n} <= {
        "train",
        "val",
    }


@pytest.mark.parametrize("fmt,layout", [
    ("csv", {"split_column": "split"}),
    ("jsonl", {"group_by": "video"}),
    ("csv", {"split_fractions": (("train", 0.5), ("val", 0.5))}),
])
def test_byte_ranges_write_the_bytes_one_reader_writes(fmt, layout, tmp_path, monkeypatch):
    sample = make_manifest_sample(tmp_path / "in", fmt=fmt, num_rows=30)
    whole = TableOptions(sample.manifest, **layout)
    cut = TableOptions(sample.manifest, range_bytes=256, **layout)
    planned = ReadTable(cut).ranges
    assert len(ReadTable(whole).ranges) == 1 and len(planned) > 5
    starts = []
    real_range_lines = reader.range_lines

    def recording(raw, start, end):
        starts.append(start)
        return real_range_lines(raw, start, end)

    monkeypatch.setattr(reader, "range_lines", recording)  # in-memory: workers run here
    _convert(tmp_path / "cut", cut)
    assert sorted(starts) == [r.start for r in planned]  # every range read, each once
    _convert(tmp_path / "whole", whole)
    names = sorted(str(p.relative_to(tmp_path / "whole"))
                   for p in (tmp_path / "whole").rglob("*") if p.is_file())
    assert names == sorted(str(p.relative_to(tmp_path / "cut"))
                           for p in (tmp_path / "cut").rglob("*") if p.is_file())
    assert len(names) > 4
    for name in names:
        assert (tmp_path / "cut" / name).read_bytes() == (tmp_path / "whole" / name).read_bytes(), name


def test_python_api_takes_split_fractions_as_the_command_does(tmp_path, output_at):
    from recordbeam.converter import convert

    sample = make_manifest_sample(tmp_path / "in", include_bad=False, num_rows=12)
    out = {"cli": tmp_path / "cli", "api": tmp_path / "api"}
    assert cli.main(["convert", "manifest", "--manifest", sample.manifest, "--split",
                     "train=0.5,val=0.5", "--schema-sample-rows", "0", "--quiet", "--output",
                     str(out["cli"]), *IN_MEMORY]) == 0
    result = convert("manifest", input=sample.manifest, split="train=0.5,val=0.5",
                     schema_sample_rows=0, quiet=True, output=str(out["api"]),
                     beam_args=IN_MEMORY)
    assert sorted(result.manifest["splits"]) == ["train", "val"]
    written = output_at(out["cli"]).snapshot()
    assert "manifest.json" in written and output_at(out["api"]).snapshot() == written


@pytest.mark.parametrize(("options", "said"), [
    ({"schema_sample_rows": -1}, "schema_sample_rows must be 0 (every row) or a positive count"),
    ({"schema_sample_rows": "10"}, "schema_sample_rows takes a whole number, got '10'"),
    ({"manifest": "m.csv"}, "convert manifest takes no option 'manifest'"),
])
def test_python_api_refuses_what_the_command_refuses(options, said, tmp_path):
    from recordbeam.converter import convert
    from recordbeam.errors import UsageError

    given = {"input": str(tmp_path / "m.csv"), **options}
    with pytest.raises(UsageError) as refused:
        convert("manifest", output=str(tmp_path / "out"), **given)
    assert said in str(refused.value)
