"""CPU per image of ``--max-side``'s resize step against a plain Pillow loop, and how far
its pictures are from the loop's.

Photo-like JPEGs (``tests/photos.py``, quality 90, 4:2:0; their bytes per pixel
are printed) are downsized three ways, each to a JPEG at recordbeam's default quality:

- ``loop``: ``Image.open``, decode whole, ``resize(LANCZOS)``, save: the baseline (1.00);
- ``whole decode``: what ``fix_image`` does for an RGB JPEG without DCT scaling (decode
  whole, ``resize(LANCZOS, reducing_gap=3.0)``, save), copied here so that both run on
  the same Pillow in the same process;
- ``recordbeam``: ``fix_image`` itself (``ImageFixes(max_side=N)``; the image's header
  is read beforehand, as ``inspect_image`` reads it for every image, resized or not).

Each round runs every way over every image, the ways in a rotating order (round robin, so
machine noise falls on all of them alike); the CPU time of this process per image is
reported as the minimum and the median over rounds, with the ratio to the loop's.
PSNR compares the decoded written JPEGs with the loop's (minimum and median over images);
``one JPEG generation`` is the loop's own written picture against its pixels before
encoding, for scale. Then: where the time goes (decode, resize, encode apart), how the
DCT-scaling margin (``transcode.DRAFT_MARGIN``) trades CPU for PSNR, and the CLI end to
end (``recordbeam convert imagefolder``) with and without ``--max-side``.

    python benchmarks/resize_bench.py [--images 4] [--rounds 7] [--cli-images 200]
        [--baseline-src DIR] [--skip-cli] [--data-dir benchmarks/data]

``--baseline-src`` names another checkout's ``src`` folder (for instance ``git archive main
src | tar -x -C /tmp/base`` then ``/tmp/base/src``): the CLI rows then include that code
with ``--max-side`` too, run the same way.
"""

from __future__ import annotations

import argparse
import io
import math
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from unittest import mock

import numpy as np
from PIL import Image, JpegImagePlugin

from recordbeam.images import transcode
from recordbeam.images.checks import inspect_image
from recordbeam.images.transcode import DEFAULT_JPEG_QUALITY, ImageFixes, fix_image, scaled_size

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests"))  # photos.py

from photos import photo_like_jpeg  # noqa: E402

CASES = ((4000, 3000, 640), (1600, 1200, 512))
#: Issue 30's bars: recordbeam's CPU against the loop's, and PSNR against its pictures.
TARGET_RATIO = {(4000, 3000, 640): 0.34, (1600, 1200, 512): 0.6}
TARGET_PSNR = 38.0
MARGINS = (1.0, 1.25, 1.5, 2.0)
#: 666: the DCT-scaled decode is just 1.5x the written size (1000 / 666), margin 1.5's worst.
MARGIN_CASES = ((4000, 3000, 640), (4000, 3000, 666), (4000, 3000, 800), (4000, 3000, 1000),
                (1600, 1200, 512), (1600, 1200, 700))

Way = Callable[[bytes, int], bytes]


def loop(data: bytes, max_side: int) -> bytes:
    image = Image.open(io.BytesIO(data))
    image.load()
    return _jpeg(image.resize(scaled_size(*image.size, max_side), Image.Resampling.LANCZOS))


def whole_decode(data: bytes, max_side: int) -> bytes:
    """``fix_image``'s steps for an RGB JPEG decoded whole (no EXIF turn, no mode change)."""
    image = JpegImagePlugin.JpegImageFile(io.BytesIO(data))
    image.load()
    size = scaled_size(*image.size, max_side)
    return _jpeg(image.resize(size, Image.Resampling.LANCZOS, reducing_gap=3.0))


def recordbeam_step(info_of: dict[bytes, object]) -> Way:
    def run(data: bytes, max_side: int) -> bytes:
        return fix_image(data, info_of[data], ImageFixes(max_side=max_side)).data
    return run


def _jpeg(image: Image.Image) -> bytes:
    out = io.BytesIO()
    image.save(out, "JPEG", quality=DEFAULT_JPEG_QUALITY)
    return out.getvalue()


def _pixels(data: bytes) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(data)), dtype=np.float64)


def psnr(ours: np.ndarray, reference: np.ndarray) -> float:
    mse = float(np.mean((ours - reference) ** 2))
    return float("inf") if mse == 0 else 10 * np.log10(255**2 / mse)


def photos(data_dir: str, width: int, height: int, count: int) -> list[bytes]:
    """``count`` distinct photo-like JPEGs of this size, generated once into ``data_dir``."""
    os.makedirs(data_dir, exist_ok=True)
    found = []
    for seed in range(count):
        path = os.path.join(data_dir, f"photo_{width}x{height}_{seed}.jpg")
        if not os.path.exists(path):
            with open(path + ".tmp", "wb") as f:
                f.write(photo_like_jpeg(width, height, seed))
            os.replace(path + ".tmp", path)
        with open(path, "rb") as f:
            found.append(f.read())
    return found


def cpu_per_image(ways: dict[str, Way], images: list[bytes], max_side: int,
                  rounds: int) -> dict[str, list[float]]:
    """Milliseconds of CPU per image, one figure per round, for each way (round robin)."""
    names = list(ways)
    per_round: dict[str, list[float]] = {name: [] for name in names}
    for round_number in range(rounds):
        shift = round_number % len(names)
        for name in names[shift:] + names[:shift]:
            started = time.process_time()
            for data in images:
                ways[name](data, max_side)
            per_round[name].append(1000 * (time.process_time() - started) / len(images))
    return per_round


def compare_case(width: int, height: int, max_side: int, images: list[bytes],
                 rounds: int) -> dict[str, float]:
    info_of = {data: inspect_image(data) for data in images}
    ways = {"loop": loop, "whole decode": whole_decode, "recordbeam": recordbeam_step(info_of)}
    times = cpu_per_image(ways, images, max_side, rounds)
    references = [_pixels(loop(data, max_side)) for data in images]
    generation = []
    for data in images:
        image = Image.open(io.BytesIO(data))
        resized = image.resize(scaled_size(width, height, max_side), Image.Resampling.LANCZOS)
        generation.append(psnr(_pixels(_jpeg(resized)), np.asarray(resized, np.float64)))
    loop_median = statistics.median(times["loop"])
    size = scaled_size(width, height, max_side)
    bpp = statistics.mean(len(d) for d in images) / (width * height)
    print(f"\n{width}x{height} -> {size[0]}x{size[1]} (--max-side {max_side}), "
          f"{len(images)} images of {bpp:.2f} bytes/pixel, {rounds} rounds")
    print("| way | CPU ms/image min | median | vs loop (median) | PSNR vs loop min | median |")
    print("|---|---|---|---|---|---|")
    result = {}
    for name, way in ways.items():
        scores = [psnr(_pixels(way(data, max_side)), ref)
                  for data, ref in zip(images, references, strict=True)]
        median = statistics.median(times[name])
        ratio = median / loop_median
        result[name] = ratio
        shown = "-" if name == "loop" else f"{min(scores):.1f} dB | {statistics.median(scores):.1f} dB"
        if name == "loop":
            shown += " | -"
        print(f"| {name} | {min(times[name]):.1f} | {median:.1f} | {ratio:.2f} | {shown} |")
        if name == "recordbeam":
            result["psnr"] = min(scores)
    print(f"one JPEG generation (the loop's written picture against its pixels): "
          f"{min(generation):.1f}-{max(generation):.1f} dB")
    bar = TARGET_RATIO.get((width, height, max_side))
    if bar is not None:
        met = result["recordbeam"] <= bar and result["psnr"] >= TARGET_PSNR
        print(f"target: CPU <= {bar}x the loop's and PSNR >= {TARGET_PSNR:.0f} dB: "
              f"{result['recordbeam']:.2f}x, {result['psnr']:.1f} dB -> "
              f"{'met' if met else 'MISSED'}")
    return result


def dct_scaled(data: bytes, size: tuple[int, int], margin: float) -> tuple[Image.Image, tuple]:
    """``data`` decoded as ``fix_image`` decodes it for ``size`` at ``margin`` (no EXIF
    turn), and the region of the decode that holds the picture."""
    image = JpegImagePlugin.JpegImageFile(io.BytesIO(data))
    wanted = (math.ceil(size[0] * margin), math.ceil(size[1] * margin))
    _mode, region = image.draft(None, wanted)
    image.load()
    return image, region


def where_time_goes(width: int, height: int, max_side: int, data: bytes, rounds: int) -> None:
    """Decode, resize and encode timed apart (best of ``rounds``), whole and DCT-scaled."""
    size = scaled_size(width, height, max_side)
    whole = JpegImagePlugin.JpegImageFile(io.BytesIO(data))
    whole.load()
    scaled, region = dct_scaled(data, size, transcode.DRAFT_MARGIN)
    small = whole.resize(size)
    steps = {
        "decode whole": lambda: JpegImagePlugin.JpegImageFile(io.BytesIO(data)).load(),
        f"decode at the DCT scale ({scaled.width}x{scaled.height})":
            lambda: dct_scaled(data, size, transcode.DRAFT_MARGIN),
        "LANCZOS from whole (loop)": lambda: whole.resize(size, Image.Resampling.LANCZOS),
        "LANCZOS from whole, reducing_gap=3": lambda: whole.resize(
            size, Image.Resampling.LANCZOS, reducing_gap=3.0),
        "LANCZOS from the DCT-scaled decode": lambda: scaled.resize(
            size, Image.Resampling.LANCZOS, box=region, reducing_gap=3.0),
        "encode": lambda: _jpeg(small),
    }
    print(f"\nwhere the time goes, {width}x{height} -> {size[0]}x{size[1]} "
          f"(CPU ms, best of {rounds})")
    print("| step | CPU ms |")
    print("|---|---|")
    for name, step in steps.items():
        best = float("inf")
        for _ in range(rounds):
            started = time.process_time()
            step()
            best = min(best, time.process_time() - started)
        print(f"| {name} | {1000 * best:.1f} |")


def margins(data_dir: str, count: int, rounds: int) -> None:
    """CPU and PSNR of ``fix_image`` at several DCT-scaling margins."""
    print(f"\nDCT-scaling margin: decoded size, CPU against the loop (median of {rounds} "
          "rounds), PSNR against the loop (min over images)")
    print("| case | " + " | ".join(f"margin {m}" for m in MARGINS) + " |")
    print("|---|" + "---|" * len(MARGINS))
    for width, height, max_side in MARGIN_CASES:
        images = photos(data_dir, width, height, count)
        info_of = {data: inspect_image(data) for data in images}
        references = [_pixels(loop(data, max_side)) for data in images]
        cells = []
        for margin in MARGINS:
            with mock.patch.object(transcode, "DRAFT_MARGIN", margin):
                step = recordbeam_step(info_of)
                times = cpu_per_image({"loop": loop, "recordbeam": step}, images, max_side,
                                      rounds)
                scores = [psnr(_pixels(step(data, max_side)), ref)
                          for data, ref in zip(images, references, strict=True)]
            decoded, _region = dct_scaled(images[0], scaled_size(width, height, max_side), margin)
            ratio = statistics.median(times["recordbeam"]) / statistics.median(times["loop"])
            cells.append(f"1/{width // decoded.width}, {ratio:.2f}x, {min(scores):.1f} dB")
        size = scaled_size(width, height, max_side)
        print(f"| {width}x{height} -> {size[0]}x{size[1]} | " + " | ".join(cells) + " |")


def cli(data_dir: str, count: int, images: int, rounds: int, baseline_src: str | None) -> None:
    """``recordbeam convert imagefolder`` over ``images`` 4000x3000 JPEGs (``count`` distinct
    files hard-linked under the other names), with and without ``--max-side 640``."""
    sources = photos(data_dir, 4000, 3000, count)
    scratch = tempfile.mkdtemp(prefix="resize-bench-")
    try:
        root = os.path.join(scratch, "photos")
        folder = os.path.join(root, "photo")
        os.makedirs(folder)
        originals = [os.path.join(data_dir, f"photo_4000x3000_{seed}.jpg") for seed in range(count)]
        for i in range(images):
            target = os.path.join(folder, f"{i:05d}.jpg")
            try:
                os.link(originals[i % len(sources)], target)
            except OSError:
                shutil.copyfile(originals[i % len(sources)], target)
        here = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")
        runs = {"recordbeam --max-side 640": (here, ["--max-side", "640"])}
        if baseline_src:
            runs["baseline src --max-side 640"] = (os.path.abspath(baseline_src),
                                                   ["--max-side", "640"])
        runs["recordbeam, no --max-side"] = (here, [])
        measured: dict[str, list[tuple[float, float]]] = {name: [] for name in runs}
        names = list(runs)
        for round_number in range(rounds):
            shift = round_number % len(names)
            for name in names[shift:] + names[:shift]:
                src, options = runs[name]
                out = os.path.join(scratch, "out")
                shutil.rmtree(out, ignore_errors=True)
                env = {**os.environ, "PYTHONPATH": src}
                command = [sys.executable, "-m", "recordbeam", "convert", "imagefolder",
                           "--root", root, "--output", out, "--quiet", *options]
                before = resource.getrusage(resource.RUSAGE_CHILDREN)
                started = time.perf_counter()
                subprocess.run(command, env=env, check=True, stdout=subprocess.DEVNULL)
                wall = time.perf_counter() - started
                after = resource.getrusage(resource.RUSAGE_CHILDREN)
                cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
                measured[name].append((wall, cpu))
        print(f"\nCLI end to end: convert imagefolder, {images} JPEGs of 4000x3000 "
              f"({count} distinct), {rounds} rounds alternating; whole command, interpreter "
              "start included")
        print("| command | wall s min | median | CPU s min | median | images per CPU s |")
        print("|---|---|---|---|---|---|")
        for name, values in measured.items():
            walls = [w for w, _ in values]
            cpus = [c for _, c in values]
            print(f"| {name} | {min(walls):.1f} | {statistics.median(walls):.1f} | "
                  f"{min(cpus):.1f} | {statistics.median(cpus):.1f} | "
                  f"{images / statistics.median(cpus):.0f} |")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--images", type=int, default=4, help="distinct images per size")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--margin-rounds", type=int, default=3)
    parser.add_argument("--cli-images", type=int, default=200)
    parser.add_argument("--cli-rounds", type=int, default=2)
    parser.add_argument("--baseline-src", help="another checkout's src folder, for the CLI rows")
    parser.add_argument("--skip-cli", action="store_true")
    parser.add_argument("--skip-margins", action="store_true")
    parser.add_argument("--data-dir", default=os.path.join(os.path.dirname(__file__), "data",
                                                           "resize"))
    args = parser.parse_args(argv)
    print(f"Pillow {Image.__version__}, {_libjpeg()}; "
          f"JPEG quality {DEFAULT_JPEG_QUALITY}; DRAFT_MARGIN {transcode.DRAFT_MARGIN}")
    for width, height, max_side in CASES:
        images = photos(args.data_dir, width, height, args.images)
        compare_case(width, height, max_side, images, args.rounds)
        where_time_goes(width, height, max_side, images[0], args.rounds)
    if not args.skip_margins:
        margins(args.data_dir, args.images, args.margin_rounds)
    if not args.skip_cli:
        cli(args.data_dir, args.images, args.cli_images, args.cli_rounds, args.baseline_src)


def _libjpeg() -> str:
    from PIL import features

    turbo = features.version_feature("libjpeg_turbo")
    return f"libjpeg-turbo {turbo}" if turbo else f"libjpeg {features.version('jpg')}"


if __name__ == "__main__":
    main()
