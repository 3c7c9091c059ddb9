"""Near duplicates: recall on transformed copies, false pairs among distinct pictures, and
the perceptual hash's CPU per image against Pillow's reduced-scale decode.

**Recall and false pairs.** N distinct photo-like pictures (``tests/photos.py``,
640x480 by default, JPEG quality 90) and one transformed copy of each, a third of them
each kind:

- ``re-encoded``: the same pixels at JPEG quality 50 to 95;
- ``resized``: scaled to 50% to 100% of the size (LANCZOS), quality 85;
- ``cropped``: 0 to 5% of the width and, independently, of the height cut off, the cut
  split at random between the two sides, quality 85;

and a fourth kind past the targets, ``all three`` (cropped up to 5%, then resized to 50-100%,
then quality 50-95), printed for scale. All 2N images go through the same search a
conversion runs (:func:`recordbeam.dataset.near_groups.near_pairs`, LSH keys, threshold
``NEAR_THRESHOLD``). A copy is *recalled* when the pair (original, copy) is found; any
other pair found is *false* (two different pictures). The false-pair rate is false pairs
per distinct picture. Targets (issue 31): recall >= 95% for each of the first three kinds,
false pairs <= 0.1%.

**CPU.** On one photo-like JPEG (1600x1200 at quality 92, ~700 KB), round robin over
rounds: ``perceptual_hash`` against ``Image.draft("RGB", 1/8)`` + ``load`` (the baseline
the target names) and ``draft("L", 1/8)``; the minimum and median CPU per image over
rounds, and the ratio. Target: hash <= 1.2x the RGB draft decode.

Hashes are computed in ``--workers`` processes and kept in ``--data-dir`` (one file per
N and size), so a second run only searches.

    python benchmarks/near_duplicates_bench.py [--images 10000] [--size 640x480]
        [--workers 2] [--rounds 7] [--data-dir benchmarks/data]
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor

import numpy as np
from PIL import Image

from recordbeam.dataset.duplicate_groups import Member
from recordbeam.dataset.near_groups import NearImage, image_keys, near_pairs
from recordbeam.images.perceptual_hash import NEAR_THRESHOLD, PerceptualHash, perceptual_hash

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests"))  # photos.py

from photos import photo_like_jpeg, photo_like_pixels  # noqa: E402

KINDS = ("re-encoded", "resized", "cropped", "all three")
TARGET_KINDS = KINDS[:3]
TARGET_RECALL = 0.95
TARGET_FALSE_RATE = 0.001
TARGET_CPU_RATIO = 1.2


def _jpeg(pixels: np.ndarray, quality: int) -> bytes:
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, "JPEG", quality=quality)
    return out.getvalue()


def _cropped(pixels: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    height, width = pixels.shape[:2]
    cut_x = int(width * rng.uniform(0, 0.05))
    cut_y = int(height * rng.uniform(0, 0.05))
    left, top = int(rng.integers(0, cut_x + 1)), int(rng.integers(0, cut_y + 1))
    return pixels[top:height - (cut_y - top), left:width - (cut_x - left)]


def _resized(pixels: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    height, width = pixels.shape[:2]
    scale = rng.uniform(0.5, 1.0)
    size = (max(1, round(width * scale)), max(1, round(height * scale)))
    return np.asarray(Image.fromarray(pixels).resize(size, Image.LANCZOS))


def copy_of(pixels: np.ndarray, kind: str, rng: np.random.Generator) -> bytes:
    if kind == "re-encoded":
        return _jpeg(pixels, int(rng.integers(50, 96)))
    if kind == "resized":
        return _jpeg(_resized(pixels, rng), 85)
    if kind == "cropped":
        return _jpeg(_cropped(pixels, rng), 85)
    return _jpeg(_resized(_cropped(pixels, rng), rng), int(rng.integers(50, 96)))


def _hash_one(job: tuple[int, int, int]) -> tuple[bytes, bytes]:
    """(original's hash, copy's hash) of picture ``index``, its copy of kind index % 4."""
    index, width, height = job
    rng = np.random.default_rng(10_000_019 + index)
    pixels = photo_like_pixels(width, height, seed=index)
    original = perceptual_hash(_jpeg(pixels, 90)).to_bytes()
    copy = perceptual_hash(copy_of(pixels, KINDS[index % len(KINDS)], rng)).to_bytes()
    return original, copy


def hashes(n: int, width: int, height: int, workers: int, data_dir: str) -> np.ndarray:
    """``n x 2 x 40`` bytes: each picture's and its copy's packed hashes (cached)."""
    path = os.path.join(data_dir, f"near_hashes_{n}_{width}x{height}.npy")
    if os.path.exists(path):
        return np.load(path)
    os.makedirs(data_dir, exist_ok=True)
    started = time.monotonic()
    jobs = [(i, width, height) for i in range(n)]
    with ProcessPoolExecutor(workers) as pool:
        pairs = list(pool.map(_hash_one, jobs, chunksize=64))
    table = np.frombuffer(b"".join(a + b for a, b in pairs), dtype=np.uint8).reshape(n, 2, 40)
    np.save(path, table)
    print(f"generated and hashed {2 * n} pictures in {time.monotonic() - started:.0f} s "
          f"({workers} processes); kept in {path}")
    return table


def search(table: np.ndarray) -> None:
    n = len(table)
    images = []
    for i in range(n):
        for side, name in ((0, "original"), (1, "copy")):
            digest = (2 * i + side).to_bytes(32, "big")  # stands for the file's SHA-256
            images.append(NearImage(digest, PerceptualHash.from_bytes(table[i, side].tobytes()),
                                    Member("train", f"{name}-{i}", "shard", 2 * i + side)))
    started = time.process_time()
    found = near_pairs(images)
    cpu = time.process_time() - started
    recalled = dict.fromkeys(KINDS, 0)
    totals = dict.fromkeys(KINDS, 0)
    false_pairs = 0
    for i in range(n):
        totals[KINDS[i % len(KINDS)]] += 1
    for pair in found.pairs:
        a, b = (int.from_bytes(pair.first, "big"), int.from_bytes(pair.second, "big"))
        if a // 2 == b // 2:
            recalled[KINDS[(a // 2) % len(KINDS)]] += 1
        else:
            false_pairs += 1
    keys = sum(len(image_keys(image.hash)[1]) for image in images)
    print(f"\nnear-duplicate search over {2 * n} images ({n} distinct pictures, one copy "
          f"each), threshold {NEAR_THRESHOLD} bits: {cpu:.1f} CPU s, "
          f"{len(found.pairs)} pairs, {keys / len(images):.1f} keys asked per image")
    print(f"{'copies':<12}{'recalled':>12}{'recall':>10}  target")
    for kind in KINDS:
        rate = recalled[kind] / totals[kind] if totals[kind] else 0.0
        target = (f">= {TARGET_RECALL:.0%} {'met' if rate >= TARGET_RECALL else 'MISSED'}"
                  if kind in TARGET_KINDS else "(none: for scale)")
        print(f"{kind:<12}{recalled[kind]:>7}/{totals[kind]:<5}{rate:>9.1%}  {target}")
    rate = false_pairs / n
    verdict = "met" if rate <= TARGET_FALSE_RATE else "MISSED"
    print(f"false pairs: {false_pairs} among {n} distinct pictures ({rate:.3%} per picture; "
          f"target <= {TARGET_FALSE_RATE:.1%}: {verdict})")


def _cpu_per_call(fn, calls: int) -> float:
    started = time.process_time()
    for _ in range(calls):
        fn()
    return (time.process_time() - started) / calls


def cpu(rounds: int) -> None:
    data = photo_like_jpeg(1600, 1200, seed=3, quality=92)

    def draft(mode: str) -> None:
        with Image.open(io.BytesIO(data)) as picture:
            picture.draft(mode, (picture.width // 8, picture.height // 8))
            picture.load()

    ways = {"draft RGB 1/8": lambda: draft("RGB"), "draft L 1/8": lambda: draft("L"),
            "perceptual_hash": lambda: perceptual_hash(data)}
    seen: dict[str, list[float]] = {name: [] for name in ways}
    names = list(ways)
    for r in range(rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            seen[name].append(_cpu_per_call(ways[name], 20))
    base = min(seen["draft RGB 1/8"])
    print(f"\nCPU per image, one {len(data) / 1e3:.0f} KB 1600x1200 JPEG, {rounds} rounds of 20 "
          "(round robin)")
    print(f"{'way':<18}{'min ms':>9}{'median ms':>11}{'x draft RGB':>13}")
    for name in names:
        low, mid = min(seen[name]), statistics.median(seen[name])
        print(f"{name:<18}{low * 1e3:>9.2f}{mid * 1e3:>11.2f}{low / base:>13.2f}")
    ratio = min(seen["perceptual_hash"]) / base
    print(f"target: hash <= {TARGET_CPU_RATIO}x the RGB draft decode: {ratio:.2f}x "
          f"{'met' if ratio <= TARGET_CPU_RATIO else 'MISSED'}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--images", type=int, default=10_000)
    parser.add_argument("--size", default="640x480")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--data-dir", default=os.path.join(os.path.dirname(__file__), "data"))
    args = parser.parse_args(argv)
    width, height = (int(v) for v in args.size.lower().split("x"))
    search(hashes(args.images, width, height, args.workers, args.data_dir))
    cpu(args.rounds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
