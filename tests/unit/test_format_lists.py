"""Every hand-written list of the input formats names each declared format and no other, so
a new format cannot miss one. Sentences that name some formats as examples, or those with
a feature (masks, split lists), are not lists of them all and are not checked."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from recordbeam.sources.format import formats

REPO = Path(__file__).resolve().parents[2]

#: Each list: its file, the list in it (group 1), a format's name in the list (group 1;
#: ``box_csv`` where a package or script is meant is the format ``box-csv``).
LISTS = [
    ("README.md", r"- \*\*Convert\*\*(.*?)\n- ", r"`convert\s+([\w-]+)`"),
    ("README.md", r"its options: (.*?)\n\n", r"\(docs/formats/([\w-]+)\.md\)"),
    ("docs/index.md", r"- \*\*Convert\*\*(.*?) into ", r"\(formats/([\w-]+)\.md\)"),
    ("docs/cli.md", r"## convert\n(.*?)\n## ", r"\(formats/([\w-]+)\.md#options\)"),
    ("docs/checks.md", r"lists its own reasons too (.*?)\n\n", r"\(formats/([\w-]+)\.md#rejects\)"),
    ("docs/formats/index.md", r"\| command \|(.*?)\n\n", r"^\| `convert ([\w-]+)` \|"),
    ("mkdocs.yml", r"- Input formats:\n(.*?)\n  - ", r": formats/([\w-]+)\.md$"),
    ("ARCHITECTURE.md", r"one package per input format \((.*?)\)", r"`(\w+)`"),
    ("src/recordbeam/sources/__init__.py", r":mod:`\.format`\):(.*?); ``reshard``", r"``(\w+)``"),
    ("src/recordbeam/cli/pipeline_commands.py", r"``convert (.*?)``", r"([\w-]+)"),
    ("deploy/README.md", r"One launcher per format \((.*?)\)", r"(\w+)"),
    ("deploy/flex-template/Dockerfile", r"one image per format \(FORMAT:(.*?);", r"(\w+)"),
]


@pytest.mark.parametrize(("path", "in_file", "name"), LISTS, ids=[path for path, *_ in LISTS])
def test_a_list_of_the_formats_names_every_declared_format_and_no_other(path, in_file, name):
    text = (REPO / path).read_text(encoding="utf-8")
    found = re.search(in_file, text, re.S)
    assert found, f"{path} has no list of the formats matching {in_file!r}"
    listed = {word.replace("_", "-") for word in re.findall(name, found.group(1), re.M)}
    where = f"{path}:{text.count(chr(10), 0, found.start(1)) + 1}"
    assert listed >= set(formats()), f"{where} does not list {sorted(set(formats()) - listed)}"
    assert listed <= set(formats()), f"{where} lists {sorted(listed - set(formats()))}, not formats"
