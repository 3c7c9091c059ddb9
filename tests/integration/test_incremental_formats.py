"""``convert --incremental`` for every input format: an image repainted is the one example
encoded again, an image deleted leaves the split, and each version holds what a full
rebuild of the same inputs holds (the reliability suite's dataset of each format)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from growing_corpus import examples, globbed_examples, last_run, rejects, split_facts
from lanes import one_in_make_test

from recordbeam.cli.main import main

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "reliability"))

from format_datasets import FORMATS, HEIGHT, WIDTH, build  # noqa: E402
from reliability_data import jpeg  # noqa: E402

#: One shard per image, and a deleted image may leave a reject behind.
OPTIONS = ("--shard-size", "1B", "--max-reject-fraction", "1")


def _split(folder: Path) -> str:
    (split,) = json.loads((folder / "manifest.json").read_text())["splits"]
    return split


def _assert_same_as_rebuild(dataset, out: Path, full: Path) -> None:
    assert main(dataset.argv(full, *OPTIONS)) == 0
    split = _split(full)
    assert examples(out, split) == examples(full, split)
    assert globbed_examples(out, split) == examples(full, split)
    assert split_facts(out, split) == split_facts(full, split)
    assert rejects(out) == rejects(full)


@pytest.mark.parametrize("kind", one_in_make_test(FORMATS))
def test_every_format_re_encodes_what_changed_and_drops_what_went(kind, tmp_path):
    dataset = build(kind, tmp_path / "in")
    out = tmp_path / "out"
    assert main(dataset.argv(out, "--incremental", *OPTIONS)) == 0
    split = _split(out)
    total = last_run(out, split)["added"]
    assert total >= 2

    dataset.image("a.jpg").write_bytes(jpeg(WIDTH, HEIGHT, (250, 250, 0)))
    assert main(dataset.argv(out, "--incremental", *OPTIONS)) == 0
    run = last_run(out, split)
    assert (run["changed"], run["unchanged"], run["added"], run["removed"]) == (1, total - 1, 0, 0)
    assert run["shards_kept"] >= total - 1
    _assert_same_as_rebuild(dataset, out, tmp_path / "full1")

    dataset.image("b.jpg").unlink()
    assert main(dataset.argv(out, "--incremental", *OPTIONS)) == 0
    assert last_run(out, split)["unchanged"] < total
    _assert_same_as_rebuild(dataset, out, tmp_path / "full2")
