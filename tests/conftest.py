"""Reliability cases, wherever their tests live.

``@pytest.mark.case("Truncated JPEG", "reject `truncated`, run succeeds")`` on a test (or
on a ``pytest.param``) names a row of the reliability table (docs/reliability.md). Every test in
``tests/reliability`` declares one (its conftest checks); tests elsewhere that prove a
data-loss or misconfiguration case declare one too. When the environment variable
``RECORDBEAM_RELIABILITY_JSON`` names a file, every declared case's result is written there
at the end of the session; ``tools/reliability_table.py`` turns that file into the table.
"""

from __future__ import annotations

import json
import os
import tempfile

import lanes
import pretend_beam
import pytest
from hypothesis import settings

RESULTS_ENV = "RECORDBEAM_RELIABILITY_JSON"

#: RECORDBEAM_PRETEND_BEAM: the Beam version the whole run pretends to have (pretend_beam.py).
PRETENDED_BEAM = pretend_beam.install_everywhere(os.environ)


_results: dict[str, dict] = {}


@pytest.fixture(scope="session", autouse=True)
def _temp_files_under_pytests_folder(tmp_path_factory):
    """TMPDIR under pytest's base folder for the session, here and in the commands the
    tests start: the logs the many runs failed on purpose keep, and Beam's pipeline temp
    folders, go where pytest prunes them instead of piling up in /tmp."""
    before = os.environ.get("TMPDIR")
    os.environ["TMPDIR"] = str(tmp_path_factory.mktemp("tmpdir"))
    tempfile.tempdir = None  # computed again from TMPDIR
    yield
    if before is None:
        os.environ.pop("TMPDIR", None)
    else:
        os.environ["TMPDIR"] = before
    tempfile.tempdir = None


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "case(name, outcome): a reliability case this test proves, for docs/reliability.md"
    )


def pytest_report_header(config):
    if PRETENDED_BEAM:
        return (f"recordbeam: pretending Apache Beam {PRETENDED_BEAM} "
                f"({pretend_beam.VARIABLE}) in every process")
    return None


def fast_path_off() -> str | None:
    """Why the local runner's fast path is off with this Beam, or None when it is on."""
    from recordbeam.local import internals

    why_not = internals.why_unusable()
    if why_not is None:
        return None
    missing = internals.missing_internals()
    internals_here = ("every runner internal it uses is present" if not missing
                      else "missing: " + ", ".join(missing))
    return f"the local runner's fast path is off here: {why_not} ({internals_here})"


def pytest_collection_modifyitems(config, items):
    # Tests of the fast path's own machinery (marked fast_path) skip where it is off.
    marked = [item for item in items if item.get_closest_marker("fast_path")]
    reason = fast_path_off() if marked else None
    for item in marked if reason else ():
        item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture(scope="session")
def fast_path() -> bool:
    """Whether local runs use the local runner's fast path here (else Beam's FnApiRunner)."""
    return fast_path_off() is None


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    cases = [tuple(m.args) for m in item.iter_markers("case")]
    if not cases:
        return
    entry = _results.setdefault(item.nodeid, {"cases": cases, "outcome": "passed", "seconds": 0.0})
    entry["seconds"] += report.duration
    if report.failed:
        entry["outcome"] = "failed"
    elif report.skipped and entry["outcome"] == "passed":
        entry["outcome"] = "skipped"


def pytest_sessionfinish(session, exitstatus):
    path = os.environ.get(RESULTS_ENV)
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if path and worker:  # each test process writes its own; the tool reads them all
        path = f"{path}.{worker}"
    if path and _results:
        with open(path, "w", encoding="utf-8") as f:
            json.dump(_results, f, indent=1, sort_keys=True)


# Property tests draw a few examples in `make test` and their full counts in `make
# test-all` (lanes.examples). CI runs them on fixed examples, so a red CI always
# reproduces (a rare example found by a random local run is pinned with @example where it
# matters); local runs keep drawing new examples.
settings.register_profile("make-test", max_examples=lanes.examples(100))
settings.register_profile("ci", parent=settings.get_profile("make-test"), derandomize=True,
                          print_blob=True)
settings.load_profile("ci" if os.environ.get("CI") else "make-test")
