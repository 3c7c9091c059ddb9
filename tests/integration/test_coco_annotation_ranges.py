"""The annotations list read in byte ranges (``coco.annotation_ranges``) gives what the
streamed pass gives: the same batches, rejects (with their position in the whole list),
counts and repeated ids, whatever the cuts; the same output folder end to end; the same
errors for broken files."""

from __future__ import annotations

import json
import os
import pickle
import re
import shutil
from collections import Counter, defaultdict

import apache_beam as beam
import lanes
import pytest
from apache_beam.testing.test_pipeline import TestPipeline as BeamPipeline
from lanes import one_in_make_test

from recordbeam.cli import main as cli_main
from recordbeam.sources.coco import annotation_ranges
from recordbeam.sources.coco.annotation_ranges import ReadAnnotationRanges
from recordbeam.sources.coco.input_tasks import ReadInputs
from recordbeam.sources.coco.json_stream import CocoFormatError
from recordbeam.sources.coco.options import CocoOptions
from recordbeam.sources.coco.records import AnnotationBatch, unpack_annotations

IN_MEMORY = ["--direct_running_mode=in_memory", "--direct_num_workers=1"]
TWO_WORKERS = ["--direct_running_mode=multi_processing", "--direct_num_workers=2"]

#: Strings a cut may land in: braces, brackets, commas, colons, escaped quotes, runs of
#: backslashes of both parities (a quote after an odd run is escaped, after an even run not).
HOSTILE = ['{"a": [1, 2]}', "]}],[{", '\\"', "\\\\", "\\\\\\\"", 'x", "id": 9', ":,:", "\\",
           "\\\\\\\\\\", "caf\u00e9 \u2603 \U0001f600", "\\u0041"]


def _annotation(ann_id, image_id, note) -> dict:
    return {"id": ann_id, "image_id": image_id, "category_id": 1, "bbox": [1.5, 2, 3, 4e0],
            "area": 12.0, "iscrowd": 0, "note": note, "deep": [[{"k": note}], {"[": "]"}]}


def _hostile_coco(path) -> str:
    annotations = []
    for n in range(60):
        annotations.append(_annotation(n + 1, n % 7, HOSTILE[n % len(HOSTILE)] * (n % 4)))
    annotations[10] = [1, 2, "not an object"]  # rejects, in several ranges
    annotations[33] = {"id": 34, "image_id": 2, "note": "no box"}
    annotations[47] = "}{"
    annotations[51]["id"] = 5  # the same id as the 5th: both are repeated
    annotations[52]["id"] = "t\\\"ext"
    annotations[55]["id"] = "t\\\"ext"
    annotations[20]["keypoints"] = [1, 2, 2]
    document = {"info": {"d": '"}]'}, "images": [{"id": i, "file_name": f"{i}.jpg"} for i in
                                                   range(7)],
                "annotations": annotations, "categories": [{"id": 1, "name": "a"}]}
    with open(path, "w", encoding="utf-8") as f:
        json.dump(document, f, ensure_ascii=False, indent=1 if "indent" in str(path) else None)
    return str(path)


def _streamed(options: CocoOptions) -> dict:
    outputs = defaultdict(list)
    for output in ReadInputs(options).process("annotations"):
        tag = getattr(output, "tag", "batches")
        outputs[tag].append(getattr(output, "value", output))
    return _comparable(outputs)


def _comparable(outputs) -> dict:
    """Batches by image id as the join sees them (batches of one image may arrive in any
    order and number), counts summed, ids as sets."""
    annotations = defaultdict(list)
    for key, batch in outputs["batches"]:
        assert type(batch) is AnnotationBatch and key.by_image_id
        annotations[key.text].extend(unpack_annotations(batch.packed))
    counts = Counter()
    for name, count in outputs["counts"]:
        counts[name] += count
    return {"annotations": {k: sorted(v, key=repr) for k, v in annotations.items()},
            "rejects": sorted(outputs["rejects"], key=repr), "counts": counts,
            "duplicates": sorted(outputs["duplicate_annotation_ids"], key=repr)}


def _ranged(options: CocoOptions, range_sizes: list[int], folder) -> dict[int, dict]:
    """What the ranged read gives with ranges of each size, in one pipeline."""
    reads = {}
    with BeamPipeline(argv=IN_MEMORY) as p:
        for size in range_sizes:
            reads[size] = p | f"Read{size}" >> ReadAnnotationRanges(options, size, size)
            for tag, pcoll in reads[size].items():
                pcoll | f"Collect{tag}{size}" >> beam.combiners.ToList() | (
                    f"Keep{tag}{size}" >> beam.Map(_keep, os.path.join(folder, f"{tag}{size}")))
    collected = {}
    for size, read in reads.items():
        found = {}
        for tag in read:
            with open(os.path.join(folder, f"{tag}{size}"), "rb") as f:
                found[tag] = pickle.load(f)
        collected[size] = _comparable(found)
    return collected


def _keep(items: list, path: str) -> None:
    with open(path, "wb") as f:
        pickle.dump(items, f)


@pytest.mark.parametrize("name", one_in_make_test(["hostile.json", "hostile-indent.json"],
                                                    keep=0))
def test_any_cut_gives_what_the_streamed_pass_gives(tmp_path, name):
    path = _hostile_coco(tmp_path / name)
    options = CocoOptions(str(tmp_path), path)
    expected = _streamed(options)
    assert len(expected["rejects"]) == 3 and expected["duplicates"] == sorted([5, "t\\\"ext"], key=repr)
    assert any("annotations[47]" in r.source for r in expected["rejects"])
    size = os.path.getsize(path)
    # Each size is a pipeline of its own stages (~2 s): make test cuts at three of them.
    sizes = [7, 16, 61, 333, size // 3, size] if lanes.FULL else [7, 333, size]
    for range_bytes, found in _ranged(options, sizes, tmp_path).items():
        assert found == expected, range_bytes


class _Sample:
    def __init__(self, images_dir: str, annotations: str) -> None:
        self.images_dir, self.annotations = images_dir, annotations


def _run(argv, tmp_path, sample, out_name):
    out = tmp_path / out_name
    code = cli_main.main(["convert", "coco", "--images", sample.images_dir, "--annotations",
                sample.annotations, "--output", str(out), "--quiet",
                "--max-reject-fraction", "0.99", *argv])
    return code, out


def _files(folder) -> dict[str, bytes]:
    found = {}
    for root, _dirs, names in os.walk(folder):
        for name in names:
            path = os.path.join(root, name)
            found[os.path.relpath(path, folder)] = open(path, "rb").read()
    return found


def _sample_with_position_rejects(coco_sample, tmp_path) -> tuple[_Sample, int]:
    """The sample's annotations with items rejected by position (no object, no box)
    spread over the list, a repeated id, and keypoints that are not written."""
    with open(coco_sample.annotations, encoding="utf-8") as f:
        coco = json.load(f)
    annotations = coco["annotations"]
    annotations.insert(5, "not an object")
    annotations.insert(30, {"id": 9999, "image_id": annotations[0]["image_id"]})
    annotations.append({**annotations[10], "bbox": [1, 1, 2, 2]})  # its id a second time
    annotations[20]["keypoints"] = [1, 1, 2]
    annotations.append([None])
    path = tmp_path / "instances.json"
    path.write_text(json.dumps(coco, indent=1), encoding="utf-8")
    return _Sample(coco_sample.images_dir, str(path)), len(annotations) - 1


def test_one_kib_ranges_on_two_workers_write_the_folder_the_streamed_pass_writes(
        coco_sample, tmp_path, monkeypatch):
    sample, last = _sample_with_position_rejects(coco_sample, tmp_path)
    assert not annotation_ranges.read_in_ranges(sample.annotations)  # a small file: streamed
    code, whole = _run(IN_MEMORY, tmp_path, sample, "whole")
    assert code == 0
    assert os.path.getsize(sample.annotations) > 10 * 1024  # so 1 KiB cuts it often
    monkeypatch.setattr(annotation_ranges, "RANGED_FROM_BYTES", 0)
    monkeypatch.setattr(annotation_ranges, "MIN_RANGE_BYTES", 1024)
    monkeypatch.setattr(annotation_ranges, "MAX_RANGE_BYTES", 1024)
    code, cut = _run(TWO_WORKERS, tmp_path, sample, "cut")
    assert code == 0
    expected, got = _files(whole), _files(cut)
    for reject in (b"annotations[5]", b"annotations[30]", f"annotations[{last}]".encode(),
                   b"duplicate_annotation_id"):
        assert reject in expected["rejects.jsonl"]
    assert got == expected


def _streamed_error(path: str) -> str:
    options = CocoOptions(os.path.dirname(path), path)
    with pytest.raises(CocoFormatError) as raised:
        list(ReadInputs(options).process("annotations"))
    return str(raised.value)


def _broken(path, fault: str) -> str:
    data = open(_hostile_coco(path), "rb").read()
    at = data.index(b'"id": 40,')
    broken = {
        "NaN": data[:at] + b'"x": NaN, ' + data[at:],
        "1,,2": data[:at] + b'"x": [1,,2], ' + data[at:],
        "truncated": data[:at],
        "deep": data[:at] + b'"x": ' + b"[" * 200 + b"]" * 200 + b", " + data[at:],
        "bad utf-8": data[:at] + b'"x": "\xff", ' + data[at:],
        "panoptic": data.replace(b'"bbox"', b'"segments_info": [], "box"'),
        "info": data.replace(b'"info": {', b'"info": {"x": tru, ', 1),
        "after the end": data + b' {"x": 1}',
        "between members": data.replace(b', "images"', b' 1, "images"', 1),
        "not a list": data.replace(b'"annotations": [', b'"annotations": {"a": [', 1).replace(
            b'"categories"', b'"x": 1}, "categories"'),
    }[fault]
    path.write_bytes(broken)
    return str(path)


@pytest.mark.parametrize("fault", one_in_make_test(
    ["truncated", "NaN", "1,,2", "deep", "bad utf-8", "panoptic", "not a list", "info",
     "after the end", "between members"]))
def test_a_broken_annotation_in_a_later_range_fails_as_the_streamed_pass_does(tmp_path, fault):
    path = _broken(tmp_path / "broken.json", fault)
    expected = _streamed_error(path)
    options = CocoOptions(str(tmp_path), path)
    for range_bytes in (256, 4096):
        with pytest.raises(Exception, match=re.escape(expected)):
            _ranged(options, [range_bytes], tmp_path)


def test_the_command_exits_1_naming_the_annotation(tmp_path, capsys, monkeypatch):
    path = _broken(tmp_path / "broken.json", "NaN")
    expected = _streamed_error(path)
    monkeypatch.setattr(annotation_ranges, "RANGED_FROM_BYTES", 0)
    monkeypatch.setattr(annotation_ranges, "MIN_RANGE_BYTES", 256)
    monkeypatch.setattr(annotation_ranges, "MAX_RANGE_BYTES", 256)
    code, _out = _run(IN_MEMORY, tmp_path, _images(tmp_path, path), "out")
    assert code == 1
    assert expected in capsys.readouterr().err


def _images(tmp_path, annotations) -> _Sample:
    from PIL import Image

    images = tmp_path / "images"
    images.mkdir(exist_ok=True)
    Image.new("RGB", (8, 8)).save(images / "0.jpg")
    return _Sample(str(images), str(annotations))



def test_files_from_the_threshold_on_are_read_in_ranges_smaller_ones_streamed(
        tmp_path, monkeypatch):
    from recordbeam.sources.coco.reader import ReadCoco

    path = _hostile_coco(tmp_path / "hostile.json")
    size = os.path.getsize(path)

    def labels(threshold: int) -> set[str]:
        monkeypatch.setattr(annotation_ranges, "RANGED_FROM_BYTES", threshold)
        p = beam.Pipeline()
        _ = p | "ReadCoco" >> ReadCoco(CocoOptions(str(tmp_path), path))
        found = set()

        class Visit(beam.pipeline.PipelineVisitor):
            def enter_composite_transform(self, node):
                found.add(node.full_label)

        p.visit(Visit())
        shutil.rmtree(p.local_tempdir, ignore_errors=True)  # Beam removes it only in run()
        return found

    assert "ReadCoco/ReadAnnotations" in labels(size)
    assert "ReadCoco/ReadAnnotations" not in labels(size + 1)
    assert not annotation_ranges.read_in_ranges(str(tmp_path / "missing.json"))


def _coco_with(path, joiner: str, note: str, number: str) -> str:
    """Annotations joined by ``joiner``, each with ``note`` and ``number`` as written."""
    annotations = joiner.join(
        json.dumps(_annotation(n + 1, n % 3, "x" * n))[:-1] + f', "n": {number}, "s": "{note}"}}'
        for n in range(12))
    path.write_text('{"images": [' + ", ".join(f'{{"id": {i}, "file_name": "{i}.jpg"}}'
                                              for i in range(3))
                    + '], "annotations": [' + annotations + '], "categories": '
                    '[{"id": 1, "name": "a"}]}', encoding="utf-8")
    return str(path)


# The ranges' parse is byte_ranges' for every list read in ranges (Label Studio's tests
# run each case without a pipeline): make test runs one case here.
@pytest.mark.parametrize(("joiner", "note", "number", "fails"), one_in_make_test([
    pytest.param(",\f", "n", "1", False, id="form-feed"),  # white space to the stream
    pytest.param(", ", "\\ud800", "1", False, id="high-surrogate"),  # "?" to the stream
    pytest.param(", ", "n", "1e400", True, id="overflow"),  # refused by the stream
    pytest.param(",,", "n", "1", True, id="double-comma"),  # an empty element
], keep=0))
def test_where_the_stream_reads_otherwise_than_json_the_ranges_follow_it(
        tmp_path, joiner, note, number, fails):
    options = CocoOptions(str(tmp_path), _coco_with(tmp_path / "a.json", joiner, note, number))
    if not fails:
        expected = _streamed(options)
        assert len(expected["annotations"]) == 3
        for range_bytes, found in _ranged(options, [7, 61], tmp_path).items():
            assert found == expected, range_bytes
        return
    with pytest.raises(CocoFormatError) as streamed:
        _streamed(options)
    for range_bytes in (7, 61):
        with pytest.raises(Exception) as ranged:  # noqa: PT011 - Beam wraps what a DoFn raises
            _ranged(options, [range_bytes], tmp_path)
        assert str(streamed.value).splitlines()[0] in str(ranged.value), range_bytes
