"""manifest.shape_problem on the keys duplicate finding adds: a manifest edited by hand
is named, never crashed on, by the writer, the commands and the readers."""

from __future__ import annotations

import copy

import pytest

from recordbeam.dataset.manifest import FORMAT, shape_problem

WRITTEN = {
    "format": FORMAT,
    "splits": {"train": {"examples": 2, "image_hashes": {"near": False},
                         "shards": [{"file": "train-00000-of-00001.tfrecord",
                                     "examples": 2, "bytes": 100}]}},
    "duplicates": {"groups": 1, "extra_copies": 1, "across_splits": 0, "dropped": 0},
}


def test_a_manifest_with_duplicate_keys_as_written_has_no_problem():
    assert shape_problem(WRITTEN) is None


@pytest.mark.parametrize(("edit", "said"), [
    (lambda m: m.update(duplicates=[1]), "'duplicates' is a JSON list, not an object"),
    (lambda m: m["splits"]["train"].update(image_hashes="yes"),
     "splits['train']['image_hashes'] is a JSON str, not an object"),
])
def test_duplicate_keys_of_the_wrong_type_are_named(edit, said):
    edited = copy.deepcopy(WRITTEN)
    edit(edited)
    assert shape_problem(edited) == said
