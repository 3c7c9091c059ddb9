"""MkDocs hook: pages made from the code and from files outside ``docs/``, so the site
cannot drift from them.

A page asks for a table with a comment on a line of its own:

``<!-- options: convert voc -->``: the arguments and options of a command, from the
command's parser (names, value, what it does and its default, as ``--help`` says them).
An unknown command fails the build.

``<!-- formats: public -->``: an API entry for each name the formats declare public
(:attr:`recordbeam.sources.format.Format.public`).

``<!-- formats: table -->``: a row per format: its command, its summary (what it reads, as
``--help`` says it) and its page.

The nav names each format's page itself: after ``formats/index.md``, in the section that
holds it, ``formats/<name>.md`` of every declared format, in name order (as ``recordbeam
convert --help`` lists them), under its page's title (the page's first line, ``# Title``).
A format without its page fails the build.

Some Markdown files live beside what they describe (``ARCHITECTURE.md`` at the top,
``benchmarks/README.md`` beside the benchmarks): :data:`INCLUDED` puts them into the site
as pages, their links to each other and to ``docs/`` rewritten to the site's paths, so
``mkdocs build --strict`` checks their links too.
"""

from __future__ import annotations

import argparse
import posixpath
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# The docs describe this checkout's parser, whatever recordbeam the environment installed.
sys.path.insert(0, str(ROOT / "src"))

#: Repository file -> its page in the site.
INCLUDED = {
    "ARCHITECTURE.md": "architecture.md",
    "benchmarks/README.md": "benchmarks/index.md",
    "benchmarks/RESULTS.md": "benchmarks/results.md",
}

_OPTIONS = re.compile(r"^<!-- options: ([a-z -]+?) -->$", re.MULTILINE)
_PUBLIC = re.compile(r"^<!-- formats: public -->$", re.MULTILINE)
_TABLE = re.compile(r"^<!-- formats: table -->$", re.MULTILINE)
#: The page after which the nav names each format's page, in the section holding it.
FORMATS_INDEX = "formats/index.md"
_LINK = re.compile(r"(\]\()([^)\s#]+)(#[^)\s]*)?(\))")


def on_config(config):
    config["nav"] = with_format_pages(config["nav"])
    return config


def on_files(files, config):
    from mkdocs.structure.files import File  # here, so the tests import this file without MkDocs

    for source, page in INCLUDED.items():
        text = (ROOT / source).read_text(encoding="utf-8")
        files.append(File.generated(config, page, content=_site_links(text, source, page)))
    return files


def on_page_markdown(markdown: str, page, config, files) -> str:  # noqa: ARG001 - MkDocs' signature
    markdown = _PUBLIC.sub(lambda _found: formats_public_api(), markdown)
    markdown = _TABLE.sub(lambda _found: formats_table(), markdown)
    return _OPTIONS.sub(lambda found: options_table(found.group(1).split()), markdown)


def formats_public_api() -> str:
    """An API entry for every name each format declares public (its read transform,
    options and encoder), format by format."""
    from recordbeam.sources.format import formats

    return "\n\n".join(f"::: {path}" for declared in formats().values()
                        for path in declared.public)


def format_pages() -> dict[str, str]:
    """Each format's name and its page's title, in name order; its page is
    ``formats/<name>.md``."""
    from recordbeam.sources.format import formats

    return {name: _title(f"formats/{name}.md") for name in formats()}


def _title(page: str) -> str:
    path = ROOT / "docs" / page
    if not path.is_file():
        raise ValueError(f"docs/{page} is missing: every format has its page there")
    first = path.read_text(encoding="utf-8").partition("\n")[0]
    if not first.startswith("# "):
        raise ValueError(f"docs/{page} does not start with its title ('# Title')")
    return first.removeprefix("# ").strip()


def with_format_pages(nav: list) -> list:
    """``nav`` (mkdocs.yml's) with every format's page after :data:`FORMATS_INDEX`, in the
    section that holds it. A format's page named in the nav by hand is an error."""
    pages = {f"formats/{name}.md": title for name, title in format_pages().items()}
    found = []

    def page_of(entry) -> str | None:
        target = next(iter(entry.values())) if isinstance(entry, dict) else entry
        return target if isinstance(target, str) else None

    def expanded(entries: list) -> list:
        out = []
        for entry in entries:
            if page_of(entry) in pages:
                raise ValueError(f"mkdocs.yml's nav names {page_of(entry)}: docs/hooks.py "
                                 "adds every format's page")
            if isinstance(entry, dict) and isinstance(next(iter(entry.values())), list):
                entry = {title: expanded(section) for title, section in entry.items()}
            out.append(entry)
            if page_of(entry) == FORMATS_INDEX:
                found.append(entry)
                out.extend({title: page} for page, title in pages.items())
        return out

    nav = expanded(nav)
    if not found:
        raise ValueError(f"mkdocs.yml's nav has no {FORMATS_INDEX}, after which docs/hooks.py "
                         "adds the formats' pages")
    return nav


def formats_table() -> str:
    """A row per format, for ``docs/formats/index.md``: ``convert <name>``, its summary,
    and its page."""
    from recordbeam.sources.format import formats

    rows = ["| command | reads | page |", "|---|---|---|"]
    for name, title in format_pages().items():
        rows.append(f"| `convert {name}` | {_text_cell(formats()[name].summary)} | "
                    f"[{title}]({name}.md) |")
    return "\n".join(rows)


def _site_links(text: str, source: str, page: str) -> str:
    """``text`` of repository file ``source``, its relative links made relative to ``page``:
    a link to another included file goes to that file's page, one into ``docs/`` to the
    page there. Other links are left as written (MkDocs reports them when broken)."""
    def rewrite(found: re.Match) -> str:
        target = found.group(2)
        if "://" in target or target.startswith(("/", "mailto:")):
            return found.group(0)
        in_repo = posixpath.normpath(posixpath.join(posixpath.dirname(source), target))
        if in_repo in INCLUDED:
            in_site = INCLUDED[in_repo]
        elif in_repo.startswith("docs/"):
            in_site = in_repo.removeprefix("docs/")
        else:
            return found.group(0)
        relative = posixpath.relpath(in_site, posixpath.dirname(page) or ".")
        return f"{found.group(1)}{relative}{found.group(3) or ''}{found.group(4)}"

    return _LINK.sub(rewrite, text)


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:  # argparse has no public way to list subcommands
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _command_parser(words: list[str]) -> argparse.ArgumentParser:
    from recordbeam.cli.parser import build_parser

    parser = build_parser()
    for word in words:
        commands = _subcommands(parser)
        if word not in commands:
            raise ValueError(f"docs ask for the options of 'recordbeam {' '.join(words)}', "
                             f"which has no command {word!r}")
        parser = commands[word]
    return parser


def options_table(words: list[str]) -> str:
    """The arguments and options of ``recordbeam <words>`` as a Markdown table."""
    rows = ["| argument or option | what it does |", "|---|---|"]
    for action in _command_parser(words)._actions:
        if action.help == argparse.SUPPRESS or isinstance(
                action, (argparse._HelpAction, argparse._SubParsersAction)):
            continue
        rows.append(f"| {_names(action)} | {_cell(action.help or '')}"
                    f"{' **Required.**' if action.required and action.option_strings else ''} |")
    return "\n".join(rows)


def _names(action: argparse.Action) -> str:
    if not action.option_strings:  # a positional argument
        return f"`{action.metavar or action.dest.upper()}`"
    names = ", ".join(f"`{flag}`" for flag in action.option_strings)
    if action.nargs == 0:
        return names
    value = action.metavar or ("{" + ",".join(map(str, action.choices)) + "}"
                               if action.choices else action.dest.upper())
    return f"{names} `{value}`"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("<", "&lt;").replace("\n", " ")


def _text_cell(text: str) -> str:
    """Plain ``text`` in a table cell: no character of it read as Markdown (the ``*`` and
    ``_`` of file patterns)."""
    return _cell(re.sub(r"([\\`*_\[\]])", r"\\\1", text))
