"""The command's arguments: the parser of every command, and the argparse types that
refuse bad values with a usage error naming the option. Imports no Beam: the standby
workers start right after parsing (see :mod:`recordbeam.local.standby`)."""

from __future__ import annotations

import argparse
import difflib
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
    cmd_convert,
    cmd_demo,
    cmd_reshard,
)
from recordbeam.cli.worker_requirements import cmd_worker_requirements
from recordbeam.dataset.consumers import CONSUMERS as CONSUMER_CHOICES
from recordbeam.options import (
    QUIET,
    Choice,
    Flag,
    Option,
    ValueRefused,
    conversion_options,
    output_options,
    shard_options,
)
from recordbeam.sources.format import formats


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


def _folder(text: str) -> str:
    """An argparse type: a folder's path, never empty (``--output ""`` would be the
    filesystem's root, or the working folder, depending on who reads it)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("is empty; give the path of a folder")
    return text


_POSITIVE = _whole_number(1, "1 or more")
_NON_NEGATIVE = _whole_number(0, "0 or more")


class _GivenSplit(argparse.Action):
    """``--split NAME`` that remembers it was typed (``split_given``): an input that names
    its own splits refuses a --split given, even ``--split train``, but not the default."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        setattr(namespace, self.dest, values)
        namespace.split_given = True


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
    # argparse names an option with other names by all of them: --input/--root.
    missing = [flag for word in message.split(":", 1)[1].split()
               for flag in word.rstrip(",").split("/") if flag.startswith("--")]
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
    for option in (*shard_options("the new shards", "without --shards, in bytes or with a unit"),
                   QUIET):
        _add_option(p, option)
    p.set_defaults(pipeline_handler=cmd_reshard)

    convert = command("convert", help="convert a dataset to sharded TFRecords",
                      description="Convert a dataset to sharded TFRecords. " + _TO_BEAM)
    kinds = convert.add_subparsers(dest="kind", required=True)

    def kind_parser(name: str, help: str) -> argparse.ArgumentParser:
        return kinds.add_parser(name, help=help, allow_abbrev=False, epilog=_TO_BEAM)


    for fmt in formats().values():
        p = kind_parser(fmt.name, fmt.summary)
        for option in (*fmt.options, *conversion_options()):
            _add_option(p, option)
        p.set_defaults(pipeline_handler=cmd_convert, split_given=False)

    p = command("demo", help="convert a small sample end to end: a generated COCO one, or "
                "any format's", epilog=_TO_BEAM)
    p.add_argument("--format", choices=tuple(formats()), default="coco",
                   help="the format of the sample: coco (the default) generates images, some "
                   "deliberately broken; another format lays out the two pictures it declares, "
                   "as its tools export them")
    p.add_argument("--num-images", type=_POSITIVE, metavar="N",
                   help="good images in the COCO sample; a few broken ones are added "
                   "(default: 24)")
    for option in output_options():
        _add_option(p, option)
    p.set_defaults(pipeline_handler=cmd_demo, max_reject_fraction=0.5, split_given=False)
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
    "convert voc": dict.fromkeys(
        ("--label-map", "--labels", "--classes"),
        "VOC's classes are the lines of labelmap.txt in --input, else the names in the XMLs"),
}


def options_not_here(parser: argparse.ArgumentParser) -> dict[str, str]:
    """What the command of ``parser`` takes instead of options other commands have."""
    command = parser.prog.removeprefix(f"{parser.prog.split()[0]} ")
    declared = formats().get(command.removeprefix("convert "))
    if command.startswith("convert ") and declared is not None:
        return dict(declared.instead)
    return _NOT_HERE.get(command, {})


class _OneSpelling(argparse.Action):
    """A value option with two names (``--input`` and ``--root``): given under both, one
    value would be dropped without a word, so the command refuses it."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        spelled = vars(namespace).setdefault("_spelled", {})
        first = spelled.setdefault(self.dest, option_string)
        if first != option_string:
            parser.error(f"{first} and {option_string} name the same option; give it once")
        setattr(namespace, self.dest, values)


def _add_option(parser: argparse.ArgumentParser, option: Option) -> None:
    """``option`` as the command takes it: a switch for a flag, else a value its kind
    reads (argparse's choices for a choice, so ``--help`` lists them)."""
    if isinstance(option.kind, Flag):
        parser.add_argument(*option.flags, dest=option.name, action="store_true",
                            help=option.help)
        return
    extra: dict[str, Any] = {}
    if option.name == "split":
        extra["action"] = _GivenSplit
    elif len(option.flags) > 1:
        extra["action"] = _OneSpelling
    if isinstance(option.kind, Choice):
        extra["choices"] = option.kind.values
    else:
        extra["type"] = _argparse_type(option)
    parser.add_argument(*option.flags, dest=option.name, default=option.default,
                        required=option.required, metavar=option.metavar or option.kind.metavar,
                        help=option.help, **extra)


def _argparse_type(option: Option) -> Callable[[str], Any]:
    """The kind's reading of text, its refusals said as argparse says a bad value."""

    def parse(text: str) -> Any:
        try:
            return option.parse(text)
        except ValueRefused as refused:
            raise argparse.ArgumentTypeError(str(refused)) from None

    parse.__name__ = option.name  # argparse names the type in some messages
    parse.pattern = option.kind.pattern  # type: ignore[attr-defined]
    return parse

