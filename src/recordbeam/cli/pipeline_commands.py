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
    result = run(lambda p: reshard(p, args.output, options, shards), args.output,
                 beam_args=beam_args, overwrite=args.overwrite, show_progress=not args.quiet,
                 break_lock=args.break_lock, command="reshard")
    return _report_run(result, args, splits)


# --- convert --------------------------------------------------------------------------


def cmd_convert(args: argparse.Namespace, beam_args: Sequence[str]) -> int:
    """``convert <format>`` of a format declared in its own package (see
    :mod:`recordbeam.sources.format`)."""
    from recordbeam import convert
    from recordbeam.options import conversion_options

    fmt = convert.find_format(args.kind)
    values = {option.name: getattr(args, option.name)
              for option in (*fmt.options, *conversion_options())}
    conversion = convert.prepare(fmt, values, args.split_given)
    result = convert.execute(fmt, conversion, values, args.beam_options)
    if isinstance(result, convert.UpToDate):
        print(f"{args.output} is up to date (same inputs, options and recordbeam version); "
              "nothing to do")
        return EXIT_OK
    return _report_run(result, args, list(conversion.splits))


def _shard_options(args: argparse.Namespace):
    from recordbeam.write.planning import ShardOptions, parse_size

    return ShardOptions(
        num_shards=args.shards, shard_size=parse_size(args.shard_size),
        compression=args.compression, index=args.index,
        max_reject_fraction=args.max_reject_fraction,
        max_annotation_reject_fraction=getattr(args, "max_annotation_reject_fraction", None),
    )


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

    result = run(build, args.output, options=args.beam_options, overwrite=args.overwrite,
                 show_progress=not args.quiet, detach=getattr(args, "detach", False),
                 break_lock=args.break_lock, command=args.command_parser.prog)
    return _report_run(result, args, list(splits or [args.split]))


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
        from recordbeam.sources.classes_file import read_classes_file

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

