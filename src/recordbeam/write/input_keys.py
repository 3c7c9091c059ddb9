"""What an example is made from, as a digest: its *input key*.

An incremental run (``--incremental``) keeps an example exactly when its input key is
the one recorded beside its shard (:mod:`recordbeam.dataset.shard_keys`). The key is a
16-byte digest of:

- what the encoder says the element is made of besides file contents
  (:meth:`recordbeam.write.encoder.ExampleEncoder.input_description`: for images, the
  identity, split, file name and size, and the labels the source built for that one
  image, so one image's annotations changing changes that one key);
- the state of each file the element reads: its modification time from the listing
  (``stat``, the default: nothing is opened), or the hash of its bytes (``content``,
  ``--verify-unchanged``: every file is read).

Options and the recordbeam version are not in the key: a change of those rebuilds the
whole split (:func:`settings_key`). No Beam.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import struct
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from recordbeam import filesystems
from recordbeam.dataset.shard_keys import INPUT_KEY_BYTES

#: How a file's state enters the key: its listed modification time, or its bytes' hash.
STAT, CONTENT = "stat", "content"
KEY_KINDS = (STAT, CONTENT)

def canonical_bytes(value: Any) -> bytes:
    """``value`` as bytes that depend only on what it holds: mappings by sorted keys, sets
    sorted, named tuples and dataclasses as their fields, every scalar tagged with its
    type (``1``, ``1.0``, ``True`` and ``"1"`` differ). Raises ``TypeError`` for a value
    of a type it does not know (a key must never depend on an object's address)."""
    out = bytearray()
    _write(value, out)
    return bytes(out)


def _write(value: Any, out: bytearray) -> None:
    kind = type(value)
    write = _BY_TYPE.get(kind) or _writer_of(kind)
    write(value, out)


def _writer_of(kind: type) -> Callable[[Any, bytearray], None]:
    """The writer of values of type ``kind`` (a subclass of a plain type is written as
    that type's value), remembered for the next value of that type: an incremental run
    computes a key per element, from ~100 values each."""
    if issubclass(kind, tuple | list):  # named tuples too: their fields, in order
        write = _write_sequence
    elif issubclass(kind, bool | np.bool_):
        write = _write_bool
    elif issubclass(kind, int | np.integer):
        write = _write_integer
    elif issubclass(kind, float | np.floating):
        write = _write_floating
    elif issubclass(kind, str):
        write = _write_str
    elif issubclass(kind, bytes | bytearray | memoryview):
        write = _write_bytes_like
    elif issubclass(kind, np.ndarray):
        write = _write_array
    elif issubclass(kind, Mapping):
        write = _write_mapping
    elif issubclass(kind, set | frozenset):
        write = _write_set
    elif dataclasses.is_dataclass(kind) and not issubclass(kind, type):
        write = _write_dataclass
    else:
        raise TypeError(f"cannot make an input key of a {kind.__name__} value; "
                        "sources give labels as plain values")
    _BY_TYPE[kind] = write
    return write


def _write_bool(value: Any, out: bytearray) -> None:
    out += b"T" if value else b"F"


def _write_int(value: int, out: bytearray) -> None:
    text = str(value).encode()
    out += _TAGGED_LENGTH.pack(b"i", len(text))
    out += text


def _write_integer(value: Any, out: bytearray) -> None:
    _write_int(int(value), out)


def _write_float(value: float, out: bytearray) -> None:
    out += _TAGGED_FLOAT.pack(b"f", value) if value == value else b"fnan\0\0\0\0\0"


def _write_floating(value: Any, out: bytearray) -> None:
    _write_float(float(value), out)


def _write_str(value: str, out: bytearray) -> None:
    data = value.encode("utf-8", "surrogatepass")
    out += _TAGGED_LENGTH.pack(b"s", len(data))
    out += data


def _write_bytes(value: bytes, out: bytearray) -> None:
    out += _TAGGED_LENGTH.pack(b"b", len(value))
    out += value


def _write_bytes_like(value: Any, out: bytearray) -> None:
    _write_bytes(bytes(value), out)


def _write_array(value: np.ndarray, out: bytearray) -> None:
    out += b"a" + canonical_bytes((str(value.dtype), value.shape))
    _write_bytes(np.ascontiguousarray(value).tobytes(), out)


def _write_sequence(value: tuple | list, out: bytearray) -> None:
    out += _TAGGED_LENGTH.pack(b"l", len(value))
    for item in value:
        # The scalars labels are made of, written here rather than through a call each.
        kind = type(item)
        if kind is float:
            out += _TAGGED_FLOAT.pack(b"f", item) if item == item else b"fnan\0\0\0\0\0"
        elif kind is int:
            text = str(item).encode()
            out += _TAGGED_LENGTH.pack(b"i", len(text))
            out += text
        else:
            (_BY_TYPE.get(kind) or _writer_of(kind))(item, out)


def _write_mapping(value: Mapping, out: bytearray) -> None:
    items = sorted((canonical_bytes(k), canonical_bytes(v)) for k, v in value.items())
    out += _TAGGED_LENGTH.pack(b"m", len(items))
    for key, item in items:
        out += key + item


def _write_set(value: set | frozenset, out: bytearray) -> None:
    members = sorted(canonical_bytes(member) for member in value)
    out += _TAGGED_LENGTH.pack(b"S", len(members)) + b"".join(members)


def _write_dataclass(value: Any, out: bytearray) -> None:
    _write((type(value).__name__, dataclasses.astuple(value)), out)


_TAGGED_LENGTH = struct.Struct(">cQ")
_TAGGED_FLOAT = struct.Struct(">cd")

#: Writers by exact type: the plain types labels are made of, and each other type once
#: :func:`_writer_of` has looked it up.
_BY_TYPE: dict[type, Callable[[Any, bytearray], None]] = {
    type(None): lambda _value, out: out.extend(b"N"),
    bool: _write_bool,
    int: _write_int,
    float: _write_float,
    str: _write_str,
    bytes: _write_bytes,
    tuple: _write_sequence,
    list: _write_sequence,
    dict: _write_mapping,
}


def input_key(description: Any, file_states: Sequence[Any]) -> bytes:
    """The 16-byte input key of an element: its ``description``
    (:meth:`~recordbeam.write.encoder.ExampleEncoder.input_description`) and the state of
    each file it reads (modification times, or content hashes)."""
    digest = hashlib.blake2b(digest_size=INPUT_KEY_BYTES, person=b"recordbeam-in")
    digest.update(canonical_bytes((description, tuple(file_states))))
    return digest.digest()


def content_hash(path: str, read: Callable[[str], Any]) -> str:
    """The hex BLAKE2b digest of the file ``path``'s bytes, streamed through ``read(path)``
    (a binary file object); ``"missing"`` when it cannot be read (the encoder then says
    why, as it would without ``--verify-unchanged``)."""
    digest = hashlib.blake2b(digest_size=16)
    try:
        with read(path) as f:
            while chunk := f.read(1 << 20):
                digest.update(chunk)
    except Exception:  # noqa: BLE001 - each filesystem says "cannot read" its own way
        return "missing"
    return digest.hexdigest()


def element_input_key(encoder: Any, element: Any, kind: str) -> bytes:
    """The input key of ``element`` as ``encoder`` (an
    :class:`~recordbeam.write.encoder.ExampleEncoder`) describes it, with each file's state
    of ``kind``: ``stat`` (the listed modification times the element carries; looked up for
    an element that carries none, as a record built by hand may) or ``content``."""
    files = tuple(encoder.input_files(element))
    if kind == CONTENT:
        states = tuple(_content_state(encoder, path) for path in files)
    else:
        states = tuple(encoder.modified_times(element))
        if len(states) != len(files):
            states = tuple(_listed_time(path) for path in files)
    return input_key(encoder.input_description(element), states)


def _content_state(encoder: Any, path: str) -> str:
    """A file's content hash; a file the encoder refuses to open (links out of the input
    folders) is not opened here either."""
    refuse = getattr(encoder, "refuse_outside", None)
    if refuse is not None and refuse(path) is not None:
        return "outside_root"
    return content_hash(path, filesystems.open_read)


def _listed_time(path: str) -> float:
    found = filesystems.file_metadata(path)
    return float(found.last_updated_in_seconds or 0.0) if found is not None else -1.0


#: Shard settings that never change an example's bytes, left out of
#: :func:`settings_key`: how shards are cut, how many rejects a run may have, and how an
#: incremental run compares and compacts (its key kind is compared on its own).
_NOT_IN_EXAMPLES = ("num_shards", "shard_size", "max_reject_fraction",
                    "max_annotation_reject_fraction", "incremental")


def example_settings(settings: Mapping[str, Any]) -> dict[str, Any]:
    """``settings`` less what never changes an example's bytes (shard sizes, reject
    limits, compaction): what an incremental run compares with the previous version's."""
    kept = dict(settings)
    if isinstance(kept.get("shards"), Mapping):
        kept["shards"] = {k: v for k, v in kept["shards"].items() if k not in _NOT_IN_EXAMPLES}
    return kept


def settings_key(settings: Mapping[str, Any]) -> str:
    """A digest of :func:`example_settings`: when it differs from the previous version's,
    the incremental run rebuilds the split."""
    return hashlib.blake2b(canonical_bytes(example_settings(settings)), digest_size=16).hexdigest()


def settings_change(previous: Mapping[str, Any], current: Mapping[str, Any]) -> str | None:
    """In words, why the example settings ``current`` differ from ``previous`` (the
    recordbeam version, or which options), or None when they do not."""
    # As the manifest holds them: JSON (tuples read back as lists).
    old, new = (json.loads(json.dumps(example_settings(s), default=str))
                for s in (previous, current))
    if old == new:
        return None
    if old.get("recordbeam_version") != new.get("recordbeam_version"):
        return (f"the recordbeam version changed ({old.get('recordbeam_version')} to "
                f"{new.get('recordbeam_version')})")
    changed = sorted(_changed_paths(old, new))
    return f"the options changed ({', '.join(changed[:6])}{', ...' if len(changed) > 6 else ''})"


def _changed_paths(old: Any, new: Any, prefix: str = "") -> list[str]:
    if isinstance(old, Mapping) and isinstance(new, Mapping):
        found = []
        for key in sorted(set(old) | set(new), key=str):
            found += _changed_paths(old.get(key), new.get(key), f"{prefix}{key}.")
        return found
    return [] if old == new else [prefix.rstrip(".") or "settings"]
