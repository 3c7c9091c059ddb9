"""The TFRecord format core: framing, index files, the Example and SequenceExample
codecs, tensors and feature specs. Imports neither Beam nor TensorFlow."""
