"""A ``Flatten`` that feeds a ``GroupByKey`` writes its inputs straight into the grouping.

Beam's FnApiRunner turns every ``Flatten`` of several inputs into a materialized
collection: each input's stage writes its elements into a buffer in the launcher, then a
stage of its own reads them all back and passes them on (``sink_flattens``, whose own
TODO says it should not always materialize). When what follows is a ``GroupByKey``
(every ``CoGroupByKey`` is tagged inputs, a ``Flatten``, then a ``GroupByKey``), that
stage does nothing but send every element through the launcher twice more and write it
into the grouping buffer: an incremental COCO run's join of 100k old keys and new
elements spent 1.2 s of its 23 s there, and spilled the elements to disk twice.

:func:`flattens_into_groupings` is a translation phase run right after ``sink_flattens``:
for a materialized ``Flatten`` whose output only a ``GroupByKey`` reads, each input's
write goes to the grouping buffer instead, and the read stage and the grouping's own
write stage are dropped. The groups are the same (each key's values, in the order they
arrived, as before: which input's values arrive first was never fixed). A ``Flatten``
whose inputs were coded otherwise than its output is left as it is.

:func:`grouping_flattens` installs the phase for a run. Beam's runner internals: only
``recordbeam.local`` may use this.
"""

from __future__ import annotations

import contextlib
import functools
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator
from typing import Any

try:
    from apache_beam.runners.portability.fn_api_runner import translations
    from apache_beam.runners.worker import bundle_processor
except ImportError:  # a Beam without the FnApiRunner: nothing to install into
    translations = None


def flattens_into_groupings(stages: Iterable[Any], context: Any) -> list[Any]:
    """The stages, with each materialized ``Flatten`` that only a ``GroupByKey`` reads
    written into the grouping directly (see the module doc)."""
    stages = list(stages)
    readers: Counter[str] = Counter(
        pcoll for stage in stages for transform in stage.transforms
        for pcoll in transform.inputs.values())
    writes, flatten_reads, group_writes = defaultdict(list), [], {}
    for stage in stages:
        if len(stage.transforms) != 1:
            continue
        transform = stage.transforms[0]
        urn, buffer = transform.spec.urn, transform.spec.payload
        if urn == bundle_processor.DATA_OUTPUT_URN:
            kind, _name = translations.split_buffer_id(buffer)
            if kind == "materialize":  # only a flatten's writes, this early
                writes[buffer].append(stage)
            elif kind == "group":
                group_writes[_only(transform.inputs.values())] = stage
        elif urn == bundle_processor.DATA_INPUT_URN:
            if translations.split_buffer_id(buffer)[0] == "materialize":
                flatten_reads.append(stage)
    replaced: dict[Any, frozenset] = {}
    pcollections = context.components.pcollections
    for read in flatten_reads:
        flattened = _only(read.transforms[0].outputs.values())
        group_write = group_writes.get(flattened)
        inputs = writes.get(read.transforms[0].spec.payload, [])
        if group_write is None or readers[flattened] != 1 or not inputs:
            continue
        if any(not _coded_alike(pcollections[_only(w.transforms[0].inputs.values())],
                                pcollections[flattened]) for w in inputs):
            continue
        for write in inputs:
            write.transforms[0].spec.payload = group_write.transforms[0].spec.payload
        # The grouping buffer takes its coder from the flattened collection, which no
        # data channel carries any more.
        context.add_data_channel_coder(flattened)
        replaced[read] = replaced[group_write] = frozenset(inputs)
    kept = [stage for stage in stages if stage not in replaced]
    for stage in kept:
        if stage.must_follow & replaced.keys():
            stage.must_follow = frozenset().union(
                *(replaced.get(before, {before}) for before in stage.must_follow))
    return kept


def _coded_alike(one: Any, other: Any) -> bool:
    return (one.coder_id == other.coder_id
            and one.windowing_strategy_id == other.windowing_strategy_id)


def _only(values: Iterable[str]) -> str:
    (value,) = values
    return value


@contextlib.contextmanager
def grouping_flattens() -> Iterator[None]:
    """For the duration of a run, Beam's translation runs :func:`flattens_into_groupings`
    right after ``sink_flattens``."""
    if translations is None:
        yield
        return
    create = translations.create_and_optimize_stages

    @functools.wraps(create)
    def with_phase(pipeline_proto, phases, *args, **kwargs):
        phases = list(phases)
        if translations.sink_flattens in phases:
            phases.insert(phases.index(translations.sink_flattens) + 1, flattens_into_groupings)
        return create(pipeline_proto, phases, *args, **kwargs)

    translations.create_and_optimize_stages = with_phase
    try:
        yield
    finally:
        translations.create_and_optimize_stages = create
