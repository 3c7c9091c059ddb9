"""What a conversion costs before its data does: each format's smallest input (two
40x30 pictures: the ``sample`` it declares) converted in this process on Beam's in-memory
runner, against a trivial pipeline (``Impulse | Map``) on the same runner.

Beam's cost per transform (building it, its proto, its bundle processor) is most of a
small conversion, so this is the floor of every run's launch time and of each in-process
test. Prints, per format, the pipeline's leaf transforms, its CPU seconds (median of
``--repeats``, after one warm-up run) and their ratio to the trivial pipeline's.

    python benchmarks/launch_bench.py [--repeats 7] [--formats coco,voc]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.pipeline import PipelineVisitor

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests"))

import format_inputs  # noqa: E402

import recordbeam  # noqa: E402
from recordbeam.local.standby import LOCAL_RUNNER  # noqa: E402


def _cpu(run) -> float:
    started = time.process_time()  # the in-memory runner's threads are this process's
    run()
    return time.process_time() - started


def _leaves(kind: str, options: dict, output: str) -> int:
    """The leaf transforms of ``kind``'s conversion, counted as it is run."""
    counted: list[int] = []
    run = beam.Pipeline.run

    class Count(PipelineVisitor):
        def visit_transform(self, node):
            counted.append(1)

    def counting(pipeline, *args, **kwargs):
        pipeline.visit(Count())
        return run(pipeline, *args, **kwargs)

    beam.Pipeline.run = counting
    try:
        recordbeam.convert(kind, output=output, beam_args=format_inputs.IN_MEMORY, quiet=True,
                           **options)
    finally:
        beam.Pipeline.run = run
    return len(counted)


def _trivial() -> None:
    options = PipelineOptions([*format_inputs.IN_MEMORY, f"--runner={LOCAL_RUNNER}"])
    with beam.Pipeline(options=options) as p:
        _ = p | beam.Impulse() | beam.Map(len)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--formats", default=",".join(format_inputs.INPUTS))
    args = parser.parse_args()
    unknown = set(args.formats.split(",")) - set(format_inputs.INPUTS)
    if unknown:
        parser.error(f"--formats: no format {', '.join(sorted(unknown))} "
                     f"(formats: {', '.join(format_inputs.INPUTS)})")
    work = Path(tempfile.mkdtemp(prefix="launch-bench-"))
    _trivial()
    trivial = statistics.median(_cpu(_trivial) for _ in range(args.repeats))
    print(f"trivial pipeline (Impulse | Map): {trivial:.3f} CPU s\n")
    print("| format | leaf transforms | CPU s | x trivial |")
    print("|---|---|---|---|")
    for kind in args.formats.split(","):
        options = format_inputs.INPUTS[kind](work / kind / "in")
        runs = iter(range(args.repeats + 2))

        def convert(kind=kind, options=options, runs=runs):
            recordbeam.convert(kind, output=str(work / kind / f"out{next(runs)}"),
                               beam_args=format_inputs.IN_MEMORY, quiet=True, **options)

        leaves = _leaves(kind, options, str(work / kind / "counted"))
        convert()
        cpu = statistics.median(_cpu(convert) for _ in range(args.repeats))
        print(f"| {kind} | {leaves} | {cpu:.3f} | {cpu / trivial:.1f} |")


if __name__ == "__main__":
    main()
