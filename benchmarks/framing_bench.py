"""Throughput of TFRecord framing: our writer and reader against a plain file and TensorFlow.

Writes N records of random bytes to a temporary directory with

  * a plain ``write`` of the same payloads (the limit any framing writer can reach),
  * recordbeam's RecordWriter (uncompressed, and GZIP with --gzip),
  * tf.io.TFRecordWriter, when TensorFlow imports,

then reads the files back with a plain ``read`` loop, recordbeam's reader and tf.data. Each case
runs --repeat times and the best time counts. MB/s is payload megabytes (10**6 bytes) per second.

    python benchmarks/framing_bench.py [--records 2000] [--size 102400] [--repeat 3] [--gzip]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from collections.abc import Callable

from recordbeam.tfrecord.framing import Compression, RecordWriter, read_records


def best_time(fn: Callable[[], object], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=2000, help="records per file")
    parser.add_argument("--size", type=int, default=100 * 1024, help="bytes per record")
    parser.add_argument("--repeat", type=int, default=3, help="runs per case; the best counts")
    parser.add_argument("--gzip", action="store_true", help="also time GZIP compression")
    parser.add_argument("--dir", default=None, help="where to write (default: a temp dir)")
    parser.add_argument("--no-tf", action="store_true", help="skip the TensorFlow rows")
    args = parser.parse_args(argv)

    tf = None
    if not args.no_tf:
        try:
            import tensorflow as tf  # only for comparison rows
        except ImportError:
            print("tensorflow not importable: skipping the TensorFlow rows")

    # A pool of distinct random payloads, reused round-robin so generating them is not timed.
    pool = [os.urandom(args.size) for _ in range(min(args.records, 64))]
    payloads = [pool[i % len(pool)] for i in range(args.records)]
    total_mb = args.records * args.size / 1e6

    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        plain_path = os.path.join(tmp, "plain.bin")
        ours_path = os.path.join(tmp, "ours.tfrecord")
        gz_path = os.path.join(tmp, "ours.tfrecord.gz")
        tf_path = os.path.join(tmp, "tf.tfrecord")

        def plain_write() -> None:
            with open(plain_path, "wb") as f:
                for p in payloads:
                    f.write(p)

        def ours_write(path: str = ours_path, c: Compression = Compression.NONE) -> None:
            with open(path, "wb") as f, RecordWriter(f, c) as w:
                for p in payloads:
                    w.write(p)

        def tf_write() -> None:
            with tf.io.TFRecordWriter(tf_path) as w:
                for p in payloads:
                    w.write(p)

        def plain_read() -> None:
            with open(plain_path, "rb") as f:
                while f.read(args.size):
                    pass

        def ours_read(path: str = ours_path, c: Compression = Compression.NONE) -> None:
            with open(path, "rb") as f:
                n = sum(1 for _ in read_records(f, compression=c))
            assert n == args.records

        def tf_read() -> None:
            n = sum(1 for _ in tf.data.TFRecordDataset([ours_path]))
            assert n == args.records

        writes: list[tuple[str, Callable[[], object]]] = [
            ("plain file write", plain_write),
            ("recordbeam RecordWriter NONE", ours_write),
        ]
        if args.gzip:
            writes.append(
                ("recordbeam RecordWriter GZIP", lambda: ours_write(gz_path, Compression.GZIP))
            )
        if tf is not None:
            writes.append(("tf.io.TFRecordWriter NONE", tf_write))
        reads: list[tuple[str, Callable[[], object]]] = [
            ("plain file read", plain_read),
            ("recordbeam read_records NONE", ours_read),
        ]
        if args.gzip:
            reads.append(
                ("recordbeam read_records GZIP", lambda: ours_read(gz_path, Compression.GZIP))
            )
        if tf is not None:
            reads.append(("tf.data.TFRecordDataset NONE", tf_read))

        print(
            f"{args.records} records x {args.size} bytes = {total_mb:.1f} MB, best of {args.repeat}"
        )
        for title, cases in (("write", writes), ("read", reads)):
            print()
            print(f"{'case':<32} {'MB/s':>9} {'ratio vs plain ' + title:>22}")
            baseline = None
            for name, fn in cases:
                mbps = total_mb / best_time(fn, args.repeat)
                baseline = baseline or mbps
                print(f"{name:<32} {mbps:>9.0f} {mbps / baseline:>22.2f}")


if __name__ == "__main__":
    main()
