"""``recordbeam worker-requirements``: what recordbeam needs beyond apache-beam, pinned."""

from __future__ import annotations

from importlib import metadata

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from recordbeam.cli.main import main
from recordbeam.cli.worker_requirements import worker_requirements
from recordbeam.errors import UsageError


def _direct_requirements(name: str) -> set[str]:
    return {canonicalize_name(Requirement(line).name) for line in metadata.requires(name) or []
            if "extra ==" not in line}


def test_lists_what_beam_does_not_bring_pinned_to_the_installed_versions():
    lines = worker_requirements()
    pinned = dict(line.split("==") for line in lines)
    listed = {canonicalize_name(name) for name in pinned}
    beams = _direct_requirements("apache-beam")
    # Beam 2.77 brings pillow and pyyaml, Beam 2.60 does not: the list follows the Beam here.
    assert _direct_requirements("recordbeam") - beams - {"apache-beam"} <= listed, lines
    assert {"crc32c", "ijson", "defusedxml"} <= listed, lines
    assert not listed & (beams | {"apache-beam"}), lines
    for name, version in pinned.items():
        assert metadata.version(name) == version
    assert lines == sorted(lines)


def test_the_command_prints_a_requirements_file(capsys):
    assert main(["worker-requirements"]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed[0].startswith("# recordbeam ")
    assert [line for line in printed if not line.startswith("#")] == worker_requirements()


def test_a_package_that_is_not_installed_is_a_usage_error():
    with pytest.raises(UsageError, match="no-such-package-xyz is not installed"):
        worker_requirements("no-such-package-xyz")
