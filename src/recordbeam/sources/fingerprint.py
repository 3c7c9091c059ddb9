"""A fingerprint of a run's inputs: every file with its size and modification time.

It is order-independent (a sum of per-file hashes), so a Beam ``CombineFn`` computes it
on any runner, and the launcher can compute the same value from a listing to decide
whether a scheduled rerun has anything to do.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from typing import Any

import apache_beam as beam

_MODULUS = 1 << 128


def file_term(path: str, size: int, mtime: float) -> int:
    """One file's contribution to the fingerprint."""
    # backslashreplace: a file name that is not UTF-8 must not crash the listing, and its
    # escaped form (how the pipeline carries it) gives the same term.
    text = f"{path}\0{size}\0{mtime:.6f}".encode("utf-8", "backslashreplace")
    return int.from_bytes(hashlib.sha256(text).digest()[:16], "big")


def combine_terms(terms: Iterable[int]) -> tuple[int, int]:
    total, count = 0, 0
    for term in terms:
        total = (total + term) % _MODULUS
        count += 1
    return total, count


def fingerprint(total: int, count: int, settings: Any) -> str:
    """The final fingerprint: file terms plus the settings (options, version) as JSON."""
    blob = json.dumps({"files": [f"{total:032x}", count], "settings": settings}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()


def inputs_entry(terms: tuple[int, int]) -> dict[str, Any]:
    """The ``inputs`` entry of a source's metadata (and so of the manifest): the file
    count and the sum of terms of :class:`FileTermsFn`."""
    total, count = terms
    return {"files": count, "terms": f"{total:032x}"}


@beam.typehints.with_output_types(Any)
class FileTermsFn(beam.CombineFn):
    """Combines ``FileMetadata`` into ``(sum of terms, file count)``."""

    def create_accumulator(self) -> tuple[int, int]:
        return 0, 0

    def add_input(self, acc, meta):
        term = file_term(meta.path, meta.size_in_bytes, meta.last_updated_in_seconds)
        return (acc[0] + term) % _MODULUS, acc[1] + 1

    def merge_accumulators(self, accumulators):
        total, count = 0, 0
        for t, c in accumulators:
            total, count = (total + t) % _MODULUS, count + c
        return total, count

    def extract_output(self, acc):
        return acc


def input_terms(files: beam.PCollection) -> beam.pvalue.AsSingleton:
    """``FileMetadata`` -> the side input of their ``(sum of terms, file count)``, ``(0, 0)``
    when there is none. The combine leaves out Beam's default element (a branch of its
    own in every pipeline); the side input's default stands in for it."""
    terms = files | "InputTerms" >> beam.CombineGlobally(FileTermsFn()).without_defaults()
    return beam.pvalue.AsSingleton(terms, default_value=(0, 0))
