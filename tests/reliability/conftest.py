"""The reliability suite: each test declares the case it proves and what must happen.

``@pytest.mark.case("Truncated JPEG", "reject `truncated`, run succeeds")`` on a test (or
on a ``pytest.param``) names a row of the README's reliability table. When the
environment variable ``RECORDBEAM_RELIABILITY_JSON`` names a file, every test's cases and
result are written there at the end of the session; ``tools/reliability_table.py`` turns
that file into the table.
"""

from __future__ import annotations

import json
import os

import pytest

RESULTS_ENV = "RECORDBEAM_RELIABILITY_JSON"

_results: dict[str, dict] = {}


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "case(name, outcome): a reliability case this test proves, for the README table"
    )


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
    if path and _results:
        with open(path, "w", encoding="utf-8") as f:
            json.dump(_results, f, indent=1, sort_keys=True)


def pytest_collection_modifyitems(items):
    here = os.path.dirname(__file__)
    for item in items:
        if str(item.fspath).startswith(here) and not any(item.iter_markers("case")):
            raise pytest.UsageError(f"{item.nodeid} declares no @pytest.mark.case(...)")
