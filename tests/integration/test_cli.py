"""The ``recordbeam`` command on real converted shards: inspect, verify, index, exit codes."""

from __future__ import annotations

import base64
import io
import json
import os
import re
import shutil
import subprocess
import sys

import pytest

from recordbeam import __version__
from recordbeam.cli import main as cli
from recordbeam.tfrecord.example import decode_example
from recordbeam.tfrecord.framing import Compression, RecordWriter, open_records

IN_MEMORY = ("--direct_running_mode=in_memory", "--direct_num_workers=1")


def _human(n: int) -> str:
    return f"{n} B" if n < 1024 else f"{n / 1024:.1f} KiB"


def _headers(out: str) -> list[str]:
    return [line for line in out.splitlines() if line.startswith("# ")]


# ----------------------------------------------------------------- inspect


def test_inspect_summarizes_image_bytes(converted, capsys):
    shard = converted.shard_paths()[0]
    assert cli.main(["inspect", shard, "-n", "1"]) == 0
    out = capsys.readouterr().out
    assert _headers(out) == [f"# {shard} record 0"]
    first = decode_example(converted.records()[0])
    encoded = first["image/encoded"][0]
    fmt = first["image/format"][0].decode()
    width, height = int(first["image/width"][0]), int(first["image/height"][0])
    summary = f"<{fmt} {width}x{height}, {_human(len(encoded))}>"
    assert re.fullmatch(r"<(jpeg|png) \d+x\d+, \d+\.\d KiB>", summary)
    assert f"value: {summary}" in out
    assert 'key: "image/encoded"' in out
    assert 'key: "image/object/bbox/xmin"' in out
    assert f'value: "{first["image/source_id"][0].decode()}"' in out
    assert len(out) < 8000  # image bytes are summarized, never dumped


def test_inspect_reads_like_tensorflows_print(converted, capsys):
    cli.main(["inspect", converted.shard_paths()[0], "-n", "1"])
    lines = capsys.readouterr().out.splitlines()
    assert lines[1] == "features {"
    assert lines[2:4] == ["  feature {", '    key: "image/encoded"']
    assert lines[-1] == "}"


def test_inspect_n_limits_records_across_files(three_shards, capsys):
    paths = three_shards.shard_paths()
    counts = [sum(1 for _ in open_records(p)) for p in paths]
    n = counts[0] + 2  # reaches into the second shard
    assert cli.main(["inspect", *paths, "-n", str(n)]) == 0
    headers = _headers(capsys.readouterr().out)
    assert len(headers) == n
    assert headers[-1] == f"# {paths[1]} record 1"


def test_inspect_shows_three_records_by_default(three_shards, capsys):
    cli.main(["inspect", three_shards.output + "/*.tfrecord"])
    assert len(_headers(capsys.readouterr().out)) == 3


def test_inspect_an_empty_file_says_it_holds_no_records(converted, tmp_path, capsys):
    empty = tmp_path / "empty.tfrecord"
    empty.write_bytes(b"")
    assert cli.main(["inspect", str(empty)]) == cli.EXIT_OK
    assert capsys.readouterr().out == f"# {empty}: 0 records (a TFRecord file of no records)\n"
    # With --json, stdout keeps JSON lines only: the note goes to stderr.
    assert cli.main(["inspect", "--json", "-n", "1", str(empty), converted.shard_paths()[0]]) == 0
    captured = capsys.readouterr()
    assert [json.loads(line) for line in captured.out.splitlines()]
    assert f"{empty}: 0 records" in captured.err


def test_inspect_json_prints_one_object_per_example(converted, capsys):
    shard = converted.shard_paths()[0]
    assert cli.main(["inspect", shard, "--json", "-n", "4"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 4
    for line, record in zip(lines, converted.records()[:4], strict=True):
        obj = json.loads(line)
        decoded = decode_example(record)
        assert sorted(obj) == sorted(decoded)
        assert base64.b64decode(obj["image/encoded"][0]["base64"]) == decoded["image/encoded"][0]
        assert obj["image/source_id"] == [decoded["image/source_id"][0].decode()]
        assert obj["image/height"] == [int(decoded["image/height"][0])]
        assert obj["image/object/bbox/xmin"] == pytest.approx(
            [float(v) for v in decoded["image/object/bbox/xmin"]]
        )


# ----------------------------------------------------------------- verify


def test_verify_clean_files_exits_zero_and_counts(three_shards, capsys):
    paths = three_shards.shard_paths()
    assert cli.main(["verify", *paths]) == 0
    out = capsys.readouterr().out
    total = len(three_shards.records())
    for path in paths:
        n = sum(1 for _ in open_records(path))
        assert f"{path}: {n} records, ok" in out
    assert f"total: {total} clean records" in out


def test_verify_flipped_byte_names_file_record_and_offset(converted, tmp_path, capsys):
    records = converted.records()
    damaged = tmp_path / "damaged.tfrecord"
    shutil.copyfile(converted.shard_paths()[0], damaged)
    target = 2
    offset = sum(len(r) + 16 for r in records[:target])
    data = bytearray(damaged.read_bytes())
    data[offset + 12 + 20] ^= 0x01  # inside record 2's data
    damaged.write_bytes(bytes(data))
    assert cli.main(["verify", str(damaged)]) == 1
    captured = capsys.readouterr()
    both = captured.out + captured.err
    problem = f"{damaged}: record {target} at byte {offset}"
    assert problem in both
    assert problem in captured.err
    assert f"{damaged}: {len(records) - 1} records, 1 problem" in captured.out


def test_verify_a_file_that_is_not_tfrecord_exits_one(coco_sample, capsys):
    image = os.path.join(coco_sample.images_dir, coco_sample.expected["good_images"][0])
    assert cli.main(["verify", image]) == 1
    assert image in capsys.readouterr().err


# ----------------------------------------------------------------- index


def _writer_index(records: list[bytes], compression: Compression) -> str:
    index = io.StringIO()
    with RecordWriter(io.BytesIO(), compression, index=index) as writer:
        for r in records:
            writer.write(r)
    return index.getvalue()


def test_index_writes_what_the_writer_writes(converted, tmp_path, capsys):
    shard = tmp_path / "train-00000-of-00001.tfrecord"
    shutil.copyfile(converted.shard_paths()[0], shard)
    assert cli.main(["index", str(shard)]) == 0
    records = converted.records()
    idx = tmp_path / "train-00000-of-00001.tfrecord.idx"
    assert idx.read_text(encoding="ascii") == _writer_index(records, Compression.NONE)
    assert f"{idx}: {len(records)} records" in capsys.readouterr().out


def test_index_of_an_empty_file_says_it_holds_no_records(tmp_path, capsys):
    empty = tmp_path / "empty.txt"
    empty.write_bytes(b"")
    assert cli.main(["index", str(empty)]) == cli.EXIT_OK
    assert (tmp_path / "empty.txt.idx").read_text() == ""  # the index of no records
    assert capsys.readouterr().out == (
        f"{empty}.idx: 0 records ({empty} is a TFRecord file of no records)\n")


def test_index_of_a_gzip_shard_is_refused(converted, tmp_path, capsys):
    records = converted.records()
    shard = tmp_path / "train-00000-of-00001.tfrecord.gz"
    with open(shard, "wb") as f, RecordWriter(f, Compression.GZIP) as writer:
        for r in records:
            writer.write(r)
    assert cli.main(["index", str(shard)]) == 2
    assert "is compressed" in capsys.readouterr().err
    assert not (tmp_path / "train-00000-of-00001.tfrecord.gz.idx").exists()


# ----------------------------------------------------------------- exit codes


@pytest.mark.parametrize("command", ["inspect", "verify", "index"])
def test_missing_path_exits_two_and_names_it(command, tmp_path, capsys):
    missing = str(tmp_path / "no-such.tfrecord")
    assert cli.main([command, missing]) == 2
    assert missing in capsys.readouterr().err


def test_glob_matching_nothing_exits_two(tmp_path, capsys):
    pattern = str(tmp_path / "*.tfrecord")
    assert cli.main(["verify", pattern]) == 2
    assert pattern in capsys.readouterr().err


def test_convert_with_a_missing_annotation_file_exits_two_and_names_it(
    coco_sample, tmp_path, capsys
):
    missing = str(tmp_path / "no-such-instances.json")
    code = cli.main(
        [
            "convert",
            "coco",
            "--images",
            coco_sample.images_dir,
            "--annotations",
            missing,
            "--output",
            str(tmp_path / "out"),
            "--quiet",
            *IN_MEMORY,
        ]
    )
    err = capsys.readouterr().err
    assert code == 2, err
    assert missing in err


def test_convert_with_a_missing_images_folder_exits_two_and_names_it(coco_sample, tmp_path, capsys):
    missing = str(tmp_path / "no-such-images")
    code = cli.main(
        [
            "convert",
            "coco",
            "--images",
            missing,
            "--annotations",
            coco_sample.annotations,
            "--output",
            str(tmp_path / "out"),
            "--quiet",
            *IN_MEMORY,
        ]
    )
    err = capsys.readouterr().err
    assert code == 2, err
    assert missing in err
    assert not (tmp_path / "out" / "manifest.json").exists()


def test_version_from_python_dash_m():
    done = subprocess.run(
        [sys.executable, "-m", "recordbeam", "--version"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"recordbeam {__version__}"


def test_verify_numbers_records_after_a_skipped_corrupt_one(tmp_path, capsys):
    from recordbeam.tfrecord.example import encode_example

    path = tmp_path / "mixed.tfrecord"
    with path.open("wb") as f, RecordWriter(f) as writer:
        writer.write(encode_example({"n": [0]}))
        writer.write(b"\xff\xff\xff")  # framed correctly, but not an Example
        writer.write(encode_example({"n": [2]}))
    data = bytearray(path.read_bytes())
    data[12] ^= 0x01  # corrupt record 0's payload: its data CRC no longer matches
    path.write_bytes(bytes(data))
    assert cli.main(["verify", str(path)]) == 1
    out = capsys.readouterr().out
    assert "record 0 at byte 0: data_crc check failed" in out
    second = 8 + 4 + len(encode_example({"n": [0]})) + 4
    assert f"record 1 at byte {second}: does not parse as an Example" in out
    assert "1 records" in out


@pytest.mark.case(
    '`--shards` far above the example count',
    'empty shards are named in the summary with advice',
)
def test_more_shards_than_examples_warns_in_the_summary(three_shards, tmp_path, capsys):
    # 200 shards for a few dozen examples: most are empty files, and the run says so.
    examples = len(three_shards.records())
    glob = os.path.join(three_shards.output, "train-*.tfrecord")
    out = tmp_path / "many"
    assert cli.main(["reshard", glob, str(out), "--shards", "200", "--quiet", *IN_MEMORY]) == 0
    captured = capsys.readouterr()
    manifest = json.loads((out / "manifest.json").read_text())
    empty = sum(1 for s in manifest["splits"]["train"]["shards"] if not s["examples"])
    assert empty >= 200 - examples
    assert re.search(rf"^warning empty shards\s+{empty}$", captured.out, re.MULTILINE)
    assert (f"warning: split train: {empty} of 200 shards are empty ({examples} examples)"
            in captured.err)
    assert "a much smaller --shards, or a larger --shard-size" in captured.err


def test_no_empty_shard_warning_when_every_shard_holds_examples(three_shards, tmp_path, capsys):
    glob = os.path.join(three_shards.output, "train-*.tfrecord")
    assert cli.main(["reshard", glob, str(tmp_path / "one"), "--shards", "1", "--quiet",
                     *IN_MEMORY]) == 0
    captured = capsys.readouterr()
    assert "warning empty shards" not in captured.out
    assert "warning:" not in captured.err
