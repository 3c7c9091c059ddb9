"""How fast recordbeam encodes and decodes a detection Example, against TensorFlow's classes.

Builds one COCO-detection-like feature dict (a 100 KB JPEG-sized blob, image size, ~8 boxes
as four float lists, int labels, class texts, ...) and times, best of ``--repeats`` runs of
``--n`` records each:

* encode: ``recordbeam.tfrecord.example.encode_example(features)`` against building a
  ``tf.train.Example`` with TensorFlow's own classes and calling ``SerializeToString``, both
  the usual way (nested constructors, as most converters do) and filled in place with
  ``extend`` (the fastest way with those classes, and the ratios' baseline), the latter
  also with sorted map keys (``deterministic=True``), which recordbeam always uses;
* decode: ``recordbeam.tfrecord.example.decode_example(data)`` against
  ``tf.train.Example.FromString(data)`` plus turning every feature into a numpy array;
* encode, "recordbeam wire": :func:`recordbeam.tfrecord.wire.encode_example_fast`, the hand-written
  wire encoder (same bytes as ``encode_example``);
* encode+write: what the shard writer does per record, into a ``RecordWriter`` on
  ``os.devnull``: ``make_example`` + ``SerializeToString(deterministic=True)`` +
  ``RecordWriter.write`` against ``encode_example_chunks`` + ``RecordWriter.write_chunks``
  (the image is never copied); "sink step" adds updating a ``FeatureSpec`` (``observe`` on
  the message against ``observe_lengths``). These rows cycle through ``--distinct``
  different records so the image is not in the CPU cache already, as in a real shard.

The TensorFlow rows appear only when TensorFlow imports. Usage::

    python benchmarks/codec_bench.py [--n 20000] [--repeats 3] [--objects 8] [--image-kb 100]
"""

from __future__ import annotations

import argparse
import itertools
import os
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from recordbeam.tfrecord.example import decode_example, encode_example, make_example
from recordbeam.tfrecord.feature_spec import FeatureSpec
from recordbeam.tfrecord.framing import RecordWriter
from recordbeam.tfrecord.wire import (
    encode_example_chunks,
    encode_example_fast,
    encode_example_observed,
)


def detection_features(objects: int, image_bytes: int, seed: int = 0) -> dict[str, Any]:
    """The feature dict the detection pipeline writes for one image (Model Garden keys)."""
    rng = np.random.default_rng(seed)
    xmin = rng.uniform(0, 0.5, objects)
    ymin = rng.uniform(0, 0.5, objects)
    return {
        "image/encoded": rng.bytes(image_bytes),
        "image/format": b"jpeg",
        "image/filename": "000000397133.jpg",
        "image/source_id": "397133",
        "image/key/sha256": "9f" * 32,
        "image/height": 427,
        "image/width": 640,
        "image/object/bbox/xmin": xmin,
        "image/object/bbox/xmax": xmin + rng.uniform(0.01, 0.5, objects),
        "image/object/bbox/ymin": ymin,
        "image/object/bbox/ymax": ymin + rng.uniform(0.01, 0.5, objects),
        "image/object/class/label": rng.integers(1, 91, objects),
        "image/object/class/text": [f"class-{i}" for i in rng.integers(1, 91, objects)],
        "image/object/is_crowd": np.zeros(objects, dtype=np.int64),
        "image/object/area": rng.uniform(10, 5000, objects).astype(np.float32),
    }


def tf_encoder(tf: Any) -> Callable[[dict[str, Any]], bytes]:
    """Builds and serializes a tf.train.Example the way TF-based converters usually do."""

    def feature(value: Any) -> Any:
        if isinstance(value, np.ndarray):
            if value.dtype.kind == "f":
                return tf.train.Feature(float_list=tf.train.FloatList(value=value.tolist()))
            return tf.train.Feature(int64_list=tf.train.Int64List(value=value.tolist()))
        if isinstance(value, list):
            return tf.train.Feature(
                bytes_list=tf.train.BytesList(value=[text.encode() for text in value])
            )
        if isinstance(value, str):
            return tf.train.Feature(bytes_list=tf.train.BytesList(value=[value.encode()]))
        if isinstance(value, bytes):
            return tf.train.Feature(bytes_list=tf.train.BytesList(value=[value]))
        return tf.train.Feature(int64_list=tf.train.Int64List(value=[value]))

    def encode(features: dict[str, Any]) -> bytes:
        example = tf.train.Example(
            features=tf.train.Features(
                feature={name: feature(value) for name, value in features.items()}
            )
        )
        return example.SerializeToString()

    return encode


def tf_in_place_encoder(tf: Any, deterministic: bool = False) -> Callable[[dict[str, Any]], bytes]:
    """TensorFlow's classes filled in place with extend(): the fastest way we know with them.

    ``deterministic=True`` sorts the map keys when serializing, as recordbeam always does so
    that a record's bytes do not change from one process to the next.
    """

    def encode(features: dict[str, Any]) -> bytes:
        example = tf.train.Example()
        feature_map = example.features.feature
        for name, value in features.items():
            if isinstance(value, np.ndarray):
                target = feature_map[name].float_list if value.dtype.kind == "f" else None
                target = target or feature_map[name].int64_list
                target.value.extend(value.tolist())
            elif isinstance(value, list):
                feature_map[name].bytes_list.value.extend([text.encode() for text in value])
            elif isinstance(value, str):
                feature_map[name].bytes_list.value.append(value.encode())
            elif isinstance(value, bytes):
                feature_map[name].bytes_list.value.append(value)
            else:
                feature_map[name].int64_list.value.append(value)
        return example.SerializeToString(deterministic=deterministic)

    return encode


def tf_decoder(tf: Any) -> Callable[[bytes], dict[str, np.ndarray]]:
    """tf.train.Example.FromString plus numpy arrays: what a non-graph reader does."""

    def decode(data: bytes) -> dict[str, np.ndarray]:
        out = {}
        for name, feature in tf.train.Example.FromString(data).features.feature.items():
            kind = feature.WhichOneof("kind")
            if kind == "int64_list":
                out[name] = np.array(feature.int64_list.value, dtype=np.int64)
            elif kind == "float_list":
                out[name] = np.array(feature.float_list.value, dtype=np.float32)
            else:
                out[name] = np.array(list(feature.bytes_list.value), dtype=object)
        return out

    return decode


def best_rates(
    candidates: dict[str, tuple[Callable[[Any], Any], Any]], n: int, repeats: int
) -> dict[str, float]:
    """Calls per second of each candidate, best of ``repeats`` runs of ``n`` calls.

    The runs are interleaved (A, B, C, A, B, C, ...) so that a burst of load on a shared
    machine hurts every candidate alike instead of one of them.
    """
    best = dict.fromkeys(candidates, float("inf"))
    for _ in range(repeats):
        for label, (function, argument) in candidates.items():
            start = time.process_time()
            for _ in range(n):
                function(argument)
            best[label] = min(best[label], time.process_time() - start)
    return {label: n / seconds for label, seconds in best.items()}


def shard_writer_candidates(
    records: list[dict[str, Any]], writer: RecordWriter
) -> dict[tuple[str, str], tuple[Callable[[Any], Any], Any]]:
    """The shard writer's per-record work, via protobuf and via the wire encoder.

    Each call takes the next of ``records`` (cycling), so that, as in a real shard, the image
    bytes are not already in the CPU cache from the previous call.
    """
    spec = FeatureSpec()

    def protobuf_write(next_record: Callable[[], dict[str, Any]]) -> None:
        writer.write(make_example(next_record()).SerializeToString(deterministic=True))

    def wire_write(next_record: Callable[[], dict[str, Any]]) -> None:
        writer.write_chunks(encode_example_chunks(next_record()))

    def protobuf_sink_step(next_record: Callable[[], dict[str, Any]]) -> None:
        message = make_example(next_record())
        spec.observe(message)
        writer.write(message.SerializeToString(deterministic=True))

    def wire_sink_step(next_record: Callable[[], dict[str, Any]]) -> None:
        chunks, observed = encode_example_observed(next_record())
        spec.observe_lengths(observed)
        writer.write_chunks(chunks)

    def cycling() -> Callable[[], dict[str, Any]]:
        return itertools.cycle(records).__next__

    return {
        ("encode+write", "recordbeam protobuf + write"): (protobuf_write, cycling()),
        ("encode+write", "recordbeam wire + write_chunks"): (wire_write, cycling()),
        ("sink step", "recordbeam protobuf + observe"): (protobuf_sink_step, cycling()),
        ("sink step", "recordbeam wire + observe_lengths"): (wire_sink_step, cycling()),
    }


def import_tensorflow() -> Any:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    try:
        import tensorflow as tf
    except ImportError:
        return None
    return tf


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=20000, help="records per timed run")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs; the best counts")
    parser.add_argument("--objects", type=int, default=8, help="boxes per image")
    parser.add_argument("--image-kb", type=int, default=100, help="size of image/encoded")
    parser.add_argument(
        "--distinct",
        type=int,
        default=64,
        help="distinct records the encode+write rows cycle through (beyond the CPU cache)",
    )
    args = parser.parse_args()

    features = detection_features(args.objects, args.image_kb * 1000)
    ours = encode_example(features)
    tf = import_tensorflow()
    candidates = {
        ("encode", "recordbeam"): (encode_example, features),
        ("decode", "recordbeam"): (decode_example, ours),
    }
    if tf is not None:
        for encoder in (tf_encoder(tf), tf_in_place_encoder(tf)):
            theirs = tf.train.Example.FromString(encoder(features))
            assert tf.train.Example.FromString(ours) == theirs, "benchmark encoders disagree"
        candidates |= {
            ("encode", "tf nested ctors"): (tf_encoder(tf), features),
            ("encode", "tf in-place extend"): (tf_in_place_encoder(tf), features),
            ("encode", "tf in-place, sorted"): (tf_in_place_encoder(tf, True), features),
            ("decode", "tf FromString+np"): (tf_decoder(tf), ours),
        }
    assert encode_example_fast(features) == ours, "wire encoder differs from encode_example"
    null_file = open(os.devnull, "wb")  # closed after the timed runs
    candidates |= {("encode", "recordbeam wire"): (encode_example_fast, features)}
    records = [
        detection_features(args.objects, args.image_kb * 1000, seed=seed)
        for seed in range(args.distinct)
    ]
    candidates |= shard_writer_candidates(records, RecordWriter(null_file))
    rates = best_rates(candidates, args.n, args.repeats)
    null_file.close()
    # The baseline of each ratio is the fastest TensorFlow variant of that operation.
    baselines = {}
    for (operation, implementation), rate in rates.items():
        if not implementation.startswith("recordbeam"):
            baselines[operation] = max(rate, baselines.get(operation, 0.0))
    rows = sorted(rates.items(), key=lambda item: (item[0][0], item[0][1].startswith("recordbeam")))

    print(
        f"{args.n} records x best of {args.repeats}; one record = {len(ours)} bytes, "
        f"{len(features)} features, {args.objects} objects"
    )
    print(
        f"{'operation':<12} {'implementation':<32} {'records/s':>12} {'us/record':>10} "
        f"{'vs best TF':>10}"
    )
    for (operation, implementation), rate in rows:
        baseline = baselines.get(operation)
        ratio = f"{rate / baseline:.2f}x" if baseline else "-"
        print(
            f"{operation:<12} {implementation:<32} {rate:>12,.0f} {1e6 / rate:>10.1f} {ratio:>10}"
        )


if __name__ == "__main__":
    main()
