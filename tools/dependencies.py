"""Print recordbeam's requirements and those of the named extras, one per line.

    python tools/dependencies.py test interop > requirements.txt

The Makefile installs an environment's dependencies from this list before recordbeam
itself, so that CI can build that environment while the test suite runs: two builds of
the project at once (``pip install -e .`` writes ``src/recordbeam.egg-info``, as does the
suite's ``setup.py sdist``) could trip over each other; installing dependencies cannot.
"""

from __future__ import annotations

import sys
from pathlib import Path

import tomllib  # Python 3.11+, which the Makefile's PYTHON is on our machines

PYPROJECT = Path(__file__).resolve().parent.parent / "pyproject.toml"


def requirements(extras: list[str]) -> list[str]:
    """The project's dependencies, then each extra's, without repeats."""
    project = tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))["project"]
    optional = project["optional-dependencies"]
    unknown = [extra for extra in extras if extra not in optional]
    if unknown:
        raise SystemExit(f"dependencies.py: pyproject.toml has no extra {', '.join(unknown)}; "
                         f"it has {', '.join(sorted(optional))}")
    out = list(project["dependencies"])
    for extra in extras:
        for requirement in optional[extra]:
            # An extra naming another of ours (recordbeam[test-fast]) stands for its list.
            if requirement.startswith(f"{project['name']}["):
                inner = requirement.split("[", 1)[1].rstrip("]").split(",")
                out.extend(r for r in requirements(inner)[len(project["dependencies"]):]
                           if r not in out)
            elif requirement not in out:
                out.append(requirement)
    return out


if __name__ == "__main__":
    print("\n".join(requirements(sys.argv[1:])))
