"""Read a finished output folder without TensorFlow (and without Beam).

``recordbeam.read(OUT, split="train")`` returns a :class:`SplitReader`: iterate it for
dicts of NumPy arrays, index it (``reader[i]``) for random access through the ``.idx``
files, ``len()`` it for the example count from the manifest. ``split`` may be left out
when the folder holds one split only.

Shapes follow :mod:`recordbeam.dataset.schema`: a fixed-length feature of one value is a 0-d
array (``int64``, ``float32`` or an object array holding ``bytes``), of ``k`` values a
``(k,)`` array, a variable-length feature a 1-D array. List features (per-object
``image/object/*``, a manifest's list columns) are always 1-D, also on a dataset whose
images each hold one object. With ``decode_images=True`` the image features
(``image/encoded``) become ``(height, width, channels)`` ``uint8`` arrays decoded with
Pillow.

Local paths are read with plain ``open()``; paths with a scheme (``gs://``, ``s3://``)
go through Beam's filesystems, imported only then.
"""

from __future__ import annotations

import bisect
import io
import os
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, BinaryIO

import numpy as np

from recordbeam.dataset.manifest import parse_manifest
from recordbeam.dataset.schema import FeatureShape, feature_shapes, image_features
from recordbeam.dataset.wholeness import check_count, check_index, check_size
from recordbeam.tfrecord.example import decode_example
from recordbeam.tfrecord.framing import Compression, compression_for_path, read_records
from recordbeam.tfrecord.index import read_index

__all__ = [
    "ReaderError",
    "SplitReader",
    "choose_split",
    "decode_image",
    "read",
    "read_manifest",
]

_KINDS = {"string": "bytes", "int64": "int64", "float32": "float"}
_MANIFEST = "manifest.json"


class ReaderError(ValueError):
    """The folder, split or index cannot be read as asked; the message says what to do."""


def _is_remote(path: str) -> bool:
    return "://" in path


def _join(base: str, name: str) -> str:
    return base.rstrip("/") + "/" + name if _is_remote(base) else os.path.join(base, name)


def _open(path: str) -> BinaryIO:
    if _is_remote(path):
        from recordbeam import filesystems  # Beam, only for remote paths

        return filesystems.open_read(path)
    return open(path, "rb")


def _exists(path: str) -> bool:
    if _is_remote(path):
        from recordbeam import filesystems

        return filesystems.exists(path)
    return os.path.exists(path)


def read_manifest(output_dir: str) -> dict[str, Any]:
    path = _join(output_dir, _MANIFEST)
    if not _exists(path):
        raise ReaderError(
            f"{output_dir} is not a finished recordbeam output: {_MANIFEST} is missing (a run "
            "that did not finish leaves none). Point at the folder given as --output."
        )
    with _open(path) as f:
        # Any JSON object: the readers never asked for the format field.
        return parse_manifest(f.read(), path, check_format=False)


def decode_image(data: bytes, mode: str | None = "RGB") -> np.ndarray:
    """Decode one encoded image into a ``(height, width, channels)`` ``uint8`` array.

    Args:
        data: JPEG or PNG bytes.
        mode: Pillow mode to convert to (``"RGB"``, ``"L"``...); None keeps the file's.
    """
    from PIL import Image

    with Image.open(io.BytesIO(data)) as image:
        if mode is not None and image.mode != mode:
            image = image.convert(mode)
        array = np.array(image)  # a writable copy (torch warns on read-only arrays)
    return array[:, :, None] if array.ndim == 2 else array


def choose_split(output_dir: str, manifest: Mapping[str, Any], split: str | None) -> str:
    """``split`` when the folder has it; None picks the only split, and is refused (naming
    the splits) when there are several: returning one of them silently would hand
    training code the wrong data."""
    splits = sorted(manifest.get("splits", {}))
    if split is None:
        if len(splits) == 1:
            return splits[0]
        if not splits:
            raise ReaderError(f"{output_dir} holds no splits; its manifest lists none")
        raise ReaderError(
            f"{output_dir} holds the splits {', '.join(splits)}; say which one to read, "
            f"e.g. split={splits[0]!r}"
        )
    if split not in splits:
        raise ReaderError(f"{output_dir} has no split {split!r}; it has {', '.join(splits) or 'none'}")
    return split


class SplitReader:
    """One split of a finished output folder.

    Args:
        output_dir: the folder holding ``manifest.json`` and the shards.
        split: which split; None when the folder holds only one (several: an error).
        decode_images: decode image features with Pillow.
        image_mode: Pillow mode images are converted to; None keeps each file's mode.
        features: keep only these features (all when None).

    Raises:
        ReaderError: no manifest, unknown split, or unknown feature names.
    """

    def __init__(
        self,
        output_dir: str,
        split: str | None = None,
        *,
        decode_images: bool = False,
        image_mode: str | None = "RGB",
        features: Sequence[str] | None = None,
    ) -> None:
        self.output_dir = output_dir
        self.manifest = read_manifest(output_dir)
        split = choose_split(output_dir, self.manifest, split)
        self.split = split
        entry = self.manifest["splits"][split]
        self.shard_files = [s["file"] for s in entry["shards"]]
        self.shard_paths = [_join(output_dir, name) for name in self.shard_files]
        self.shard_examples = [int(s["examples"]) for s in entry["shards"]]
        self.shard_bytes = [int(s["bytes"]) for s in entry["shards"]]
        self._starts = np.cumsum([0, *self.shard_examples]).tolist()
        shapes = feature_shapes(self.manifest, split) if entry["examples"] else []
        known = {s.name for s in shapes}
        if features is not None:
            unknown = sorted(set(features) - known)
            if unknown:
                raise ReaderError(
                    f"split {split!r} of {output_dir} has no {'feature' if len(unknown) == 1 else 'features'} {unknown}; "
                    f"it has {sorted(known)}"
                )
            shapes = [s for s in shapes if s.name in set(features)]
        self.shapes: dict[str, FeatureShape] = {s.name: s for s in shapes}
        self._kinds = {s.name: _KINDS[s.dtype] for s in shapes}
        self._images = set(image_features(shapes)) if decode_images else set()
        self._image_mode = image_mode
        self._indexes: dict[int, list[tuple[int, int]]] = {}

    def __len__(self) -> int:
        return self._starts[-1]

    def __repr__(self) -> str:
        return (
            f"SplitReader({self.output_dir!r}, split={self.split!r}: {len(self)} examples "
            f"in {len(self.shard_paths)} shards)"
        )

    def decode(self, data: bytes, where: str = "<record>") -> dict[str, np.ndarray]:
        """Turn one serialized Example into a dict of arrays shaped as the manifest says."""
        try:
            raw = decode_example(data, self._kinds)
        except ValueError as error:
            raise ReaderError(f"{where}: {error}") from error
        out: dict[str, np.ndarray] = {}
        for name, shape in self.shapes.items():
            values = raw.get(name)
            if values is None:
                values = np.empty(0, dtype=object if shape.dtype == "string" else shape.dtype)
            if shape.fixed:
                if len(values) != shape.length:
                    raise ReaderError(
                        f"{where}: feature {name!r} has {len(values)} values, but the manifest "
                        f"says every example has {shape.length}; the shard does not belong to "
                        "this manifest (re-run the conversion)"
                    )
                if shape.scalar:
                    values = values.reshape(())
            if name in self._images:
                values = decode_image(values.item(), self._image_mode)
            out[name] = values
        return out

    def iter_file(self, path: str) -> Iterator[dict[str, np.ndarray]]:
        """The examples of one shard file, in file order. A shard of this split is checked
        against the manifest: its size before the first example, its count after the
        last (:class:`recordbeam.dataset.wholeness.ShardChanged`)."""
        shard = self.shard_paths.index(path) if path in self.shard_paths else None
        if shard is not None:
            check_size(path, self.shard_bytes[shard])
        records = 0
        with _open(path) as f:
            for number, data in enumerate(
                read_records(f, path=path, compression=compression_for_path(path))
            ):
                records += 1
                yield self.decode(data, f"{path}: record {number}")
        if shard is not None:
            check_count(path, records, self.shard_examples[shard])

    def __iter__(self) -> Iterator[dict[str, np.ndarray]]:
        for path in self.shard_paths:
            yield from self.iter_file(path)

    # --- random access -----------------------------------------------------------------

    def locate(self, index: int) -> tuple[int, int]:
        """``(shard number, record number in that shard)`` of example ``index``."""
        n = len(self)
        if index < 0:
            index += n
        if not 0 <= index < n:
            raise IndexError(f"example {index} is out of range: split {self.split!r} has {n}")
        shard = bisect.bisect_right(self._starts, index) - 1
        return shard, index - self._starts[shard]

    def _index(self, shard: int) -> list[tuple[int, int]]:
        found = self._indexes.get(shard)
        if found is not None:
            return found
        path = self.shard_paths[shard]
        if compression_for_path(path) is not Compression.NONE:
            raise ReaderError(
                f"{path}: random access needs uncompressed shards (a compressed stream cannot "
                "be entered in the middle). Iterate instead, or reshard without compression: "
                "recordbeam reshard IN_GLOB OUT --compression none"
            )
        idx_path = path + ".idx"
        check_size(path, self.shard_bytes[shard])
        if _exists(idx_path):
            with _open(idx_path) as f:
                entries = read_index(io.TextIOWrapper(f, encoding="ascii"), path=idx_path)
        else:
            # No .idx: one pass over the shard finds the offsets (kept for later calls).
            from recordbeam.tfrecord.framing import read_records_with_offsets

            with _open(path) as f:
                entries = [(o, n) for o, n, _ in read_records_with_offsets(f, path=path)]
        if len(entries) != self.shard_examples[shard]:
            raise ReaderError(
                f"{idx_path}: {len(entries)} entries, but the manifest lists "
                f"{self.shard_examples[shard]} examples in {self.shard_files[shard]}; the index "
                f"is stale. Re-create it: recordbeam index {path}"
            )
        check_index(idx_path, entries, self.shard_bytes[shard])
        self._indexes[shard] = entries
        return entries

    def read_bytes(self, index: int) -> bytes:
        """The serialized Example number ``index`` (CRCs checked)."""
        shard, number = self.locate(index)
        offset, framed = self._index(shard)[number]
        path = self.shard_paths[shard]
        with _open(path) as f:
            f.seek(offset)
            buffer = f.read(framed)
        records = read_records(
            io.BytesIO(buffer), path=f"{path} (record {number} at byte {offset})"
        )
        data = next(iter(records), None)
        if data is None:
            raise ReaderError(f"{path}: no record at byte {offset}; re-create the index")
        return data

    def __getitem__(self, index: int) -> dict[str, np.ndarray]:
        shard, number = self.locate(index)
        return self.decode(self.read_bytes(index), f"{self.shard_paths[shard]}: record {number}")


def read(
    output_dir: str,
    split: str | None = None,
    *,
    decode_images: bool = False,
    image_mode: str | None = "RGB",
    features: Sequence[str] | None = None,
) -> SplitReader:
    """Open one split of a finished output folder for reading without TensorFlow.

    Iterate the result for dicts of NumPy arrays, index it for random access, ``len()``
    it for the number of examples. See :class:`SplitReader` for the arguments; ``split``
    is required when the folder holds more than one split.

    Example::

        for example in recordbeam.read("out", split="train", decode_images=True):
            image = example["image/encoded"]          # (H, W, 3) uint8
            boxes = example["image/object/bbox/xmin"]  # (N,) float32
    """
    return SplitReader(
        output_dir, split, decode_images=decode_images, image_mode=image_mode, features=features
    )
