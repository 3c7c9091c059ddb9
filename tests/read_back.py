"""Reading back what a conversion wrote, by split, for the format tests."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from recordbeam.tfrecord.example import decode_example
from recordbeam.tfrecord.framing import open_records


def split_examples(output: str | os.PathLike[str], split: str, key: str = "image/source_id",
                   kinds: Mapping[str, str] | None = None) -> dict[str, dict[str, Any]]:
    """The decoded Examples of ``split``'s shards in ``output``, by the text of their
    ``key`` feature; ``kinds`` (feature -> kind) decodes empty lists with their kind."""
    names = sorted(n for n in os.listdir(output) if n.startswith(f"{split}-"))
    return {example[key][0].decode(): example
            for name in names for record in open_records(os.path.join(output, name))
            for example in [decode_example(record, dict(kinds or {}))]}
