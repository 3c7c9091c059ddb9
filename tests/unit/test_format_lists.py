"""Every list of the input formats names each declared format and no other, so a new format
cannot miss one. Lists are kept where readers need the names (the README's and the docs
home page's, the formats page's table, the nav); other pages link to the formats page or
say ``recordbeam convert --help``. Sentences that name some formats as examples, or those
with a feature (masks, split lists), are not lists of them all and are not checked."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from recordbeam.sources.format import formats

REPO = Path(__file__).resolve().parents[2]

#: Each list: its file, the list in it (group 1), a format's name in the list (group 1).
LISTS = [
    ("README.md", r"- \*\*Convert\*\*(.*?)\n- ",
     r"\[`convert\s+([\w-]+)`\]\(docs/formats/\1\.md\)"),
    ("docs/index.md", r"- \*\*Convert\*\*(.*?) into ", r"\(formats/([\w-]+)\.md\)"),
    ("docs/formats/index.md", r"\| command \|(.*?)\n\n", r"^\| `convert ([\w-]+)` \|"),
    ("mkdocs.yml", r"- Input formats:\n(.*?)\n  - ", r": formats/([\w-]+)\.md$"),
]


@pytest.mark.parametrize(("path", "in_file", "name"), LISTS, ids=[path for path, *_ in LISTS])
def test_a_list_of_the_formats_names_every_declared_format_and_no_other(path, in_file, name):
    text = (REPO / path).read_text(encoding="utf-8")
    found = re.search(in_file, text, re.S)
    assert found, f"{path} has no list of the formats matching {in_file!r}"
    listed = set(re.findall(name, found.group(1), re.M))
    where = f"{path}:{text.count(chr(10), 0, found.start(1)) + 1}"
    assert listed >= set(formats()), f"{where} does not list {sorted(set(formats()) - listed)}"
    assert listed <= set(formats()), f"{where} lists {sorted(listed - set(formats()))}, not formats"
