"""The ``recordbeam`` command, a thin shell over the library, one module per job:

- ``main``: the entry point (``console``/``main``), dispatch, error reporting, Ctrl-C.
- ``parser``: every command's arguments and the argparse types (imports no Beam).
- ``commands``: ``inspect``, ``verify``, ``index``, ``schema``, ``report``, ``check``.
- ``pipeline_commands``: ``convert``, ``reshard``, ``demo`` (they run a pipeline).
- ``record_files``: which files a reading command reads (files, globs, an output folder).
- ``verify``: checking record files and saying what is wrong with one.
- ``show``: a record as ``inspect`` prints it (TensorFlow's text layout or JSON).
- ``summary``: what a run prints at its end.
"""
