"""The command's arguments: the parser of every command, and the argparse types that
refuse bad values with a usage error naming the option. Imports no Beam: the standby
workers start right after parsing (see :mod:`recordbeam.local.standby`)."""

from __future__ import annotations

import argparse
import difflib
import functools
import sys
from collections.abc import Callable, Sequence
from typing import Any

from recordbeam import __version__
from recordbeam.cli.commands import (
    cmd_check,
    cmd_index,
    cmd_inspect,
    cmd_report,
    cmd_schema,
    cmd_verify,
)
from recordbeam.cli.pipeline_commands import (
    cmd_convert_box_csv,
    cmd_convert_coco,
    cmd_convert_cvat,
    cmd_convert_imagefolder,
    cmd_convert_kitti,
    cmd_convert_labelme,
    cmd_convert_manifest,
    cmd_convert_openimages,
    cmd_convert_voc,
    cmd_convert_yolo,
    cmd_demo,
    cmd_reshard,
)
from recordbeam.cli.worker_requirements import cmd_worker_requirements
from recordbeam.dataset.consumers import CONSUMERS as CONSUMER_CHOICES
from recordbeam.records import DUPLICATE_MODES, MAX_LABEL


def _accepting(pattern: str, parse: Callable[[str], Any]) -> Callable[[str], Any]:
    """``parse``, carrying ``pattern``: a regular expression of the texts it may accept, for
    forms filled in elsewhere (the Flex Template's parameters,
    ``tools/flex_template_metadata.py``). ``parse`` keeps the last word."""
    parse.pattern = pattern  # type: ignore[attr-defined]
    return parse


def _whole_number(minimum: int, meaning: str,
                  maximum: int | None = None) -> Callable[[str], int]:
    """An argparse type: an integer of at least ``minimum`` (0 or more; and at most
    ``maximum``); ``meaning`` says which."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if value < minimum or (maximum is not None and value > maximum):
            raise argparse.ArgumentTypeError(f"must be {meaning}, got {value}")
        return value

    return _accepting(r"^[0-9]+$", parse)


def _fraction(*, zero_allowed: bool, one_allowed: bool) -> Callable[[str], float]:
    """An argparse type: a number between 0 and 1, ends included as asked."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        low_ok = value > 0 or (zero_allowed and value == 0)
        high_ok = value < 1 or (one_allowed and value == 1)
        if not (low_ok and high_ok):
            low, high = ("[0" if zero_allowed else "(0"), ("1]" if one_allowed else "1)")
            raise argparse.ArgumentTypeError(f"must be a fraction in {low}, {high}, got {text}")
        return value

    return _accepting(r"^(0(\.[0-9]*)?|1(\.0*)?|\.[0-9]+)$", parse)


@functools.partial(_accepting, r"^[0-9]+(\.[0-9]+)?\s*([KMGkmg]([Ii]?[Bb])?|[Bb])?$")
def _size(text: str) -> str:
    """An argparse type: a size such as 128MiB, above 0 (kept as text: the commands parse it)."""
    from recordbeam.write.planning import parse_size

    try:
        value = parse_size(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be above 0 bytes, got {text!r}")
    return text


def _folder(text: str) -> str:
    """An argparse type: a folder's path, never empty (``--output ""`` would be the
    filesystem's root, or the working folder, depending on who reads it)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("is empty; give the path of a folder")
    return text


_POSITIVE = _whole_number(1, "1 or more")
_NON_NEGATIVE = _whole_number(0, "0 or more")


def _add_fix_args(parser: argparse.ArgumentParser) -> None:
    from recordbeam.images.transcode import DEFAULT_JPEG_QUALITY, TRANSCODE_CHOICES

    parser.add_argument("--transcode", default="keep", choices=TRANSCODE_CHOICES,
                        help="re-encode images that are not 8-bit RGB JPEG (jpeg) or PNG (png), "
                        "and convert GIF, BMP, WebP and TIFF; default: keep (bytes written as "
                        "they are, other formats rejected)")
    parser.add_argument("--jpeg-quality", type=_whole_number(1, "between 1 and 100"),
                        default=None, metavar="1-100",  # None: not given, DEFAULT_JPEG_QUALITY
                        help=f"quality of re-encoded JPEGs (default: {DEFAULT_JPEG_QUALITY})")
    parser.add_argument("--max-side", type=_POSITIVE, default=None, metavar="PIXELS",
                        help="downsize images whose longer side exceeds this many pixels, "
                        "keeping the aspect (default: no downsizing)")
    parser.add_argument("--apply-exif", action="store_true",
                        help="rotate pixels by the EXIF orientation, width and height swap "
                        "(default: off; images are written unrotated and counted)")


class _GivenSplit(argparse.Action):
    """``--split NAME`` that remembers it was typed (``split_given``): an input that names
    its own splits refuses a --split given, even ``--split train``, but not the default."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        setattr(namespace, self.dest, values)
        namespace.split_given = True


def _add_output_args(parser: argparse.ArgumentParser, *, output_required: bool = True) -> None:
    from recordbeam.images.checks import DEFAULT_MAX_IMAGE_BYTES, DEFAULT_MAX_PIXELS
    from recordbeam.records import DEFAULT_MAX_REJECT_FRACTION

    parser.add_argument("--output", required=output_required, metavar="OUT", type=_folder,
                        help="output folder, on any Beam filesystem (local, gs://, s3://)")
    parser.add_argument("--split", default="train", action=_GivenSplit,
                        help="split name used in shard names (default: train)")
    parser.set_defaults(split_given=False)
    _add_shard_args(parser, "the shards", "when --shards is not given, in bytes or with a "
                    "unit: B, KiB, MiB, GiB, KB, MB, GB")
    parser.add_argument("--max-reject-fraction", type=_fraction(zero_allowed=True, one_allowed=True),
                        default=DEFAULT_MAX_REJECT_FRACTION, metavar="F",
                        help="fail and commit nothing when more than this fraction (0 to 1) of "
                        f"the images is rejected (default: {DEFAULT_MAX_REJECT_FRACTION})")
    parser.add_argument("--max-pixels", type=_whole_number(0, "0 (no limit) or more pixels"),
                        default=DEFAULT_MAX_PIXELS,
                        metavar="PIXELS",
                        help="reject images whose header claims more pixels, width x height "
                        f"(decompression bombs); 0: no limit (default: {DEFAULT_MAX_PIXELS:,})")
    parser.add_argument("--max-image-bytes", type=_size, metavar="SIZE",
                        default=f"{DEFAULT_MAX_IMAGE_BYTES // 2**20}MiB",
                        help="reject larger image files unread, in bytes or with a unit "
                        f"(default: {DEFAULT_MAX_IMAGE_BYTES // 2**20}MiB)")
    parser.add_argument("--verify-decode", action="store_true",
                        help="fully decode every image, slower (default: header checks only)")
    parser.add_argument("--duplicates", default="keep", choices=DUPLICATE_MODES,
                        help="images with the same bytes, in a split or across the splits of "
                        "OUT: keep (write all, list them in OUT/duplicates.jsonl), drop (write "
                        "one copy, the others are 'duplicate' rejects), drop-across-splits "
                        "(drop a later split's copies of an earlier split's image), off (do "
                        "not look) (default: keep)")
    parser.add_argument("--near-duplicates", action="store_true",
                        help="also look for near duplicates (re-encoded, resized, slightly "
                        "cropped copies; a small decode per image) and list them in "
                        "OUT/near-duplicates.jsonl (default: off)")
    _add_quiet(parser)
    parser.add_argument("--if-changed", action="store_true",
                        help="exit 0 at once when OUT already holds a finished output of the same "
                        "inputs (names, sizes, modification times), options and recordbeam "
                        "version (default: always convert)")
    parser.add_argument("--incremental", action="store_true",
                        help="keep the shards of OUT whose examples did not change and encode "
                        "only new and changed inputs (an image's name, size and modification "
                        "time, and its own annotations); other options or another recordbeam "
                        "version rebuild the split (default: rebuild the split)")
    parser.add_argument("--verify-unchanged", action="store_true",
                        help="with --incremental: compare images by the hash of their bytes "
                        "(every image is read) instead of their size and modification time")
    parser.add_argument("--compact-below", type=_fraction(zero_allowed=False, one_allowed=True),
                        default=None, metavar="F",
                        help="with --incremental: fold shards smaller than F (0 to 1) times "
                        "--shard-size into shards near --shard-size (default: never)")


def _add_shard_args(parser: argparse.ArgumentParser, shards: str, shard_size_when: str) -> None:
    """How the shards are cut and where they may go (``shards`` names them in the help,
    ``shard_size_when`` says when --shard-size counts and how it is written)."""
    parser.add_argument("--shards", type=_POSITIVE, default=None, metavar="N",
                        help="number of shards (default: total input bytes / --shard-size)")
    parser.add_argument("--shard-size", type=_size, default="128MiB", metavar="SIZE",
                        help=f"target shard size {shard_size_when} (default: 128MiB)")
    parser.add_argument("--compression", default="none", choices=["none", "gzip", "zlib"],
                        help=f"compression of {shards} (default: none)")
    parser.add_argument("--index", action="store_true",
                        help="also write <shard>.idx index files (default: off)")
    parser.add_argument("--overwrite", action="store_true",
                        help="write into a folder that holds files recordbeam did not write; "
                        "they are kept (default: refuse such a folder)")
    parser.add_argument("--break-lock", action="store_true",
                        help="take OUT's lock even if another run holds it: only when that "
                        "run is gone for good (default: refuse a folder another run writes)")


def _add_quiet(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--quiet", action="store_true",
                        help="no progress line (default: a progress line on a terminal)")


def _add_run_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--detach", action="store_true",
                        help="remote runners only: submit the job, print its id and exit 0 "
                        "without waiting; the job commits OUT itself (default: wait for the end)")


def _add_conversion_args(parser: argparse.ArgumentParser, handler: Callable[..., int]) -> None:
    """What every ``convert`` command ends with: image fixes, output and run options, and
    the function that runs it."""
    _add_fix_args(parser)
    _add_output_args(parser)
    _add_run_args(parser)
    parser.set_defaults(pipeline_handler=handler)


def _add_allow_outside_root(parser: argparse.ArgumentParser, folders: str,
                            also: str = "") -> None:
    """--allow-outside-root: ``folders`` names what the command is given, ``also`` what
    else it would read outside them."""
    parser.add_argument("--allow-outside-root", action="store_true",
                        help=f"also read files that symbolic links lead outside {folders}{also} "
                        "(default: refused, rejected outside_root without being opened)")


def _add_include_masks(parser: argparse.ArgumentParser, masks_from: str) -> None:
    parser.add_argument("--include-masks", action="store_true",
                        help=f"write image/object/mask: one 0/1 PNG per object from {masks_from} "
                        "(default: off)")


def _add_annotation_reject_fraction(parser: argparse.ArgumentParser, things: str,
                                    reasons: str) -> None:
    """The limit on rejected ``things`` (objects, boxes...); ``reasons`` lists typical ones."""
    parser.add_argument("--max-annotation-reject-fraction",
                        type=_fraction(zero_allowed=True, one_allowed=True), default=None,
                        metavar="F",
                        help=f"fail when more than this fraction (0 to 1) of {things} is rejected "
                        f"({reasons}...; {things} of rejected images count as image rejects) "
                        "(default: --max-reject-fraction)")


def _add_record_paths(parser: argparse.ArgumentParser) -> None:
    """The files ``inspect``, ``verify`` and ``index`` read (see
    :func:`recordbeam.cli.record_files.record_files`)."""
    parser.add_argument("paths", nargs="+", metavar="PATH_GLOB_OR_FOLDER",
                        help="a TFRecord file, a glob (quote it), or an output folder (the "
                        "shards its manifest.json lists, every split)")


#: Said by every command that runs a pipeline: what it does not know goes to Beam.
_TO_BEAM = ("Options not listed here go to Beam as pipeline options (--runner, "
            "--direct_num_workers, --project...); an option neither recordbeam nor Beam "
            "knows is an error.")


class _Parser(argparse.ArgumentParser):
    """argparse, and when a required option is missing while a mistyped one was given
    (``--inptu``), the message names the typo beside the missing option.

    Options may also be written as Beam writes its own, and as a Dataflow Flex Template
    launcher passes every parameter: ``--if_changed=true`` for ``--if-changed``
    (``=false`` leaves a switch off), ``--max_reject_fraction=0.1`` for
    ``--max-reject-fraction=0.1``."""

    def parse_known_args(self, args=None, namespace=None):
        self._given = list(sys.argv[1:] if args is None else args)
        return super().parse_known_args(self._as_own_flags(self._given), namespace)

    def _as_own_flags(self, tokens: Sequence[str]) -> list[str]:
        own = {flag for action in self._actions for flag in action.option_strings}
        switches = {flag for action in self._actions if action.nargs == 0
                    and isinstance(action.const, bool) for flag in action.option_strings}
        written = []
        for index, token in enumerate(tokens):
            if token == "--":
                return written + list(tokens[index:])
            name, equals, value = token.partition("=")
            if name.startswith("--") and name not in own:
                dashed = "--" + name[2:].replace("_", "-")
                name = dashed if dashed in own else name
            if equals and name in switches:
                if value.lower() not in ("true", "false"):
                    self.error(f"argument {name}: takes no value, or true or false; got {value!r}")
                if value.lower() == "true":
                    written.append(name)
                continue
            written.append(name + equals + value)
        return written

    def error(self, message: str):
        if message.startswith("the following arguments are required"):
            given = getattr(self, "_given", [])
            message += _typo_hint(message, given)
            explained = options_not_here(self)
            brought = [flag for flag in dict.fromkeys(t.split("=", 1)[0] for t in given)
                       if flag in explained]
            if brought:
                message += "; " + "; ".join(f"{flag}: {explained[flag]}" for flag in brought)
        super().error(message)


def _typo_hint(message: str, given: Sequence[str]) -> str:
    """`` (--inptu looks like a typo of --input)`` for given flags close to a missing one."""
    missing = [word.rstrip(",") for word in message.split(":", 1)[1].split()
               if word.startswith("--")]
    hints = []
    for token in given:
        flag = token.split("=", 1)[0]
        if flag.startswith("--") and flag not in missing:
            close = difflib.get_close_matches(flag, missing, n=1, cutoff=0.75)
            if close:
                hints.append(f"{flag} looks like a typo of {close[0]}")
    return f" ({'; '.join(hints)})" if hints else ""


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="recordbeam", allow_abbrev=False,
        description="Image datasets to sharded TFRecords with Apache Beam; read and check TFRecords "
        "without TensorFlow. Commands that run a pipeline (convert, reshard, demo) pass "
        "options they do not know to Beam (e.g. --runner).",
        epilog="exit codes: 0 ok, 1 data problems, 2 usage error, 3 run failed, 130 interrupted",
    )
    parser.add_argument("--version", action="version", version=f"recordbeam {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    def command(name: str, **kwargs: Any) -> argparse.ArgumentParser:
        return sub.add_parser(name, allow_abbrev=False, **kwargs)

    p = command("inspect", help="print the first records as Examples")
    _add_record_paths(p)
    p.add_argument("-n", type=_NON_NEGATIVE, default=3, metavar="N",
                   help="how many records, across all files (default: 3)")
    p.add_argument("--json", action="store_true",
                   help="JSON Lines, one object per example (default: TensorFlow's text layout)")
    kind = p.add_mutually_exclusive_group()
    kind.add_argument("--sequence", dest="kind", action="store_const", const="sequence",
                      help="parse as SequenceExample (default: whichever the record is)")
    kind.add_argument("--example", dest="kind", action="store_const", const="example",
                      help="parse as Example (default: whichever the record is)")
    p.set_defaults(kind="auto", handler=cmd_inspect)

    p = command("verify", help="check every record's CRCs and that it parses as an Example")
    _add_record_paths(p)
    p.add_argument("--max-problems", type=_NON_NEGATIVE, default=10, metavar="N",
                   help="problems listed per file (default: 10)")
    p.set_defaults(handler=cmd_verify)

    p = command("index", help="write <file>.idx beside each TFRecord file (offset and length "
                "per record)")
    _add_record_paths(p)
    p.set_defaults(handler=cmd_index)

    p = command("schema", help="print feature_description code for tf.io.parse_single_example")
    p.add_argument("output_dir", metavar="OUT", help="a finished output folder")
    p.add_argument("--split", default=None, help="use this split's features (default: all splits)")
    p.add_argument("--ragged", action="store_true",
                   help="tf.io.RaggedFeature instead of VarLenFeature for variable-length "
                   "features (default: VarLenFeature)")
    p.add_argument("--json", action="store_true",
                   help="print the spec as JSON (default: Python code)")
    p.set_defaults(handler=cmd_schema)

    p = command("report", help="write a static HTML report of an output folder")
    p.add_argument("output_dir", metavar="OUT", help="a finished output folder")
    p.add_argument("--html", default="report.html",
                   help="where to write it (default: report.html; missing folders are created)")
    p.add_argument("--max-examples", type=_POSITIVE, default=None, metavar="N",
                   help="read at most this many examples per split for the histograms "
                   "(default: all)")
    p.add_argument("--gallery", type=_NON_NEGATIVE, default=24, metavar="N",
                   help="draw N examples per split from the records (boxes, masks, keypoints, "
                   "captions) and up to N rejected images; 0 turns the gallery off (default: 24)")
    p.add_argument("--near-duplicates", action="store_true",
                   help="also find near duplicates among the records (a small decode per "
                   "image); exact duplicates are always shown (default: off)")
    p.set_defaults(handler=cmd_report)

    p = command("check", help="check that a finished output folder fits a trainer or loader",
                description="Check a finished output folder against the rules of a consumer: "
                + "; ".join(f"{name}: {what}" for name, what in CONSUMER_CHOICES.items())
                + ". Exit 1 when a rule fails.")
    p.add_argument("output_dir", metavar="OUT", help="a finished output folder")
    p.add_argument("--for", dest="consumer", default=None, choices=list(CONSUMER_CHOICES),
                   metavar="CONSUMER", help="whose rules: " + ", ".join(CONSUMER_CHOICES)
                   + " (default: none; then --duplicates is required)")
    p.add_argument("--duplicates", action="store_true",
                   help="also fail when an image is written twice, in one split "
                   "(duplicates) or in two (split-overlap), by the bytes of the records "
                   "(default: off)")
    p.add_argument("--near-duplicates", action="store_true",
                   help="with --duplicates: also fail on near duplicates (re-encoded, resized, "
                   "slightly cropped copies; a small decode per image) (default: off)")
    p.add_argument("--max-records", type=_POSITIVE, default=None, metavar="N",
                   help="read at most N records in all (default: every record)")
    p.add_argument("--max-problems", type=_POSITIVE, default=5, metavar="N",
                   help="violations listed per rule, the rest counted (default: 5)")
    p.add_argument("--write-label-map", nargs="?", const="label_map.pbtxt", default=None,
                   metavar="FILE", help="with --for od-api: also write the manifest's label map "
                   "as the Object Detection API's label_map.pbtxt (default FILE: label_map.pbtxt "
                   "in the current folder)")
    p.set_defaults(handler=cmd_check)

    p = command("worker-requirements",
                help="print the requirements file for workers that install recordbeam's wheel "
                "without a package index (--requirements_file, beside --extra_package)",
                description="Print what recordbeam needs beyond apache-beam and its "
                "dependencies (which Beam's SDK container holds), pinned to this environment's "
                "versions: a requirements file for Dataflow or portable-runner workers that "
                "install recordbeam from its wheel (--extra_package) and reach no package index.")
    p.set_defaults(handler=cmd_worker_requirements)

    p = command("reshard", help="rewrite TFRecord files into a new shard count or compression",
                epilog=_TO_BEAM)
    p.add_argument("inputs", metavar="IN_GLOB",
                   help="input files (quote the glob), or an output folder (the shards its "
                   "manifest lists)")
    p.add_argument("output", metavar="OUT", type=_folder,
                   help="new output folder (any Beam filesystem)")
    p.add_argument("--split", default=None,
                   help="put every input in this split (default: each input keeps the split "
                   "its shard name gives, else train; refused when the inputs hold several)")
    _add_shard_args(p, "the new shards", "without --shards, in bytes or with a unit")
    _add_quiet(p)
    p.set_defaults(pipeline_handler=cmd_reshard)

    convert = command("convert", help="convert a dataset to sharded TFRecords",
                      description="Convert a dataset to sharded TFRecords. " + _TO_BEAM)
    kinds = convert.add_subparsers(dest="kind", required=True)

    def kind_parser(name: str, help: str) -> argparse.ArgumentParser:
        return kinds.add_parser(name, help=help, allow_abbrev=False, epilog=_TO_BEAM)

    def detection_format(name: str, help: str, handler: Callable[..., int], *, input_help: str,
                         rejected: tuple[str, str], images_help: str | None = None,
                         classes_help: str | None = None, masks_from: str | None = None,
                         also_outside: str = "") -> None:
        """``convert <name>`` for a folder of annotated images: --input, then the options
        the format has (help texts given), the annotation reject limit and the rest."""
        p = kind_parser(name, help)
        p.add_argument("--input", required=True, metavar="ROOT", help=input_help)
        if images_help:
            p.add_argument("--images", default=None, metavar="DIR", help=images_help)
        if classes_help:
            p.add_argument("--classes", default=None, metavar="FILE", help=classes_help)
        if masks_from:
            _add_include_masks(p, masks_from)
        _add_allow_outside_root(p, "ROOT and --images" if images_help else "ROOT", also_outside)
        _add_annotation_reject_fraction(p, *rejected)
        _add_conversion_args(p, handler)

    p = kind_parser("coco", "COCO instances (keypoints, LVIS, captions) JSON + image folder")
    p.add_argument("--images", required=True, metavar="DIR",
                   help="folder of images named by file_name")
    p.add_argument("--annotations", default=None, metavar="FILE",
                   help="COCO instances JSON file (person keypoints and LVIS files too) "
                   "(default: none; then --captions is required)")
    p.add_argument("--contiguous-labels", action="store_true",
                   help="write labels 1..K in category-id order (default: COCO's category ids)")
    p.add_argument("--allow-outside-root", action="store_true",
                   help="also read files outside --images: file_names with '..' or absolute "
                   "paths, and symbolic links leading out (default: refused)")
    _add_include_masks(p, "the segmentations")
    p.add_argument("--include-keypoints", action="store_true",
                   help="write image/object/keypoint/{x,y,visibility,num,text} from a person "
                   "keypoints file (default: off; the summary counts keypoints not written)")
    p.add_argument("--captions", default=None, metavar="FILE",
                   help="COCO captions JSON (captions_*.json): write image/caption, joined by "
                   "image id; alone (no --annotations) its own images are converted (default: none)")
    _add_annotation_reject_fraction(
        p, "annotations", "unknown image or category, invalid box or mask, duplicate id")
    _add_conversion_args(p, cmd_convert_coco)

    p = kind_parser("imagefolder", "ImageNet-style class folders: ROOT/<class>/<image>")
    p.add_argument("--root", required=True, metavar="DIR",
                   help="folder of class folders (or of train/ and val/ split folders)")
    p.add_argument("--classes", default=None, metavar="FILE",
                   help="file with one class name per line, in label order "
                   "(default: folder names sorted)")
    p.add_argument("--label-offset", type=_whole_number(
                       0, f"between 0 and {MAX_LABEL} (labels are 64-bit integers)", MAX_LABEL),
                   default=0, metavar="N",
                   help="label of the first class; 1 keeps 0 for background, as slim does "
                   "(default: 0)")
    p.add_argument("--val-fraction", type=_fraction(zero_allowed=False, one_allowed=False),
                   default=None, metavar="F",
                   help="write this share (0 to 1) of a flat layout's images to val, by a hash "
                   "of their path (default: no val split)")
    _add_allow_outside_root(p, "--root")
    _add_conversion_args(p, cmd_convert_imagefolder)

    p = kind_parser("manifest", "CSV or JSON Lines manifest: one row per example")
    p.add_argument("--manifest", required=True, metavar="FILE",
                   help="FILE.csv or FILE.jsonl; --split also takes fractions by hash of the "
                   "image path, e.g. --split train=0.8,val=0.1,test=0.1")
    p.add_argument("--schema", default=None, metavar="FILE",
                   help='JSON {"column": "int64|float|bytes|image|int64_list|float_list|bytes_list"} '
                   "(default: inferred from the first --schema-sample-rows rows)")
    p.add_argument("--schema-sample-rows", type=int, default=10_000, metavar="N",
                   help="rows the launcher reads to infer the types and the split names; later "
                   "rows that disagree are rejected (default: 10000; 0: every row)")
    p.add_argument("--splits", default=None, metavar="NAMES",
                   help="comma-separated values the --split-column may hold (default: those "
                   "in the first --schema-sample-rows rows)")
    p.add_argument("--csv-multiline", action="store_true",
                   help="quoted CSV fields hold line breaks: one worker reads the manifest "
                   "(default: cut into byte ranges read in parallel, unless the first rows "
                   "show such fields)")
    p.add_argument("--image-columns", default=None, metavar="COLUMNS",
                   help="comma-separated columns holding image paths (default: from the schema)")
    p.add_argument("--split-column", default=None, metavar="COLUMN",
                   help="column holding each row's split name (default: none, --split names it)")
    p.add_argument("--allow-outside-root", action="store_true",
                   help="also read image paths with '..' or absolute local paths "
                   "(default: refused)")
    p.add_argument("--group-by", default=None, metavar="COLUMN",
                   help="write one SequenceExample per value of this column, rows become "
                   "steps (default: one Example per row)")
    _add_fix_args(p)
    _add_output_args(p)
    _add_run_args(p)
    p.set_defaults(pipeline_handler=cmd_convert_manifest)

    detection_format(
        "voc", "Pascal VOC folder: Annotations/*.xml, JPEGImages/, ImageSets/Main/",
        cmd_convert_voc,
        input_help="the VOC folder as exported: Annotations/, JPEGImages/, optional "
        "ImageSets/Main/<split>.txt and labelmap.txt; or a flat export, each <id>.xml beside "
        "its image (in train/, valid/, test/ folders as Roboflow writes them)",
        images_help="folder of the images (default: ROOT/JPEGImages)",
        rejected=("objects", "unknown class, invalid or degenerate box"))

    detection_format(
        "kitti", "KITTI detection folder: <split>/image_2/, <split>/label_2/", cmd_convert_kitti,
        input_help="the KITTI folder: each <split>/ holding image_2/ and label_2/ "
        "(training/, testing/ ...) is a split named as its folder; or image_2/ "
        "and label_2/ themselves, one split named by --split",
        images_help="folder holding <split>/image_2/ (default: ROOT)",
        rejected=("objects", "malformed line, degenerate box"))

    detection_format(
        "cvat", "CVAT for images or video 1.1 XML: annotations.xml (or <subset>.xml), images/",
        cmd_convert_cvat,
        input_help="the CVAT export folder: annotations.xml or <subset>.xml files, and "
        "images/ (or images/<subset>/)",
        images_help="folder of the images (default: ROOT/images)",
        masks_from="its polygon or CVAT mask, or its box when it has neither",
        rejected=("objects", "unknown label, invalid box, malformed points or rle"))

    detection_format(
        "labelme", "folder of labelme JSONs, one per image", cmd_convert_labelme,
        input_help="the folder of labelme JSONs (any depth); each JSON's imagePath, "
        "relative to it, names its image",
        images_help="folder of the images, laid out as the JSONs below ROOT (default: "
        "where each imagePath points)",
        classes_help="file with one class name per line, in label order, labels 1..K; "
        "labelme's __ignore__ and _background_ lines are skipped (default: the "
        "labels found, sorted)",
        masks_from="its polygons and circles (a rectangle's mask is its box)",
        rejected=("objects", "unknown class, invalid or degenerate shape"))

    detection_format(
        "openimages", "Open Images CSVs: *-annotations-bbox.csv, class-descriptions*.csv, "
        "images/<split>/", cmd_convert_openimages,
        input_help="the Open Images folder: <split>-annotations-bbox.csv, "
        "class-descriptions*.csv and optional <split>-annotations-human-imagelabels"
        "*.csv (in ROOT or ROOT/annotations), images/<split>/<ImageID>.jpg",
        images_help="folder holding the <split>/ folders of images (default: ROOT/images)",
        rejected=("boxes", "unknown LabelName, malformed row, degenerate box"))

    detection_format(
        "box-csv", "box CSV per split (Roboflow's TensorFlow Object Detection CSV): "
        "<split>/_annotations.csv beside the images", cmd_convert_box_csv,
        input_help="the exported folder: <split>/_annotations.csv (filename,width,height,"
        "class,xmin,ymin,xmax,ymax; one row per box) beside the images",
        images_help="folder holding the <split>/ folders of images (default: ROOT)",
        rejected=("boxes", "malformed row, degenerate box"))

    detection_format(
        "yolo", "YOLO folder: darknet (obj.data, obj.names) or Ultralytics "
        "(data.yaml, images/, labels/)", cmd_convert_yolo,
        input_help="the YOLO folder as exported: obj.data + obj.names + lists of images "
        "(darknet), or data.yaml + images/<split>/ + labels/<split>/ (Ultralytics); without "
        "either, images/ + labels/ (or labels beside images) and a classes.txt",
        classes_help="class names, one per line, class 0 first, for a folder without "
        "obj.data or data.yaml (default: its classes.txt, obj.names or _darknet.labels)",
        masks_from="the segment lines (the box for box lines)",
        rejected=("objects", "unknown class id, malformed line, empty box"),
        also_outside=", and the folders or lists data.yaml names outside ROOT")

    p = command("demo", help="convert a small generated COCO sample end to end", epilog=_TO_BEAM)
    p.add_argument("--num-images", type=_POSITIVE, default=24, metavar="N",
                   help="good images in the sample; a few broken ones are added "
                   "(default: 24)")
    _add_output_args(p)
    p.set_defaults(pipeline_handler=cmd_demo, contiguous_labels=False, max_reject_fraction=0.5)
    _remember_parsers(parser)
    return parser


def _remember_parsers(parser: argparse.ArgumentParser) -> None:
    """Let each command know its own parser: an unknown option is reported with the
    command's name and the closest of its options."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in dict.fromkeys(action.choices.values()):
                child.set_defaults(command_parser=child)
                _remember_parsers(child)


def own_flags(parser: argparse.ArgumentParser) -> list[str]:
    return [flag for action in parser._actions for flag in action.option_strings]


#: Options a user brings from another converter, and what this one takes instead: said in
#: place of a typo suggestion (``--images`` is no typo of ``--max-image-bytes``).
_NOT_HERE: dict[str, dict[str, str]] = {
    "convert yolo": {
        "--images": "YOLO finds each image's labels from the image's path, so the images "
                    "are where obj.data or data.yaml say; give their folder as --input",
    },
    "convert voc": dict.fromkeys(
        ("--label-map", "--labels", "--classes"),
        "VOC's classes are the lines of labelmap.txt in --input, else the names in the XMLs"),
    "convert coco": dict.fromkeys(
        ("--input", "--root"), "convert coco takes --images FOLDER and --annotations FILE"),
    "convert imagefolder": dict.fromkeys(
        ("--input", "--images"), "convert imagefolder takes the class folders' parent as --root"),
    "convert manifest": {
        "--input": "convert manifest takes the CSV or JSONL file as --manifest",
        "--images": "the manifest's rows name the images, relative to the manifest's folder",
    },
}


def options_not_here(parser: argparse.ArgumentParser) -> dict[str, str]:
    """What the command of ``parser`` takes instead of options other commands have."""
    return _NOT_HERE.get(parser.prog.removeprefix(f"{parser.prog.split()[0]} "), {})

