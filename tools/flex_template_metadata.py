"""The Dataflow Flex Templates' parameter files, made from the ``recordbeam convert`` parser.

One template per format: ``deploy/flex-template/metadata/<format>.json`` lists exactly the
options of ``recordbeam convert <format>`` (``pipelines/<format>_to_tfrecord.py``), each
with its label, its help text, whether it is optional, and a regular expression of the
values it takes where one helps (numbers, sizes, choices, true/false, object-store
paths). Names are written as Beam writes its options (``max_reject_fraction``); the
command reads both spellings, and switches as ``=true`` / ``=false``, which is how the
Flex Template launcher passes parameters.

    python tools/flex_template_metadata.py            # rewrite the files
    python tools/flex_template_metadata.py --check    # exit 1 if a file differs

``tests/unit/test_flex_template_metadata.py`` fails when the files drift from the parser.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
METADATA = ROOT / "deploy" / "flex-template" / "metadata"
PIPELINES = ROOT / "pipelines"

#: Options that name files or folders: on Dataflow they must be on an object store.
PATH_METAVARS = {"DIR", "FILE", "ROOT", "OUT"}
OBJECT_STORE_PATH = r"^[a-z][a-z0-9+.-]*://[^\n\r]+$"
TRUE_OR_FALSE = r"^(true|false)$"
WHOLE_NUMBER = r"^-?[0-9]+$"


def convert_parsers() -> dict[str, tuple[str, argparse.ArgumentParser]]:
    """``recordbeam convert``'s formats in CLI order: each one's help line and parser."""
    from recordbeam.cli.parser import build_parser

    convert = _subcommands(build_parser())
    kinds = _subcommands(convert.choices["convert"])
    return {item.dest: (item.help, kinds.choices[item.dest]) for item in kinds._choices_actions}


def _subcommands(parser: argparse.ArgumentParser) -> argparse._SubParsersAction:
    (action,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return action


def script_name(kind: str) -> str:
    """The pipeline script (and metadata file) stem of a format: ``box-csv`` -> ``box_csv``."""
    return kind.replace("-", "_")


def parameter_name(flag: str) -> str:
    return flag.removeprefix("--").replace("-", "_")


def is_switch(action: argparse.Action) -> bool:
    return action.nargs == 0 and isinstance(action.const, bool)


def template_actions(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    """The options a template offers: every option of the command but --help."""
    return [a for a in parser._actions
            if a.option_strings and not isinstance(a, argparse._HelpAction)]


def _regexes(action: argparse.Action) -> list[str]:
    if is_switch(action):
        return [TRUE_OR_FALSE]
    if action.choices:
        return ["^(" + "|".join(str(c) for c in action.choices) + ")$"]
    if action.metavar in PATH_METAVARS:
        return [OBJECT_STORE_PATH]
    if action.type is int:
        return [WHOLE_NUMBER]
    pattern = getattr(action.type, "pattern", None)
    return [pattern] if pattern else []


def _label(action: argparse.Action) -> str:
    words = parameter_name(action.option_strings[-1]).split("_")
    return " ".join([words[0].capitalize(), *words[1:]])


def parameter(action: argparse.Action, flags: set[str]) -> dict[str, Any]:
    """One entry of the template's ``parameters``, from one option of the command (whose
    ``flags`` its help may name: they are named as the template's parameters are)."""
    text = re.sub(r"--[a-z][a-z0-9-]*",
                  lambda m: parameter_name(m.group()) if m.group() in flags else m.group(),
                  " ".join((action.help or "").split()))
    if is_switch(action):
        text += "; true or false"
    entry: dict[str, Any] = {
        "name": parameter_name(action.option_strings[-1]),
        "label": _label(action),
        "helpText": text,
        "isOptional": not action.required,
    }
    regexes = _regexes(action)
    if regexes:
        entry["regexes"] = regexes
    return entry


def metadata(kind: str, summary: str, parser: argparse.ArgumentParser) -> dict[str, Any]:
    script = f"pipelines/{script_name(kind)}_to_tfrecord.py"
    actions = template_actions(parser)
    flags = {flag for action in actions for flag in action.option_strings}
    return {
        "name": f"recordbeam convert {kind}",
        "description": (
            f"{summary} to sharded TFRecords of tf.train.Example, "
            f"written by {script} (recordbeam convert {kind}); the output folder's "
            "manifest.json appears last, when the job has committed. Beam's options "
            "(sdk_container_image, max_num_workers...) are set at launch."),
        "parameters": [parameter(a, flags) for a in actions],
    }


def rendered() -> dict[Path, str]:
    """Every metadata file's path and the text it should hold."""
    return {METADATA / f"{script_name(kind)}.json":
            json.dumps(metadata(kind, *described), indent=2, ensure_ascii=False) + "\n"
            for kind, described in convert_parsers().items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 if a file differs from what the parser gives")
    args = parser.parse_args(argv)
    wanted = rendered()
    stale = sorted(set(METADATA.glob("*.json")) - set(wanted))
    drifted = [path for path, text in wanted.items()
               if not path.exists() or path.read_text(encoding="utf-8") != text]
    if args.check:
        for path in [*drifted, *stale]:
            print(f"{path.relative_to(ROOT)} differs from the parser: run "
                  "python tools/flex_template_metadata.py", file=sys.stderr)
        return 1 if drifted or stale else 0
    METADATA.mkdir(parents=True, exist_ok=True)
    for path in stale:
        path.unlink()
    for path in drifted:
        path.write_text(wanted[path], encoding="utf-8")
        print(f"wrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
