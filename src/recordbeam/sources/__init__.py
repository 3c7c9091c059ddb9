"""One module per input kind, each a PTransform yielding ImageRecords (or
serialized examples) for the writer."""
