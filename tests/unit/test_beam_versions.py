"""The Beams recordbeam admits, the ones its local runner is tested with, and the ones CI
installs agree: any Beam from the oldest tested on, the two tested ends pinned."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from recordbeam.local.internals import TESTED_BEAM, minor_version

ROOT = Path(__file__).parents[2]


def _beam_requirements() -> list:
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    requirements = pytest.importorskip("packaging.requirements")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    listed = [*project["dependencies"],
              *(r for extra in project["optional-dependencies"].values() for r in extra)]
    parsed = [requirements.Requirement(r) for r in listed]
    return [r for r in parsed if r.name == "apache-beam"]


def test_every_beam_requirement_admits_the_oldest_tested_beam_and_every_newer_one():
    beams = _beam_requirements()
    assert {str(sorted(r.extras)) for r in beams} == {"[]", "['gcp']", "['aws']"}
    major, oldest = TESTED_BEAM[0]
    for beam in beams:  # no upper bound: a new Beam installs beside recordbeam
        assert [(s.operator, s.version) for s in beam.specifier] == [(">=", f"{major}.{oldest}")]


def test_the_makefile_pins_the_two_beams_the_local_runner_is_tested_with():
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    pins = dict(re.findall(r"^(OLDEST_BEAM|NEWEST_BEAM) \?= (\S+)$", makefile, re.MULTILINE))
    assert (minor_version(pins["OLDEST_BEAM"]), minor_version(pins["NEWEST_BEAM"])) == TESTED_BEAM
