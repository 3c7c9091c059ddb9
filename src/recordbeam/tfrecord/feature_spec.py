"""The feature spec of a written dataset: lengths learned from the examples, list
features declared by the source.

Each shard writer observes its examples; the finalizer merges the shard specs. A feature
the source declares as a list (COCO's per-object ``image/object/*``, a manifest's
``*_list`` columns) is variable-length whatever the data holds: a dataset whose images
each hold one box today may hold two tomorrow, and a spec saved today must parse both.
Of the other features, one present in every example with the same number of values is
fixed-length (a ``FixedLenFeature``); anything else is variable-length.

Manifests written before lists were declared have no ``list`` key; for them
:func:`is_list_feature` takes the per-object convention of the TensorFlow Object
Detection API and Model Garden: every ``image/object/...`` feature is a list.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from recordbeam import feature_keys

_DTYPES = {"bytes_list": "string", "float_list": "float32", "int64_list": "int64"}
_KNOWN_DTYPES = frozenset(_DTYPES.values())


def is_list_feature(name: str, spec: Mapping[str, Any]) -> bool:
    """Whether one entry of a manifest's feature spec is a list by declaration.

    Entries written since lists are declared carry ``"list"``; older ones do not, and
    then the per-object features (``image/object/...``) are the lists.
    """
    if "list" in spec:
        return bool(spec["list"])
    return name.startswith(feature_keys.OBJECT_PREFIX)


@dataclass
class _Seen:
    dtype: str | None
    examples: int = 0
    min_length: int = 0
    max_length: int = 0


@dataclass
class FeatureSpec:
    """Per-feature dtype and length range over the examples observed so far.

    Attributes:
        examples: examples observed.
        features: what was seen of each feature.
        lists: names the source declares as lists (variable-length whatever their
            observed lengths); see :meth:`declare_lists`.
    """

    examples: int = 0
    features: dict[str, _Seen] = field(default_factory=dict)
    lists: frozenset[str] = frozenset()

    def declare_lists(self, names: Iterable[str]) -> None:
        """Mark features as lists by nature (one value per object, a list column...).

        Names that no example holds are harmless: only observed features are reported.
        """
        self.lists = self.lists | frozenset(names)

    def observe(self, example: Any) -> None:
        """Record one ``Example`` message (ours or any wire-compatible class)."""
        observed = {}
        for name, feature in example.features.feature.items():
            kind = feature.WhichOneof("kind")
            observed[name] = (_DTYPES[kind], len(getattr(feature, kind).value)) if kind else (None, 0)
        self.observe_lengths(observed)

    def observe_lengths(self, observed: Mapping[str, tuple[str | None, int]]) -> None:
        """Record one example given as ``{name: (dtype, length)}`` instead of a message.

        What :func:`recordbeam.tfrecord.wire.encode_example_observed` reports: dtype is ``"string"``,
        ``"float32"``, ``"int64"`` or None (an empty value written without a kind). Same
        bookkeeping and errors as :meth:`observe`.
        """
        self.examples += 1
        for name, (dtype, length) in observed.items():
            if dtype is not None and dtype not in _KNOWN_DTYPES:
                raise ValueError(
                    f"feature {name!r}: unknown dtype {dtype!r}; expected one of "
                    f"{sorted(_KNOWN_DTYPES)} or None"
                )
            seen = self.features.get(name)
            if seen is None:
                self.features[name] = _Seen(dtype, 1, length, length)
                continue
            if seen.dtype is None:
                seen.dtype = dtype
            elif dtype and dtype != seen.dtype:
                raise ValueError(
                    f"feature {name!r} is {seen.dtype} in some examples and {dtype} in others; "
                    "a feature must have one type across the dataset"
                )
            seen.examples += 1
            seen.min_length = min(seen.min_length, length)
            seen.max_length = max(seen.max_length, length)

    def merge(self, other: FeatureSpec) -> FeatureSpec:
        merged = FeatureSpec(self.examples + other.examples, lists=self.lists | other.lists)
        for name in sorted(set(self.features) | set(other.features)):
            a, b = self.features.get(name), other.features.get(name)
            if a is None or b is None:
                only = a or b
                merged.features[name] = _Seen(only.dtype, only.examples, only.min_length, only.max_length)
                continue
            if a.dtype and b.dtype and a.dtype != b.dtype:
                raise ValueError(f"feature {name!r} is {a.dtype} in one shard and {b.dtype} in another")
            merged.features[name] = _Seen(
                a.dtype or b.dtype, a.examples + b.examples,
                min(a.min_length, b.min_length), max(a.max_length, b.max_length),
            )
        return merged

    def to_state(self) -> dict[str, Any]:
        """Everything this spec knows, as JSON values, for :meth:`from_state`: unlike
        :meth:`to_json` (what readers need) it keeps what merging needs, so a spec saved
        with one shard merges later exactly as the live one would."""
        return {
            "examples": self.examples,
            "lists": sorted(self.lists),
            "features": {name: [seen.dtype, seen.examples, seen.min_length, seen.max_length]
                         for name, seen in sorted(self.features.items())},
        }

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> FeatureSpec:
        """The spec :meth:`to_state` saved. Raises ``ValueError`` for anything else."""
        try:
            features = {str(name): _Seen(dtype, int(n), int(low), int(high))
                        for name, (dtype, n, low, high) in state["features"].items()}
            if any(seen.dtype is not None and seen.dtype not in _KNOWN_DTYPES
                   for seen in features.values()):
                raise ValueError("unknown dtype")
            return cls(int(state["examples"]), features, frozenset(map(str, state["lists"])))
        except (KeyError, TypeError, ValueError, AttributeError) as error:
            raise ValueError(f"not a saved feature spec ({error})") from None

    def to_json(self) -> dict[str, dict[str, Any]]:
        """``{name: {dtype, fixed_length | None, list, min_length, max_length, present_in}}``.

        ``fixed_length`` is None for declared lists, so that any reader of the manifest
        parses them as variable-length.
        """
        out = {}
        for name in sorted(self.features):
            seen = self.features[name]
            is_list = name in self.lists
            fixed = (not is_list and seen.examples == self.examples
                     and seen.min_length == seen.max_length)
            out[name] = {
                "dtype": seen.dtype or "float32",
                "fixed_length": seen.min_length if fixed else None,
                "list": is_list,
                "min_length": seen.min_length,
                "max_length": seen.max_length,
                "present_in": seen.examples,
            }
        return out


def observe_sequence(message: Any, spec: FeatureSpec, list_spec: FeatureSpec | None) -> None:
    """Record one ``SequenceExample`` message: ``spec`` learns its context, ``list_spec``
    each step of its feature lists (a list's ``fixed_length`` is then its values per step,
    ``present_in`` counts steps)."""
    spec.observe(SimpleNamespace(features=message.context))
    if list_spec is None:
        return
    feature_lists = message.feature_lists.feature_list
    steps = max((len(fl.feature) for fl in feature_lists.values()), default=0)
    for i in range(steps):
        step = {name: fl.feature[i] for name, fl in feature_lists.items() if i < len(fl.feature)}
        list_spec.observe(SimpleNamespace(features=SimpleNamespace(feature=step)))


def merge_spec_json(a: dict[str, dict[str, Any]], b: dict[str, dict[str, Any]],
                    examples_a: int, examples_b: int) -> dict[str, dict[str, Any]]:
    """Merge two :meth:`FeatureSpec.to_json` results (e.g. of two splits)."""
    out: dict[str, dict[str, Any]] = {}
    for name in sorted(set(a) | set(b)):
        x, y = a.get(name), b.get(name)
        if x is None or y is None:
            only = dict(x or y)
            only["fixed_length"] = None  # absent from the other part's examples
            only["list"] = is_list_feature(name, only)
            out[name] = only
            continue
        if x["dtype"] != y["dtype"]:
            raise ValueError(f"feature {name!r} is {x['dtype']} in one split and {y['dtype']} in another")
        is_list = is_list_feature(name, x) or is_list_feature(name, y)
        fixed = x["fixed_length"] if x["fixed_length"] == y["fixed_length"] and not is_list else None
        out[name] = {
            "dtype": x["dtype"],
            "fixed_length": fixed,
            "list": is_list,
            "min_length": min(x["min_length"], y["min_length"]),
            "max_length": max(x["max_length"], y["max_length"]),
            "present_in": x["present_in"] + y["present_in"],
        }
    for spec in out.values():
        if spec["present_in"] < examples_a + examples_b:
            spec["fixed_length"] = None
    return out
