"""CPU of the COCO stages before the write stage, piece by piece, in this process.

``recordbeam convert coco`` reads its inputs in four tasks (the ``annotations``, ``images``
and ``categories`` passes over the JSON and the listing of the images folder), joins the
files and entries by name, then the images and their annotations by image id. This script
calls the same DoFns the workers call (no Beam runner, so no per-element overhead of
Beam's) on the COCO benchmark set (``coco_bench.py``'s data) and prints the CPU seconds of
each, best of ``--repeat``. Baseline rows, run in the same process: the categories pass as
a parse of the whole file (what it was before it read the file's end) and the
annotations pass's parse alone (the floor of that pass with ijson).

    python benchmarks/coco_read_bench.py [--images 20000] [--data-dir benchmarks/data]
        [--repeat 3]

CPU time of this process: other processes on the machine disturb it less than wall time
(the page cache and the memory bus they share still show).
"""

from __future__ import annotations

import argparse
import collections
import gc
import os
import sys
import time
from collections.abc import Callable, Iterable

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from coco_bench import ensure_dataset  # noqa: E402 - the same data as coco_bench.py


def _cpu_best(run: Callable[[], object], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        gc.collect()
        start = time.process_time()
        run()
        best = min(best, time.process_time() - start)
    return best


def _drain(items: Iterable[object]) -> int:
    return sum(1 for _ in items)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    parser.add_argument("--images", type=int, default=20_000)
    parser.add_argument("--data-dir", default=os.path.join(os.path.dirname(__file__), "data"))
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)

    from recordbeam.records import ImageRecord
    from recordbeam.sources.coco.input_tasks import LIST_TASK, ReadInputs
    from recordbeam.sources.coco.join import JoinAnnotations
    from recordbeam.sources.coco.json_stream import stream_section
    from recordbeam.sources.coco.options import CocoOptions
    from recordbeam.sources.coco.records import AnnotationBatch, LocatedImage

    ds = ensure_dataset(args.data_dir, args.images)
    read = ReadInputs(CocoOptions(ds.images_dir, ds.annotations))
    categories = [output.value for output in read.process("categories")]
    by_image: dict[str, list] = collections.defaultdict(list)
    for key, message in read.process("annotations"):
        if type(message) is AnnotationBatch:
            by_image[key.text].append(message)
    # The join by image id's input: each image's located file and its annotation batches.
    groups = [(key, [LocatedImage(batches[0].image_id, f"{key}.jpg",
                                  f"{ds.images_dir}/{key}.jpg", 1, 640, 480), *batches])
              for key, batches in by_image.items()]
    join = JoinAnnotations("train", False)
    records = [o for g in groups for o in join.process(g, categories, [])]
    assert all(type(o) is ImageRecord for o in records), "the join rejected annotations"

    rows = [
        ("annotations pass", lambda: _drain(read.process("annotations"))),
        ("  its parse alone (floor)", lambda: _drain(stream_section(ds.annotations,
                                                                    "annotations"))),
        ("images pass", lambda: _drain(read.process("images"))),
        ("categories pass", lambda: _drain(read.process("categories"))),
        ("  as a parse of the whole file (before)",
         lambda: _drain(stream_section(ds.annotations, "categories"))),
        ("listing", lambda: _drain(read.process(LIST_TASK))),
        ("join by image id", lambda: [o for g in groups for o in join.process(g, categories, [])]),
    ]
    print(f"COCO read stages, {args.images} images, CPU s (best of {args.repeat})")
    seconds = {}
    for name, run in rows:
        seconds[name] = _cpu_best(run, args.repeat)
        print(f"{name:<42} {seconds[name]:7.3f}")
    before = seconds["  as a parse of the whole file (before)"]
    print(f"categories pass: {before / max(seconds['categories pass'], 1e-9):.0f}x less CPU "
          "than a parse of the whole file")
    return 0


if __name__ == "__main__":
    sys.exit(main())
