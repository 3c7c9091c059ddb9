"""The ``recordbeam`` command."""
