"""The reliability suite: each test declares the case it proves and what must happen
(``@pytest.mark.case``, registered in ``tests/conftest.py``)."""

from __future__ import annotations

import os

import pytest


def pytest_collection_modifyitems(items):
    here = os.path.dirname(__file__)
    for item in items:
        if str(item.fspath).startswith(here) and not any(item.iter_markers("case")):
            raise pytest.UsageError(f"{item.nodeid} declares no @pytest.mark.case(...)")
