"""The short paths of COCO's per-annotation code give what the general paths give: the
order of the join by image id, packed annotations and objects, the annotation id tally."""

from __future__ import annotations

import pickle
import random

import pytest

from recordbeam.sources.coco.checks import id_order
from recordbeam.sources.coco.input_tasks import IdTally
from recordbeam.sources.coco.join import annotations_in_id_order
from recordbeam.sources.coco.records import (
    Annotation,
    AnnotationBatch,
    Keypoints,
    NamedKeypoints,
    ObjectLabel,
    _without_trailing_none,
    pack_annotations,
    unpack_annotations,
    unpack_objects,
)


def _general_order(batches: list[AnnotationBatch]) -> list:
    return sorted(((a, m.image_id) for m in batches for a in unpack_annotations(m.packed)),
                  key=lambda pair: (id_order(pair[0].id), id_order(pair[1])))


def _batch(image_id, ids) -> AnnotationBatch:
    return AnnotationBatch(image_id, pack_annotations(
        [Annotation(i, 1, (0.0, 0.0, 1.0, 1.0), 1.0, 0) for i in ids]))


@pytest.mark.parametrize("seed", range(20))
def test_join_order_matches_the_general_order(seed):
    rng = random.Random(seed)
    ids = rng.sample(range(-50, 10**12), rng.randint(0, 12))
    ids += rng.sample(ids, min(len(ids), 2))  # repeated ids keep the file's order
    cases = [
        [_batch(7, ids)],  # one batch of integer ids: the short path
        [_batch(7, [*ids, "x", "10"])],  # text ids: the general path
        [_batch(7, ids), _batch("7", ids[:3])],  # two spellings of the image id
        [_batch(7, ids[:4]), _batch(7, ids[4:])],  # an image split over two flushes
        [_batch(7, [*ids, 2**70])],  # an id beyond 64 bits is an int all the same
    ]
    for batches in cases:
        assert annotations_in_id_order(batches) == _general_order(batches)


POINTS = Keypoints((1.0, 2.0, 2.0), 1)
NAMED = NamedKeypoints((1.0, 2.0, 2.0), 1, ("nose",))


@pytest.mark.parametrize("item", [
    Annotation(1, 2, (0, 0, 1, 1), 1.0, 0),
    Annotation(1, 2, (0, 0, 1, 1), 1.0, 1, [[0, 0, 1, 1, 1, 0]]),
    Annotation(1, 2, (0, 0, 1, 1), 1.0, 0, None, POINTS),
    Annotation(1, 2, (0, 0, 1, 1), 1.0, 0, {"counts": "x", "size": [1, 1]}, POINTS),
    ObjectLabel(1, 2, "dog", (0, 0, 1, 1), 1.0, 0),
    ObjectLabel(1, 2, "dog", (0, 0, 1, 1), 1.0, 0, None, NAMED),
    ObjectLabel(1, 2, "dog", (0, 0, 1, 1), 1.0, 0, [[0, 0, 1, 1, 1, 0]]),
])
def test_packing_drops_the_trailing_unset_fields_and_unpacks_to_the_same(item):
    rows = pickle.loads(pack_annotations([item, item]))
    assert rows == (_without_trailing_none(tuple(item)),) * 2
    assert all(type(row) is tuple for row in rows)
    unpack = unpack_annotations if type(item) is Annotation else unpack_objects
    back = unpack(pack_annotations([item]))
    assert back == (item,) and type(back[0]) is type(item)


def test_annotation_id_tally_finds_repeats_of_every_kind():
    tally = IdTally()
    for value in (1, 2, 2**70, 2**70, -(2**63), -(2**63), "a", "a", 3, 1):
        tally.add(value)
    assert tally.repeated() == [-(2**63), 1, 2**70, "a"]
