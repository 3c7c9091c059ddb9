"""The launchable scripts of ``pipelines/``, one per input format, made from the formats'
declarations (:mod:`recordbeam.sources.format`); and, by ``tools/flex_template_metadata.py``,
the Flex Templates' parameter files: every file made from the declarations, in one command.

    python tools/generate_pipelines.py            # write pipelines/<format>_to_tfrecord.py
                                                  # and deploy/flex-template/metadata/
    python tools/generate_pipelines.py --check    # exit 1 if a file differs from its declaration

Each script runs ``recordbeam convert <format>`` with its arguments: the same options, the
same checks, and every other option to Beam, so a Dataflow or Flink user launches it as
Beam's own example pipelines are launched.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from recordbeam.sources.format import Format, formats  # noqa: E402 - after the path above


def _on_bucket(example: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(word if word.startswith("-") else f"gs://B/{word}" for word in example)


def render(fmt: Format) -> str:
    """The script of ``fmt``."""
    script = fmt.script
    local = " ".join(fmt.example)
    remote = " ".join(_on_bucket(fmt.example))
    return f'''"""{fmt.summary} -> sharded TFRecords, on any Beam runner.

Made by tools/generate_pipelines.py from the declaration of ``recordbeam convert {fmt.name}``;
change that, not this file.

Local (FnApiRunner, one worker per core):
    python {script} {local} --output OUT

Dataflow (docs/deploy/dataflow.md; every option: docs/formats/{fmt.name}.md):
    python {script} {remote} --output gs://B/{fmt.name}-tfrecord \\\\
        --runner DataflowRunner --project P --region R --temp_location gs://B/tmp \\\\
        --setup_file ./setup.py

Our options are those of ``recordbeam convert {fmt.name}``; every other option goes to Beam,
and one that Beam does not define either is refused (exit 2), never ignored.
"""

import sys

from recordbeam.cli.main import console

if __name__ == "__main__":
    console(["convert", "{fmt.name}", *sys.argv[1:]])
'''


def stale() -> list[Path]:
    """The scripts that differ from what their declarations make now."""
    return [ROOT / fmt.script for fmt in formats().values()
            if not (ROOT / fmt.script).is_file()
            or (ROOT / fmt.script).read_text(encoding="utf-8") != render(fmt)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="only say whether the scripts are what the declarations make")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(Path(__file__).resolve().parent))  # this tool's folder, whatever ROOT is
    import flex_template_metadata

    if args.check:
        found = stale()
        for path in found:
            print(f"{path.relative_to(ROOT)} differs from its format's declaration: run "
                  "python tools/generate_pipelines.py")
        return max(1 if found else 0, flex_template_metadata.main(["--check"]))
    for fmt in formats().values():
        (ROOT / fmt.script).write_text(render(fmt), encoding="utf-8")
    print(f"wrote {len(formats())} scripts in pipelines/")
    return flex_template_metadata.main([])


if __name__ == "__main__":
    sys.exit(main())
