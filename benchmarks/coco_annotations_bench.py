"""Time of the COCO annotations stage alone, on the local runner, by worker count:
the annotations list read in byte ranges by every worker (``ReadAnnotationRanges``) against
the streamed pass on one worker (``ReadInputs``'s ``annotations`` task), taken from one
source tree or another (``--before-src`` a checkout whose ``ReadCoco`` streams them).

Each run is a pipeline of that stage and a count of the batches it gives, in a process
of its own; the runs alternate (streamed 1 worker, ranged 1, streamed 2, ranged 2, then
again) so the machine's other load falls on all of them alike. Each prints two times:

- **in stages**: the wall time of the stages the FnApiRunner executes (its private
  ``_execute_bundle``, timed as ``stage_timeline.py`` does), but the first: that one holds
  only the ``Create`` (and, ranged, the cut into ranges), and its time is the workers'
  start-up, which a ``convert`` run pays while it imports. This is the stage's own time.
- **the pipeline**: ``run()`` to its end, start-up included.

    python benchmarks/coco_annotations_bench.py [--annotations FILE | --images 143000
        [--data-dir DIR]] [--repeat 3] [--workers 1 2] [--before-src /path/to/other/src]

The data is ``--annotations`` (no image is read) or ``coco_bench.py``'s dataset (about 7
boxes per image: 143000 images give 1M annotations).
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

        # The reshuffle leaves the Create alone in the first stage, as the ranged read's
        # first stage holds only its Create and the cut into ranges.
        batches = (p | beam.Create(["annotations"]) | beam.Reshuffle()
                   | beam.ParDo(ReadInputs(options))
                   .with_outputs("rejects", "counts", "duplicate_annotation_ids",
                                 main="batches")).batches
    _ = batches | beam.combiners.Count.Globally()
    in_stages = _time_stages()
    started = time.perf_counter()
    p.run().wait_until_finish()
    # The first stage holds only the Create (and the cut into ranges): its time is the
    # workers' start, which a convert run pays while it imports (see stage_timeline.py).
    print(json.dumps({"seconds": time.perf_counter() - started,
                      "in_stages": sum(in_stages[1:])}))


def _time_stages() -> list[float]:
    """The wall time of every bundle the FnApiRunner executes (timed as
    ``stage_timeline.py`` times them): the stage's own time, without the runner's start
    and its workers' start-up. Empty on a Beam without the method timed."""
    from apache_beam.runners.portability.fn_api_runner import fn_runner
    from stage_timeline import time_bundles_of

    took: list[float] = []
    verbose = bool(os.environ.get("ANNOTATIONS_BENCH_STAGES"))

    def record(_began: float, seconds: float, stage: str) -> None:
        took.append(seconds)
        if verbose:
            print(f"{seconds:6.2f} {stage[:150]}", file=sys.stderr)

    time_bundles_of(fn_runner, record)
    return took


def _run(mode: str, workers: int, src: str, ds) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": src}
    done = subprocess.run(
        [sys.executable, __file__, "--child", mode, "--workers", str(workers),
         "--images-dir", ds.images_dir, "--annotations", ds.annotations],
        env=env, check=True, capture_output=True, text=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    parser.add_argument("--images", type=int, default=143_000)
    parser.add_argument("--annotations", help="an existing COCO annotation file to read "
                        "(default: coco_bench.py's dataset of --images images)")
    parser.add_argument("--data-dir", default=os.path.join(os.path.dirname(__file__), "data"))
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--before-src", default=HERE_SRC,
                        help="source tree whose streamed pass is the baseline")
    parser.add_argument("--child", choices=["ranged", "streamed"], help=argparse.SUPPRESS)
    parser.add_argument("--images-dir", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        _child(args.child, args.workers[0], args.images_dir, args.annotations)
        return 0

    if args.annotations:  # an existing file: the stage reads no image
        ds = argparse.Namespace(annotations=args.annotations,
                                images_dir=os.path.dirname(os.path.abspath(args.annotations)))
        label = args.annotations
    else:
        from coco_bench import ensure_dataset

        ds = ensure_dataset(args.data_dir, args.images)
        label = f"{ds.annotations} ({args.images} images)"
    print(f"{label}: {os.path.getsize(ds.annotations) / 1e6:.0f} MB")
    times: dict[tuple[str, int], list[dict[str, float]]] = {}
    for _ in range(args.repeat):
        for workers in args.workers:
            for mode, src in (("streamed", args.before_src), ("ranged", HERE_SRC)):
                run = _run(mode, workers, src, ds)
                times.setdefault((mode, workers), []).append(run)
                print(f"  {mode:9} {workers} worker(s): {run['in_stages']:6.1f} s in stages, "
                      f"{run['seconds']:6.1f} s the pipeline", flush=True)
    print(f"{'annotations stage':28} {'stages best':>12} {'median':>7} "
          f"{'pipeline best':>14} {'median':>7}")
    best: dict[tuple[str, int], float] = {}
    for (mode, workers), runs in times.items():
        staged = [r["in_stages"] for r in runs]
        whole = [r["seconds"] for r in runs]
        best[mode, workers] = min(staged)
        print(f"{mode + f', {workers} worker(s)':28} {min(staged):12.1f} "
              f"{statistics.median(staged):7.1f} {min(whole):14.1f} "
              f"{statistics.median(whole):7.1f}")
    for mode in ("streamed", "ranged"):
        if (mode, 1) in best and (mode, 2) in best and best[mode, 2]:
            print(f"{mode}: 2 workers {best[mode, 1] / best[mode, 2]:.2f}x faster than 1 "
                  f"(time in stages, best of {args.repeat}; target for ranged >= 1.7x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
