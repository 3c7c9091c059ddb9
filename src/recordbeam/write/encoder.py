"""The encoder protocol: how :class:`recordbeam.write.sink.WriteShards` turns elements into
examples.

An input format gives the sink an :class:`ExampleEncoder`; the sink calls it on the worker
that writes each shard, after the shuffle, and frames what :meth:`ExampleEncoder.encode`
returns (an :class:`Encoded`). Nothing here imports Beam: an encoder is plain Python,
testable without a pipeline.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from recordbeam.dataset.names import check_split_name
from recordbeam.records import Reject
from recordbeam.write.planning import RECORD_FRAMING


@dataclass(frozen=True)
class Encoded:
    """What an encoder made of one element.

    Give ``features`` (a mapping for :func:`recordbeam.tfrecord.example.make_example`) or
    ``serialized`` (bytes of an ``Example`` written as they are), or neither when the
    element was rejected. ``kinds`` fixes the kind of features whose lists may be empty.
    ``counts`` are added up into the manifest (e.g. boxes clipped).
    """

    features: Mapping[str, Any] | None = None
    kinds: Mapping[str, str] | None = None
    serialized: bytes | None = None
    rejects: tuple[Reject, ...] = ()
    counts: Mapping[str, int] = field(default_factory=dict)
    #: ``(context, feature_lists)`` for a ``SequenceExample`` (arguments of
    #: :func:`recordbeam.tfrecord.example.make_sequence_example`, with ``kinds``).
    sequence: tuple[Mapping[str, Any], Mapping[str, Any]] | None = None
    #: SHA-256 of the example's one image as read (before any fix), by which duplicates
    #: are found; None for an example without exactly one image. Its ``image/encoded``
    #: feature holds the image as written.
    image_digest: bytes | None = None


class ExampleEncoder:
    """How ``WriteShards`` turns elements into examples.

    The base class writes elements that are already serialized ``Example`` bytes.
    Subclasses override ``encode`` to do the heavy work (reading image bytes) on the
    worker that writes the shard, after the shuffle.

    ``list_features`` names the features that are lists by nature (one value per object,
    a list column): the manifest declares them variable-length even when every example
    happens to hold the same number of values, so readers see one shape on every dataset.
    """

    #: Features that are lists whatever the data holds (see the class docstring).
    list_features: frozenset[str] = frozenset()
    #: Whether examples carry an image whose duplicates the sink looks for: encoders that
    #: set it give ``Encoded.image_digest`` and :meth:`image_digest`.
    has_images: bool = False

    def __init__(self, split: str = "train", *, list_features: Iterable[str] = ()) -> None:
        self.default_split = check_split_name(split)
        if list_features:
            self.list_features = frozenset(list_features)

    def setup(self) -> None:
        """Called once per worker before the first ``encode``."""

    def identity(self, element: Any) -> str:
        """A stable identity; its hash orders the output. Must not depend on where data lives."""
        return hashlib.sha256(element).hexdigest()

    def size(self, element: Any) -> int:
        """Expected bytes of the element's framed record in the shard, for planning shard
        counts (``--shard-size`` is a target for the shard files)."""
        return len(element) + RECORD_FRAMING

    def size_overhead(self) -> int:
        """Bytes a typical record adds to the payload sizes a reader gives upfront
        (``WriteShards(sizes=...)``, e.g. the image files' listed sizes): the framing
        and the features the encoder writes beside the payload."""
        return RECORD_FRAMING

    def split(self, element: Any) -> str:
        return self.default_split

    def encode(self, element: Any) -> Encoded:
        return Encoded(serialized=bytes(element))

    def input_description(self, element: Any) -> Any:
        """What the element's example is made of, besides the contents of its
        :meth:`input_files` and the run's settings, as plain values: its part of the input
        key an incremental run compares (:mod:`recordbeam.write.input_keys`). Everything
        :meth:`encode` reads from the element belongs here. By default the element itself
        (serialized bytes)."""
        return element

    def example_settings(self) -> Mapping[str, Any]:
        """Choices this encoder makes for every example that the run's options do not
        record (a manifest's inferred column types), as plain values: when they change,
        an incremental run rebuilds the split. None by default."""
        return {}

    def input_files(self, element: Any) -> Sequence[str]:
        """The files :meth:`encode` reads for the element (none by default)."""
        return ()

    def modified_times(self, element: Any) -> Sequence[float]:
        """The listed modification time of each of :meth:`input_files`, in that order."""
        return ()

    def image_digest(self, element: Any) -> bytes | None:
        """The SHA-256 :meth:`encode` would give as ``Encoded.image_digest``, found without
        encoding (``--duplicates drop`` decides which copy to write before the write);
        None when the element has no image to compare."""
        return None

    def lost_with(self, element: Any, reject: Reject) -> tuple[Reject, ...]:
        """Rejects for what is lost along with a rejected element besides the element
        itself (COCO: its objects, listed as annotation rejects). None by default."""
        return ()
