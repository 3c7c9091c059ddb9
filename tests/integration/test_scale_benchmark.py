"""benchmarks/scale.py runs end to end in its --quick mode and prints the tables it promises.

Only the shape is checked: the numbers depend on the machine.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from lanes import exhaustive

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCALE = os.path.join(REPO, "benchmarks", "scale.py")

RUN_COLUMNS = ["case", "images", "workers", "wall s", "CPU s", "images/CPU s",
               "first stage at s", "launcher peak MiB", "worker peaks MiB", "worker CPU s"]
STAGE_COLUMNS = ["case", "images", "stage", "s, 1 worker(s)", "s, 2 worker(s)",
                 "speed-up 1->2"]


def _table(lines: list[str], first_column: str, header_has: str) -> list[list[str]]:
    """The rows (header first) of the markdown table whose header names ``header_has``."""
    start = next(i for i, line in enumerate(lines)
                 if line.startswith(f"| {first_column} |") and header_has in line)
    rows = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip().strip("|").split("|")])
    return [rows[0], *rows[2:]]  # without the |---| line


@pytest.fixture(scope="module")
def quick_output(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    data = tmp_path_factory.mktemp("scale_data")
    run = subprocess.run(
        [sys.executable, SCALE, "--quick", "--cases", "coco", "--workers", "2,1",
         "--data-dir", str(data), "--scratch", str(tmp_path_factory.mktemp("scale_scratch"))],
        capture_output=True, text=True, timeout=240, cwd=REPO)
    assert run.returncode == 0, run.stderr[-3000:]
    return run.stdout.splitlines()


@exhaustive  # a benchmark's own output, not a promise of the product
def test_quick_prints_one_row_per_run_with_its_memory(quick_output: list[str]) -> None:
    header, *rows = _table(quick_output, "case", "launcher peak MiB")
    assert header == RUN_COLUMNS
    # Worker counts are run fewest first, whatever order they were given in.
    assert [(row[0], row[1], row[2]) for row in rows] == [("coco", "400", "1"), ("coco", "400", "2")]
    for row in rows:
        assert float(row[3]) > 0 and float(row[4]) > 0
        assert int(row[7]) > 0, "the launcher's memory was sampled"
        worker_peaks = [int(mib) for mib in row[8].split()]
        assert worker_peaks and all(mib > 0 for mib in worker_peaks)
        worker_cpu = [float(seconds) for seconds in row[9].split()]
        assert len(worker_cpu) == len(worker_peaks) and sum(worker_cpu) > 0
    one, two = rows
    assert len(two[8].split()) > len(one[8].split()), "the second worker shows up"


@exhaustive  # likewise
def test_quick_prints_every_stage_with_its_speed_up(quick_output: list[str]) -> None:
    header, *rows = _table(quick_output, "case", "speed-up")
    assert header == STAGE_COLUMNS
    stages = [row[2] for row in rows]
    assert any("WriteShard" in stage for stage in stages), stages
    assert any("ReadCoco" in stage for stage in stages), stages
    for row in rows:
        assert row[5] == "-" or row[5].endswith("x")
