"""The COCO pipeline end to end on the generated sample: what it writes, what it rejects,
and how it behaves on reruns, failures and foreign folders.

Expectations come from ``SampleDataset.expected`` and from the sample's own files (JSON,
image bytes read with Pillow), never from the code under test.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import shutil
import struct
import zlib
from collections import Counter

import apache_beam as beam
import pytest
from PIL import Image
from read_back import folder_files

from recordbeam import pipeline
from recordbeam.cli import main as cli
from recordbeam.converter import convert as convert_api
from recordbeam.dataset.folder_lock import LOCK, LockRecord
from recordbeam.dataset.folder_lock import read as read_lock
from recordbeam.dataset.layout import FAILED_REJECTS, LABELS, MANIFEST, REJECTS, TEMP_PREFIX
from recordbeam.dataset.names import hash_file_name
from recordbeam.sources.coco.encoder import CocoEncoder
from recordbeam.sources.coco.reader import CocoOptions, ReadCoco
from recordbeam.tfrecord.framing import open_records
from recordbeam.tfrecord.index import read_index
from recordbeam.write.image_encoder import ImageChecks
from recordbeam.write.sink import ShardOptions, WriteShards

IN_MEMORY = ("--direct_running_mode=in_memory", "--direct_num_workers=1")
MULTI_PROCESS = ("--direct_running_mode=multi_processing", "--direct_num_workers=2")
LENIENT = 0.5  # the sample rejects about a quarter of its images on purpose


def _text(value) -> str:
    return value.decode("utf-8")


def _by_filename(examples) -> dict[str, dict]:
    return {_text(e["image/filename"][0]): e for e in examples}


def _image_rejects(rejects) -> dict[str, str]:
    return {os.path.basename(r["source"]): r["reason"] for r in rejects if r["kind"] == "image"}


def _annotation_rejects(rejects) -> dict[int, str]:
    out = {}
    for r in rejects:
        if r["kind"] == "annotation":
            word, number = r["source"].split(" ")
            assert word == "annotation"
            out[int(number)] = r["reason"]
    return out


def _no_temp_folders(output) -> bool:
    return not any(name.startswith(TEMP_PREFIX) for name in os.listdir(output))


def _cli_convert(sample, output, *extra: str) -> list[str]:
    return [
        "convert",
        "coco",
        "--images",
        sample.images_dir,
        "--annotations",
        sample.annotations,
        "--output",
        os.fspath(output),
        "--quiet",
        *extra,
        *IN_MEMORY,
    ]


# ----------------------------------------------------------------- rejects and counts


def test_every_expected_rejected_image_is_listed_with_its_reason(converted, coco_sample):
    expected = coco_sample.expected["rejected_images"]
    assert _image_rejects(converted.rejects()) == expected


def test_image_rejects_explain_themselves(converted):
    for r in converted.rejects():
        assert r["detail"], r
        assert r["kind"] in {"image", "annotation", "warning"}


def test_every_expected_rejected_annotation_is_listed_with_its_reason(converted, coco_sample):
    expected = coco_sample.expected["rejected_annotations"]
    assert _annotation_rejects(converted.rejects()) == {int(k): v for k, v in expected.items()}


def test_size_mismatch_is_a_warning_naming_the_image(converted, coco_sample):
    warnings = [r for r in converted.rejects() if r["kind"] == "warning"]
    assert {os.path.basename(w["source"]) for w in warnings} == set(
        coco_sample.expected["size_mismatch"]
    )
    assert {w["reason"] for w in warnings} == {"size_mismatch"}
    assert converted.manifest["splits"]["train"]["warnings"] == {"size_mismatch": len(warnings)}


def test_manifest_counts_rejects_by_reason(converted, coco_sample):
    expected = Counter(f"image:{r}" for r in coco_sample.expected["rejected_images"].values())
    expected.update(
        f"annotation:{r}" for r in coco_sample.expected["rejected_annotations"].values()
    )
    rejects = converted.manifest["splits"]["train"]["rejects"]
    assert converted.manifest["rejects"]["by_reason"] == rejects["by_reason"]
    assert rejects["by_reason"] == dict(expected)
    assert rejects["images"] == len(coco_sample.expected["rejected_images"])
    assert rejects["annotations"] == len(coco_sample.expected["rejected_annotations"])
    good, bad = len(coco_sample.expected["good_images"]), rejects["images"]
    assert rejects["image_fraction"] == pytest.approx(bad / (good + bad))


def test_manifest_counts_unlisted_files_boxes_and_exif(converted, coco_sample):
    expected = coco_sample.expected
    counts = converted.manifest["splits"]["train"]["counts"]
    assert counts["unlisted_files"] == len(expected["unlisted_files"])
    assert counts["boxes_clipped"] == expected["clipped_boxes"]
    assert counts["boxes_written"] == expected["num_annotations"]
    assert counts["images_written"] == len(expected["good_images"])
    rotated = [i for i in expected["images"].values() if i["exif_orientation"] not in (None, 1)]
    assert counts["exif_rotated"] == len(rotated)


def test_manifest_fingerprints_every_input_file(converted, coco_sample):
    on_disk = len(os.listdir(coco_sample.images_dir))
    split = converted.manifest["splits"]["train"]
    assert split["input_files"] == on_disk + 1  # plus the annotation file
    assert len(split["inputs_fingerprint"]) == 64


# ----------------------------------------------------------------- the examples


def test_every_good_image_is_written_exactly_once(converted, coco_sample, coco_json):
    examples = converted.examples()
    names = sorted(_text(e["image/filename"][0]) for e in examples)
    assert names == coco_sample.expected["good_images"]
    ids = {image["file_name"]: str(image["id"]) for image in coco_json["images"]}
    for e in examples:
        assert _text(e["image/source_id"][0]) == ids[_text(e["image/filename"][0])]
    assert converted.manifest["totals"]["examples"] == len(examples)


def test_output_is_shuffled_not_in_file_name_order(converted):
    names = [_text(e["image/filename"][0]) for e in converted.examples()]
    assert names != sorted(names)


def test_image_bytes_are_the_files_unchanged_with_their_sha256(converted, coco_sample):
    for name, e in _by_filename(converted.examples()).items():
        with open(os.path.join(coco_sample.images_dir, name), "rb") as f:
            data = f.read()
        assert e["image/encoded"][0] == data, name
        assert _text(e["image/key/sha256"][0]) == hashlib.sha256(data).hexdigest()


def test_format_is_sniffed_from_the_bytes_not_the_extension(converted, coco_sample):
    examples = _by_filename(converted.examples())
    for name, info in coco_sample.expected["images"].items():
        assert _text(examples[name]["image/format"][0]) == info["format"], name
    png_named_jpg = [
        n
        for n, i in coco_sample.expected["images"].items()
        if n.endswith(".jpg") and i["format"] == "png"
    ]
    assert png_named_jpg, "the sample should hold a PNG named .jpg"
    for name in png_named_jpg:
        assert _text(examples[name]["image/format"][0]) == "png"


def test_height_and_width_come_from_the_image_header(converted, coco_sample):
    examples = _by_filename(converted.examples())
    for name, e in examples.items():
        with Image.open(io.BytesIO(e["image/encoded"][0])) as image:
            width, height = image.size
        assert (int(e["image/width"][0]), int(e["image/height"][0])) == (width, height), name
        info = coco_sample.expected["images"][name]
        assert (width, height) == (info["width"], info["height"])
    for name, sizes in coco_sample.expected["size_mismatch"].items():
        e = examples[name]
        assert [int(e["image/width"][0]), int(e["image/height"][0])] == sizes["header"]


def test_objects_match_the_json_annotations(converted, coco_sample, coco_json):
    """Boxes normalized by the header size and clipped; labels, text, area, crowd as given."""
    rejected = {int(k) for k in coco_sample.expected["rejected_annotations"]}
    names = {c["id"]: c["name"] for c in coco_json["categories"]}
    by_image: dict[int, list[dict]] = {}
    for ann in sorted(coco_json["annotations"], key=lambda a: a["id"]):
        if ann["id"] not in rejected:
            by_image.setdefault(ann["image_id"], []).append(ann)
    ids = {image["file_name"]: image["id"] for image in coco_json["images"]}
    for name, e in _by_filename(converted.examples()).items():
        anns = by_image.get(ids[name], [])
        assert len(anns) == coco_sample.expected["annotations_per_image"][name]
        width, height = int(e["image/width"][0]), int(e["image/height"][0])
        xmin, ymin, xmax, ymax = [], [], [], []
        for ann in anns:
            x, y, w, h = ann["bbox"]
            xmin.append(max(0.0, x) / width)
            ymin.append(max(0.0, y) / height)
            xmax.append(min(float(width), x + w) / width)
            ymax.append(min(float(height), y + h) / height)
        assert list(e["image/object/bbox/xmin"]) == pytest.approx(xmin, rel=1e-6, abs=1e-7)
        assert list(e["image/object/bbox/ymin"]) == pytest.approx(ymin, rel=1e-6, abs=1e-7)
        assert list(e["image/object/bbox/xmax"]) == pytest.approx(xmax, rel=1e-6, abs=1e-7)
        assert list(e["image/object/bbox/ymax"]) == pytest.approx(ymax, rel=1e-6, abs=1e-7)
        assert list(e["image/object/class/label"]) == [a["category_id"] for a in anns]
        assert [_text(t) for t in e["image/object/class/text"]] == [
            names[a["category_id"]] for a in anns
        ]
        assert list(e["image/object/area"]) == pytest.approx([a["area"] for a in anns], rel=1e-6)
        assert list(e["image/object/is_crowd"]) == [1 if a["iscrowd"] else 0 for a in anns]


def test_boxes_are_within_the_unit_square(converted):
    for e in converted.examples():
        for key in ("xmin", "xmax", "ymin", "ymax"):
            values = e[f"image/object/bbox/{key}"]
            assert ((values >= 0.0) & (values <= 1.0)).all(), key
        assert (e["image/object/bbox/xmin"] <= e["image/object/bbox/xmax"]).all()
        assert (e["image/object/bbox/ymin"] <= e["image/object/bbox/ymax"]).all()


def test_the_box_reaching_outside_is_clipped_to_the_right_edge(converted, coco_sample, coco_json):
    anns = {a["id"]: a for a in coco_json["annotations"]}
    files = {i["id"]: i["file_name"] for i in coco_json["images"]}
    examples = _by_filename(converted.examples())
    assert coco_sample.expected["clipped"]
    for ann_id, (x, y, w, h) in coco_sample.expected["clipped"].items():
        ann = anns[int(ann_id)]
        e = examples[files[ann["image_id"]]]
        width = int(e["image/width"][0])
        height = int(e["image/height"][0])
        expected = (x / width, y / height, (x + w) / width, (y + h) / height)
        found = list(
            zip(
                e["image/object/bbox/xmin"],
                e["image/object/bbox/ymin"],
                e["image/object/bbox/xmax"],
                e["image/object/bbox/ymax"],
                strict=True,
            )
        )
        assert any(f == pytest.approx(expected, rel=1e-6) for f in found)
        assert expected[2] == 1.0


def test_image_without_annotations_has_empty_object_lists(converted, coco_sample):
    empty = [n for n, k in coco_sample.expected["annotations_per_image"].items() if k == 0]
    assert empty
    examples = _by_filename(converted.examples())
    for name in empty:
        for key in ("bbox/xmin", "class/label", "class/text", "area", "is_crowd"):
            assert len(examples[name][f"image/object/{key}"]) == 0


# ----------------------------------------------------------------- metadata files


def test_labels_txt_and_label_map_follow_category_ids(converted, coco_json):
    categories = sorted(coco_json["categories"], key=lambda c: c["id"])
    with open(os.path.join(converted.output, LABELS), encoding="utf-8") as f:
        assert f.read().splitlines() == [c["name"] for c in categories]
    assert converted.manifest["label_map"] == {str(c["id"]): c["name"] for c in categories}
    assert converted.manifest["label_names"] == [c["name"] for c in categories]


def test_manifest_describes_shards_and_features(converted):
    manifest = converted.manifest
    shards = manifest["splits"]["train"]["shards"]
    assert [s["file"] for s in shards] == ["train-00000-of-00001.tfrecord"]
    for s in shards:
        path = os.path.join(converted.output, s["file"])
        assert s["bytes"] == os.path.getsize(path)
    assert sum(s["examples"] for s in shards) == len(converted.records())
    features = manifest["features"]
    for key in ("image/encoded", "image/format", "image/source_id", "image/key/sha256"):
        assert (features[key]["dtype"], features[key]["fixed_length"]) == ("string", 1)
    for key in ("image/height", "image/width"):
        assert (features[key]["dtype"], features[key]["fixed_length"]) == ("int64", 1)
    assert features["image/object/bbox/xmin"]["dtype"] == "float32"
    assert features["image/object/bbox/xmin"]["fixed_length"] is None
    assert features["image/object/class/label"]["dtype"] == "int64"


def test_a_finished_output_holds_only_our_files_and_no_temp_folder(converted):
    tfds_files = ["dataset_info.json", "features.json", "image.object.class.label.labels.txt"]
    assert converted.files() == sorted(
        [MANIFEST, LABELS, REJECTS, "train-00000-of-00001.tfrecord", *tfds_files,
         *_duplicate_lists("train-00000-of-00001.tfrecord")]
    )


def _duplicate_lists(*shards: str) -> list[str]:
    """What duplicate finding (on by default) adds when it finds no group: a hash file
    per shard."""
    return [hash_file_name(shard) for shard in shards]


def test_contiguous_labels_are_one_to_k_and_split_names_files(convert, tmp_path, coco_json):
    result = convert(tmp_path / "out", contiguous_labels=True, split="val2017")
    categories = sorted(coco_json["categories"], key=lambda c: c["id"])
    rank = {c["id"]: position + 1 for position, c in enumerate(categories)}
    assert result.manifest["label_map"] == {
        str(position + 1): c["name"] for position, c in enumerate(categories)
    }
    assert [os.path.basename(p) for p in result.shard_paths()] == [
        "val2017-00000-of-00001.tfrecord"
    ]
    with open(os.path.join(result.output, LABELS), encoding="utf-8") as f:
        assert f.read().splitlines() == [c["name"] for c in categories]
    by_name = {c["name"]: c["id"] for c in categories}
    labels_seen = set()
    for e in result.examples():
        for label, text in zip(
            e["image/object/class/label"], e["image/object/class/text"], strict=True
        ):
            assert int(label) == rank[by_name[_text(text)]]
            labels_seen.add(int(label))
    assert labels_seen <= set(range(1, len(categories) + 1))
    assert len(labels_seen) > 1


# ----------------------------------------------------------------- sharding


def test_three_shards_are_named_and_hold_every_example(three_shards, converted):
    names = [os.path.basename(p) for p in three_shards.shard_paths()]
    assert names == [f"train-0000{i}-of-00003.tfrecord" for i in range(3)]
    assert sorted(three_shards.records()) == sorted(converted.records())
    manifest_shards = three_shards.manifest["splits"]["train"]["shards"]
    assert [s["file"] for s in manifest_shards] == names
    assert three_shards.manifest["totals"]["shards"] == 3


def test_shards_concatenate_to_the_single_shard_order(three_shards, converted):
    # Shards are contiguous ranges of one key order, so reading them in name order gives
    # the same sequence as one shard.
    assert three_shards.records() == converted.records()


def test_runner_modes_write_byte_identical_shards(three_shards, convert, tmp_path):
    other = convert(tmp_path / "out", shards=3, beam_args=MULTI_PROCESS)
    ours = {os.path.basename(p): open(p, "rb").read() for p in three_shards.shard_paths()}
    theirs = {os.path.basename(p): open(p, "rb").read() for p in other.shard_paths()}
    assert list(ours) == list(theirs)
    for name in ours:
        assert ours[name] == theirs[name], f"{name} differs between runner modes"


def test_the_command_and_the_python_api_write_what_the_library_writes(
        converted, coco_sample, tmp_path):
    # `convert coco` and recordbeam.convert("coco") are made from the format's one
    # declaration: every file as the library call writes it (settings, fingerprint).
    command, api = tmp_path / "command", tmp_path / "api"
    assert cli.main(_cli_convert(coco_sample, command, "--max-reject-fraction", str(LENIENT))) == 0
    convert_api("coco", images=coco_sample.images_dir, annotations=coco_sample.annotations,
                output=str(api), max_reject_fraction=LENIENT, quiet=True,
                beam_args=list(IN_MEMORY))
    expected = folder_files(converted.output)
    assert folder_files(command) == expected
    assert folder_files(api) == expected


def test_rerun_with_fewer_shards_leaves_no_stale_files(
    three_shards, tmp_path, coco_sample, output_at, capsys
):
    out = tmp_path / "out"
    shutil.copytree(three_shards.output, out)
    # What a killed earlier run leaves behind (its temp folder, and its lock naming it),
    # and a file of the user's.
    killed = out / f"{TEMP_PREFIX}0123456789ab"
    killed.mkdir()
    (killed / "train-00000-of-00003.tfrecord.deadbeef").write_bytes(b"partial")
    (out / LOCK).write_bytes(LockRecord("0123456789ab", host="elsewhere", pid=1,
                                        temp_folders=(killed.name,)).to_bytes())
    (out / "notes.txt").write_text("mine")
    code = cli.main(
        _cli_convert(
            coco_sample, out, "--shards", "2", "--overwrite", "--max-reject-fraction", str(LENIENT)
        )
    )
    assert code == 0, capsys.readouterr().err
    assert "examples" in capsys.readouterr().out  # the summary table
    result = output_at(out)
    assert result.files() == sorted(
        [
            MANIFEST,
            LABELS,
            REJECTS,
            "notes.txt",
            "dataset_info.json",  # TFDS metadata
            "features.json",
            "image.object.class.label.labels.txt",
            "train-00000-of-00002.tfrecord",
            "train-00001-of-00002.tfrecord",
            *_duplicate_lists("train-00000-of-00002.tfrecord", "train-00001-of-00002.tfrecord"),
        ]
    )
    assert (out / "notes.txt").read_text() == "mine"  # --overwrite never deletes foreign files
    assert result.records() == three_shards.records()
    assert result.manifest["totals"]["shards"] == 2


def test_folder_with_a_foreign_file_is_refused(coco_sample, tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    code = cli.main(_cli_convert(coco_sample, out, "--max-reject-fraction", str(LENIENT)))
    assert code == 2
    err = capsys.readouterr().err
    assert "notes.txt" in err and "--overwrite" in err
    assert sorted(os.listdir(out)) == ["notes.txt"]


# ----------------------------------------------------------------- compression and index


def _framed_record_at(stream: bytes, offset: int, framed_length: int) -> bytes:
    (length,) = struct.unpack("<Q", stream[offset : offset + 8])
    assert framed_length == length + 16
    return stream[offset + 12 : offset + 12 + length]


@pytest.mark.parametrize(
    ("compression", "suffix", "decompress"),
    [
        ("gzip", ".tfrecord.gz", gzip.decompress),
        ("zlib", ".tfrecord.zz", zlib.decompress),
    ],
)
def test_compression(convert, tmp_path, converted, compression, suffix, decompress):
    result = convert(tmp_path / "out", compression=compression, shards=2)
    shard_names = [f"train-0000{i}-of-00002{suffix}" for i in range(2)]
    assert [os.path.basename(p) for p in result.shard_paths()] == shard_names
    assert set(result.files()) == {MANIFEST, LABELS, REJECTS, *shard_names,
                                   *_duplicate_lists(*shard_names)}
    assert result.manifest["options"]["compression"] == compression
    records = result.records()
    assert records == converted.records()
    for path in result.shard_paths():
        with open(path, "rb") as f:
            assert decompress(f.read())  # really compressed with that codec


@pytest.mark.parametrize("compression", ["gzip", "zlib"])
@pytest.mark.case(
    '`--index` with `--compression gzip`',
    'refused (exit 2): offsets into a compressed shard are of no use',
)
def test_index_with_compression_is_refused_before_anything_runs(
        coco_sample, tmp_path, capsys, compression):
    # The offsets of a compressed shard's index would count decompressed bytes, which no
    # reader can seek to: the pair is a usage error, not a silently useless file.
    out = tmp_path / "out"
    code = cli.main(["convert", "coco", "--images", coco_sample.images_dir, "--annotations",
                     coco_sample.annotations, "--output", str(out), "--quiet", "--index",
                     "--compression", compression, *IN_MEMORY])
    err = capsys.readouterr().err
    assert code == cli.EXIT_USAGE
    assert f"--index cannot be combined with --compression {compression}" in err
    assert "Error" not in err and "Traceback" not in err
    assert not out.exists()
    with pytest.raises(ValueError, match="--index cannot be combined"):
        ShardOptions(compression=compression, index=True)


def test_index_offsets_seek_straight_into_an_uncompressed_shard(convert, tmp_path, converted):
    result = convert(tmp_path / "out", index=True, shards=2)
    shard_names = [f"train-0000{i}-of-00002.tfrecord" for i in range(2)]
    assert set(result.files()) == {
        MANIFEST,
        LABELS,
        REJECTS,
        "dataset_info.json",  # TFDS metadata
        "features.json",
        "image.object.class.label.labels.txt",
        *shard_names,
        *(n + ".idx" for n in shard_names),
        *_duplicate_lists(*shard_names),
    }
    assert result.manifest["options"]["index"] is True
    seen = 0
    for path in result.shard_paths():
        with open(path + ".idx", encoding="ascii") as f:
            entries = read_index(f)
        expected = [r for r in open_records(path)]
        assert len(entries) == len(expected) > 0
        with open(path, "rb") as f:
            for number in reversed(range(len(entries))):  # random access, not a scan
                offset, framed_length = entries[number]
                f.seek(offset)
                framed = f.read(framed_length)
                assert framed[12:-4] == expected[number]
                seen += 1
        assert entries[-1][0] + entries[-1][1] == os.path.getsize(path)
    assert seen == len(converted.records())


# ----------------------------------------------------------------- failures


def test_reject_limit_fails_without_committing(coco_sample, tmp_path, capsys):
    out = tmp_path / "out"
    code = cli.main(_cli_convert(coco_sample, out, "--max-reject-fraction", "0.01"))
    assert code == 1
    err = capsys.readouterr().err
    bad = len(coco_sample.expected["rejected_images"])
    total = bad + len(coco_sample.expected["good_images"])
    assert f"{bad} of {total}" in err
    assert "--max-reject-fraction" in err
    assert FAILED_REJECTS in err
    assert not (out / MANIFEST).exists()
    # The lock records the rejects file as recordbeam's: the next run may replace it.
    assert sorted(os.listdir(out)) == [LOCK, FAILED_REJECTS]
    assert read_lock(str(out)).files == (FAILED_REJECTS,)
    with open(out / FAILED_REJECTS, encoding="utf-8") as f:
        failed = [json.loads(line) for line in f]
    assert _image_rejects(failed) == coco_sample.expected["rejected_images"]


def test_reject_limit_leaves_a_previous_output_intact(
    coco_sample, converted, output_at, tmp_path, capsys
):
    out = tmp_path / "out"
    shutil.copytree(converted.output, out)
    before = output_at(out).snapshot()
    code = cli.main(_cli_convert(coco_sample, out, "--max-reject-fraction", "0.01"))
    assert code == 1
    capsys.readouterr()
    after = output_at(out).snapshot()
    assert set(after) == set(before) | {FAILED_REJECTS, LOCK}
    for name, data in before.items():
        assert after[name] == data, f"{name} changed"
    assert _no_temp_folders(out)


def test_malformed_json_fails_naming_the_file(coco_sample, tmp_path, capsys):
    broken = tmp_path / "broken.json"
    with open(coco_sample.annotations, "rb") as f:
        text = f.read()
    broken.write_bytes(text[: len(text) // 2])
    out = tmp_path / "out"
    argv = _cli_convert(coco_sample, out, "--max-reject-fraction", str(LENIENT))
    argv[argv.index("--annotations") + 1] = str(broken)
    code = cli.main(argv)
    assert code == 1
    err = capsys.readouterr().err
    assert str(broken) in err
    assert "JSON" in err
    assert not (out / MANIFEST).exists()


@pytest.mark.parametrize("section", ["categories", "images"])
def test_a_section_that_is_no_list_is_named_as_such(coco_sample, tmp_path, capsys, section):
    with open(coco_sample.annotations, encoding="utf-8") as f:
        coco = json.load(f)
    coco[section] = {str(i): item for i, item in enumerate(coco[section])}  # keyed, not listed
    keyed = tmp_path / "keyed.json"
    keyed.write_text(json.dumps(coco), encoding="utf-8")
    argv = _cli_convert(coco_sample, tmp_path / "out", "--max-reject-fraction", str(LENIENT))
    argv[argv.index("--annotations") + 1] = str(keyed)
    assert cli.main(argv) == 1
    err = capsys.readouterr().err
    assert f"{keyed}: '{section}' is an object, not a list" in err, err
    assert not (tmp_path / "out" / MANIFEST).exists()


def test_a_byte_order_mark_before_the_json_changes_nothing(coco_sample, tmp_path):
    # Some Windows tools write one; JSON readers may skip it (RFC 8259), ijson's C parser does not.
    marked = tmp_path / "marked.json"
    with open(coco_sample.annotations, "rb") as f:
        marked.write_bytes(b"\xef\xbb\xbf" + f.read())
    plain = tmp_path / "plain"
    assert cli.main(_cli_convert(coco_sample, plain, "--max-reject-fraction", str(LENIENT))) == 0
    argv = _cli_convert(coco_sample, tmp_path / "marked", "--max-reject-fraction", str(LENIENT))
    argv[argv.index("--annotations") + 1] = str(marked)
    assert cli.main(argv) == 0
    shards = sorted(n for n in os.listdir(plain) if n.endswith(".tfrecord"))
    assert shards
    for name in [*shards, "labels.txt"]:
        assert (tmp_path / "marked" / name).read_bytes() == (plain / name).read_bytes(), name
    # The same rejects (those naming the annotation file name the file given).
    rejects = (plain / "rejects.jsonl").read_text()
    assert rejects
    assert (tmp_path / "marked" / "rejects.jsonl").read_text() == rejects.replace(
        coco_sample.annotations, str(marked))


def _delete_when_seen(record, victim: str):
    if record.path == victim and os.path.exists(victim):
        os.remove(victim)
    return record


def test_image_deleted_after_listing_is_a_missing_reject(coco_sample, tmp_path, output_at):
    images = tmp_path / "images"
    shutil.copytree(coco_sample.images_dir, images)
    victim_name = coco_sample.expected["good_images"][0]
    victim = str(images / victim_name)
    out = str(tmp_path / "out")
    coco = CocoOptions(str(images), coco_sample.annotations)

    def build(p):
        read = p | "ReadCoco" >> ReadCoco(coco)
        # Runs after the listing and before the shard writer reads the bytes.
        records = read.records | "DeleteOne" >> beam.Map(_delete_when_seen, victim)
        sink = WriteShards(
            out,
            CocoEncoder(ImageChecks()),
            options=ShardOptions(max_reject_fraction=LENIENT),
            rejects=read.rejects,
            counts=read.counts,
            metadata=read.metadata,
        )
        _ = records | "WriteShards" >> sink
        return sink

    result = pipeline.run(build, out, beam_args=list(IN_MEMORY), show_progress=False)
    assert not os.path.exists(victim)
    view = output_at(out)
    missing = [r for r in view.rejects() if r["reason"] == "missing" and r["kind"] == "image"]
    assert {os.path.basename(r["source"]) for r in missing} == {
        victim_name,
        *(n for n, why in coco_sample.expected["rejected_images"].items() if why == "missing"),
    }
    names = sorted(_text(e["image/filename"][0]) for e in view.examples())
    assert names == coco_sample.expected["good_images"][1:]
    assert result.manifest["totals"]["examples"] == len(names)
