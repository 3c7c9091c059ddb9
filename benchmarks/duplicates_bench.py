"""What finding duplicates costs a conversion: CPU at 20k images, memory at 100k.

**CPU.** ``coco_bench.py``'s 20k-image COCO dataset (640x480 JPEGs of ~140 KB, ~7 boxes
each), made distinct: each name gets its own bytes (its distinct file with a JPEG comment
segment naming it inserted after the start marker), except ``--copies`` of them (default
1%), which repeat another name's bytes: duplicates to find. ``recordbeam convert coco``
runs once per case per round, the cases in rotating order (round robin, so machine noise
falls on all alike), each as its own command measured from a fresh process (CPU of its
whole process tree: launcher and Beam workers; peak RSS of its largest process):

- ``off``: ``--duplicates off``, the baseline: no hashes, no grouping;
- ``keep``: the default: hash files, grouping, ``duplicates.jsonl``;
- ``drop``: ``--duplicates drop`` (reads and hashes every image once more before the write);
  then, for comparison, the other way to drop: the CPU of a framed copy of every shard of a
  ``keep`` output (:func:`rewrite_estimate`);
- ``near``: ``--near-duplicates`` (a perceptual hash per image: a small decode).

Prints per case the minimum and median CPU over rounds, the ratio of the minimums to
``off``'s, wall time and peak RSS; then each case's CPU over ``off``'s round by round
(the two ran back to back, so a busy machine weighs on both) and the median of those
ratios, on which the target is judged: ``keep`` at most 3% more CPU than ``off`` (issue
31). Each output is checked to hold the examples
expected (all, or all but the copies with ``drop``).

**Memory** (``--memory 20000,100000``): ``memory_scale.py``'s tiny-image datasets (a few KB
per image: a run's memory is its records, not image bytes), every file made distinct the
same way; per size and per case (``off``, ``keep``), the launcher's and the largest
worker's peak resident memory, sampled every 0.1 s.

``--in-process N`` also alternates ``off`` and ``keep`` N times in the benchmark's own
process on Beam's in-memory runner (one worker: all stages here), CPU time of the process
per run: no process start or worker scheduling, so less noise than whole commands.

    python benchmarks/duplicates_bench.py [--images 20000] [--rounds 3]
        [--cases off,keep,drop,near] [--copies 0.01] [--in-process N]
        [--memory 20000,100000] [--data-dir benchmarks/data] [--scratch DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import struct
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import coco_bench  # noqa: E402 - a sibling script: its dataset and its measuring child
import memory_scale  # noqa: E402

CASES = {
    "off": ["--duplicates", "off"],
    "keep": [],
    "drop": ["--duplicates", "drop", "--max-reject-fraction", "0.2"],
    "near": ["--near-duplicates"],
}
TARGET_RATIO = 1.03
_SOI = b"\xff\xd8"


def tagged_jpeg(data: bytes, tag: str) -> bytes:
    """``data`` (a JPEG) with a comment segment holding ``tag`` after its start marker: the
    same picture, other bytes."""
    if not data.startswith(_SOI):
        raise ValueError("not a JPEG")
    text = tag.encode("utf-8")
    return _SOI + b"\xff\xfe" + struct.pack(">H", len(text) + 2) + text + data[2:]


def distinct_copy(images_dir: str, target_dir: str, copies: float) -> int:
    """Write every image of ``images_dir`` into ``target_dir`` with bytes of its own, but
    one name in ``1 / copies`` repeats the previous name's bytes. Returns the number of
    names that repeat another's."""
    os.makedirs(target_dir, exist_ok=True)
    names = sorted(os.listdir(images_dir))
    every = round(1 / copies) if copies else 0
    repeated = 0
    previous = b""
    for index, name in enumerate(names):
        with open(os.path.join(images_dir, name), "rb") as f:
            data = f.read()
        if every and index % every == every - 1 and previous:
            tagged = previous
            repeated += 1
        else:
            tagged = tagged_jpeg(data, name)
        with open(os.path.join(target_dir, name), "wb") as f:
            f.write(tagged)
        previous = tagged
    return repeated


def ensure_distinct(data_dir: str, images: int, copies: float) -> tuple[coco_bench.Dataset, int]:
    """``coco_bench``'s dataset of ``images`` with distinct bytes (see the module doc)."""
    ds = coco_bench.ensure_dataset(data_dir, images)
    root = os.path.join(data_dir, f"coco_{images}_distinct_{copies:g}")
    marker = os.path.join(root, "distinct.json")
    if not os.path.exists(marker):
        shutil.rmtree(root, ignore_errors=True)
        print(f"making {images} images distinct into {root} ...", flush=True)
        repeated = distinct_copy(ds.images_dir, os.path.join(root, "images"), copies)
        with open(marker, "w", encoding="utf-8") as f:
            json.dump({"repeated": repeated}, f)
    with open(marker, encoding="utf-8") as f:
        repeated = json.load(f)["repeated"]
    images_dir = os.path.join(root, "images")
    size = sum(os.path.getsize(os.path.join(images_dir, n)) for n in os.listdir(images_dir))
    return coco_bench.Dataset(images_dir, ds.annotations, ds.num_images, size), repeated


def _command(ds: coco_bench.Dataset, output: str, case: str) -> list[str]:
    return [sys.executable, "-m", "recordbeam", "convert", "coco", "--images", ds.images_dir,
            "--annotations", ds.annotations, "--output", output, "--quiet", *CASES[case]]


def _examples(output: str) -> int:
    with open(os.path.join(output, "manifest.json"), encoding="utf-8") as f:
        return json.load(f)["totals"]["examples"]


def cpu(args: argparse.Namespace, scratch: str) -> None:
    ds, repeated = ensure_distinct(args.data_dir, args.images, args.copies)
    seen: dict[str, list[dict]] = {case: [] for case in args.cases}
    for r in range(args.rounds):
        order = args.cases[r % len(args.cases):] + args.cases[:r % len(args.cases)]
        for case in order:
            output = os.path.join(scratch, case)
            shutil.rmtree(output, ignore_errors=True)
            os.sync()
            time.sleep(2)
            result = coco_bench.run_case(_command(ds, output, case),
                                         os.path.join(scratch, f"{case}.log"))
            if result["returncode"]:
                raise SystemExit(f"{case} failed; see {os.path.join(scratch, case + '.log')}")
            expected = ds.num_images - (repeated if case == "drop" else 0)
            if _examples(output) != expected:
                raise SystemExit(f"{case} wrote {_examples(output)} examples, not {expected}")
            seen[case].append(result)
            print(f"round {r + 1} {case}: {result['cpu']:.2f} CPU s, {result['wall']:.1f} s",
                  flush=True)
            shutil.rmtree(output, ignore_errors=True)
    base = min(r["cpu"] for r in seen["off"]) if "off" in seen else None
    print(f"\n{ds.num_images:,} images ({repeated} of them repeating another's bytes), "
          f"{args.rounds} rounds, round robin")
    print("| case | min CPU s | median CPU s | min vs off | median wall s | peak MiB |")
    print("|---|---|---|---|---|---|")
    for case, results in seen.items():
        low = min(r["cpu"] for r in results)
        mid = statistics.median(r["cpu"] for r in results)
        ratio = f"{low / base:.3f}" if base else "-"
        wall = statistics.median(r["wall"] for r in results)
        peak = max(r["peak_mib"] for r in results)
        print(f"| {case} | {low:.2f} | {mid:.2f} | {ratio} | {wall:.1f} | {peak:.0f} |")
    if base is None:
        return
    for case in seen:
        if case == "off":
            continue
        paired = [r["cpu"] / o["cpu"] for r, o in zip(seen[case], seen["off"], strict=True)]
        print(f"{case} / off, round by round: {' '.join(f'{x:.3f}' for x in paired)}; "
              f"median {statistics.median(paired):.3f}")
    if "keep" in seen:
        paired = [r["cpu"] / o["cpu"] for r, o in zip(seen["keep"], seen["off"], strict=True)]
        ratio = statistics.median(paired)
        print(f"target: keep <= {TARGET_RATIO}x off's CPU (median of the rounds' ratios): "
              f"{ratio:.3f}x {'met' if ratio <= TARGET_RATIO else 'MISSED'}")
    if "drop" in seen:
        rewrite_estimate(ds, scratch)


def in_process(args: argparse.Namespace, scratch: str) -> None:
    """``off`` and ``keep`` alternated in this process on Beam's in-memory runner (one
    worker: every stage runs here), CPU time of this process per run: no process start,
    no worker scheduling, so less noise than whole commands."""
    from recordbeam.cli import main as cli

    ds, _repeated = ensure_distinct(args.data_dir, args.images, args.copies)
    seen: dict[str, list[float]] = {"off": [], "keep": []}
    for r in range(args.in_process):
        for case in ("off", "keep") if r % 2 == 0 else ("keep", "off"):
            output = os.path.join(scratch, f"in_process_{case}")
            shutil.rmtree(output, ignore_errors=True)
            started = time.process_time()
            code = cli.main([*_command(ds, output, case)[3:], "--direct_running_mode=in_memory",
                             "--direct_num_workers=1"])
            seen[case].append(time.process_time() - started)
            if code:
                raise SystemExit(f"{case} failed in process (exit {code})")
            shutil.rmtree(output, ignore_errors=True)
    paired = [k - o for k, o in zip(seen["keep"], seen["off"], strict=True)]
    ratio = statistics.median(k / o for k, o in zip(seen["keep"], seen["off"], strict=True))
    print(f"\nin one process, in-memory runner, {args.in_process} rounds alternated:")
    for case, values in seen.items():
        print(f"  {case}: {' '.join(f'{v:.2f}' for v in values)} CPU s; median "
              f"{statistics.median(values):.2f}")
    print(f"  keep - off, round by round: {' '.join(f'{d:+.2f}' for d in paired)} CPU s; "
          f"median {statistics.median(paired):+.2f} ({ratio:.3f}x)")


def rewrite_estimate(ds: coco_bench.Dataset, scratch: str) -> None:
    """What ``drop`` would cost done the other way (write every copy, then rewrite the
    shards holding a dropped one): at 1% copies nearly every shard holds one, so the
    cost is about a framed copy of every shard, timed here on a ``keep`` output
    (records copied as framed bytes, CRCs not checked; the read, the copy, the write)."""
    import io

    from recordbeam.tfrecord.framing import read_records_with_offsets

    output = os.path.join(scratch, "rewrite")
    shutil.rmtree(output, ignore_errors=True)
    result = coco_bench.run_case(_command(ds, output, "keep"), os.path.join(scratch, "rw.log"))
    if result["returncode"]:
        raise SystemExit("the keep run for the rewrite estimate failed")
    shards = sorted(n for n in os.listdir(output) if n.endswith(".tfrecord"))
    os.sync()
    cpu_started, wall_started = time.process_time(), time.monotonic()
    copied = 0
    for name in shards:
        with open(os.path.join(output, name), "rb") as f:
            data = f.read()
        with open(os.path.join(output, name + ".rewritten"), "wb") as out:
            for offset, framed, _record in read_records_with_offsets(io.BytesIO(data),
                                                                     verify=False):
                out.write(data[offset:offset + framed])
                copied += framed
        os.remove(os.path.join(output, name + ".rewritten"))
    cpu_s, wall = time.process_time() - cpu_started, time.monotonic() - wall_started
    print(f"rewrite estimate: a framed copy of every shard of the keep output "
          f"({len(shards)} shards, {copied / 2**30:.2f} GiB): {cpu_s:.2f} CPU s, {wall:.1f} s "
          "(in one process; the I/O is as much again on an object store)")
    shutil.rmtree(output, ignore_errors=True)


def distinct_small(data_dir: str, images: int) -> str:
    """``memory_scale``'s tiny-image dataset of ``images``, every file distinct."""
    source = memory_scale.dataset(data_dir, images)
    root = os.path.join(data_dir, f"coco_small_{images}_distinct")
    if not os.path.exists(os.path.join(root, "distinct.json")):
        shutil.rmtree(root, ignore_errors=True)
        os.makedirs(os.path.join(root, "annotations"))
        shutil.copy(os.path.join(source, "annotations", "instances.json"),
                    os.path.join(root, "annotations", "instances.json"))
        distinct_copy(os.path.join(source, "images"), os.path.join(root, "images"), 0)
        with open(os.path.join(root, "distinct.json"), "w", encoding="utf-8") as f:
            json.dump({"images": images}, f)
    return root


def memory(args: argparse.Namespace, scratch: str) -> None:
    rows = []
    for n in (int(v) for v in args.memory.split(",")):
        root = distinct_small(args.data_dir, n)
        for case in ("off", "keep"):
            output = os.path.join(scratch, f"memory_{case}_{n}")
            wall, launcher, worker = memory_scale.measure(root, n, output, extra=CASES[case])
            rows.append((n, case, wall, launcher, worker))
            print(f"{n} {case}: {wall:.1f} s, launcher {launcher} MiB, worker {worker} MiB",
                  flush=True)
            shutil.rmtree(output, ignore_errors=True)
    print("\n| images | case | wall s | launcher peak MiB | largest worker peak MiB |")
    print("|---|---|---|---|---|")
    for n, case, wall, launcher, worker in rows:
        print(f"| {n:,} | {case} | {wall:.1f} | {launcher} | {worker} |")


def main(argv: list[str] | None = None) -> int:
    here = os.path.dirname(os.path.abspath(__file__))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cases", default="off,keep",
                        help=f"comma-separated, of {', '.join(CASES)} (default: off,keep)")
    parser.add_argument("--copies", type=float, default=0.01,
                        help="share of names repeating another's bytes (default: 0.01)")
    parser.add_argument("--memory", default=None, metavar="SIZES",
                        help="also (or with --rounds 0, only) the memory run at these sizes")
    parser.add_argument("--in-process", type=int, default=0, metavar="ROUNDS",
                        help="also run off and keep alternated in this process, ROUNDS times")
    parser.add_argument("--data-dir", default=os.path.join(here, "data"))
    parser.add_argument("--scratch", default=None)
    args = parser.parse_args(argv)
    args.cases = [c.strip() for c in args.cases.split(",") if c.strip()]
    unknown = [c for c in args.cases if c not in CASES]
    if unknown:
        raise SystemExit(f"unknown case(s) {unknown}; choose among {', '.join(CASES)}")
    coco_bench.compile_recordbeam()
    scratch = tempfile.mkdtemp(prefix="duplicates-bench-", dir=args.scratch)
    try:
        if args.rounds:
            cpu(args, scratch)
        if args.in_process:
            in_process(args, scratch)
        if args.memory:
            memory(args, scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
