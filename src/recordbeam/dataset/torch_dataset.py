"""A PyTorch ``IterableDataset`` over one split of an output folder (torch optional).

``from recordbeam.dataset.torch_dataset import RecordIterableDataset`` imports torch at that
moment; nothing else in recordbeam needs it. Install it with the ``torch`` extra.

Each consumer (a DataLoader worker of a distributed rank) reads its own shards:
consumer ``c`` of ``C = world_size * num_workers`` takes shards ``c, c + C, c + 2C...``
of the (per-epoch shuffled) shard list, so no record is read twice and shards are
opened by one process only. With fewer shards than consumers every consumer reads all
shards and keeps every ``C``-th record instead (correct, but each one reads everything;
write more shards). Records are decoded by :class:`recordbeam.dataset.reader.SplitReader`, so
they have its shapes (list features such as ``image/object/*`` are always 1-D arrays).

Distributed training needs the same number of steps on every rank, but ranks get whole
shards, whose sizes differ a little (the sink spreads examples by hash): stop an epoch
after a fixed number of steps, e.g. ``len(dataset) // (world_size * batch_size)`` minus a
margin, rather than when the loader runs dry.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, TypeVar

from recordbeam.dataset.reader import SplitReader

__all__ = ["RecordIterableDataset", "consumer_plan", "shuffle_buffer"]  # noqa: F822 - lazy

T = TypeVar("T")


def consumer_plan(
    num_shards: int, consumer: int, consumers: int, order: Sequence[int] | None = None
) -> tuple[list[int], int, int]:
    """Which shards one consumer reads, and which of their records it keeps.

    Args:
        num_shards: shards in the split.
        consumer: this consumer's number, ``rank * num_workers + worker_id``.
        consumers: ``world_size * num_workers``.
        order: the shard order for this epoch (default ``range(num_shards)``).

    Returns:
        ``(shards, stride, offset)``: read ``shards`` and keep records whose running number
        ``i`` (over those shards) satisfies ``i % stride == offset``.
    """
    if not 0 <= consumer < consumers:
        raise ValueError(f"consumer {consumer} out of range for {consumers} consumers")
    order = list(range(num_shards)) if order is None else list(order)
    if num_shards >= consumers:
        return order[consumer::consumers], 1, 0
    return order, consumers, consumer


def shuffle_buffer(items: Iterable[T], size: int, rng: random.Random) -> Iterator[T]:
    """Yield ``items`` in random order using a buffer of ``size`` (0 or 1: unchanged).

    Each new item replaces a random slot whose item is yielded; the rest is emptied in
    random order at the end. Memory: ``size`` items.
    """
    if size <= 1:
        yield from items
        return
    buffer: list[T] = []
    for item in items:
        if len(buffer) < size:
            buffer.append(item)
            continue
        slot = rng.randrange(size)
        yield buffer[slot]
        buffer[slot] = item
    rng.shuffle(buffer)
    yield from buffer


def _distributed() -> tuple[int, int]:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def _make_class() -> type:
    try:
        import torch.utils.data
    except ImportError as error:
        raise ImportError(
            "recordbeam.dataset.torch_dataset needs PyTorch: pip install torch"
        ) from error

    class RecordIterableDataset(torch.utils.data.IterableDataset):
        """Examples of one split as dicts of NumPy arrays (or what ``transform`` makes).

        Args:
            output_dir: a finished output folder.
            split: which split; may be left out when the folder holds only one.
            shuffle: shuffle the shard order every epoch and records through a buffer.
            buffer_size: records held for shuffling (with ``shuffle``).
            seed: base seed; the epoch (see :meth:`set_epoch`) is added to it, so every
                rank sees the same shard order in one epoch and a new one the next.
            decode_images: decode image features with Pillow (``(H, W, 3)`` uint8).
            features: keep only these features.
            transform: applied to every example dict (e.g. to make tensors).
            rank, world_size: override what ``torch.distributed`` reports.
        """

        def __init__(
            self,
            output_dir: str,
            split: str | None = None,
            *,
            shuffle: bool = False,
            buffer_size: int = 1000,
            seed: int = 0,
            decode_images: bool = False,
            features: Sequence[str] | None = None,
            transform: Callable[[dict], Any] | None = None,
            rank: int | None = None,
            world_size: int | None = None,
        ) -> None:
            super().__init__()
            self.reader = SplitReader(
                output_dir, split, decode_images=decode_images, features=features
            )
            self.shuffle = shuffle
            self.buffer_size = buffer_size
            self.seed = seed
            self.epoch = 0
            self.transform = transform
            self._rank = rank
            self._world_size = world_size

        def set_epoch(self, epoch: int) -> None:
            """Call before each epoch (like ``DistributedSampler.set_epoch``) for a new order."""
            self.epoch = epoch

        def __len__(self) -> int:
            return len(self.reader)

        def _rank_and_world(self) -> tuple[int, int]:
            rank, world = _distributed()
            return (
                rank if self._rank is None else self._rank,
                world if self._world_size is None else self._world_size,
            )

        def __iter__(self) -> Iterator[Any]:
            rank, world = self._rank_and_world()
            info = torch.utils.data.get_worker_info()
            worker, workers = (info.id, info.num_workers) if info is not None else (0, 1)
            consumer, consumers = rank * workers + worker, world * workers
            order = list(range(len(self.reader.shard_paths)))
            if self.shuffle:
                random.Random(self.seed + self.epoch).shuffle(order)  # same on every rank
            shards, stride, offset = consumer_plan(len(order), consumer, consumers, order)
            records = self._records(shards, stride, offset)
            if self.shuffle:
                rng = random.Random((self.seed + self.epoch) * 1_000_003 + consumer)
                records = shuffle_buffer(records, self.buffer_size, rng)
            for example in records:
                yield self.transform(example) if self.transform else example

        def _records(self, shards: list[int], stride: int, offset: int) -> Iterator[dict]:
            number = 0
            for shard in shards:
                for example in self.reader.iter_file(self.reader.shard_paths[shard]):
                    if number % stride == offset:
                        yield example
                    number += 1

    RecordIterableDataset.__module__ = __name__
    return RecordIterableDataset


_CLASS: type | None = None


def __getattr__(name: str) -> Any:
    # The class derives from torch's IterableDataset, so it is built on first use.
    global _CLASS
    if name == "RecordIterableDataset":
        if _CLASS is None:
            _CLASS = _make_class()
        return _CLASS
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
