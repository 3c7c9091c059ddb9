"""``recordbeam worker-requirements``: the requirements file for workers that install
recordbeam's wheel without reaching a package index.

Beam's SDK container holds Python and apache-beam with Beam's own dependencies (protobuf,
numpy, pyyaml...). What recordbeam needs beyond them is listed here, pinned to the
versions this environment has; given as ``--requirements_file``, Beam's stager downloads
their wheels and stages them with the job, and the workers install them from there.
"""

from __future__ import annotations

import argparse
from importlib import metadata

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from recordbeam.errors import EXIT_OK, UsageError

#: The distribution the workers' container already holds, with its dependencies.
CONTAINER_HOLDS = "apache-beam"


def worker_requirements(package: str = "recordbeam") -> list[str]:
    """``name==version`` lines for what ``package`` needs at run time beyond apache-beam
    and its dependencies, as installed here, sorted by name."""
    held = _closure(CONTAINER_HOLDS)
    needed = _closure(package) - held - {canonicalize_name(package)}
    return sorted(f"{_installed(name).metadata['Name']}=={_installed(name).version}"
                  for name in needed)


def _closure(name: str) -> set[str]:
    """``name`` and every distribution it requires, transitively, as installed here
    (without extras; markers evaluated for this interpreter)."""
    seen: set[str] = set()
    waiting = [canonicalize_name(name)]
    while waiting:
        current = waiting.pop()
        if current in seen:
            continue
        seen.add(current)
        for line in _installed(current).requires or []:
            requirement = Requirement(line)
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                waiting.append(canonicalize_name(requirement.name))
    return seen


def _installed(name: str) -> metadata.Distribution:
    try:
        return metadata.distribution(name)
    except metadata.PackageNotFoundError:
        raise UsageError(f"{name} is not installed in this environment, so its version cannot "
                         "be pinned; run this command where the job is submitted from") from None


def cmd_worker_requirements(args: argparse.Namespace) -> int:
    from recordbeam import __version__

    beam = _installed(CONTAINER_HOLDS).version
    print(f"# recordbeam {__version__}: what it needs beyond apache-beam {beam} (which Beam's SDK\n"
          "# container holds), pinned to the submitting environment's versions. Pass with\n"
          "# --requirements_file beside --extra_package <recordbeam wheel>.")
    for line in worker_requirements():
        print(line)
    return EXIT_OK
