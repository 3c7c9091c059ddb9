"""A big Label Studio export (one JSON array), read streamed by one worker and read in byte
ranges by every worker (``exports.ReadArrayRanges``): wall time and peak memory.

Writes an export of about ``--mb`` MB: tasks of about 1 KB, each naming its own image, all
but the first few not annotated (counted, not written: the run measures the export's
read and the join, not images); the first few annotated with a box on a small picture. Converts it twice on the default
local runner (``--direct_num_workers``, 2 by default), in alternating order per repeat:
once streamed, once in ranges (the size from which exports are read in ranges set to 0
in the child process), and samples the resident memory of the launcher and of every
worker every 0.1 s. Checks that both outputs hold the same files, byte for byte.

    python benchmarks/array_export_bench.py [--mb 1024] [--repeats 1] [--scratch DIR]

Prints per mode: wall seconds, the launcher's and the largest worker's peak RSS, and the
ranged read's against the streamed one's.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

from PIL import Image

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from memory_scale import _rss_mib, _tree  # noqa: E402

PICTURES = 4
_CHILD = """
import sys
import recordbeam
from recordbeam.sources import byte_ranges
if sys.argv[1] == "ranged":
    byte_ranges.RANGED_FROM_BYTES = 0
recordbeam.convert("labelstudio", input=sys.argv[2], images=sys.argv[3], output=sys.argv[4],
                   overwrite=True, quiet=True, beam_args=sys.argv[5:])
"""


def write_export(root: str, megabytes: int) -> tuple[str, str, int]:
    """The export and its media folder below ``root``; the number of tasks."""
    media = os.path.join(root, "media", "upload", "1")
    os.makedirs(media, exist_ok=True)
    for i in range(PICTURES):
        Image.new("RGB", (64, 48), (60 * i, 90, 30)).save(os.path.join(media, f"{i:08x}-p{i}.jpg"))
    path = os.path.join(root, "export.json")
    filler = "lorem ipsum, [quoted] \\\"text\\\" " * 28
    tasks = 0
    with open(path, "w", encoding="utf-8") as f:
        f.write("[")
        while f.tell() < megabytes << 20:
            # Each task its own image; only the annotated ones' files exist.
            name = f"{tasks:08x}-p{tasks}.jpg"
            task = {"id": tasks + 1, "data": {"image": f"/data/upload/1/{name}", "note": filler},
                    "annotations": [], "predictions": []}
            if tasks < PICTURES:  # each picture annotated once
                task["annotations"] = [{"id": tasks + 1, "result": [{
                    "id": "r", "type": "rectanglelabels", "original_width": 64,
                    "original_height": 48, "value": {"x": 10, "y": 10, "width": 50,
                                                     "height": 50, "rotation": 0,
                                                     "rectanglelabels": ["dog"]}}]}]
            f.write(("," if tasks else "") + json.dumps(task))
            tasks += 1
        f.write("]")
    return path, os.path.join(root, "media"), tasks


def measure(mode: str, export: str, media: str, output: str,
            beam_args: list[str]) -> tuple[float, int, int]:
    """Wall seconds, launcher peak MiB, largest worker peak MiB of one conversion."""
    started = time.monotonic()
    run = subprocess.Popen([sys.executable, "-c", _CHILD, mode, export, media, output,
                            *beam_args], stdout=subprocess.DEVNULL)
    launcher = workers = 0
    while run.poll() is None:
        for pid in _tree(run.pid):
            rss = _rss_mib(pid)
            if rss is not None and pid == run.pid:
                launcher = max(launcher, rss)
            elif rss is not None:
                workers = max(workers, rss)
        time.sleep(0.1)
    if run.returncode:
        raise SystemExit(f"the {mode} conversion failed with exit code {run.returncode}")
    return time.monotonic() - started, launcher, workers


def _digests(folder: str) -> dict[str, str]:
    found = {}
    for base, _dirs, files in os.walk(folder):
        for name in files:
            if name != "manifest.json":
                path = os.path.join(base, name)
                with open(path, "rb") as f:
                    found[os.path.relpath(path, folder)] = hashlib.sha256(f.read()).hexdigest()
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=int, default=1024, help="export size in MB")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--scratch", default=None, help="folder for the export (a temporary one)")
    args = parser.parse_args(argv)
    scratch = tempfile.mkdtemp(prefix="array-export-", dir=args.scratch)
    try:
        export, media, tasks = write_export(scratch, args.mb)
        size = os.path.getsize(export)
        print(f"export: {size / 2**20:.0f} MiB, {tasks:,} tasks; "
              f"{args.workers} workers, {os.cpu_count()} cores")
        beam_args = [f"--direct_num_workers={args.workers}"]
        results: dict[str, list[tuple[float, int, int]]] = {"streamed": [], "ranged": []}
        for repeat in range(args.repeats):
            order = ("streamed", "ranged") if repeat % 2 == 0 else ("ranged", "streamed")
            for mode in order:
                results[mode].append(measure(mode, export, media,
                                             os.path.join(scratch, mode), beam_args))
        same = _digests(os.path.join(scratch, "streamed")) == _digests(
            os.path.join(scratch, "ranged"))
        print("| read | wall s | launcher peak MiB | largest worker peak MiB |")
        print("|---|---|---|---|")
        best = {mode: min(runs) for mode, runs in results.items()}
        for mode, (wall, launcher, worker) in best.items():
            print(f"| {mode} | {wall:.1f} | {launcher} | {worker} |")
        ratio = best["ranged"][0] / best["streamed"][0]
        print(f"ranged / streamed wall time: {ratio:.2f}; outputs identical: {same}")
        return 0 if same else 1
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
