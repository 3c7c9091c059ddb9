"""recordbeam: image datasets to sharded TFRecords with Apache Beam, no TensorFlow needed."""

__version__ = "0.1.0"


def __getattr__(name: str):
    # Lazy, so that `import recordbeam` stays light (no NumPy, protobuf or Beam import).
    if name == "read":
        from recordbeam.dataset.reader import read

        return read
    raise AttributeError(f"module 'recordbeam' has no attribute {name!r}")
