"""The rules of ``recordbeam check --for``: each consumer's rules on small folders written
by hand (one rule broken at a time), the command's output and exit codes."""

from __future__ import annotations

import io
import json
import os

import numpy as np
import pytest
from PIL import Image

from recordbeam.cli.main import main
from recordbeam.dataset.consumers import CONSUMERS, check_folder, label_map_pbtxt
from recordbeam.errors import UsageError
from recordbeam.tfrecord.example import encode_example
from recordbeam.tfrecord.framing import RecordWriter

KINDS = {"image/object/bbox/xmin": "float", "image/object/bbox/xmax": "float",
         "image/object/bbox/ymin": "float", "image/object/bbox/ymax": "float",
         "image/object/area": "float", "image/object/class/label": "int64",
         "image/object/class/text": "bytes", "image/object/is_crowd": "int64",
         "image/object/mask": "bytes"}
DTYPES = {"bytes": "string", "int64": "int64", "float": "float32"}


def _png(width: int, height: int, mode: str = "RGB") -> bytes:
    out = io.BytesIO()
    Image.new(mode, (width, height)).save(out, format="PNG")
    return out.getvalue()


def detection_example(number: int, *, source_id: str | None = None, mask_size=(8, 6),
                      label: int = 1) -> dict:
    width, height = 8, 6
    return {
        "image/encoded": _png(width, height), "image/format": b"png",
        "image/height": height, "image/width": width,
        "image/source_id": (str(100 + number) if source_id is None else source_id).encode(),
        "image/filename": f"{number}.png".encode(),
        "image/object/bbox/xmin": [0.1], "image/object/bbox/xmax": [0.5],
        "image/object/bbox/ymin": [0.2], "image/object/bbox/ymax": [0.9],
        "image/object/area": [4.0], "image/object/class/label": [label],
        "image/object/class/text": [b"cat"], "image/object/is_crowd": [0],
        "image/object/mask": [_png(*mask_size, mode="L")],
    }


def write_folder(folder, examples_per_shard: list[list[dict]], *, compression: str = "none",
                 index: bool = True, label_map=None) -> str:
    """A finished folder as a conversion leaves it: shards, .idx files and manifest.json."""
    folder = str(folder)
    os.makedirs(folder, exist_ok=True)
    suffix = {"none": "", "gzip": ".gz", "zlib": ".zz"}[compression]
    shards, features = [], {}
    count = len(examples_per_shard)
    for i, examples in enumerate(examples_per_shard):
        name = f"train-{i:05d}-of-{count:05d}.tfrecord{suffix}"
        lines = io.StringIO()
        with open(os.path.join(folder, name), "wb") as f, \
                RecordWriter(f, compression, index=lines if index else None) as writer:
            for example in examples:
                writer.write(encode_example(example, KINDS))
                for key, value in example.items():
                    kind = KINDS.get(key) or ("bytes" if isinstance(value, bytes) else "int64")
                    features.setdefault(key, {"dtype": DTYPES[kind]})
        if index:
            with open(os.path.join(folder, name + ".idx"), "w") as f:
                f.write(lines.getvalue())
        shards.append({"file": name, "examples": len(examples), "bytes": 0})
    manifest = {"features": features, "label_map": label_map or {"1": "cat"},
                "splits": {"train": {"shards": shards, "bytes": 0,
                                     "examples": sum(len(e) for e in examples_per_shard),
                                     "features": features}}}
    with open(os.path.join(folder, "manifest.json"), "w") as f:
        json.dump(manifest, f)
    return folder


def failed(result) -> dict[str, list[str]]:
    return {rule.name: rule.shown for rule in result.rules if not rule.ok}


@pytest.fixture
def good(tmp_path):
    return write_folder(tmp_path / "good", [[detection_example(0), detection_example(1)],
                                            [detection_example(2)]])


@pytest.mark.parametrize("consumer", ["model-garden", "od-api", "efficientdet", "dali", "torch"])
def test_a_clean_detection_folder_passes(good, consumer):
    result = check_folder(good, consumer)
    assert result.ok, failed(result)
    assert result.records == 3
    assert all(rule.checked > 0 for rule in result.rules if not rule.note)


def test_a_string_source_id_fails_model_garden_and_efficientdet_naming_shard_record_rule(tmp_path):
    folder = write_folder(tmp_path / "f", [[detection_example(0), detection_example(1, source_id="2007_000027")]])
    for consumer in ("model-garden", "efficientdet"):
        problems = failed(check_folder(folder, consumer))
        assert list(problems) == ["source-id"]
        assert problems["source-id"][0].startswith("train-00000-of-00001.tfrecord record 1: ")
        assert "'2007_000027', not a decimal integer" in problems["source-id"][0]
    assert check_folder(folder, "od-api").ok  # the OD API keeps source_id a string


def test_efficientdet_accepts_an_empty_source_id_but_not_one_float32_rounds(tmp_path):
    folder = write_folder(tmp_path / "f", [[detection_example(0, source_id=""),
                                            detection_example(1, source_id=str(2**24 + 1))]])
    problems = failed(check_folder(folder, "efficientdet"))
    assert list(problems) == ["source-id"] and len(problems["source-id"]) == 1
    assert "record 1" in problems["source-id"][0] and "2**24" in problems["source-id"][0]
    assert "source-id" in failed(check_folder(folder, "model-garden"))  # empty is refused there


def test_a_mask_of_another_size_than_its_image_fails_model_garden(tmp_path):
    folder = write_folder(tmp_path / "f", [[detection_example(0), detection_example(1, mask_size=(6, 8))]])
    problems = failed(check_folder(folder, "model-garden"))
    assert list(problems) == ["masks"]
    assert problems["masks"] == ["train-00000-of-00001.tfrecord record 1: object 0: the mask is "
                                 "8x6 but the image is 6x8; masks are stacked at the image's size"]


def test_label_zero_fails_the_detection_trainers_and_one_outside_the_map_fails_od_api(tmp_path):
    folder = write_folder(tmp_path / "f", [[detection_example(0, label=0), detection_example(1, label=2)]])
    assert "labels" in failed(check_folder(folder, "efficientdet"))
    problems = failed(check_folder(folder, "od-api"))
    assert problems["label-map"][0].endswith("label 0 is not in the manifest's label map")
    assert "record 1: object 0: label 2 is not in" in problems["label-map"][1]


def test_a_compressed_folder_fails_dali_and_zlib_fails_torch(tmp_path):
    gz = write_folder(tmp_path / "gz", [[detection_example(0)]], compression="gzip", index=False)
    problems = failed(check_folder(gz, "dali"))
    assert set(problems) == {"compression", "index"}
    assert "compression" not in failed(check_folder(gz, "torch"))  # the tfrecord package reads gzip
    zz = write_folder(tmp_path / "zz", [[detection_example(0)]], compression="zlib", index=False)
    assert "compression" in failed(check_folder(zz, "torch"))


def test_a_missing_or_stale_index_fails_dali_and_a_stale_one_fails_torch(good):
    os.remove(os.path.join(good, "train-00001-of-00002.tfrecord.idx"))
    index = os.path.join(good, "train-00000-of-00002.tfrecord.idx")
    lines = open(index).read().splitlines()
    with open(index, "w") as f:
        f.write(lines[0] + "\n")  # one record short
    stale = "train-00000-of-00002.tfrecord.idx: ends before record 1 of the shard"
    problems = failed(check_folder(good, "dali"))["index"]
    assert problems[0].startswith(stale)
    assert problems[1].startswith("train-00001-of-00002.tfrecord: no train-00001-of-00002.tfrecord.idx")
    # The tfrecord package reads a shard without index whole, but follows a stale one.
    assert [p[: len(stale)] for p in failed(check_folder(good, "torch"))["index"]] == [stale]
    assert check_folder(good, "model-garden").ok  # no index needed there


def test_an_index_line_at_the_wrong_offset_is_named(good):
    index = os.path.join(good, "train-00000-of-00002.tfrecord.idx")
    first, second = open(index).read().splitlines()
    offset, length = second.split()
    with open(index, "w") as f:
        f.write(f"{first}\n{int(offset) + 1} {length}\n")
    problems = failed(check_folder(good, "dali"))["index"]
    assert problems == [f"train-00000-of-00002.tfrecord.idx line 2: '{int(offset) + 1} {length}', but "
                        f"record 1 is at offset {offset} with {length} bytes ('{second}'); re-create "
                        "it with recordbeam index train-00000-of-00002.tfrecord"]


def test_violations_are_bounded_per_rule_and_the_rest_counted(tmp_path, capsys):
    folder = write_folder(tmp_path / "f", [[detection_example(i, source_id=f"x{i}") for i in range(9)]])
    assert main(["check", folder, "--for", "efficientdet", "--max-problems", "3"]) == 1
    out, err = capsys.readouterr()
    assert out.count("not a decimal integer") == 3
    assert "    and 6 more\n" in out
    assert "  source-id: FAILED, 9 violations" in out
    assert "1 rule failed (source-id)" in err


def test_max_records_stops_reading_and_says_so(good, capsys):
    assert main(["check", good, "--for", "dali", "--max-records", "2"]) == 0
    out = capsys.readouterr().out
    assert ": 2 records read (stopped there: --max-records" in out
    assert "  counts: ok (" in out and "; 1 checked)" in out  # the second shard was not read


def test_a_clean_folder_prints_one_line_per_rule_and_exits_0(good, capsys):
    assert main(["check", good, "--for", "model-garden"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith(f"{good} for model-garden (")
    assert [line.split(":")[0].strip() for line in lines[1:]] == [
        "examples", "counts", "keys", "objects", "boxes", "labels", "image-size", "source-id", "masks"]


def test_an_unknown_consumer_is_a_usage_error_naming_the_choices(good, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["check", good, "--for", "yolo"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert all(name in err for name in CONSUMERS)
    with pytest.raises(UsageError, match="choose one of model-garden"):
        check_folder(good, "yolo")


def test_a_folder_without_manifest_is_a_usage_error(tmp_path, capsys):
    assert main(["check", str(tmp_path), "--for", "tfds"]) == 2
    assert "no manifest.json" in capsys.readouterr().err


def test_write_label_map_writes_the_od_api_label_map(tmp_path, capsys):
    folder = write_folder(tmp_path / "f", [[detection_example(0)]], label_map={"1": "cat", "3": 'say "hi"'})
    target = str(tmp_path / "label_map.pbtxt")
    assert main(["check", folder, "--for", "od-api", "--write-label-map", target]) == 0
    assert open(target).read() == (
        'item {\n  id: 1\n  name: "cat"\n  display_name: "cat"\n}\n'
        'item {\n  id: 3\n  name: "say \\"hi\\""\n  display_name: "say \\"hi\\""\n}\n')
    assert main(["check", folder, "--for", "dali", "--write-label-map", target]) == 2
    assert "use it with --for od-api" in capsys.readouterr().err


@pytest.mark.parametrize("where", ["below a file", "a folder"])
def test_write_label_map_at_a_path_that_cannot_be_a_file_is_a_usage_error(where, tmp_path, capsys):
    folder = write_folder(tmp_path / "f", [[detection_example(0)]], label_map={"1": "cat"})
    (tmp_path / "a-file").write_text("x")
    target = str(tmp_path / "a-file" / "lm.pbtxt") if where == "below a file" else str(tmp_path)
    assert main(["check", folder, "--for", "od-api", "--write-label-map", target]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"recordbeam: --write-label-map {target}")
    if where == "a folder":
        assert f"is a folder; give a file path, e.g. --write-label-map {tmp_path}/label_map.pbtxt" in err
    else:
        assert f"{tmp_path / 'a-file'} is a file, not a folder" in err
    assert "File exists" not in err and "Is a directory" not in err


def test_write_label_map_creates_its_missing_folders(tmp_path):
    folder = write_folder(tmp_path / "f", [[detection_example(0)]], label_map={"1": "cat"})
    target = tmp_path / "new" / "deeper" / "label_map.pbtxt"
    assert main(["check", folder, "--for", "od-api", "--write-label-map", str(target)]) == 0
    assert 'name: "cat"' in target.read_text()


def test_a_label_map_with_label_zero_is_refused_for_the_od_api():
    with pytest.raises(UsageError, match="reserves 0 for the background"):
        label_map_pbtxt({"label_map": {"0": "cat", "1": "dog"}})


def test_torch_needs_every_record_to_store_keys_with_the_manifest_type(tmp_path):
    example = detection_example(1)
    example["image/height"] = np.float32(6.0)
    odd = write_folder(tmp_path / "odd", [[detection_example(0), example]])
    # The manifest lists image/height as int64 (write_folder types it by the first record).
    assert json.load(open(os.path.join(odd, "manifest.json")))["features"]["image/height"] == {"dtype": "int64"}
    problems = failed(check_folder(odd, "torch"))
    assert problems == {"kinds": ["train-00000-of-00001.tfrecord record 1: image/height is stored "
                                  "as float, the manifest lists it as int64"]}


def test_torch_refuses_an_empty_feature_written_without_a_type(tmp_path):
    folder = write_folder(tmp_path / "f", [[detection_example(0)]])
    shard = os.path.join(folder, "train-00000-of-00001.tfrecord")
    example = detection_example(0)
    with open(shard, "wb") as f, RecordWriter(f) as writer:
        writer.write(encode_example({**example, "image/object/area": []},
                                    {k: v for k, v in KINDS.items() if k != "image/object/area"}))
    os.remove(shard + ".idx")
    problems = failed(check_folder(folder, "torch"))
    assert list(problems) == ["kinds"]
    assert problems["kinds"][0].startswith("train-00000-of-00001.tfrecord record 0: "
                                           "image/object/area is an empty value stored without a type")


def test_a_damaged_or_missing_shard_is_a_violation_and_the_other_shards_are_still_read(good):
    first = os.path.join(good, "train-00000-of-00002.tfrecord")
    data = bytearray(open(first, "rb").read())
    data[-3] ^= 0xFF  # the last record's data CRC
    open(first, "wb").write(bytes(data))
    result = check_folder(good, "model-garden")
    problems = failed(result)
    assert list(problems) == ["examples"]
    assert problems["examples"][0].startswith("train-00000-of-00002.tfrecord record 1 at byte offset ")
    assert result.records == 2  # record 0 of the first shard, then the second shard
    os.remove(os.path.join(good, "train-00001-of-00002.tfrecord"))
    problems = failed(check_folder(good, "model-garden"))
    assert problems["counts"] == ["train-00001-of-00002.tfrecord: listed in the manifest but cannot "
                                  "be read (No such file or directory); the folder is incomplete"]


def test_image_size_must_be_the_encoded_image_size_when_written(tmp_path):
    wrong = detection_example(1)
    wrong["image/height"] = 7
    unsized = {k: v for k, v in detection_example(2).items()
               if k not in ("image/height", "image/width", "image/object/mask")}
    folder = write_folder(tmp_path / "f", [[detection_example(0), wrong, unsized]])
    problems = failed(check_folder(folder, "efficientdet"))
    assert problems == {"image-size": ["train-00000-of-00001.tfrecord record 1: image/height x "
                                       "image/width is 7x8 but the encoded image is 6x8"]}
