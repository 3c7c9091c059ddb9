"""Which tests run in which lane (docs/development.md, "Test lanes").

- ``make test-fast``: the unit tests and one small conversion per format, with only the
  runtime dependencies and the test runner installed.
- ``make test``: every promise proven once; property tests draw a few examples.
- ``make test-all``: also every case of the matrices (``exhaustive``), and the property
  tests with their full example counts (``RECORDBEAM_TEST_LANE=all``).

A matrix keeps one case in ``make test``, the one that proves its promise there; the rest
are marked ``exhaustive`` (:func:`one_in_make_test`).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

import pytest

#: Set to ``all`` by ``make test-exhaustive``: property tests draw their full counts.
LANE_VARIABLE = "RECORDBEAM_TEST_LANE"
FULL = os.environ.get(LANE_VARIABLE) == "all"

exhaustive = pytest.mark.exhaustive


def examples(full: int) -> int:
    """A property test's example count: ``full`` in ``make test-all``, a tenth of it (at
    least 10) in ``make test``."""
    return full if FULL else max(10, full // 10)


def one_in_make_test(values: Iterable[Any], keep: int = 0) -> list[Any]:
    """``values`` for ``pytest.mark.parametrize``: the one at index ``keep`` runs in
    ``make test``, every other one is marked ``exhaustive``. Values may be
    ``pytest.param``s (their ids and marks are kept); a tuple is the values of several
    argument names."""
    params = []
    for index, value in enumerate(values):
        if index == keep:
            params.append(value)
            continue
        if isinstance(value, type(pytest.param(None))):
            params.append(pytest.param(*value.values, id=value.id,
                                       marks=(*value.marks, exhaustive)))
        else:
            values_of = value if isinstance(value, tuple) else (value,)
            params.append(pytest.param(*values_of, marks=exhaustive))
    return params
