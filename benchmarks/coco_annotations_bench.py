"""Wall time of the COCO annotations stage alone, on the local runner, by worker count:
the annotations list read in byte ranges by every worker (``ReadAnnotationRanges``) against
the streamed pass on one worker (``ReadInputs``'s ``annotations`` task), taken from one
source tree or another (``--before-src`` a checkout whose ``ReadCoco`` streams them).

Each run is a pipeline of that stage and a count of the batches it gives, in a process
of its own; the runs alternate (streamed 1 worker, ranged 1, streamed 2, ranged 2, then
again) so the machine's other load falls on all of them alike.

    python benchmarks/coco_annotations_bench.py [--images 143000] [--data-dir DIR]
        [--repeat 3] [--workers 1 2] [--before-src /path/to/other/src]

The data is ``coco_bench.py``'s (about 7 boxes per image: 143000 images give 1M
annotations).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

HERE_SRC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")


def _child(mode: str, workers: int, images_dir: str, annotations: str) -> None:
    import apache_beam as beam

    from recordbeam.local.runner import pipeline_options
    from recordbeam.sources.coco.options import CocoOptions

    options = CocoOptions(images_dir, annotations)
    p = beam.Pipeline(options=pipeline_options([f"--direct_num_workers={workers}"]))
    if mode == "ranged":
        from recordbeam.sources.coco.annotation_ranges import ReadAnnotationRanges

        batches = (p | "Read" >> ReadAnnotationRanges(options))["batches"]
    else:
        from recordbeam.sources.coco.input_tasks import ReadInputs

        batches = (p | beam.Create(["annotations"]) | beam.ParDo(ReadInputs(options))
                   .with_outputs("rejects", "counts", "duplicate_annotation_ids",
                                 main="batches")).batches
    _ = batches | beam.combiners.Count.Globally()
    started = time.perf_counter()
    p.run().wait_until_finish()
    print(json.dumps({"seconds": time.perf_counter() - started}))


def _run(mode: str, workers: int, src: str, ds) -> float:
    env = {**os.environ, "PYTHONPATH": src}
    done = subprocess.run(
        [sys.executable, __file__, "--child", mode, "--workers", str(workers),
         "--images-dir", ds.images_dir, "--annotations", ds.annotations],
        env=env, check=True, capture_output=True, text=True)
    return json.loads(done.stdout.strip().splitlines()[-1])["seconds"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    parser.add_argument("--images", type=int, default=143_000)
    parser.add_argument("--data-dir", default=os.path.join(os.path.dirname(__file__), "data"))
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--before-src", default=HERE_SRC,
                        help="source tree whose streamed pass is the baseline")
    parser.add_argument("--child", choices=["ranged", "streamed"], help=argparse.SUPPRESS)
    parser.add_argument("--images-dir", help=argparse.SUPPRESS)
    parser.add_argument("--annotations", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        _child(args.child, args.workers[0], args.images_dir, args.annotations)
        return 0

    from coco_bench import ensure_dataset

    ds = ensure_dataset(args.data_dir, args.images)
    with open(ds.annotations, encoding="utf-8") as f:
        size = os.fstat(f.fileno()).st_size
    print(f"{ds.annotations}: {size / 1e6:.0f} MB, {args.images} images")
    times: dict[tuple[str, int], list[float]] = {}
    for _ in range(args.repeat):
        for workers in args.workers:
            for mode, src in (("streamed", args.before_src), ("ranged", HERE_SRC)):
                seconds = _run(mode, workers, src, ds)
                times.setdefault((mode, workers), []).append(seconds)
                print(f"  {mode:9} {workers} worker(s): {seconds:6.1f} s", flush=True)
    print(f"{'annotations stage':28} {'best s':>8} {'median s':>9}")
    for (mode, workers), runs in times.items():
        print(f"{mode + f', {workers} worker(s)':28} {min(runs):8.1f} "
              f"{statistics.median(runs):9.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
