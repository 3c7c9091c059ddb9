"""One package per input format, each declaring itself in its ``__init__``
(:mod:`.format`): ``coco`` (COCO instances, keypoints, captions, LVIS), ``voc`` (Pascal
VOC), ``yolo`` (darknet and Ultralytics), ``labelme``, ``cvat`` (CVAT XML), ``kitti``,
``openimages`` and ``box_csv`` (box tables, joined with their images by ``csv_boxes``),
``imagefolder`` (class folders), ``manifest`` (CSV / JSON Lines manifests); ``reshard``
reads finished TFRecord files. Detection sources share ``detection`` (the object record
and ``DetectionEncoder``, which ``CocoEncoder`` and ``VocEncoder`` extend); formats with one
annotation file per image (VOC, YOLO, labelme, KITTI) share ``annotated_files``: they
describe their folders and parse one file, and ``ReadAnnotatedImages`` lists, joins, parses
on workers and turns class names into labels.

Every format's reader follows one small interface, which :mod:`.conversion` relies on:

* ``Read<Kind>(options, skip_below=None)``: a ``beam.PTransform`` applied to the pipeline
  (``p | ReadCoco(...)``). ``skip_below`` is the output folder, left out of the listing
  (:mod:`.listing`) when it lies inside the input folder.
* its ``expand`` returns a :class:`.result.SourceRead`, the named tuple of
  PCollections the sink takes: ``records`` (:class:`~recordbeam.records.ImageRecord`,
  typed as such with ``.with_output_types(ImageRecord)`` so the writer's shuffle uses the
  compact coder of :mod:`.record_coder`; ``identity`` fixes shard and order, ``labels`` is
  read by the kind's encoder), ``rejects``, ``counts``, ``metadata`` (its ``inputs`` made
  by :class:`.fingerprint.FileTermsFn`) and, when the source knows them early,
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

#: What a pipeline of your own imports from here, and the module that defines it: each
#: format's read transform, its options and its encoder, and what the read returns.
#: Everything else under ``recordbeam.sources`` is private.
_PUBLIC = {
    "SourceRead": "result",
    "ReadCoco": "coco.reader", "CocoOptions": "coco.options", "CocoEncoder": "coco.encoder",
    "ReadVoc": "voc.reader", "VocOptions": "voc.reader", "VocEncoder": "voc.reader",
    "ReadYolo": "yolo.reader", "YoloOptions": "yolo.reader", "YoloEncoder": "yolo.reader",
    "ReadKitti": "kitti.reader", "KittiOptions": "kitti.reader",
    "KittiEncoder": "kitti.reader",
    "ReadCvat": "cvat.reader", "CvatOptions": "cvat.reader", "CvatEncoder": "cvat.reader",
    "ReadLabelme": "labelme.reader", "LabelmeOptions": "labelme.reader",
    "LabelmeEncoder": "labelme.reader",
    "ReadOpenImages": "openimages.reader", "OpenImagesOptions": "openimages.reader",
    "OpenImagesEncoder": "openimages.reader",
    "ReadBoxCsv": "box_csv.reader", "BoxCsvOptions": "box_csv.reader",
    "BoxCsvEncoder": "box_csv.reader",
    "ReadImageFolder": "imagefolder.reader", "ImageFolderOptions": "imagefolder.reader",
    "ClassificationEncoder": "imagefolder.reader",
    "ReadTable": "manifest.reader", "TableOptions": "manifest.reader",
    "TableEncoder": "manifest.reader",
    "ReadRecordFiles": "reshard", "ReshardOptions": "reshard",
    "SplitRecordEncoder": "reshard",
}

__all__ = sorted(_PUBLIC)


def __getattr__(name: str):
    # Lazy: a format's modules (and Beam) are imported when one of its names is asked for.
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
