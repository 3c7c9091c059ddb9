"""What the Datumaro interop tests share: Datumaro, an independent writer, exports a COCO
sample to a format; we convert that export; every box and class written must match the
COCO truth (boxes within a pixel).

Datumaro comes with the ``formats-test`` extra (it needs numpy>=2.2, which the oldest-Beam
environment cannot install); without it, importing this module skips the test module that
imports it.
"""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip(
    "datumaro", reason="datumaro is not installed (pip install -e '.[formats-test]')")

from datumaro.components.dataset import Dataset  # noqa: E402

from recordbeam.cli import main as cli  # noqa: E402
from recordbeam.testing.samples import make_coco_sample  # noqa: E402
from recordbeam.tfrecord.example import decode_example  # noqa: E402
from recordbeam.tfrecord.framing import open_records  # noqa: E402

IN_MEMORY = ["--direct_running_mode=in_memory", "--direct_num_workers=1"]
#: The features the comparison reads; a test adds the kinds of its format's own features.
BOX_KINDS = {"image/object/class/label": "int64", "image/object/bbox/xmin": "float",
             "image/object/bbox/xmax": "float", "image/object/bbox/ymin": "float",
             "image/object/bbox/ymax": "float", "image/object/class/text": "bytes"}

#: One object: class name and corners in pixels (x0, y0, x1, y1).
Box = tuple[str, float, float, float, float]


@dataclass(frozen=True)
class CocoTruth:
    """A generated COCO sample (no broken images) and its annotations, read as truth."""

    root: Path
    annotations: str
    truth: dict[str, Any]

    @property
    def images(self) -> list[dict[str, Any]]:
        return self.truth["images"]

    @property
    def categories(self) -> dict[int, str]:
        return {c["id"]: c["name"] for c in self.truth["categories"]}

    def names_in_id_order(self) -> list[str]:
        categories = self.categories
        return [categories[i] for i in sorted(categories)]

    def boxes(self, corners: Callable[[dict[str, Any]], tuple[float, ...]] | None = None,
              ) -> dict[int, list[Box]]:
        """Each image id's objects; ``corners(annotation)`` overrides COCO's own corners."""
        categories = self.categories
        by_image: dict[int, list[Box]] = {i["id"]: [] for i in self.images}
        for a in self.truth["annotations"]:
            x, y, w, h = a["bbox"]
            box = corners(a) if corners else (x, y, x + w, y + h)
            by_image[a["image_id"]].append((categories[a["category_id"]], *box))
        return by_image


def coco_truth(root: Path) -> CocoTruth:
    sample = make_coco_sample(root / "coco", include_bad=False)
    with open(sample.annotations, encoding="utf-8") as f:
        return CocoTruth(root, sample.annotations, json.load(f))


def convert_export(tmp_path: Path, kind: str, fmt: str, kinds: Mapping[str, str] = BOX_KINDS,
                   *options: str) -> tuple[CocoTruth, dict[str, Any], dict[str, dict[str, Any]]]:
    """A COCO sample in ``tmp_path``, Datumaro's ``fmt`` export of it, and its conversion
    by ``convert <kind>`` into ``tmp_path/out``: the truth, the manifest and the examples
    of the split Datumaro names "default"."""
    coco = coco_truth(tmp_path)
    manifest = convert(kind, export_coco(coco, fmt), tmp_path / "out", *options)
    return coco, manifest, read_examples(tmp_path / "out", kinds)


def export(dataset: Dataset, folder: Path, fmt: str) -> Path:
    """Datumaro's ``fmt`` export of ``dataset`` into ``folder``, images included."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Datumaro's own deprecations, not ours to judge
        dataset.export(str(folder), fmt, save_media=True)
    return folder


def export_coco(coco: CocoTruth, fmt: str) -> Path:
    """The COCO sample as Datumaro exports it to ``fmt``, in ``root/<fmt>``."""
    return export(Dataset.import_from(coco.annotations, "coco_instances"), coco.root / fmt, fmt)


def convert(kind: str, input_root: Path, out: Path, *options: str) -> dict[str, Any]:
    """``recordbeam convert <kind>``; it must succeed. Returns the manifest."""
    code = cli.main(["convert", kind, "--input", str(input_root), "--output", str(out),
                     *options, "--quiet", *IN_MEMORY])
    assert code == 0
    return json.loads((out / "manifest.json").read_text())


def read_examples(out: Path, kinds: Mapping[str, str], key: str = "image/source_id",
                  split: str | None = "default") -> dict[str, dict[str, Any]]:
    """The examples of ``split`` (Datumaro names its one subset "default"; None: every
    split) keyed by their ``key`` feature."""
    names = sorted(n for n in os.listdir(out) if n.endswith(".tfrecord")
                   and (split is None or n.startswith(f"{split}-")))
    return {e[key][0].decode(): e
            for n in names for r in open_records(os.path.join(out, n))
            for e in [decode_example(r, kinds)]}


def written_boxes(example: Mapping[str, Any], width: float, height: float) -> list[Box]:
    """The example's objects, corners back in pixels, sorted as :func:`assert_boxes_match`
    compares them."""
    return sorted(
        (text.decode(), x0 * width, y0 * height, x1 * width, y1 * height)
        for text, x0, y0, x1, y1 in zip(
            example["image/object/class/text"], example["image/object/bbox/xmin"],
            example["image/object/bbox/ymin"], example["image/object/bbox/xmax"],
            example["image/object/bbox/ymax"], strict=True))


def assert_boxes_match(example: Mapping[str, Any], expected: list[Box], where: str,
                       size: tuple[int, int] | None = None) -> int:
    """Classes equal and corners within a pixel of ``expected`` (``size``: the width and
    height the fractions are of; default: the example's own). Returns the objects checked."""
    width, height = size or (int(example["image/width"][0]), int(example["image/height"][0]))
    written, expected = written_boxes(example, width, height), sorted(expected)
    assert [w[0] for w in written] == [e[0] for e in expected], where
    for got, want in zip(written, expected, strict=True):
        assert got[1:] == pytest.approx(want[1:], abs=1.0), where
    return len(written)


def image_stem(image: Mapping[str, Any]) -> str:
    """A COCO image's file name without its extension: the id most formats keep."""
    return os.path.splitext(image["file_name"])[0]


def assert_every_box_matches(coco: CocoTruth, examples: Mapping[str, Mapping[str, Any]],
                             key_of: Callable[[Mapping[str, Any]], str] = image_stem, *,
                             by_image: Mapping[int, list[Box]] | None = None,
                             truth_sizes: bool = False) -> None:
    """One example per COCO image (``key_of(image)`` its key in ``examples``), each
    holding that image's objects (``by_image``, default: COCO's boxes), at least one in
    all. ``truth_sizes``: box fractions are of COCO's width and height, not the example's."""
    assert set(examples) == {key_of(i) for i in coco.images}
    by_image = by_image or coco.boxes()
    checked = sum(
        assert_boxes_match(examples[key_of(i)], by_image[i["id"]], i["file_name"],
                           (i["width"], i["height"]) if truth_sizes else None)
        for i in coco.images)
    assert checked == len(coco.truth["annotations"]) > 0
