"""Our Open Images reading against an independent writer: Datumaro exports Open Images
(``annotations/*.csv``, ``images/<subset>/``) from a COCO sample, we convert that export,
and every box and class must match the COCO truth (boxes within a pixel).

Datumaro comes with the ``formats-test`` extra (it needs numpy>=2.2, which the oldest-Beam
environment cannot install); without it this test is skipped.
"""

from __future__ import annotations

import pytest

dm = pytest.importorskip(
    "datumaro", reason="datumaro is not installed (pip install -e '.[formats-test]')")

from datumaro_truth import (  # noqa: E402
    BOX_KINDS,
    assert_every_box_matches,
    coco_truth,
    convert,
    export_coco,
    read_examples,
)


def test_datumaro_open_images_export_converts_to_the_coco_truth(tmp_path):
    coco = coco_truth(tmp_path)
    manifest = convert("openimages", export_coco(coco, "open_images"), tmp_path / "out")
    # Datumaro names its one subset "default" (default-annotations-bbox.csv).
    examples = read_examples(tmp_path / "out", BOX_KINDS)
    # Its class-descriptions.csv keeps COCO's order.
    assert list(manifest["label_map"].values()) == coco.names_in_id_order()
    assert_every_box_matches(coco, examples)
