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

Beside it, in the same run, the byte work no writer can skip: a plain loop that reads each
image, hashes it (SHA-256), CRCs it and writes it to a file in the scratch folder, with
nothing else (no checks, no features, no framing). The stage's cost over that floor is what
recordbeam adds per image; the floor grows with the image size (the issue's set had 95 KB
JPEGs, ``make_coco_benchmark`` writes ~145 KB ones).

``--profile N`` also prints the N functions with the most cumulative time (cProfile) in
the write stage of the last run: where to look next. The issue's target (issue 15) is 250
µs per image at 20,000 images.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
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
    with open(os.path.join(output, "manifest.json"), encoding="utf-8") as f:
        totals = json.load(f)["totals"]
    shutil.rmtree(output, ignore_errors=True)
    return clock.cpu_seconds, totals["examples"], clock.shards


def byte_floor(ds, scratch: str, limit: int) -> float:
    """CPU microseconds per image of read + SHA-256 + CRC32C + write, nothing else."""
    import hashlib

    import crc32c

    with open(ds.annotations, encoding="utf-8") as f:
        names = [image["file_name"] for image in json.load(f)["images"]][:limit]
    target = os.path.join(scratch, "byte_floor.bin")
    started = time.thread_time()
    with open(target, "wb") as out:
        for name in names:
            with open(os.path.join(ds.images_dir, name), "rb") as f:
                data = f.read()
            hashlib.sha256(data).hexdigest()
            crc32c.crc32c(data)
            out.write(data)
    cpu = time.thread_time() - started
    os.remove(target)
    return cpu / len(names) * 1e6


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
    floors = []
    profiler = None
    try:
        for run in range(args.repeat):
            floors.append(byte_floor(ds, scratch, args.images))
            print(f"run {run + 1}: byte floor (read, SHA-256, CRC, write): {floors[-1]:.0f} "
                  "us/image", flush=True)
            if args.profile and run == args.repeat - 1:
                profiler = cProfile.Profile()
            cpu, examples, shards = run_once(ds, scratch, profiler)
            results.append(cpu / examples * 1e6)
            print(f"run {run + 1}: {cpu:.2f} CPU s in the write stage, {examples} examples "
                  f"in {shards} shards: {results[-1]:.0f} us/image", flush=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    best, floor = min(results), min(floors)
    print(f"\nwrite stage, {args.images} images: best {best:.0f} us of CPU per image "
          f"(target {TARGET_US}: {'met' if best <= TARGET_US else 'missed'}); the byte floor "
          f"of the same images: {floor:.0f} us, so recordbeam adds {best - floor:.0f} us "
          f"({best / floor:.2f}x the floor)")
    if profiler is not None:
        text = io.StringIO()
        pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(args.profile)
        print(text.getvalue())
    return 0


if __name__ == "__main__":
    sys.exit(main())
