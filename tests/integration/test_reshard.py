"""reshard: rewrite a pipeline's output into another shard count and compression."""

from __future__ import annotations

import os
from collections import Counter

import pytest

from recordbeam import cli, pipeline
from recordbeam.framing import RecordError, open_records
from recordbeam.output_folder import OutputFolderError
from recordbeam.reshard import ReshardOptions, reshard
from recordbeam.sink import ShardOptions

IN_MEMORY = ["--direct_running_mode=in_memory", "--direct_num_workers=1"]


def shard_paths(folder: str) -> list[str]:
    return sorted(
        os.path.join(folder, n)
        for n in os.listdir(folder)
        if ".tfrecord" in n and not n.endswith(".idx")
    )


pytestmark = pytest.mark.slow


def run_reshard(inputs, out, **options):
    shards = ShardOptions(**options)
    return pipeline.run(
        lambda p: reshard(p, str(out), ReshardOptions(tuple(inputs), "train"), shards),
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
