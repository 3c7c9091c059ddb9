"""pyproject.toml applies without warnings (setuptools warned on every install)."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]


def test_pyproject_applies_without_warnings(monkeypatch):
    pyprojecttoml = pytest.importorskip("setuptools.config.pyprojecttoml")
    from setuptools.dist import Distribution

    monkeypatch.chdir(ROOT)  # as a build does: the readme and version are found from here
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        dist = pyprojecttoml.apply_configuration(Distribution(), "pyproject.toml")
    assert [str(w.message) for w in caught] == []
    assert dist.metadata.license_expression == "Apache-2.0"  # SPDX (PEP 639)
