"""Does a conversion spread over workers as the corpus grows? Memory, start time and speed-up.

For each case (``coco``: ``convert coco``; ``manifest``: ``convert manifest`` on a CSV with one
``image,label`` row per image), each size and each worker count, runs the conversion under
``stage_timeline.py`` (which times every stage the runner executes) and samples the resident
memory of every process of the run (the launcher and each Beam worker) every 0.1 s through
``/proc``. The datasets are ``memory_scale.py``'s: COCO-like annotations (~7 boxes per image)
over a few small 640x480 JPEGs hard-linked under every name, so a million images take
~1.5 GB of annotations and ~5 GB of output, not 140 GB; the manifest lists the same images.

    python benchmarks/scale.py [--images 100000,1000000] [--cases coco,manifest]
        [--workers 1,2] [--data-dir benchmarks/data] [--scratch DIR] [--quick]

Prints two tables, ratios computed in this run:

- per run: wall and CPU seconds (user + system of the whole process tree), images per CPU
  second, when the first stage starts (seconds from the launcher's start, imports included:
  everything the launcher does alone before the job runs on workers), the launcher's peak
  RSS, and each worker process's peak RSS (MiB) and CPU seconds, in start order: how
  evenly the workers shared the work, which a busy machine does not distort as it does
  the stage times;
- per stage that takes a noticeable share of the run: its seconds with each worker count and
  the speed-up from the fewest to the most workers (a stage at ~1.0x runs on one worker),
  and, with several sizes, how its time grew from the smallest size to the largest.

``--quick`` is a smoke test: 400 images, both cases, 1 and 2 workers, every stage shown.
Times on a shared machine are noisy; memory is not.
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from memory_scale import RECORDS_PER_SHARD, _rss_mib, _tree, dataset  # noqa: E402

TIMELINE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "stage_timeline.py")
CASES = ("coco", "manifest")
#: A timeline row: start, took, rss, peak, stage (the rows of imports and the end have no rss).
_STAGE_ROW = re.compile(r"^\s*(\d+\.\d+)\s+(\d+\.\d+)\s+(-?\d+)\s+(-?\d+)\s+(\S.*)$")


@dataclass
class Run:
    """What one conversion measured."""

    case: str
    images: int
    workers: int
    wall: float = 0.0
    cpu: float = 0.0
    first_stage: float = 0.0
    launcher_mib: int = 0
    worker_mib: list[int] = field(default_factory=list)
    worker_cpu: list[float] = field(default_factory=list)
    stages: dict[str, float] = field(default_factory=dict)


def manifest_for(root: str, images: int) -> str:
    """A CSV manifest beside the COCO dataset's images: one ``image,label`` row per image."""
    path = os.path.join(root, "manifest.csv")
    if not os.path.exists(path):
        partial = path + ".partial"
        with open(partial, "w", encoding="utf-8") as f:
            f.write("image,label\n")
            for image_id in range(1, images + 1):
                f.write(f"images/{image_id:012d}.jpg,{image_id % 80}\n")
        os.replace(partial, path)
    return path


def command_for(case: str, root: str, images: int, output: str, workers: int) -> list[str]:
    if case == "coco":
        inputs = ["coco", "--images", os.path.join(root, "images"),
                  "--annotations", os.path.join(root, "annotations", "instances.json")]
    else:
        inputs = ["manifest", "--manifest", manifest_for(root, images)]
    return [sys.executable, TIMELINE, "convert", *inputs, "--output", output,
            "--overwrite", "--quiet",
            # As many records per shard as memory_scale.py (the full-size benchmark's shards).
            "--shards", str(max(1, images // RECORDS_PER_SHARD)),
            f"--direct_num_workers={workers}"]


def _cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds ``pid`` has used so far (its own, not its children's)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _cpu_of_children() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def measure(case: str, root: str, images: int, workers: int, output: str, log: str) -> Run:
    run = Run(case, images, workers)
    cpu_before = _cpu_of_children()
    started = time.monotonic()
    peaks: dict[int, int] = {}
    cpu: dict[int, float] = {}  # the last reading: how the work was shared, whatever the load
    with open(log, "w") as out:
        process = subprocess.Popen(command_for(case, root, images, output, workers),
                                   stdout=out, stderr=subprocess.STDOUT)
        while process.poll() is None:
            for pid in _tree(process.pid):
                rss = _rss_mib(pid)
                if rss is not None:
                    peaks[pid] = max(peaks.get(pid, 0), rss)
                seconds = _cpu_seconds(pid)
                if seconds is not None:
                    cpu[pid] = seconds
            time.sleep(0.1)
    run.wall = time.monotonic() - started
    run.cpu = _cpu_of_children() - cpu_before
    if process.returncode:
        raise SystemExit(f"the {case} conversion of {images} images with {workers} worker(s) "
                         f"failed with exit code {process.returncode}; see {log}")
    run.launcher_mib = peaks.pop(process.pid, 0)
    # Beam may start a process between a worker and its SDK harness; a worker is a process
    # that held memory like one (more than a bare interpreter's few MiB).
    workers = sorted(pid for pid, mib in peaks.items() if mib > 40)  # in start order
    run.worker_mib = [peaks[pid] for pid in workers]
    run.worker_cpu = [cpu.get(pid, 0.0) for pid in workers]
    firsts = []
    with open(log) as f:
        for line in f:
            row = _STAGE_ROW.match(line)
            if row:
                firsts.append(float(row[1]))
                name = _stage_key(row[5])
                run.stages[name] = run.stages.get(name, 0.0) + float(row[2])
    if not firsts:
        raise SystemExit(f"no stage times in {log}: stage_timeline.py could not time this Beam")
    run.first_stage = min(firsts)
    return run


def _stage_key(stage: str) -> str:
    """A stage's first two transforms: the rest of a fused stage's name (which side outputs it
    writes) comes in a different order with a different worker count."""
    return " + ".join(part.strip() for part in stage.split(" + ")[:2])


def _run_row(r: Run) -> str:
    peaks = " ".join(str(m) for m in r.worker_mib) or "-"
    cpu = " ".join(f"{s:.1f}" for s in r.worker_cpu) or "-"
    return (f"| {r.case} | {r.images:,} | {r.workers} | {r.wall:.1f} | {r.cpu:.1f} "
            f"| {r.images / r.cpu:.0f} | {r.first_stage:.1f} | {r.launcher_mib} | {peaks} "
            f"| {cpu} |")


def print_tables(runs: list[Run], min_share: float) -> None:
    print("| case | images | workers | wall s | CPU s | images/CPU s | first stage at s "
          "| launcher peak MiB | worker peaks MiB | worker CPU s |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in runs:
        print(_run_row(r))
    print()
    worker_counts = sorted({r.workers for r in runs})
    sizes = sorted({r.images for r in runs})
    few, most = worker_counts[0], worker_counts[-1]
    growth = len(sizes) > 1
    print("| case | images | stage | " + " | ".join(f"s, {w} worker(s)" for w in worker_counts)
          + f" | speed-up {few}->{most} |" + (" grew x (smallest->largest size) |" if growth else ""))
    print("|---|---|---|" + "---|" * len(worker_counts) + "---|" + ("---|" if growth else ""))
    by_key = {(r.case, r.images, r.workers): r for r in runs}
    for case in dict.fromkeys(r.case for r in runs):
        for n in sizes:
            base = by_key.get((case, n, few))
            if base is None:
                continue
            total = sum(base.stages.values())
            for name, took in base.stages.items():
                if took < min_share * total:
                    continue
                times = [by_key[(case, n, w)].stages.get(name) if (case, n, w) in by_key else None
                         for w in worker_counts]
                cells = " | ".join("-" if t is None else f"{t:.2f}" for t in times)
                fastest = times[-1]
                speedup = f"{took / fastest:.2f}x" if fastest else "-"
                line = f"| {case} | {n:,} | {name[:100]} | {cells} | {speedup} |"
                if growth:
                    smallest = by_key.get((case, sizes[0], few))
                    earlier = smallest.stages.get(name) if smallest else None
                    line += f" {took / earlier:.1f} |" if earlier else " - |"
                print(line)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", default="100000,1000000", help="comma-separated sizes")
    parser.add_argument("--cases", default="coco,manifest", help="comma-separated: coco, manifest")
    parser.add_argument("--workers", default="1,2", help="comma-separated Beam worker counts")
    parser.add_argument("--data-dir", default=os.path.join(os.path.dirname(__file__), "data"))
    parser.add_argument("--scratch", default=None, help="where outputs and logs go (deleted after)")
    parser.add_argument("--min-share", type=float, default=0.03,
                        help="show stages taking at least this share of the stage time")
    parser.add_argument("--quick", action="store_true",
                        help="smoke test: 400 images, every stage shown")
    args = parser.parse_args(argv)
    if not sys.platform.startswith("linux"):
        raise SystemExit("reads /proc to sample memory: Linux only")
    if args.quick:
        args.images, args.min_share = "400", 0.0
    sizes = [int(n) for n in args.images.split(",")]
    cases = args.cases.split(",")
    unknown = sorted(set(cases) - set(CASES))
    if unknown:
        parser.error(f"unknown case(s) {', '.join(unknown)}; choose from {', '.join(CASES)}")
    worker_counts = sorted(int(w) for w in args.workers.split(","))
    scratch = tempfile.mkdtemp(prefix="scale-", dir=args.scratch)
    runs = []
    try:
        for n in sizes:
            root = dataset(args.data_dir, n)
            for case in cases:
                # Alternating worker counts back to back keeps the machine's load alike for both.
                for workers in worker_counts:
                    output = os.path.join(scratch, f"out_{case}_{n}_{workers}")
                    log = os.path.join(scratch, f"log_{case}_{n}_{workers}.txt")
                    runs.append(measure(case, root, n, workers, output, log))
                    shutil.rmtree(output, ignore_errors=True)
                    # Each run as it ends, so a long series stopped midway still says something.
                    print(f"done: {_run_row(runs[-1])}", file=sys.stderr, flush=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print_tables(runs, args.min_share)
    return 0


if __name__ == "__main__":
    sys.exit(main())
