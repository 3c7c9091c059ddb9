"""`recordbeam convert labelstudio` end to end on a small hand-written export: what pairs
is written (choices as classes of the image), what cannot pair is rejected or warned
about, and what was left on purpose is counted, through the shared export plumbing."""

from __future__ import annotations

import json

from PIL import Image

import recordbeam
from recordbeam import feature_keys

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
