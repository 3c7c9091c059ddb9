"""The suite's datasets of every format hold every declared format: a format added to
``recordbeam.sources`` fails here, in ``make test``, until it has them (its cases over
every format then run in ``make test-all``)."""

from __future__ import annotations

import pytest
from format_datasets import BUILDERS, FORMATS
from labelled_datasets import CLASS_NAME_FORMATS, NO_CLASS_NAMES
from test_class_name_trust import FOUND, LISTED, VARIANTS

from recordbeam.sources.format import formats

CASE = pytest.mark.case


@CASE("A declared format missing from the suite's datasets of every format "
      "(`format_datasets`: links, glob characters, incremental runs; `labelled_datasets`: "
      "class names, each format's found where its names come from)",
      "this test fails naming the format and the table to add it to")
def test_every_declared_format_has_its_datasets():
    declared = set(formats())
    assert set(FORMATS) == declared
    assert sorted(declared - set(BUILDERS)) == [], "format_datasets.BUILDERS lacks them"
    assert sorted(declared - set(CLASS_NAME_FORMATS) - set(NO_CLASS_NAMES)) == [], (
        "labelled_datasets.CLASS_NAME_FORMATS lacks them (or NO_CLASS_NAMES, if their runs "
        "write no class names)")
    classified = {VARIANTS.get(kind, (kind, {}))[0] for kind in (*LISTED, *FOUND)}
    assert sorted(set(CLASS_NAME_FORMATS) - classified) == [], (
        "test_class_name_trust lists them neither in LISTED nor in FOUND")
