"""The package builds cleanly with the setuptools at hand, license included."""

from __future__ import annotations

import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]


def test_sdist_carries_the_license_and_its_file(tmp_path):
    """What Beam's stager does for ``--setup_file``: ``setup.py sdist`` in this environment."""
    setuptools = pytest.importorskip("setuptools")
    done = subprocess.run([sys.executable, "setup.py", "-q", "sdist", "--dist-dir", str(tmp_path)],
                          cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "Warning" not in done.stderr, done.stderr  # e.g. a deprecated pyproject field
    (sdist,) = tmp_path.glob("recordbeam-*.tar.gz")
    with tarfile.open(sdist) as archive:
        names = archive.getnames()
        info = archive.extractfile(next(n for n in names if n.endswith("/PKG-INFO"))).read()
    assert any(n.endswith("/LICENSE") for n in names)
    expected = (b"License-Expression: Apache-2.0" if int(setuptools.__version__.split(".")[0]) >= 77
                else b"License: Apache-2.0")
    assert expected in info
