"""tools/dependencies.py: what the Makefile installs ahead of recordbeam is what
``pip install -e '.[extras]'`` would ask for."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TOOL = ROOT / "tools" / "dependencies.py"


def run(*extras: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(TOOL), *extras], capture_output=True, text=True,
                          check=False)


def test_lists_the_project_and_each_named_extra_once():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+, as the tool
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    done = run("test", "gcp", "aws")
    assert done.returncode == 0, done.stderr
    listed = done.stdout.splitlines()
    ours = f"{project['name']}[test-fast]"  # the test extra names the test-fast one
    assert ours in project["optional-dependencies"]["test"]
    expected = (project["dependencies"] + project["optional-dependencies"]["test"]
                + project["optional-dependencies"]["test-fast"]
                + project["optional-dependencies"]["gcp"] + project["optional-dependencies"]["aws"])
    assert set(listed) == set(expected) - {ours}
    assert len(listed) == len(set(listed))
    assert not set(listed) & (set(project["optional-dependencies"]["docs"]) - set(expected))


def test_an_unknown_extra_fails_naming_the_known_ones():
    done = run("test", "tset")
    assert done.returncode == 1
    assert "no extra tset" in done.stderr and "interop" in done.stderr
    assert done.stdout == ""
