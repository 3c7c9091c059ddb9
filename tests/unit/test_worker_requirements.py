"""``recordbeam worker-requirements``: what recordbeam needs beyond apache-beam, pinned."""

from __future__ import annotations

from importlib import metadata

import pytest

from recordbeam.cli.main import main
from recordbeam.cli.worker_requirements import worker_requirements
from recordbeam.errors import UsageError


def test_lists_what_beam_does_not_bring_pinned_to_the_installed_versions():
    lines = worker_requirements()
    pinned = dict(line.split("==") for line in lines)
    assert {"crc32c", "ijson", "defusedxml"} <= {name.lower() for name in pinned}, lines
    for name, version in pinned.items():
        assert metadata.version(name) == version
    # Beam's own dependencies are in Beam's container already.
    assert not {name.lower() for name in pinned} & {"apache-beam", "numpy", "protobuf", "pyyaml"}
    assert lines == sorted(lines)


def test_the_command_prints_a_requirements_file(capsys):
    assert main(["worker-requirements"]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed[0].startswith("# recordbeam ")
    assert [line for line in printed if not line.startswith("#")] == worker_requirements()


def test_a_package_that_is_not_installed_is_a_usage_error():
    with pytest.raises(UsageError, match="no-such-package-xyz is not installed"):
        worker_requirements("no-such-package-xyz")
