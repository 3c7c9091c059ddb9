"""The commands that run a pipeline: ``convert coco|voc|yolo|labelme|cvat|kitti|openimages|box-csv|
imagefolder|manifest``, ``reshard``
and ``demo``. Each checks its inputs before Beam starts, builds the library's options
from the arguments, runs, and prints what the run did."""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

from recordbeam.cli.commands import cmd_inspect
from recordbeam.cli.record_files import check_listed_exist, expand_paths, record_files
from recordbeam.cli.summary import print_summary, submitted_text
from recordbeam.cli.verify import check_first_records
from recordbeam.errors import EXIT_OK, UsageError


def cmd_reshard(args: argparse.Namespace, beam_args: Sequence[str]) -> int:
    from recordbeam.pipeline import run
    from recordbeam.sources.reshard import ReshardOptions, check_not_in_place, input_splits, reshard
    from recordbeam.write.planning import ShardOptions, parse_size

    # An output folder means its shards, as for inspect and verify; every input is checked
    # to be there and to start as a TFRecord file before the job starts.
    files = record_files([args.inputs])
    check_listed_exist(files)
    check_first_records(files, "reshard")
    inputs = [file.path for file in files]
    check_not_in_place(inputs, args.output)
    splits = sorted(set(input_splits(inputs, args.split).values()))
    shards = ShardOptions(num_shards=args.shards, shard_size=parse_size(args.shard_size),
                          compression=args.compression, index=args.index)
    options = ReshardOptions(tuple(inputs), args.split)
    _warn_if_the_local_runner_is_beams(args.beam_options)
    result = run(lambda p: reshard(p, args.output, options, shards), args.output,
                 beam_args=beam_args, overwrite=args.overwrite, show_progress=not args.quiet,
                 break_lock=args.break_lock, command="reshard")
    return _report_run(result, args, splits)


# --- convert --------------------------------------------------------------------------


def _shard_options(args: argparse.Namespace):
    from recordbeam.write.planning import ShardOptions, parse_size

    incremental = getattr(args, "incremental", False)
    if getattr(args, "verify_unchanged", False) and not incremental:
        raise UsageError("--verify-unchanged applies to incremental runs only: add "
                         "--incremental, or drop --verify-unchanged")
    if getattr(args, "compact_below", None) is not None and not incremental:
        raise UsageError("--compact-below applies to incremental runs only: add --incremental, "
                         "or drop --compact-below")
    if incremental and args.shards is not None:
        raise UsageError("--shards cannot be combined with --incremental: an incremental run "
                         "keeps the shards that did not change and cuts its new ones by "
                         "--shard-size; drop --shards")
    if incremental and (getattr(args, "duplicates", "keep") not in ("keep", "off")
                        or getattr(args, "near_duplicates", False)):
        raise UsageError("--duplicates drop and --near-duplicates cannot be combined with "
                         "--incremental yet (an incremental run does not look for "
                         "duplicates); drop one of them")
    return ShardOptions(
        num_shards=args.shards, shard_size=parse_size(args.shard_size),
        compression=args.compression, index=args.index,
        max_reject_fraction=args.max_reject_fraction,
        max_annotation_reject_fraction=getattr(args, "max_annotation_reject_fraction", None),
        incremental=incremental,
        input_key="content" if getattr(args, "verify_unchanged", False) else "stat",
        compact_below=getattr(args, "compact_below", None) or 0.0,
        duplicates=_duplicates(args), near_duplicates=getattr(args, "near_duplicates", False),
    )


def _duplicates(args: argparse.Namespace) -> str:
    mode = getattr(args, "duplicates", "keep")
    if mode == "off" and getattr(args, "near_duplicates", False):
        raise UsageError("--near-duplicates would be ignored with --duplicates off; drop one "
                         "of them")
    return mode


def _checks(args: argparse.Namespace):
    from recordbeam.write.image_encoder import ImageChecks
    from recordbeam.write.planning import parse_size

    return ImageChecks(
        max_pixels=args.max_pixels or None, max_bytes=parse_size(args.max_image_bytes),
        verify_decode=args.verify_decode,
    )


def _run_conversion(build, args: argparse.Namespace, beam_args: Sequence[str],
                    splits: Sequence[str] | None = None) -> int:
    from recordbeam.pipeline import run

    _warn_if_the_local_runner_is_beams(args.beam_options)
    result = run(build, args.output, options=args.beam_options, overwrite=args.overwrite,
                 show_progress=not args.quiet, detach=getattr(args, "detach", False),
                 break_lock=args.break_lock, command=args.command_parser.prog)
    return _report_run(result, args, list(splits or [args.split]))


def _warn_if_the_local_runner_is_beams(options: Any) -> None:
    """Before a run: a local run on this Beam is Beam's plain FnApiRunner, which holds its
    shuffles in memory. The runner logs it too, but a run's log is deleted on success."""
    from recordbeam.local.runner import plain_runner_notice, runs_on_local_runner

    notice = plain_runner_notice() if runs_on_local_runner(options) else None
    if notice is not None:
        print(f"warning: {notice}", file=sys.stderr)


def _convert(args: argparse.Namespace, beam_args: Sequence[str], inputs: Any,
             splits: Sequence[str], patterns: list[str],
             settings_of: Callable[..., dict[str, Any]], to_tfrecord: Callable[..., Any]) -> int:
    """What every convert command does once its inputs are checked: nothing when
    ``--if-changed`` finds OUT up to date, else the run. ``settings_of(inputs, shards,
    checks, fixes)`` and ``to_tfrecord(p, output, inputs, shards, checks, fixes)`` are the
    format's functions of :mod:`recordbeam.pipeline`."""
    shards, checks, fixes = _shard_options(args), _checks(args), _fixes(args)
    if _up_to_date(args, splits, patterns, settings_of(inputs, shards, checks, fixes)):
        return EXIT_OK
    return _run_conversion(
        lambda p: to_tfrecord(p, args.output, inputs, shards, checks, fixes),
        args, beam_args, splits)


#: What a missing or empty image folder's message advises, for formats with --images.
_PASS_IMAGES = " (pass --images if the images are elsewhere)"

#: Said of an input without any annotation file, after where they were looked for.
_NO_OBJECTS = ", so every image would be written without objects; "
_UNLABELED = " (to write unlabeled images, use convert imagefolder)"


def _require_folder(path: str, advice: str) -> None:
    """Fail fast, before Beam starts, on a folder that is missing or holds no files
    (``advice`` follows the message: what the option takes, or which one to check)."""
    from recordbeam import filesystems

    local = filesystems.local_path(path)
    if local is not None and os.path.isfile(local):
        raise UsageError(f"{path} is a file, not a folder{advice}")
    # Listing, not exists(): a gs:// or s3:// "folder" is not an object of its own.
    if not filesystems.has_files(path):
        raise UsageError(f"{path}: no such folder, or it holds no files{advice}")


def _require_images_option(args: argparse.Namespace) -> None:
    """An --images folder given beside --input: there, with files (else the whole job would
    run to reject every image as missing)."""
    if getattr(args, "images", None):
        _require_folder(args.images, " (check --images)")


def _require_classes_file(path: str | None) -> None:
    """A --classes file that exists and reads as class names, checked before the job (a
    small file; the job reads it again)."""
    if path:
        _require_file(path, "--classes", "classes file", "a text file with one class name per line")
        from recordbeam.sources.imagefolder import read_classes_file

        read_classes_file(path)


def _refuse_split(args: argparse.Namespace, splits: Sequence[str], named_by: str, *,
                  accepted: bool | None = None) -> None:
    """Refuse a --split typed on the command line (not the default) when the input's files
    name the splits (``named_by`` says where): it would be ignored, and a run writing
    splits other than the one asked for replaces them in OUT. By default a --split is
    accepted only when it names the input's one split (an input without splits of its own
    has the one --split names); ``accepted`` overrides that where the format uses --split."""
    if accepted is None:
        accepted = list(splits) == [args.split]
    if getattr(args, "split_given", False) and not accepted:
        raise UsageError(f"--split {args.split} would be ignored: {named_by} "
                         f"({', '.join(splits)}); drop --split")


def _report_run(result: Any, args: argparse.Namespace, splits: Sequence[str]) -> int:
    """Print what a run did: the summary of a finished run, or what became of a job this
    command did not wait for (``--detach``, a Dataflow ``--dry_run``)."""
    from recordbeam.pipeline import SubmittedRun

    if isinstance(result, SubmittedRun):
        print(submitted_text(result, args.output))
        return EXIT_OK
    print_summary(result, splits, args.output)
    exif = sum(result.manifest["splits"].get(s, {}).get("counts", {}).get("exif_rotated", 0)
               for s in splits)
    if exif:
        carry = "image carries" if exif == 1 else "images carry"
        print(f"warning: {exif} {carry} an EXIF orientation other than 1; TensorFlow's "
              "decoders ignore it, so they are written and read unrotated (pass --apply-exif "
              "to rotate their pixels).", file=sys.stderr)
    return EXIT_OK


def _require_file(path: str, flag: str, kind: str, what: str) -> None:
    """Fail fast, before Beam starts, on an input file that is missing or is a folder
    (``kind`` names the file, ``what`` says what ``flag`` takes)."""
    from recordbeam import filesystems

    local = filesystems.local_path(path)
    if local is not None and os.path.isdir(local):
        raise UsageError(f"{path} is a folder; {flag} takes {what}")
    if not filesystems.exists(path):
        raise UsageError(f"{path}: no such {kind} (check {flag})")


def _require_json_object(path: str, flag: str, what: str) -> None:
    """Fail fast on a local file given as a JSON document that does not start like one (an
    image, a CSV...): its first bytes, not the parser's error from a worker. Files on object
    stores are left to the parser: a small read there can fetch a large block."""
    from recordbeam import filesystems

    if filesystems.local_path(path) is None:
        return
    start = b""
    with filesystems.open_read(path) as f:
        while chunk := f.read(1 << 16):  # whitespace may come first, any amount of it
            start = (start + chunk).removeprefix(b"\xef\xbb\xbf").lstrip()
            if start:
                break
    if start.startswith(b"{"):
        return
    if not start:
        raise UsageError(f"{path} holds no JSON (it is empty or blank); {flag} takes {what}")
    raise UsageError(
        f"{path} is not a JSON object (it starts with {_shown_start(start)}); {flag} takes {what}")


def _shown_start(data: bytes) -> str:
    """The first characters of ``data`` as text, or its first bytes in hex when binary."""
    for cut in range(24, 28):  # a cut inside a multi-byte character moves on to its end
        try:
            return repr(data[:cut].decode("utf-8"))
        except UnicodeDecodeError as error:
            if error.start < cut - 3:
                break
    return "the bytes " + " ".join(f"{b:02x}" for b in data[:8])


def _check_inputs(images_dir: str, annotations: str | None, captions: str | None = None) -> None:
    """Fail fast, before Beam starts, on input paths that do not exist, then on annotation
    files that are no JSON object."""
    if annotations is None and captions is None:
        raise UsageError("convert coco needs --annotations FILE, --captions FILE or both")
    given = ((annotations, "--annotations", "annotation file",
              "the COCO instances JSON file, e.g. annotations/instances_train2017.json"),
             (captions, "--captions", "captions file",
              "the COCO captions JSON file, e.g. annotations/captions_train2017.json"))
    for path, flag, kind, what in given:
        if path is not None:
            _require_file(path, flag, kind, what)
    _require_folder(images_dir, " (check --images)")
    for path, flag, _kind, what in given:  # every path exists: now what the files hold
        if path is not None:
            _require_json_object(path, flag, what)


def cmd_convert_coco(args: argparse.Namespace, beam_args: Sequence[str]) -> int:
    from recordbeam.pipeline import coco_input_patterns, coco_settings, coco_to_tfrecord
    from recordbeam.sources.coco import CocoOptions

    captions = getattr(args, "captions", None)
    _check_inputs(args.images, args.annotations, captions)
    coco = CocoOptions(args.images, args.annotations, args.split, args.contiguous_labels,
                       allow_outside_root=getattr(args, "allow_outside_root", False),
                       include_masks=getattr(args, "include_masks", False),
                       include_keypoints=getattr(args, "include_keypoints", False),
                       captions=captions)
    code = _convert(args, beam_args, coco, [args.split], coco_input_patterns(coco),
                    coco_settings, coco_to_tfrecord)
    if code == EXIT_OK and not coco.contiguous_labels:
        _warn_of_label_0(args)
    return code


def _warn_of_label_0(args: argparse.Namespace) -> None:
    """Known once the objects are written: some had category id 0 (Label Studio's COCO
    export numbers categories from 0), written as label 0, the background's."""
    from recordbeam.dataset import layout
    from recordbeam.sources.coco import LABEL_0_OBJECTS

    manifest = layout.read_manifest(args.output) or {}
    count = manifest.get("splits", {}).get(args.split, {}).get("counts", {}).get(
        LABEL_0_OBJECTS, 0)
    if count:
        print(f"warning: {count} object{'s have' if count > 1 else ' has'} category id 0, "
              "written as label 0, which the Object Detection API and Model Garden read as "
              "background; rerun with --contiguous-labels to write labels 1..K", file=sys.stderr)


def _fixes(args: argparse.Namespace):
    from recordbeam.images.transcode import DEFAULT_JPEG_QUALITY, ImageFixes

    quality = getattr(args, "jpeg_quality", None)
    fixes = ImageFixes(
        transcode=getattr(args, "transcode", "keep"),
        quality=DEFAULT_JPEG_QUALITY if quality is None else quality,
        max_side=getattr(args, "max_side", None),
        apply_exif=getattr(args, "apply_exif", False),
    )
    if quality is not None and (not fixes.active or fixes.transcode == "png"):
        raise UsageError(
            f"--jpeg-quality {quality} would be ignored: no image is re-encoded as JPEG. It "
            "applies with --transcode jpeg, and to the JPEGs --max-side or --apply-exif "
            "re-encode (not with --transcode png); drop it or add one of those")
    return fixes


def _up_to_date(args: argparse.Namespace, splits: Sequence[str], patterns: list[str],
                settings: dict[str, Any]) -> bool:
    from recordbeam.pipeline import is_up_to_date

    if getattr(args, "if_changed", False) and all(
            is_up_to_date(args.output, split, patterns, settings) for split in splits):
        print(f"{args.output} is up to date (same inputs, options and recordbeam version); nothing to do")
        return True
    return False


def cmd_convert_imagefolder(args: argparse.Namespace, beam_args: Sequence[str]) -> int:
    from recordbeam.pipeline import (
        imagefolder_input_patterns,
        imagefolder_settings,
        imagefolder_to_tfrecord,
    )
    from recordbeam.sources.imagefolder import ImageFolderOptions, ReadImageFolder

    _require_folder(args.root, " (check --root)")
    _require_classes_file(args.classes)
    folder = ImageFolderOptions(args.root, args.split, args.classes, args.label_offset,
                                args.val_fraction, args.allow_outside_root)
    read = ReadImageFolder(folder)  # looks for split folders
    if read.split_folders:
        _refuse_split(args, read.split_folders, f"the split folders of {args.root} name the splits")
    return _convert(args, beam_args, folder, read.splits,
                    imagefolder_input_patterns(folder), imagefolder_settings,
                    imagefolder_to_tfrecord)


def cmd_convert_manifest(args: argparse.Namespace, beam_args: Sequence[str]) -> int:
    from recordbeam.pipeline import table_input_patterns, table_settings, table_to_tfrecord
    from recordbeam.sources.tabular import ReadTable, TableOptions, parse_split_fractions

    _require_file(args.manifest, "--manifest", "file", "a .csv or .jsonl file with one row per example")
    if args.schema:
        _require_file(args.schema, "--schema", "file", 'a JSON file such as {"label": "int64"}')
    # --split is a split name, or fractions such as train=0.8,val=0.2 (split by hash).
    fractions = parse_split_fractions(args.split) if "=" in args.split else ()
    if fractions:
        args.split = fractions[0][0]
    # A TableError (a row whose type disagrees) is a DataError: main reports it, exit 1.
    table = TableOptions(
        args.manifest, args.split, args.schema,
        tuple(c.strip() for c in (args.image_columns or "").split(",") if c.strip()),
        args.split_column, fractions, args.group_by, args.allow_outside_root,
        schema_sample_rows=args.schema_sample_rows,
        splits=tuple(s.strip() for s in (args.splits or "").split(",") if s.strip()),
        csv_multiline=args.csv_multiline,
    )
    read = ReadTable(table)  # reads the first rows to learn the column types
    if args.split_column and not fractions:
        _refuse_split(args, read.splits, f"the column {args.split_column!r} (--split-column) "
                      "names each row's split", accepted=False)
    shards, checks, fixes = _shard_options(args), _checks(args), _fixes(args)
    settings = table_settings(table, shards, checks, fixes)
    if _up_to_date(args, read.splits, table_input_patterns(table), settings):
        return EXIT_OK
    return _run_conversion(
        lambda p: table_to_tfrecord(p, args.output, table, shards, checks, fixes),
        args, beam_args, read.splits)


def cmd_convert_voc(args: argparse.Namespace, beam_args: Sequence[str]) -> int:
    from recordbeam.pipeline import voc_settings, voc_to_tfrecord
    from recordbeam.sources.voc import ReadVoc, VocOptions, voc_input_patterns

    voc = VocOptions(args.input, args.images, args.split, args.allow_outside_root)
    _require_folder(voc.root, "; --input takes a Pascal VOC folder holding Annotations/ and "
                    "JPEGImages/, or a flat export with each <name>.xml beside its image")
    _require_images_option(args)
    # Finds Annotations/ or the XMLs of a flat export, lists ImageSets/Main, reads labelmap.txt.
    read = ReadVoc(voc, skip_below=args.output)
    if not read.layout.flat:
        _require_folder(read.annotation_format().image_folder, _PASS_IMAGES)
    splits = read.splits
    _refuse_split(args, splits, f"the split folders of {voc.root} name the splits" if read.layout.flat
                  else f"{voc.split_lists_dir} lists the splits")
    if not read.finds_annotation_file():
        raise UsageError(f"{voc.annotations_dir}: no .xml annotation file{_NO_OBJECTS}--input "
                         f"takes a Pascal VOC folder holding Annotations/<id>.xml{_UNLABELED}")
    return _convert(args, beam_args, voc, splits, voc_input_patterns(voc, read.layout),
                    voc_settings, voc_to_tfrecord)


def cmd_convert_kitti(args: argparse.Namespace, beam_args: Sequence[str]) -> int:
    from recordbeam.pipeline import kitti_settings, kitti_to_tfrecord
    from recordbeam.sources.kitti import KittiOptions, ReadKitti, kitti_input_patterns

    kitti = KittiOptions(args.input, args.images, args.split, args.allow_outside_root)
    _require_images_option(args)
    splits = ReadKitti(kitti).split_folders  # lists the split folders
    if not splits:
        raise UsageError(f"{kitti.images_root}: no <split>/image_2/ or <split>/label_2/ folder "
                         "with files; --input takes a KITTI folder such as the one holding "
                         "training/image_2/ and training/label_2/ (--images if the images "
                         "are elsewhere)")
    if all(split.labels is None for split in splits):
        raise UsageError(f"{kitti.labels_root}: no label_2/ folder beside "
                         f"{', '.join(split.images for split in splits)}, so every image would "
                         "be written without objects; --input takes the KITTI folder holding "
                         "<split>/label_2/ (to write unlabeled images, use convert imagefolder)")
    names = [s.name for s in splits]
    # One split folder may take the name --split gives; several name themselves.
    _refuse_split(args, names, "the split folders name the splits")
    return _convert(args, beam_args, kitti, names, kitti_input_patterns(splits), kitti_settings,
                    kitti_to_tfrecord)


def cmd_convert_cvat(args: argparse.Namespace, beam_args: Sequence[str]) -> int:
    from recordbeam.pipeline import cvat_settings, cvat_to_tfrecord
    from recordbeam.sources.cvat import CvatOptions, cvat_input_patterns, plan, xml_files

    cvat = CvatOptions(args.input, args.images, args.split, args.include_masks,
                       args.allow_outside_root)
    if not xml_files(cvat):
        raise UsageError(f"{cvat.xml_files_shown} matches no file; --input takes the CVAT export "
                         "folder holding annotations.xml (or <subset>.xml files) and images/")
    _require_folder(cvat.image_folder, _PASS_IMAGES)
    planned = plan(cvat)  # reads each XML's <meta>, up to its first <image>
    splits = planned.splits
    # An annotations.xml declaring several subsets puts its <image>s without a subset
    # attribute in --split: there it must name one of them. Elsewhere the subsets decide.
    places_images = len(splits) > 1 and any(subset is None for _path, subset in planned.files)
    _refuse_split(args, splits, "the XMLs name the subsets",
                  accepted=args.split in splits if places_images else None)
    code = _convert(args, beam_args, cvat, splits, cvat_input_patterns(cvat), cvat_settings,
                    cvat_to_tfrecord)
    if code == EXIT_OK and places_images and getattr(args, "split_given", False):
        _warn_if_split_placed_nothing(args)
    return code


def _warn_if_split_placed_nothing(args: argparse.Namespace) -> None:
    """Known only once the XML was read: every <image> had its own subset, so the typed
    --split placed none of them. Said, not silently ignored."""
    from recordbeam.dataset import layout
    from recordbeam.sources.cvat import PLACED_BY_SPLIT_OPTION

    manifest = layout.read_manifest(args.output) or {}
    placed = sum(entry.get("counts", {}).get(PLACED_BY_SPLIT_OPTION, 0)
                 for entry in manifest.get("splits", {}).values())
    if manifest and not placed:
        print(f"warning: --split {args.split} placed no image: every <image> of the XMLs "
              "carries its own subset, which decides its split; drop --split", file=sys.stderr)


def cmd_convert_labelme(args: argparse.Namespace, beam_args: Sequence[str]) -> int:
    from recordbeam.pipeline import labelme_settings, labelme_to_tfrecord
    from recordbeam.sources.labelme import LabelmeOptions, ReadLabelme, labelme_input_patterns

    _require_folder(args.input, "; --input takes the folder labelme saved its JSONs into")
    if args.images:
        _require_folder(args.images, " (check --images)")
    _require_classes_file(args.classes)
    labelme = LabelmeOptions(args.input, args.images, args.split, args.classes,
                             args.include_masks, args.allow_outside_root)
    read = ReadLabelme(labelme, skip_below=args.output)  # a broken classes file is said here
    if not read.finds_annotation_file():
        raise UsageError(f"{args.input}: no .json file below it{_NO_OBJECTS}--input takes the "
                         f"folder labelme saved its JSONs into{_UNLABELED}")
    return _convert(args, beam_args, labelme, [args.split], labelme_input_patterns(labelme),
                    labelme_settings, labelme_to_tfrecord)


def cmd_convert_openimages(args: argparse.Namespace, beam_args: Sequence[str]) -> int:
    from recordbeam.pipeline import openimages_settings, openimages_to_tfrecord
    from recordbeam.sources.openimages import (
        OpenImagesOptions,
        ReadOpenImages,
        openimages_input_patterns,
    )

    oid = OpenImagesOptions(args.input, args.images, args.allow_outside_root)
    _require_folder(args.input, "; --input takes an Open Images folder holding the "
                    "*-annotations-bbox.csv tables (or annotations/ with them) and images/")
    _require_images_option(args)
    read = ReadOpenImages(oid)  # lists the tables, reads their headers and the classes
    _refuse_split(args, read.splits, "the splits come from the tables' names")
    return _convert(args, beam_args, oid, read.splits,
                    openimages_input_patterns(oid, read.tables), openimages_settings,
                    openimages_to_tfrecord)


def cmd_convert_box_csv(args: argparse.Namespace, beam_args: Sequence[str]) -> int:
    from recordbeam.pipeline import box_csv_settings, box_csv_to_tfrecord
    from recordbeam.sources.boxcsv import BoxCsvOptions, ReadBoxCsv, box_csv_input_patterns

    boxes = BoxCsvOptions(args.input, args.images, args.allow_outside_root)
    _require_folder(args.input, "; --input takes the folder a box CSV export holds: "
                    "<split>/_annotations.csv beside the images")
    _require_images_option(args)
    splits = ReadBoxCsv(boxes).splits  # lists ROOT/*/_annotations.csv, reads their headers
    _refuse_split(args, splits, "the splits come from the folders holding _annotations.csv")
    return _convert(args, beam_args, boxes, splits, box_csv_input_patterns(boxes, splits),
                    box_csv_settings, box_csv_to_tfrecord)


def cmd_convert_yolo(args: argparse.Namespace, beam_args: Sequence[str]) -> int:
    from recordbeam.pipeline import yolo_settings, yolo_to_tfrecord
    from recordbeam.sources.annotated_files import annotation_folders
    from recordbeam.sources.yolo import ReadYolo, YoloOptions, yolo_input_patterns

    yolo = YoloOptions(args.input, args.split, args.classes, args.allow_outside_root)
    _require_folder(yolo.folder, "; --input takes a YOLO folder holding obj.data (darknet), "
                    "data.yaml (Ultralytics), or images and labels with a classes.txt")
    if args.classes:
        _require_file(args.classes, "--classes", "classes file",
                      "a text file with one class name per line, class 0 first")
    # Reads obj.data + obj.names, data.yaml, or looks for split folders and a names file.
    read = ReadYolo(yolo, skip_below=args.output)
    _refuse_split(args, read.splits, f"the split folders of {yolo.folder} name the splits"
                  if read.layout.kind == "folders" else
                  f"{read.layout.description} names the splits")
    if not read.finds_annotation_file():
        folders = ", ".join(annotation_folders(read.annotation_format()))
        raise UsageError(f"{folders}: no label file (.txt){_NO_OBJECTS}an image's labels are "
                         "its path with images/ as labels/ and .txt as extension "
                         f"(labels/<split>/<id>.txt), or beside it{_UNLABELED}")
    # Masks are no YoloOptions field: the settings record them only when on.
    masks = args.include_masks
    return _convert(args, beam_args, yolo, read.splits, yolo_input_patterns(yolo, read.layout),
                    partial(yolo_settings, include_masks=masks),
                    partial(yolo_to_tfrecord, include_masks=masks))


def cmd_demo(args: argparse.Namespace, beam_args: Sequence[str]) -> int:
    from recordbeam.testing.samples import make_coco_sample

    with tempfile.TemporaryDirectory(prefix="recordbeam-demo-") as root:
        sample = make_coco_sample(root, num_images=args.num_images, seed=0)
        # Not where: the folder is deleted when the command ends.
        print(f"generated a COCO sample of {sample.num_images} images, some deliberately broken")
        args.images, args.annotations = sample.images_dir, sample.annotations
        code = cmd_convert_coco(args, beam_args)
    if code == EXIT_OK:
        print("\nfirst example, as `recordbeam inspect` shows it:")
        from recordbeam import filesystems

        first = filesystems.join(args.output, f"{args.split}-00000-of-")
        shards = expand_paths([filesystems.literal(first) + "*.tfrecord*"])
        cmd_inspect(argparse.Namespace(paths=shards[:1], n=1, json=False, kind="auto"))
    return code

