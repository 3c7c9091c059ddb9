"""`recordbeam convert labelstudio` end to end on a small hand-written export: what pairs
is written (choices as classes of the image), what cannot pair is rejected or warned
about, and what was left on purpose is counted, through the shared export plumbing."""

from __future__ import annotations

import json

from PIL import Image

import recordbeam
from recordbeam import feature_keys
from recordbeam.cli import main as cli
from recordbeam.sources import byte_ranges

IN_MEMORY = ("--direct_running_mode=in_memory", "--direct_num_workers=1")


def test_an_export_with_every_kind_of_loss_converts_what_pairs(tmp_path):
    media = tmp_path / "media"
    for name in ("11111111-a.jpg", "22222222-b.jpg", "33333333-c.jpg", "44444444-d.jpg"):
        (media / "upload" / "3").mkdir(parents=True, exist_ok=True)
        Image.new("RGB", (40, 30), (200, 80, 40)).save(media / "upload" / "3" / name, "JPEG")
    box = {"id": "box", "type": "rectanglelabels", "original_width": 40,
           "original_height": 30, "value": {"x": 10, "y": 10, "width": 50, "height": 50,
                                            "rotation": 0, "rectanglelabels": ["dog"]}}
    choice = {"id": "scene", "type": "choices", "value": {"choices": ["indoor"]}}

    def task(task_id, name, *results, cancelled=False):
        return {"id": task_id, "data": {"image": f"/data/upload/3/{name}"},
                "annotations": [{"id": task_id, "was_cancelled": cancelled,
                                 "result": list(results)}]}

    tasks = [task(1, "11111111-a.jpg", box, choice, {"id": "bad", "type": "rectanglelabels"}),
             task(2, "22222222-b.jpg", box), task(3, "22222222-b.jpg"),
             task(4, "55555555-gone.jpg", box),
             task(5, "44444444-d.jpg", box, cancelled=True)]
    export = tmp_path / "project-3.json"
    export.write_text(json.dumps(tasks))
    out = tmp_path / "out"
    result = recordbeam.convert("labelstudio", input=str(export), images=str(media),
                                output=str(out), max_reject_fraction=0.9, quiet=True,
                                beam_args=IN_MEMORY)

    split = result.manifest["splits"]["train"]
    assert split["examples"] == 1  # a; c, which no task names, is only counted
    assert split["counts"]["labelstudio_tasks_not_annotated"] == 1  # d: not written, no warning
    assert split["counts"]["labelstudio_files_named_by_no_task"] == 1  # c
    rejects = [json.loads(line) for line in (out / "rejects.jsonl").read_text().splitlines()]
    assert sorted((r["kind"], r["reason"], r["source"]) for r in rejects) == [
        ("annotation", "missing_field", f"{export}: task 1 result bad"),
        ("image", "duplicate_file_name", f"{export}: task 2"),
        ("image", "missing", f"{export}: task 4")]
    assert (out / "labels.txt").read_text().split() == ["dog", "indoor"]
    written = {e[feature_keys.FILENAME].item(): e
               for e in recordbeam.read(str(out), split="train")}
    assert sorted(written) == [b"a.jpg"]
    a = written[b"a.jpg"]
    assert a[feature_keys.SOURCE_ID].item() == b"1"  # the task's id, a number as trainers want
    assert list(a[feature_keys.OBJECT_TEXT]) == [b"dog"]
    assert list(a[feature_keys.CLASS_LABEL]) == [2] and list(a[feature_keys.CLASS_TEXT]) == [
        b"indoor"]


def _ranged(monkeypatch, range_bytes: int) -> None:
    """Every array export read in byte ranges of ``range_bytes``, as a big one is."""
    monkeypatch.setattr(byte_ranges, "RANGED_FROM_BYTES", 0)
    monkeypatch.setattr(byte_ranges, "MIN_RANGE_BYTES", range_bytes)
    monkeypatch.setattr(byte_ranges, "MAX_RANGE_BYTES", range_bytes)


def _files(folder) -> dict:
    return {path.relative_to(folder).as_posix(): path.read_bytes()
            for path in sorted(folder.rglob("*")) if path.is_file()
            and path.name != "manifest.json"}


def test_an_export_read_in_ranges_writes_what_its_stream_writes(tmp_path, monkeypatch):
    """Tasks with ids and without (named by their index in the array), strings holding
    brackets, quotes and backslashes where a range may cut, rejects and counts: the
    output folder is the streamed read's, byte for byte."""
    media = tmp_path / "media"
    (media / "upload" / "1").mkdir(parents=True)
    tasks = []
    for i in range(12):
        name = f"{i:08x}-p{i}.jpg"
        if i != 5:  # task 5's image is missing: a reject naming it
            Image.new("RGB", (40, 30), (20 * i, 80, 40)).save(media / "upload" / "1" / name)
        result = {"id": f"r{i}", "type": "rectanglelabels", "original_width": 40,
                  "original_height": 30, "value": {
                      "x": 10, "y": 10, "width": 50, "height": 50, "rotation": 0,
                      "rectanglelabels": [["dog", "cat"][i % 2]]}}
        task = {"data": {"image": f"/data/upload/1/{name}", "note": '],"\\[{' * (i % 3)},
                "annotations": [{"result": [result] if i % 4 else [result, {"id": "x", "type": "rectanglelabels"}]}]}
        tasks.append(task if i % 3 else {"id": i + 100, **task})
    export = tmp_path / "export.json"
    export.write_text(json.dumps(tasks, indent=1))

    def convert(out):
        recordbeam.convert("labelstudio", input=str(export), images=str(media),
                           output=str(out), max_reject_fraction=0.9, quiet=True,
                           beam_args=IN_MEMORY)
        return _files(out)

    streamed = convert(tmp_path / "streamed")
    sources = sorted(json.loads(line)["source"].split(": ")[1]
                     for line in streamed["rejects.jsonl"].splitlines())
    assert sources == ["task 100 result x", "task [4] result x", "task [5]",
                       "task [8] result x"]
    for range_bytes in (97, 512):
        _ranged(monkeypatch, range_bytes)
        assert convert(tmp_path / f"ranged-{range_bytes}") == streamed


def test_an_element_the_ranges_refuse_fails_as_the_stream_does(tmp_path, monkeypatch, capsys):
    (tmp_path / "media").mkdir()
    Image.new("RGB", (40, 30)).save(tmp_path / "media" / "a.jpg")
    export = tmp_path / "export.json"
    export.write_text('[{"id": 1, "data": {"image": "a.jpg"}},\n'
                      '{"id": 2, "data": {"image": "b.jpg", "w": NaN}}]')
    argv = ["convert", "labelstudio", "--input", str(export), "--images",
            str(tmp_path / "media"), *IN_MEMORY]
    assert cli.main([*argv, "--output", str(tmp_path / "streamed")]) == 1
    said = capsys.readouterr().err
    _ranged(monkeypatch, 16)
    assert cli.main([*argv, "--output", str(tmp_path / "ranged")]) == 1
    first_line = said.splitlines()[0]  # the next names the run's log, a file of its own
    assert capsys.readouterr().err.replace("ranged", "streamed").splitlines()[0] == first_line
    assert "export.json: malformed JSON" in first_line
