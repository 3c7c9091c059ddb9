"""recordbeam: image datasets to sharded TFRecords with Apache Beam, no TensorFlow needed."""

__version__ = "0.1.0"
