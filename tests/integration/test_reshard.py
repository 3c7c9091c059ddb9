"""reshard: rewrite a pipeline's output into another shard count and compression."""

from __future__ import annotations

import json
import os
import re
from collections import Counter

import pytest

from recordbeam import pipeline
from recordbeam.cli import main as cli
from recordbeam.dataset.layout import OutputFolderError
from recordbeam.sources.reshard import ReshardOptions, reshard
from recordbeam.tfrecord.example import encode_example
from recordbeam.tfrecord.framing import RecordError, RecordWriter, open_records
from recordbeam.write.sink import ShardOptions

IN_MEMORY = ["--direct_running_mode=in_memory", "--direct_num_workers=1"]


def shard_paths(folder: str) -> list[str]:
    return sorted(
        os.path.join(folder, n)
        for n in os.listdir(folder)
        if ".tfrecord" in n and not n.endswith(".idx")
    )




def run_reshard(inputs, out, **options):
    shards = ShardOptions(**options)
    return pipeline.run(
        lambda p: reshard(p, str(out), ReshardOptions(tuple(inputs)), shards),
        str(out),
        beam_args=IN_MEMORY,
        show_progress=False,
    ).manifest


def test_same_records_in_new_count_and_compression(three_shards, tmp_path):
    before = Counter(three_shards.records())
    manifest = run_reshard(
        three_shards.shard_paths(), tmp_path / "out", num_shards=2, compression="gzip"
    )
    paths = shard_paths(str(tmp_path / "out"))
    assert [os.path.basename(p) for p in paths] == [
        "train-00000-of-00002.tfrecord.gz",
        "train-00001-of-00002.tfrecord.gz",
    ]
    after = Counter(r for p in paths for r in open_records(p))
    assert after == before
    assert manifest["splits"]["train"]["examples"] == sum(before.values())
    assert (
        manifest["splits"]["train"]["features"]
        == three_shards.manifest["splits"]["train"]["features"]
    )
    assert manifest["label_names"] == three_shards.manifest["label_names"]  # carried over


def test_cli_reshard_infers_split_and_refuses_in_place(three_shards, tmp_path, capsys):
    out = tmp_path / "one"
    glob = os.path.join(three_shards.output, "train-*.tfrecord")
    code = cli.main(["reshard", glob, str(out), "--shards", "1", "--quiet", *IN_MEMORY])
    assert code == cli.EXIT_OK, capsys.readouterr().err
    assert [os.path.basename(p) for p in shard_paths(str(out))] == ["train-00000-of-00001.tfrecord"]
    assert sorted(open_records(shard_paths(str(out))[0])) == sorted(three_shards.records())
    code = cli.main(["reshard", str(out / "train-*.tfrecord"), str(out), "--quiet", *IN_MEMORY])
    assert code == cli.EXIT_USAGE
    assert "new folder" in capsys.readouterr().err


def test_corrupt_input_fails_and_commits_nothing(three_shards, tmp_path):
    bad = tmp_path / "bad-00000-of-00001.tfrecord"
    data = bytearray(open(three_shards.shard_paths()[0], "rb").read())
    data[40] ^= 0xFF
    bad.write_bytes(bytes(data))
    with pytest.raises((RecordError, pipeline.RunFailed)) as caught:
        run_reshard([str(bad)], tmp_path / "out", num_shards=1)
    assert "bad-00000-of-00001.tfrecord" in str(caught.value)
    assert not (tmp_path / "out" / "manifest.json").exists()


def test_in_place_is_refused(three_shards, tmp_path):
    with pytest.raises(OutputFolderError, match="new folder"):
        run_reshard(three_shards.shard_paths(), three_shards.output, num_shards=1)


def _write_shards(folder, split: str, per_shard: list[int], first: int) -> list[bytes]:
    """``split`` shards of ``per_shard`` records each, numbered from ``first``."""
    folder.mkdir(exist_ok=True)
    records, number = [], first
    for index, count in enumerate(per_shard):
        name = f"{split}-{index:05d}-of-{len(per_shard):05d}.tfrecord"
        with open(folder / name, "wb") as f, RecordWriter(f) as writer:
            for _ in range(count):
                record = encode_example({"number": [number], "split": split})
                writer.write(record)
                records.append(record)
                number += 1
    return records


def _split_records(folder, split: str) -> list[bytes]:
    return [r for p in shard_paths(str(folder)) if os.path.basename(p).startswith(f"{split}-")
            for r in open_records(p)]


@pytest.mark.case(
    '`reshard` of a folder holding train and val',
    "each input split stays its own output split; train's shards equal a train-only reshard",
)
def test_each_split_of_the_inputs_stays_its_own_split(tmp_path, capsys):
    source = tmp_path / "source"
    train = _write_shards(source, "train", [6, 4], 0)
    val = _write_shards(source, "val", [4], 100)
    out = tmp_path / "new"
    code = cli.main(["reshard", str(source / "*.tfrecord"), str(out), "--shards", "2", "--quiet",
                     *IN_MEMORY])
    assert code == cli.EXIT_OK, capsys.readouterr().err
    manifest = json.loads((out / "manifest.json").read_text())
    assert {name: e["examples"] for name, e in manifest["splits"].items()} == {"train": 10, "val": 4}
    assert sorted(_split_records(out, "train")) == sorted(train)
    assert sorted(_split_records(out, "val")) == sorted(val)
    printed = capsys.readouterr().out
    assert re.search(r"^examples\s+14$", printed, re.MULTILINE)
    assert re.search(r"^  val\s+4 examples in 2 shards$", printed, re.MULTILINE)
    # The train shards are the same bytes as when train is resharded alone.
    alone = tmp_path / "train-only"
    assert cli.main(["reshard", str(source / "train-*.tfrecord"), str(alone), "--shards", "2",
                     "--quiet", *IN_MEMORY]) == cli.EXIT_OK
    for name in ("train-00000-of-00002.tfrecord", "train-00001-of-00002.tfrecord"):
        assert (out / name).read_bytes() == (alone / name).read_bytes()


@pytest.mark.case(
    '`reshard --split` over inputs of several splits',
    'refused (exit 2) before anything is written: validation never leaks into training',
)
def test_split_option_over_several_input_splits_is_refused(tmp_path, capsys):
    source = tmp_path / "source"
    _write_shards(source, "train", [3], 0)
    _write_shards(source, "val", [2], 100)
    out = tmp_path / "new"
    code = cli.main(["reshard", str(source / "*.tfrecord"), str(out), "--split", "train",
                     "--quiet", *IN_MEMORY])
    err = capsys.readouterr().err
    assert code == cli.EXIT_USAGE
    assert "the inputs hold the splits train, val; --split train would merge them" in err
    assert "Error" not in err
    assert not out.exists()


def test_split_option_renames_the_one_input_split(tmp_path, capsys):
    source = tmp_path / "source"
    records = _write_shards(source, "train", [3, 2], 0)
    out = tmp_path / "new"
    assert cli.main(["reshard", str(source / "*.tfrecord"), str(out), "--split", "all",
                     "--shards", "1", "--quiet", *IN_MEMORY]) == cli.EXIT_OK
    manifest = json.loads((out / "manifest.json").read_text())
    assert list(manifest["splits"]) == ["all"]
    assert sorted(_split_records(out, "all")) == sorted(records)


@pytest.mark.case(
    '`reshard OUT NEW` (a finished output folder as the input)',
    "reshards the shards its manifest lists, as `verify OUT` reads them",
)
def test_an_output_folder_as_input_means_its_shards(three_shards, tmp_path, capsys):
    out = tmp_path / "new"
    code = cli.main(["reshard", three_shards.output, str(out), "--shards", "2", "--quiet",
                     *IN_MEMORY])
    assert code == cli.EXIT_OK, capsys.readouterr().err
    after = [r for p in shard_paths(str(out)) for r in open_records(p)]
    assert sorted(after) == sorted(three_shards.records())


@pytest.mark.case(
    "`reshard` of a JPEG, or of `'OUT/*'` (matching dataset_info.json)",
    "refused (exit 1) before the job, naming the file: not a TFRecord file",
)
@pytest.mark.parametrize("kind", ["jpeg", "folder glob"])
def test_inputs_that_are_not_tfrecord_files_are_refused_before_the_job(
        kind, three_shards, tmp_path, capsys):
    if kind == "jpeg":
        given = tmp_path / "photo.jpg"
        given.write_bytes(b"\xff\xd8\xff\xe0" + bytes(64))
        named = str(given)
    else:
        given = os.path.join(three_shards.output, "*")
        named = os.path.join(three_shards.output, "dataset_info.json")
    out = tmp_path / "new"
    code = cli.main(["reshard", str(given), str(out), "--quiet", *IN_MEMORY])
    err = capsys.readouterr().err
    assert code == cli.EXIT_DATA, err
    assert f"{named}: not a TFRecord file" in err
    assert "CRC" not in err and "skip_corrupt" not in err
    assert "the run's log is in" not in err  # no job was started
    assert not out.exists()


def test_a_record_damaged_in_the_middle_gets_advice_for_the_command_line(
        three_shards, tmp_path, capsys):
    bad = tmp_path / "train-00000-of-00001.tfrecord"
    data = bytearray(open(three_shards.shard_paths()[0], "rb").read())
    data[len(data) // 2] ^= 0xFF
    bad.write_bytes(bytes(data))
    code = cli.main(["reshard", str(bad), str(tmp_path / "new"), "--quiet", *IN_MEMORY])
    err = capsys.readouterr().err
    assert code == cli.EXIT_DATA, err
    assert f"{bad}: record " in err
    assert "skip_corrupt" not in err
    assert f"recordbeam verify {bad}" in err
    assert not (tmp_path / "new" / "manifest.json").exists()
