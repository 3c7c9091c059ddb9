"""Where a local ``recordbeam`` run spends its time: one line per stage the runner executes.

Beam's FnApiRunner runs a pipeline's fused stages one after the other, each split over the
worker processes. This script runs any ``recordbeam`` command in this process and prints,
for every bundle the runner executed: when it started, how long it took, the launcher's
resident memory after it (and its peak so far), and the stage's transforms. It reaches
into the FnApiRunner's private ``_execute_bundle`` (there from Beam 2.60 to 2.77 at
least), so it is a measuring tool, not part of the library; on a Beam without it, the
command still runs and the script says it could not time the stages.

    python benchmarks/stage_timeline.py convert coco --images DIR --annotations FILE \\
        --output OUT --quiet [--min-seconds 0.05]

Columns: ``start`` and ``took`` in seconds from this script's start (imports included),
``rss``/``peak`` of this process in MiB. The command imports Beam itself, as it does when
run on its own (its standby workers start before that import), and the script patches
the runner once it is imported.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.abc
import importlib.util
import resource
import sys
import time
from collections.abc import Callable
from types import ModuleType

START = time.monotonic()


def _rss_mib() -> int:
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * resource.getpagesize() // 2**20
    except OSError:  # not Linux: the peak column still says something
        return -1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    parser.add_argument("--min-seconds", type=float, default=0.0,
                        help="hide stages shorter than this (default: show all)")
    ours, command = parser.parse_known_args()

    from recordbeam.cli.main import main as recordbeam_main

    rows: list[tuple[float, float, int, int, str]] = []

    untimed = []

    def row(began: float, took: float, stage: str) -> None:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
        rows.append((began - START, took, _rss_mib(), peak, stage))

    def time_bundles(fn_runner: ModuleType) -> None:
        if not time_bundles_of(fn_runner, row):
            untimed.append("this Beam's FnApiRunner has no _execute_bundle to time")

    @contextlib.contextmanager
    def terminal_log(prefix: str = ""):
        yield sys.stdout, "(Beam's log goes to the terminal)"

    _after_import("apache_beam.runners.portability.fn_api_runner.fn_runner", time_bundles)
    # Keep failures visible here.
    _after_import("recordbeam.pipeline", lambda m: setattr(m, "worker_output_to_log", terminal_log))
    imported = time.monotonic() - START
    code = recordbeam_main(command)
    finished = time.monotonic() - START

    print(f"\n{'start':>7} {'took':>6} {'rss':>5} {'peak':>5}  stage")
    print(f"{0.0:7.2f} {imported:6.2f} {'':>5} {'':>5}  (imports)")
    for began, took, rss, peak, name in rows:
        if took >= ours.min_seconds:
            print(f"{began:7.2f} {took:6.2f} {rss:5d} {peak:5d}  {_short(name)}")
    last = rows[-1][0] + rows[-1][1] if rows else imported
    print(f"{last:7.2f} {finished - last:6.2f} {'':>5} {'':>5}  (after the last stage)")
    print(f"total {finished:.2f} s; {len(rows)} bundles, {sum(r[1] for r in rows):.2f} s in stages")
    for reason in untimed:
        print(f"stages not timed: {reason}", file=sys.stderr)
    return code


def time_bundles_of(fn_runner: ModuleType, record: Callable[[float, float, str], None]) -> bool:
    """Has the FnApiRunner of module ``fn_runner`` call ``record(began, took, stage name)``
    (``time.monotonic`` seconds) after every bundle it executes, through its private
    ``_execute_bundle``; False, and nothing changed, on a Beam without it."""
    execute = getattr(getattr(fn_runner, "FnApiRunner", None), "_execute_bundle", None)
    if execute is None:
        return False

    def timed(self, context, bundle_manager, bundle_input):
        began = time.monotonic()
        try:
            return execute(self, context, bundle_manager, bundle_input)
        finally:
            record(began, time.monotonic() - began, bundle_manager.stage.name)

    fn_runner.FnApiRunner._execute_bundle = timed
    return True


def _after_import(name: str, then: Callable[[ModuleType], None]) -> None:
    """Call ``then(module)`` as soon as module ``name`` has been imported, by whoever."""

    class Hook(importlib.abc.MetaPathFinder):
        def find_spec(self, fullname, path, target=None):
            if fullname != name:
                return None
            sys.meta_path.remove(self)
            spec = importlib.util.find_spec(fullname)
            execute = spec.loader.exec_module

            def execute_then(module: ModuleType) -> None:
                execute(module)
                then(module)

            spec.loader.exec_module = execute_then
            return spec

    sys.meta_path.insert(0, Hook())


def _short(stage: str) -> str:
    """The transforms of a fused stage, without the runner's decorations."""
    names = []
    for part in stage.replace("(", "").replace(")", "").split("+"):
        part = part.removeprefix("ref_AppliedPTransform_").removeprefix("ref_PCollection_")
        names.append(part.rsplit("_", 1)[0] if part.rsplit("_", 1)[-1].isdigit() else part)
    return " + ".join(names)[:160]


if __name__ == "__main__":
    sys.exit(main())
