"""One package per input format, each declaring itself in its ``__init__``
(:mod:`.format`; ``recordbeam convert --help`` lists them); ``reshard`` reads finished
TFRecord files. Detection sources share ``detection`` (the object record and
``DetectionEncoder``, which ``CocoEncoder`` and ``VocEncoder`` extend) and box tables
``csv_boxes`` (rows joined with their images);
formats with one annotation file per image (VOC, YOLO, labelme, KITTI) share
``annotated_files``: they describe their folders and parse one file, and
``ReadAnnotatedImages`` lists, joins, parses on workers and turns class names into labels;
formats of export files describing many images beside an images folder (Label Studio)
share ``exports``: they parse one export file in plain Python, and ``ReadExport`` streams
it, lists the folder, joins and pairs on workers.

Every format's reader follows one small interface, which :mod:`.conversion` relies on:

* ``Read<Kind>(options, skip_below=None)``: a ``beam.PTransform`` applied to the pipeline
  (``p | ReadCoco(...)``). ``skip_below`` is the output folder, left out of the listing
  (:mod:`.listing`) when it lies inside the input folder.
* its ``expand`` returns a :class:`.result.SourceRead`, the named tuple of
  PCollections the sink takes: ``records`` (:class:`~recordbeam.records.ImageRecord`,
  typed as such with ``.with_output_types(ImageRecord)`` so the writer's shuffle uses the
  compact coder of :mod:`.record_coder`; ``identity`` fixes shard and order, ``labels`` is
  read by the kind's encoder), ``rejects``, ``counts``, ``metadata`` (its ``inputs`` made
  by :func:`.fingerprint.input_terms`) and, when the source knows them early,
  ``sizes``.

* an encoder beside it (``CocoEncoder``, ``VocEncoder``, ``ClassificationEncoder``, ``TableEncoder``,
  subclasses of :class:`~recordbeam.write.image_encoder.ImageExampleEncoder`) that turns
  its records' ``labels`` into features;
* sources that know their splits before running expose ``splits`` (and ``label_metadata``)
  so a run can be checked against an existing output folder.

Records handed between a source's own stages are named types with a compact coder too
(:mod:`.coco.records`, ``manifest.reader.BuiltRow``), never positional tuples. Splits decided by
fractions share one salted hash (:mod:`.splits`).

A new input format is one new package here: its declaration, and a ``reader`` with its
options, ``Read<Kind>``, its encoder and ``prepare`` (ARCHITECTURE.md, "Adding an input
format"). The command, the Python API, the ``pipelines/`` script and the docs' options
table are made from the declaration.
"""

import importlib
from functools import cache

#: Names a pipeline of your own imports from here besides each format's (its declaration's
#: ``public``: read transform, options, encoder), by the module that defines them.
_SHARED = {
    "SourceRead": "result",
    "ReadRecordFiles": "reshard", "ReshardOptions": "reshard",
    "SplitRecordEncoder": "reshard",
}


@cache
def public_paths() -> dict[str, str]:
    """Every public name of this package and its full dotted path. Everything else under
    ``recordbeam.sources`` is private."""
    from recordbeam.sources.format import formats

    paths = {name: f"{__name__}.{module}.{name}" for name, module in _SHARED.items()}
    for declared in formats().values():
        paths.update((path.rsplit(".", 1)[1], path) for path in declared.public)
    return dict(sorted(paths.items()))


def __getattr__(name: str):
    # Lazy: a format's modules (and Beam) are imported when one of its names is asked for.
    if name == "__all__":
        return list(public_paths())
    path = public_paths().get(name)
    if path is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module, _, attribute = path.rpartition(".")
    return getattr(importlib.import_module(module), attribute)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(public_paths()))
