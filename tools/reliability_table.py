"""The reliability table of the docs (``docs/reliability.md``), produced from the tests
that declare cases.

Each test in ``tests/reliability`` (and each test elsewhere that proves a data-loss or
misconfiguration case) declares what it proves with
``@pytest.mark.case("<case>", "<what happens>")``. This script runs those tests, reads the
per-test results ``tests/conftest.py`` writes (``RECORDBEAM_RELIABILITY_JSON``) and writes the
table between ``<!-- reliability-table:start -->`` and ``<!-- reliability-table:end -->``
in docs/reliability.md.

    python tools/reliability_table.py            # run the suite, rewrite the table
    python tools/reliability_table.py --check    # exit 1 if the page's rows drifted

The declared cases are read from the test sources (no test run needed), so
``tests/reliability/test_reliability_table.py`` can check the page on every test run.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TESTS = ROOT / "tests"
#: Where declared cases live: the reliability suite first, then cases proved elsewhere.
CASE_FOLDERS = ("reliability", "integration", "interop", "unit")
PAGE = ROOT / "docs" / "reliability.md"
START = "<!-- reliability-table:start -->"
END = "<!-- reliability-table:end -->"
RESULTS_ENV = "RECORDBEAM_RELIABILITY_JSON"
HEADER = "| case | what happens | test | result |\n|---|---|---|---|"


@dataclass(frozen=True)
class Case:
    """One declared case: its name, the promised outcome, and the test proving it."""

    name: str
    outcome: str
    test: str  # "test_file.py::test_function"


def _is_case_marker(node: ast.AST) -> bool:
    """``pytest.mark.case(...)``, or ``CASE(...)`` where ``CASE = pytest.mark.case``."""
    if not isinstance(node, ast.Call):
        return False
    func = node.func
    if isinstance(func, ast.Name):
        return func.id == "CASE"
    return isinstance(func, ast.Attribute) and func.attr == "case"


def declared_cases(tests: Path = TESTS) -> list[Case]:
    """Every ``case`` marker in ``tests/<folder>/test_*.py``, folder by folder
    (:data:`CASE_FOLDERS`), in source order."""
    cases = []
    paths = [p for folder in CASE_FOLDERS for p in sorted((tests / folder).glob("test_*.py"))]
    for path in paths:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in tree.body:
            if not isinstance(node, ast.FunctionDef):
                continue
            for decorator in node.decorator_list:
                for call in ast.walk(decorator):
                    if _is_case_marker(call):
                        name, outcome = (ast.literal_eval(a) for a in call.args[:2])
                        cases.append(Case(name, outcome,
                                          f"{path.relative_to(tests).as_posix()}::{node.name}"))
    return cases


def run_suite(tests: Path = TESTS) -> dict[str, dict]:
    """Run every test that declares a case; nodeid -> {"cases", "outcome", "seconds"}."""
    node_ids = sorted({f"{tests / c.test.split('::')[0]}::{c.test.split('::')[1]}"
                       for c in declared_cases(tests)})
    with tempfile.TemporaryDirectory() as folder:
        results = os.path.join(folder, "results.json")
        env = {**os.environ, RESULTS_ENV: results}
        subprocess.run(
            [sys.executable, "-m", "pytest", *node_ids, "-q", "-p", "no:cacheprovider",
             "-n", str(min(os.cpu_count() or 1, 4))],
            cwd=ROOT,
            env=env,
            check=False,
        )
        merged: dict[str, dict] = {}
        for name in sorted(os.listdir(folder)):  # one file per test process
            with open(os.path.join(folder, name), encoding="utf-8") as f:
                merged.update(json.load(f))
        return merged


def _results_by_case(results: dict[str, dict]) -> dict[tuple[str, str], list[dict]]:
    by_case: dict[tuple[str, str], list[dict]] = {}
    for entry in results.values():
        for name, outcome in entry["cases"]:
            by_case.setdefault((name, outcome), []).append(entry)
    return by_case


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render(cases: list[Case], results: dict[str, dict] | None = None) -> str:
    """The Markdown table; without results the result column says "not run"."""
    by_case = _results_by_case(results or {})
    lines = [HEADER]
    for case in cases:
        runs = by_case.get((case.name, case.outcome), [])
        if not runs:
            result = "not run"
        elif all(r["outcome"] == "passed" for r in runs):
            result = f"passed ({sum(r['seconds'] for r in runs):.1f} s)"
        else:
            result = "**FAILED**"
        lines.append(f"| {_cell(case.name)} | {_cell(case.outcome)} | `{case.test}` | {result} |")
    return "\n".join(lines)


def page_rows(page: Path = PAGE) -> list[tuple[str, str, str]]:
    """(case, what happens, test) of each row between the page's markers."""
    text = page.read_text(encoding="utf-8")
    if START not in text or END not in text:
        return []
    block = text.split(START, 1)[1].split(END, 1)[0]
    rows = []
    for line in block.strip().splitlines()[2:]:
        cells = [c.strip().replace("\\|", "|") for c in line.strip().strip("|").split(" | ")]
        rows.append((cells[0], cells[1], cells[2].strip("`")))
    return rows


def write_table(table: str, page: Path = PAGE) -> None:
    text = page.read_text(encoding="utf-8")
    head, rest = text.split(START, 1)
    tail = rest.split(END, 1)[1]
    page.write_text(f"{head}{START}\n{table}\n{END}{tail}", encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--check",
        action="store_true",
        help="only compare the page's rows with the declared cases",
    )
    args = parser.parse_args(argv)
    cases = declared_cases()
    if args.check:
        expected = [(c.name, c.outcome, c.test) for c in cases]
        if page_rows() != expected:
            print(f"the reliability table of {PAGE.relative_to(ROOT)} is out of date: "
                  "run python tools/reliability_table.py")
            return 1
        print(f"the reliability table of {PAGE.relative_to(ROOT)} lists all {len(cases)} cases")
        return 0
    results = run_suite()
    write_table(render(cases, results))
    failed = [r for r in results.values() if r["outcome"] != "passed"]
    print(f"wrote {len(cases)} cases to {PAGE}; {len(failed)} test(s) not passing")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
