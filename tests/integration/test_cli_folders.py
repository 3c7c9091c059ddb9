"""``inspect``, ``verify`` and ``index`` take an output folder, as ``schema``, ``report`` and
``read`` do, and say "not a TFRecord file" of files that are none (issue 12, item 10)."""

from __future__ import annotations

import os
import shutil

import pytest

from recordbeam.cli import main as cli
from recordbeam.tfrecord.framing import open_records


@pytest.fixture()
def folder(three_shards, tmp_path) -> str:
    """A writable copy of a finished three-shard output folder."""
    copy = str(tmp_path / "out")
    shutil.copytree(three_shards.output, copy)
    return copy


def shards_of(folder: str) -> list[str]:
    return sorted(
        os.path.join(folder, n) for n in os.listdir(folder) if n.endswith(".tfrecord")
    )


def test_verify_a_folder_checks_every_shard_its_manifest_lists(three_shards, capsys):
    assert cli.main(["verify", three_shards.output]) == cli.EXIT_OK
    out = capsys.readouterr().out
    for path in three_shards.shard_paths():
        assert f"{path}: {sum(1 for _ in open_records(path))} records, ok" in out
    assert f"total: {len(three_shards.records())} clean records" in out
    assert "manifest.json" not in out


def test_verify_glob_over_a_folder_calls_metadata_files_not_tfrecord(three_shards, capsys):
    assert cli.main(["verify", os.path.join(three_shards.output, "*")]) == cli.EXIT_DATA
    captured = capsys.readouterr()
    manifest = os.path.join(three_shards.output, "manifest.json")
    assert f"{manifest}: not a TFRecord file" in captured.out
    assert f"recordbeam verify {three_shards.output}" in captured.out  # what to do instead
    for text in (captured.out, captured.err):
        assert "skip_corrupt" not in text and "check failed" not in text
    for path in three_shards.shard_paths():
        assert f"{path}: " in captured.out and "records, ok" in captured.out


def test_verify_a_folder_finds_missing_and_foreign_shards(folder, capsys):
    first, second, _ = shards_of(folder)
    os.remove(first)
    shutil.copyfile(second, second + ".tmp")
    with open(second, "ab") as f, open(second + ".tmp", "rb") as extra:
        f.write(extra.read())  # intact records, twice as many as the manifest lists
    os.remove(second + ".tmp")
    assert cli.main(["verify", folder]) == cli.EXIT_DATA
    out = capsys.readouterr().out
    assert f"{first}: listed in manifest.json but missing" in out
    assert f"{second}: " in out and "but manifest.json lists" in out


@pytest.mark.case(
    "Shard listed in manifest.json deleted; `inspect`, `index`, `report`, `reshard` of the folder",
    "exit 1 naming the shard: listed but missing, re-run the conversion (as `verify` says)",
)
@pytest.mark.parametrize("command", ["inspect", "index", "report", "reshard"])
def test_a_missing_shard_is_named_as_verify_names_it(command, folder, tmp_path, capsys):
    missing = shards_of(folder)[1]
    os.remove(missing)
    extra = {"report": ["--html", str(tmp_path / "r.html")],
             "reshard": [str(tmp_path / "new"), "--quiet"]}.get(command, [])
    assert cli.main([command, folder, *extra]) == cli.EXIT_DATA
    err = capsys.readouterr().err
    assert f"recordbeam: {missing}: listed in manifest.json but missing; the folder is " \
        "incomplete (re-run the conversion)" in err
    assert "No such file" not in err
    assert not os.path.exists(tmp_path / "r.html") and not os.path.exists(tmp_path / "new")
    assert not any(n.endswith(".idx") for n in os.listdir(folder))


def test_inspect_a_folder_prints_its_first_records(three_shards, capsys):
    assert cli.main(["inspect", three_shards.output, "-n", "2"]) == cli.EXIT_OK
    headers = [line for line in capsys.readouterr().out.splitlines() if line.startswith("# ")]
    first = three_shards.shard_paths()[0]
    assert headers == [f"# {first} record 0", f"# {first} record 1"]


def test_inspect_a_metadata_file_says_it_is_not_tfrecord(three_shards, capsys):
    manifest = os.path.join(three_shards.output, "manifest.json")
    assert cli.main(["inspect", manifest]) == cli.EXIT_DATA
    err = capsys.readouterr().err
    assert f"{manifest}: not a TFRecord file" in err
    assert f"recordbeam inspect {three_shards.output}" in err
    assert "skip_corrupt" not in err and "Traceback" not in err


def test_inspect_a_damaged_shard_gives_command_line_advice(folder, capsys):
    shard = shards_of(folder)[0]
    data = bytearray(open(shard, "rb").read())
    first_length = int.from_bytes(data[:8], "little")
    data[16 + first_length + 2] ^= 0x10  # record 1's length field
    with open(shard, "wb") as f:
        f.write(bytes(data))
    assert cli.main(["inspect", shard, "-n", "5"]) == cli.EXIT_DATA
    err = capsys.readouterr().err
    assert f"{shard}: record 1 at byte offset {16 + first_length}" in err
    assert f"recordbeam verify {shard}" in err
    assert "skip_corrupt" not in err


def test_index_a_folder_writes_every_shards_index(folder, capsys):
    for name in os.listdir(folder):
        if name.endswith(".idx"):
            os.remove(os.path.join(folder, name))
    assert cli.main(["index", folder]) == cli.EXIT_OK
    out = capsys.readouterr().out
    for shard in shards_of(folder):
        records = sum(1 for _ in open_records(shard))
        assert os.path.exists(shard + ".idx")
        assert f"{shard}.idx: {records} records" in out


def test_index_a_metadata_file_writes_nothing_and_says_why(folder, capsys):
    labels = os.path.join(folder, "labels.txt")
    assert cli.main(["index", labels]) == cli.EXIT_DATA
    assert f"{labels}: not a TFRecord file" in capsys.readouterr().err
    assert not os.path.exists(labels + ".idx")


@pytest.mark.parametrize("command", ["inspect", "verify", "index"])
def test_a_folder_without_manifest_is_a_usage_error(command, tmp_path, capsys):
    (tmp_path / "loose").mkdir()
    assert cli.main([command, str(tmp_path / "loose")]) == cli.EXIT_USAGE
    err = capsys.readouterr().err
    assert f"{tmp_path / 'loose'} is a folder without a finished recordbeam manifest" in err
    assert "Error" not in err


@pytest.mark.case(
    "`manifest.json` cut short (`{`); every read-side command on the folder",
    "exit 1 naming manifest.json: there but not valid JSON, re-run the conversion",
)
@pytest.mark.parametrize("command", [
    ["inspect"], ["verify"], ["index"], ["schema"], ["report"], ["check", "--for", "torch"],
    ["reshard"],
])
def test_a_damaged_manifest_is_named_as_damaged_not_missing(command, folder, tmp_path, capsys):
    from recordbeam.dataset.layout import read_manifest

    manifest = os.path.join(folder, "manifest.json")
    with open(manifest, "w") as f:
        f.write("{\n")
    extra = {"report": ["--html", str(tmp_path / "r.html")],
             "reshard": [str(tmp_path / "new"), "--quiet"]}.get(command[0], [])
    assert cli.main([command[0], folder, *command[1:], *extra]) == cli.EXIT_DATA
    err = capsys.readouterr().err
    assert f"recordbeam: {manifest} is there but is not valid JSON" in err
    assert "re-run the conversion" in err
    assert "no manifest" not in err and "without a finished" not in err
    assert read_manifest(folder) is None  # the writer's view: the folder is not finished


def test_a_manifest_of_another_format_is_not_called_missing(folder, capsys):
    manifest = os.path.join(folder, "manifest.json")
    with open(manifest, "w") as f:
        f.write('{"format": "someone-else/2"}')
    assert cli.main(["verify", folder]) == cli.EXIT_DATA
    assert f"{manifest} is not a recordbeam manifest (its format is 'someone-else/2'" \
        in capsys.readouterr().err


def test_verify_an_index_file_says_it_is_an_index_not_a_damaged_shard(folder, capsys):
    assert cli.main(["index", folder]) == 0
    index = shards_of(folder)[0] + ".idx"
    capsys.readouterr()
    assert cli.main(["verify", index]) == 1
    out = capsys.readouterr().out
    assert "not a TFRecord file" in out and "it is an index file" in out
    assert "damaged" not in out
