"""reader: recordbeam.read over a hand-made output folder, iteration and random access."""

from __future__ import annotations

import io
import json
import sys

import numpy as np
import pytest
from PIL import Image

import recordbeam
from recordbeam.dataset.reader import ReaderError
from recordbeam.tfrecord.example import encode_example
from recordbeam.tfrecord.framing import RecordWriter


def png(width: int, height: int, value: int) -> bytes:
    out = io.BytesIO()
    Image.new("L", (width, height), value).save(out, "PNG")
    return out.getvalue()


def example(i: int) -> dict:
    return {
        "image/encoded": png(4 + i, 3, 10 * i),
        "image/height": 3,
        "image/width": 4 + i,
        "boxes": [0.5] * (i % 3),
        "name": f"n{i}",
    }


def spec(dtype: str, fixed: int | None, present: int) -> dict:
    return {
        "dtype": dtype,
        "fixed_length": fixed,
        "min_length": 0,
        "max_length": 2,
        "present_in": present,
    }


def make_folder(root, per_shard=(3, 2), compression="none", index=True) -> list[dict]:
    """Shards written with our framing plus a manifest written by hand."""
    examples = [example(i) for i in range(sum(per_shard))]
    suffix = ".tfrecord" + {"none": "", "gzip": ".gz"}[compression]
    shards, start = [], 0
    for number, count in enumerate(per_shard):
        name = f"train-{number:05d}-of-{len(per_shard):05d}{suffix}"
        idx = io.StringIO()
        with open(root / name, "wb") as f, RecordWriter(f, compression, index=idx) as w:
            for ex in examples[start : start + count]:
                w.write(encode_example(ex, {"boxes": "float"}))
        if index:
            (root / (name + ".idx")).write_text(idx.getvalue())
        shards.append({"file": name, "examples": count, "bytes": (root / name).stat().st_size})
        start += count
    n = len(examples)
    features = {
        "image/encoded": spec("string", 1, n),
        "image/height": spec("int64", 1, n),
        "image/width": spec("int64", 1, n),
        "boxes": spec("float32", None, n),
        "name": spec("string", 1, n),
    }
    manifest = {
        "features": features,
        "splits": {"train": {"examples": n, "bytes": 1, "shards": shards, "features": features}},
    }
    (root / "manifest.json").write_text(json.dumps(manifest))
    return examples


def test_iterates_every_example_with_manifest_shapes(tmp_path):
    written = make_folder(tmp_path)
    got = list(recordbeam.read(str(tmp_path)))
    assert len(got) == len(written)
    for ex, want in zip(got, written, strict=True):
        assert ex["image/width"].shape == () and int(ex["image/width"]) == want["image/width"]
        assert ex["name"].item() == want["name"].encode()
        assert ex["boxes"].dtype == np.float32 and ex["boxes"].tolist() == want["boxes"]
        assert ex["image/encoded"].item() == want["image/encoded"]


def test_decodes_images_with_pillow(tmp_path):
    written = make_folder(tmp_path)
    ex = next(iter(recordbeam.read(str(tmp_path), decode_images=True)))
    assert ex["image/encoded"].shape == (3, written[0]["image/width"], 3)
    assert ex["image/encoded"].dtype == np.uint8
    gray = recordbeam.read(str(tmp_path), decode_images=True, image_mode=None)[1]
    assert gray["image/encoded"].shape == (3, 5, 1) and int(gray["image/encoded"][0, 0, 0]) == 10


@pytest.mark.parametrize("index", [True, False])
def test_random_access_matches_iteration(tmp_path, index):
    written = make_folder(tmp_path, index=index)
    reader = recordbeam.read(str(tmp_path))
    assert len(reader) == 5
    for i in [4, 0, 3, 2, -1]:
        assert reader[i]["name"].item() == written[i]["name"].encode()
    with pytest.raises(IndexError, match="5"):
        reader[5]


def test_stale_index_is_reported(tmp_path):
    make_folder(tmp_path)
    (tmp_path / "train-00000-of-00002.tfrecord.idx").write_text("0 20\n")
    with pytest.raises(ReaderError, match="stale.*recordbeam index"):
        recordbeam.read(str(tmp_path))[0]


def test_compressed_shards_iterate_but_refuse_random_access(tmp_path):
    written = make_folder(tmp_path, compression="gzip", index=False)
    reader = recordbeam.read(str(tmp_path))
    assert [e["name"].item() for e in reader] == [w["name"].encode() for w in written]
    with pytest.raises(ReaderError, match="uncompressed"):
        reader[0]


def test_errors_name_the_problem(tmp_path):
    with pytest.raises(ReaderError, match="manifest.json is missing"):
        recordbeam.read(str(tmp_path))
    make_folder(tmp_path)
    with pytest.raises(ReaderError, match="no split 'val'; it has train"):
        recordbeam.read(str(tmp_path), split="val")
    with pytest.raises(ReaderError, match="no feature"):
        recordbeam.read(str(tmp_path), features=["nope"])


def test_selected_features_only(tmp_path):
    make_folder(tmp_path)
    ex = recordbeam.read(str(tmp_path), features=["name"])[0]
    assert list(ex) == ["name"]


def test_reader_does_not_import_beam():
    import subprocess

    code = (
        "import sys, recordbeam; recordbeam.read; import recordbeam.dataset.reader; "
        "print('apache_beam' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def add_split(root, name: str) -> None:
    """A second split in the manifest, sharing the train shards (enough for choosing)."""
    manifest = json.loads((root / "manifest.json").read_text())
    manifest["splits"][name] = manifest["splits"]["train"]
    (root / "manifest.json").write_text(json.dumps(manifest))


@pytest.mark.case(
    '`recordbeam.read(OUT)` on a folder of several splits',
    'an error naming the splits; `split=` is required',
)
def test_split_may_be_left_out_only_when_there_is_one(tmp_path):
    make_folder(tmp_path)
    assert recordbeam.read(str(tmp_path)).split == "train"
    add_split(tmp_path, "val")
    with pytest.raises(ReaderError, match=r"holds the splits train, val; say which one.*split='train'"):
        recordbeam.read(str(tmp_path))
    assert recordbeam.read(str(tmp_path), split="val").split == "val"


def test_the_only_split_is_read_whatever_its_name(tmp_path):
    make_folder(tmp_path)
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    manifest["splits"] = {"val": manifest["splits"]["train"]}
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    assert len(recordbeam.read(str(tmp_path))) == 5


def test_list_feature_with_one_value_everywhere_is_a_1d_array(tmp_path):
    make_folder(tmp_path)
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    features = manifest["splits"]["train"]["features"]
    # "name" holds one value in every example; declared a list, it must stay 1-D.
    features["name"] = {**features["name"], "fixed_length": None, "list": True}
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    reader = recordbeam.read(str(tmp_path))
    for ex in [*reader, reader[2]]:
        assert ex["name"].shape == (1,)
        assert ex["image/height"].shape == ()
