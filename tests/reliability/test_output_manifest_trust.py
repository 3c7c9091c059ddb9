"""A hand-edited ``manifest.json`` whose shard entries name files outside its folder: every
command and reader of a finished folder refuses it, naming the manifest and the entry,
before opening any shard."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from reliability_data import IN_MEMORY, jpeg

import recordbeam
from recordbeam.cli import main as cli
from recordbeam.dataset.manifest import DamagedManifest

CASE = pytest.mark.case
SHARD = "train-00000-of-00001.tfrecord"


@pytest.fixture(scope="module")
def outputs(tmp_path_factory) -> tuple[Path, Path]:
    """Two finished output folders: ``mine`` and another dataset's ``other/out``."""
    base = tmp_path_factory.mktemp("manifests")
    for name, colour in (("mine", (10, 200, 10)), ("other", (200, 10, 200))):
        classes = base / f"{name}-input" / "dog"
        classes.mkdir(parents=True)
        (classes / "a.jpg").write_bytes(jpeg(32, 24, colour))
    folders = base / "mine", base / "other" / "out"
    for name, folder in zip(("mine", "other"), folders, strict=True):
        assert cli.main(["convert", "imagefolder", "--root", str(base / f"{name}-input"),
                         "--output", str(folder), "--quiet", *IN_MEMORY]) == 0
    return folders


def _entries(other: Path) -> dict[str, str]:
    """Shard entries that leave their folder, each naming a real file."""
    return {
        "dotdot": f"../other/out/{SHARD}",
        "absolute": str(other / SHARD),
        "subfolder": f"nested/{SHARD}",
        "system file": "/etc/passwd",
    }


@pytest.fixture(params=["dotdot", "absolute", "subfolder", "system file"])
def hostile(request, outputs, tmp_path) -> tuple[Path, str]:
    """A copy of ``mine`` whose manifest lists one shard that lies elsewhere."""
    mine, other = outputs
    folder = mine.parent / f"hostile-{tmp_path.name}"
    shutil.copytree(mine, folder)
    (folder / "nested").mkdir()
    shutil.copy(other / SHARD, folder / "nested" / SHARD)
    entry = _entries(other)[request.param]
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["splits"]["train"]["shards"][0]["file"] = entry
    (folder / "manifest.json").write_text(json.dumps(manifest))
    yield folder, entry
    shutil.rmtree(folder)


COMMANDS = {
    "verify": lambda out, new: ["verify", str(out)],
    "inspect": lambda out, new: ["inspect", str(out)],
    "index": lambda out, new: ["index", str(out)],
    "reshard": lambda out, new: ["reshard", str(out), str(new), "--quiet", *IN_MEMORY],
    "report": lambda out, new: ["report", str(out), "--html", str(new / "report.html")],
    "check": lambda out, new: ["check", str(out), "--for", "torch"],
    "schema": lambda out, new: ["schema", str(out)],
}


@CASE("`manifest.json` listing a shard outside its folder (`../other/out/...`, an absolute "
      "path, `/etc/passwd`, `nested/x`); `verify`, `inspect`, `index`, `reshard`, `report`, "
      "`check`, `schema` of the folder",
      "exit 1 naming manifest.json and the entry: shard names are plain file names in its "
      "folder; no shard is opened, nothing is written")
@pytest.mark.parametrize("command", list(COMMANDS))
def test_shards_outside_the_folder_are_refused(hostile, tmp_path, capsys, command):
    folder, entry = hostile
    new = tmp_path / "new"

    code = cli.main(COMMANDS[command](folder, new))

    assert code == 1
    err = capsys.readouterr().err
    assert str(folder / "manifest.json") in err and entry in err
    assert not new.exists()
    assert not list(folder.glob("*.idx"))


@CASE("`manifest.json` listing a shard outside its folder; `recordbeam.read(OUT)`",
      "`DamagedManifest` naming manifest.json and the entry")
def test_the_reader_refuses_shards_outside_the_folder(hostile):
    folder, entry = hostile
    with pytest.raises(DamagedManifest) as raised:
        recordbeam.read(str(folder))
    assert "manifest.json" in str(raised.value) and entry in str(raised.value)


@CASE("`manifest.json` listing a shard outside its folder, or one that is no text (`5`); "
      "a conversion into the folder",
      "the folder counts as unfinished: refused (exit 2) as holding foreign files, written "
      "beside them with `--overwrite`; the files the entry names are never touched")
@pytest.mark.parametrize("entry", [f"../other/out/{SHARD}", 5])
def test_a_conversion_into_the_folder_claims_nothing_the_entry_names(outputs, tmp_path,
                                                                     entry):
    mine, other = outputs
    folder = tmp_path / "out"
    shutil.copytree(mine, folder)
    (tmp_path / "other" / "out").mkdir(parents=True)
    victim = tmp_path / "other" / "out" / SHARD
    victim.write_bytes(b"another dataset's shard")
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["splits"]["train"]["shards"][0]["file"] = entry
    (folder / "manifest.json").write_text(json.dumps(manifest))
    inputs = mine.parent / "mine-input"
    argv = ["convert", "imagefolder", "--root", str(inputs), "--output", str(folder),
            "--quiet", *IN_MEMORY]

    assert cli.main(argv) == 2
    assert cli.main([*argv, "--overwrite"]) == 0
    assert victim.read_bytes() == b"another dataset's shard"
    assert json.loads((folder / "manifest.json").read_text())["splits"]["train"]["examples"] == 1
