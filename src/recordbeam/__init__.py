"""recordbeam: image datasets to sharded TFRecords with Apache Beam, no TensorFlow needed.

``recordbeam.convert(format, output=..., **options)`` converts a dataset
(:func:`recordbeam.converter.convert`); ``recordbeam.read(output, split=...)`` reads one back
without TensorFlow (:func:`recordbeam.dataset.reader.read`).
"""

__all__ = ["__version__", "convert", "read"]

__version__ = "0.1.0"


def __getattr__(name: str):
    # Lazy, so that `import recordbeam` stays light (no NumPy, protobuf or Beam import).
    if name == "read":
        from recordbeam.dataset.reader import read

        return read
    if name == "convert":
        from recordbeam.converter import convert

        return convert
    raise AttributeError(f"module 'recordbeam' has no attribute {name!r}")
