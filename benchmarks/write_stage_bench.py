"""CPU per image of the write stage: ``_WriteShard`` of ``recordbeam convert coco``.

Runs ``recordbeam convert coco`` on the COCO benchmark set (``coco_bench.py``'s data) in
this process (``--direct_running_mode=in_memory``, one worker) and wraps the sink's
``_WriteShard.process`` to add up the CPU time its thread spends in it: reading the shard's
grouped elements back from the shuffle, decoding them, reading every image, checking it,
hashing it, encoding the Example, framing it (CRC) and writing it. The time spent by the
steps downstream of its yields is left out. It prints microseconds of CPU per image
written, best of ``--repeat`` runs (the CPU of a thread, so other processes on the machine
disturb it little; the page cache and the memory bus they share still show).

    python benchmarks/write_stage_bench.py [--images 20000] [--data-dir benchmarks/data]
        [--scratch /dev/shm] [--repeat 3] [--profile N]

``--profile N`` also prints the N functions with the most cumulative time (cProfile) in
the write stage of the last run: where to look next. The issue's target (issue 15) is 250
µs per image at 20,000 images.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from coco_bench import ensure_dataset  # noqa: E402 - the same data as coco_bench.py

TARGET_US = 250


class _StageClock:
    """Adds up the CPU time of ``_WriteShard.process`` in the thread that runs it."""

    def __init__(self, profiler: cProfile.Profile | None) -> None:
        self.cpu_seconds = 0.0
        self.shards = 0
        self.profiler = profiler

    def wrap(self, process):
        clock = self

        def timed_process(dofn, group):
            generator = process(dofn, group)
            while True:
                if clock.profiler is not None:
                    clock.profiler.enable()
                started = time.thread_time()
                try:
                    item = next(generator)
                except StopIteration:
                    return
                finally:
                    clock.cpu_seconds += time.thread_time() - started
                    if clock.profiler is not None:
                        clock.profiler.disable()
                if type(item).__name__ == "ShardResult":
                    clock.shards += 1
                yield item

        return timed_process


def run_once(ds, scratch: str, profiler: cProfile.Profile | None) -> tuple[float, int, int]:
    """One in-process conversion; ``(write-stage CPU seconds, examples, shards)``."""
    from recordbeam.cli.main import main as recordbeam_main
    from recordbeam.write import sink

    output = os.path.join(scratch, "write_stage_bench_out")
    shutil.rmtree(output, ignore_errors=True)
    clock = _StageClock(profiler)
    original = sink._WriteShard.process
    sink._WriteShard.process = clock.wrap(original)
    try:
        code = recordbeam_main([
            "convert", "coco", "--images", ds.images_dir, "--annotations", ds.annotations,
            "--output", output, "--quiet", "--direct_running_mode=in_memory",
            "--direct_num_workers=1",
        ])
    finally:
        sink._WriteShard.process = original
    if code != 0:
        raise SystemExit(f"recordbeam exited with {code}")
    import json

    with open(os.path.join(output, "manifest.json"), encoding="utf-8") as f:
        totals = json.load(f)["totals"]
    shutil.rmtree(output, ignore_errors=True)
    return clock.cpu_seconds, totals["examples"], clock.shards


def main(argv: list[str] | None = None) -> int:
    here = os.path.dirname(os.path.abspath(__file__))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=20000, help="dataset size (default 20000)")
    parser.add_argument("--data-dir", default=os.path.join(here, "data"),
                        help="where coco_bench.py's datasets are (generated if absent)")
    parser.add_argument("--scratch", default="/dev/shm" if os.path.isdir("/dev/shm") else None,
                        help="where the output goes (default /dev/shm, a tmpfs)")
    parser.add_argument("--repeat", type=int, default=3, help="runs; the best is reported")
    parser.add_argument("--profile", type=int, default=0, metavar="N",
                        help="print the N costliest functions of the last run's write stage")
    args = parser.parse_args(argv)
    ds = ensure_dataset(args.data_dir, args.images)
    scratch = tempfile.mkdtemp(prefix="write-stage-", dir=args.scratch)
    results = []
    profiler = None
    try:
        for run in range(args.repeat):
            if args.profile and run == args.repeat - 1:
                profiler = cProfile.Profile()
            cpu, examples, shards = run_once(ds, scratch, profiler)
            results.append(cpu / examples * 1e6)
            print(f"run {run + 1}: {cpu:.2f} CPU s in the write stage, {examples} examples "
                  f"in {shards} shards: {results[-1]:.0f} us/image", flush=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    best = min(results)
    print(f"\nwrite stage, {args.images} images: best {best:.0f} us of CPU per image "
          f"(target {TARGET_US}: {'met' if best <= TARGET_US else 'missed'})")
    if profiler is not None:
        text = io.StringIO()
        pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(args.profile)
        print(text.getvalue())
    return 0


if __name__ == "__main__":
    sys.exit(main())
