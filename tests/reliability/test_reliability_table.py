"""The reliability table of the docs (docs/reliability.md) cannot drift from the cases these
tests declare."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

TOOL = Path(__file__).resolve().parents[2] / "tools" / "reliability_table.py"


def _tool():
    spec = importlib.util.spec_from_file_location("reliability_table", TOOL)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@pytest.mark.case(
    "Reliability table of the docs", "lists exactly the declared cases; this test fails when it drifts"
)
def test_docs_table_matches_declared_cases():
    tool = _tool()
    cases = tool.declared_cases()
    assert len(cases) >= 20
    rows = tool.page_rows()
    assert rows == [(c.name, c.outcome, c.test) for c in cases], (
        "docs/reliability.md is out of date: run python tools/reliability_table.py"
    )


@pytest.mark.case("Reliability table tool", "renders passed / FAILED / not run from test results")
def test_render_reports_each_result():
    tool = _tool()
    cases = [
        tool.Case("a", "x", "t.py::a"),
        tool.Case("b", "y | z", "t.py::b"),
        tool.Case("c", "w", "t.py::c"),
    ]
    results = {
        "t.py::a": {"cases": [["a", "x"]], "outcome": "passed", "seconds": 1.25},
        "t.py::b": {"cases": [["b", "y | z"]], "outcome": "failed", "seconds": 0.1},
    }
    lines = tool.render(cases, results).splitlines()
    assert lines[2] == "| a | x | `t.py::a` | passed (1.2 s) |"
    assert lines[3] == "| b | y \\| z | `t.py::b` | **FAILED** |"
    assert lines[4] == "| c | w | `t.py::c` | not run |"
