"""Every list of the input formats names each declared format and no other, so a new format
cannot miss one: the two written by hand (the README's and the docs home page's, which
readers meet first), and the two ``docs/hooks.py`` makes when the site is built (the nav's
entries under *Input formats* and the table of ``docs/formats/index.md``). Other pages link
to that table or say ``recordbeam convert --help``. Sentences that name some formats as
examples, or those with a feature (masks, split lists), are not lists of them all and are
not checked."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest
import yaml

from recordbeam.sources.format import formats

REPO = Path(__file__).resolve().parents[2]

#: Each list: its file, the list in it (group 1), a format's name in the list (group 1).
LISTS = [
    ("README.md", r"- \*\*Convert\*\*(.*?)\n- ",
     r"\[`convert\s+([\w-]+)`\]\(docs/formats/\1\.md\)"),
    ("docs/index.md", r"- \*\*Convert\*\*(.*?) into ", r"\(formats/([\w-]+)\.md\)"),
]


def _hooks():
    spec = importlib.util.spec_from_file_location("docs_hooks", REPO / "docs" / "hooks.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _nav() -> list:
    return yaml.safe_load((REPO / "mkdocs.yml").read_text(encoding="utf-8"))["nav"]


@pytest.mark.parametrize(("path", "in_file", "name"), LISTS, ids=[path for path, *_ in LISTS])
def test_a_list_of_the_formats_names_every_declared_format_and_no_other(path, in_file, name):
    text = (REPO / path).read_text(encoding="utf-8")
    found = re.search(in_file, text, re.S)
    assert found, f"{path} has no list of the formats matching {in_file!r}"
    listed = set(re.findall(name, found.group(1), re.M))
    where = f"{path}:{text.count(chr(10), 0, found.start(1)) + 1}"
    assert listed >= set(formats()), f"{where} does not list {sorted(set(formats()) - listed)}"
    assert listed <= set(formats()), f"{where} lists {sorted(listed - set(formats()))}, not formats"


def test_the_nav_lists_every_formats_page_in_name_order_under_its_title():
    hooks = _hooks()
    section = next(entry["Input formats"] for entry in hooks.with_format_pages(_nav())
                   if "Input formats" in entry)
    assert section[0] == "formats/index.md"
    pages = [(page, title) for entry in section[1:] for title, page in entry.items()]
    assert [page for page, _ in pages] == [f"formats/{name}.md" for name in formats()]
    for page, title in pages:
        first = (REPO / "docs" / page).read_text(encoding="utf-8").splitlines()[0]
        assert first == f"# {title}", page


def test_the_formats_table_has_a_row_per_format_with_its_summary_and_page():
    table = _hooks().formats_table()
    rows = table.splitlines()[2:]
    assert [re.match(r"\| `convert ([\w-]+)` \|", row).group(1) for row in rows] == list(formats())
    for row, (name, declared) in zip(rows, formats().items(), strict=True):
        summary = row.split(" | ")[1]
        assert re.sub(r"\\(.)", r"\1", summary).replace("&lt;", "<") == declared.summary
        assert row.endswith(f"]({name}.md) |")
    assert "<!-- formats: table -->" in (REPO / "docs/formats/index.md").read_text(
        encoding="utf-8").splitlines()


def test_a_formats_page_named_in_the_nav_by_hand_is_an_error(monkeypatch):
    hooks = _hooks()
    monkeypatch.setattr(hooks, "format_pages", lambda: {"coco": "COCO"})
    nav = [{"Input formats": ["formats/index.md", {"COCO": "formats/coco.md"}]}]
    with pytest.raises(ValueError, match="names formats/coco.md"):
        hooks.with_format_pages(nav)
    with pytest.raises(ValueError, match="has no formats/index.md"):
        hooks.with_format_pages([{"Home": "index.md"}])
