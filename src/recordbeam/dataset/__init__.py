"""A finished output folder: its layout, manifest and TFDS metadata, and what
reads it (NumPy reader, PyTorch dataset, schema, report)."""
