"""torch_dataset: shards split across DataLoader workers and ranks, shuffling."""

from __future__ import annotations

import random

import pytest

from recordbeam.dataset.torch_dataset import consumer_plan, shuffle_buffer


def test_consumer_plan_covers_every_shard_once():
    for shards in (1, 3, 8):
        for consumers in (1, 2, 4):
            seen = []
            for c in range(consumers):
                mine, stride, offset = consumer_plan(shards, c, consumers)
                seen += [(s, stride, offset) for s in mine]
            if shards >= consumers:
                assert sorted(s for s, _, _ in seen) == list(range(shards))
            else:  # everyone reads all shards and keeps its own records
                assert {(st, off) for _, st, off in seen} == {
                    (consumers, c) for c in range(consumers)
                }


def test_shuffle_buffer_permutes():
    items = list(range(100))
    out = list(shuffle_buffer(items, 10, random.Random(1)))
    assert sorted(out) == items and out != items
    assert list(shuffle_buffer(items, 0, random.Random(1))) == items


def source_ids(loader) -> list[bytes]:
    return [ex["image/source_id"].item() for ex in loader]


def test_dataloader_workers_and_ranks_split_the_split(three_shards):
    torch = pytest.importorskip("torch")
    from recordbeam.dataset.torch_dataset import RecordIterableDataset

    want = sorted(source_ids(RecordIterableDataset(three_shards.output)))
    assert len(want) == three_shards.manifest["splits"]["train"]["examples"]
    ds = RecordIterableDataset(three_shards.output, shuffle=True, buffer_size=4, seed=3)
    loader = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2)
    got = source_ids(loader)
    assert sorted(got) == want  # no example twice, none lost
    ranks = [
        source_ids(RecordIterableDataset(three_shards.output, rank=r, world_size=2))
        for r in range(2)
    ]
    assert sorted(ranks[0] + ranks[1]) == want and not set(ranks[0]) & set(ranks[1])
    ds.set_epoch(1)
    assert source_ids(torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2)) != got


def test_more_consumers_than_shards(converted):
    pytest.importorskip("torch")
    from recordbeam.dataset.torch_dataset import RecordIterableDataset

    parts = [
        source_ids(RecordIterableDataset(converted.output, rank=r, world_size=3)) for r in range(3)
    ]
    everything = sorted(source_ids(RecordIterableDataset(converted.output)))
    assert sorted(parts[0] + parts[1] + parts[2]) == everything
    assert all(parts)


def test_batches_collate_to_tensors(three_shards):
    torch = pytest.importorskip("torch")
    from recordbeam.dataset.torch_dataset import RecordIterableDataset

    ds = RecordIterableDataset(three_shards.output, features=["image/height", "image/width"])
    batch = next(iter(torch.utils.data.DataLoader(ds, batch_size=4)))
    assert batch["image/height"].dtype == torch.int64 and batch["image/height"].shape == (4,)
