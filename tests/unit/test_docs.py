"""The docs stay tied to the code: every input format has its page with its options table,
the options tables come from the parser, and the Markdown files outside the MkDocs site
(README, ARCHITECTURE, the benchmarks' pages) link only to files that exist. ``make docs``
builds the site with ``--strict``, which checks the links inside it."""

from __future__ import annotations

import argparse
import importlib.util
import re
import sys
from pathlib import Path

import pytest

from recordbeam.cli.parser import build_parser

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"


def _hooks():
    spec = importlib.util.spec_from_file_location("docs_hooks", DOCS / "hooks.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def test_every_input_format_has_a_page_with_its_options_table():
    # The nav and the other lists of the formats: test_format_lists.py.
    for name in _subcommands(_subcommands(build_parser())["convert"]):
        page = f"formats/{name}.md"
        text = (DOCS / page).read_text(encoding="utf-8")
        assert f"<!-- options: convert {name} -->" in text.splitlines(), page


def test_an_options_table_lists_every_option_of_its_command():
    parser = _subcommands(_subcommands(build_parser())["convert"])["voc"]
    table = _hooks().options_table(["convert", "voc"])
    for action in parser._actions:
        for flag in action.option_strings:
            if flag not in ("-h", "--help"):
                assert f"`{flag}`" in table, flag
    assert "`--input` `ROOT`" in table and "**Required.**" in table


def test_an_options_table_lists_positional_arguments():
    table = _hooks().options_table(["reshard"])
    assert "| `IN_GLOB` |" in table and "| `OUT` |" in table


def test_a_page_asking_for_a_command_that_does_not_exist_fails():
    with pytest.raises(ValueError, match="no command 'vocc'"):
        _hooks().options_table(["convert", "vocc"])


def test_the_marker_becomes_the_table_only_on_a_line_of_its_own():
    hooks = _hooks()
    page = "intro\n<!-- options: demo -->\ntext `<!-- options: demo -->` stays\n"
    out = hooks.on_page_markdown(page, None, None, None)
    assert "| argument or option | what it does |" in out
    assert "text `<!-- options: demo -->` stays" in out


def test_included_files_link_to_site_pages():
    hooks = _hooks()
    text = ("[a](docs/sizing.md#cpu) [b](benchmarks/RESULTS.md) [c](https://example.org/x.md) "
            "[d](src/recordbeam/pipeline.py)")
    assert hooks._site_links(text, "ARCHITECTURE.md", "architecture.md") == (
        "[a](sizing.md#cpu) [b](benchmarks/results.md) [c](https://example.org/x.md) "
        "[d](src/recordbeam/pipeline.py)")
    assert hooks._site_links("[r](RESULTS.md#scalepy) [s](../docs/sizing.md)",
                             "benchmarks/README.md", "benchmarks/index.md") == (
        "[r](results.md#scalepy) [s](../sizing.md)")


_LINK = re.compile(r"\]\(([^)\s#]+)(?:#[^)\s]*)?\)")


@pytest.mark.parametrize("document", ["README.md", "ARCHITECTURE.md", "benchmarks/README.md",
                                      "benchmarks/RESULTS.md"])
def test_markdown_outside_the_site_links_to_files_that_exist(document):
    path = REPO / document
    for target in _LINK.findall(path.read_text(encoding="utf-8")):
        if "://" in target or target.startswith("mailto:"):
            continue
        assert (path.parent / target).exists(), f"{document} links to {target}, which is missing"
