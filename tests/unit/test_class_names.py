"""What a class name may be: one line of a label file, told apart from every other."""

from __future__ import annotations

import pytest

from recordbeam.dataset.class_names import (
    ClassNameError,
    check_class_list,
    class_file_lines,
    label_file_text,
    name_problem,
    normalisation_twins,
    repeated_name_warnings,
)


@pytest.mark.parametrize("name, problem", [
    ("dog", None),
    ("traffic light", None),
    ("a\tb", None),  # a tab stays on its line
    ("\U0001f415 dog", None),
    ("", "is empty"),
    (" \t", "is only white space"),
    ("hot\ndog", "line break (U+000A"),
    ("hot\rdog", "line break (U+000D"),
    ("a\x0bb", "line break (U+000B"),
    ("a\x85b", "line break (U+0085"),
    ("a\u2029b", "line break (U+2029 PARAGRAPH SEPARATOR)"),
    ("a\x00b", "control character U+0000"),
    ("a\x1bb", "control character U+001B"),
    ("caf\udce9", "control character U+DCE9"),  # a byte that was not UTF-8
    (7, "is int, not text"),
])
def test_a_name_is_one_line_of_visible_text(name, problem):
    found = name_problem(name)
    assert (found is None) if problem is None else (problem in found)


def test_every_line_break_python_splits_at_is_refused():
    breaks = {c for c in map(chr, range(0x3000)) if len(f"a{c}b".splitlines()) > 1}
    assert breaks and all(name_problem(f"a{c}b") for c in breaks)


def test_twins_are_names_with_one_nfc_form():
    assert normalisation_twins(["caf\u00e9", "dog", "cafe\u0301", "dog"]) == [
        ("caf\u00e9", "cafe\u0301")]


def test_a_class_list_refuses_bad_names_twins_and_repeats():
    with pytest.raises(ClassNameError, match=r"f\.txt: the class name 'a\\nb' \(line 2\)"):
        check_class_list(["dog", "a\nb"], ["line 1", "line 2"], "f.txt")
    with pytest.raises(ClassNameError, match=r"class 'dog' \(line 3\) already appears \(line 1\)"):
        check_class_list(["dog", "cat", "dog"], ["line 1", "line 2", "line 3"], "f.txt")
    with pytest.raises(ClassNameError, match=r"'caf\\xe9' \(line 1\) and 'cafe\\u0301' \(line 2\)"):
        check_class_list(["caf\u00e9", "cafe\u0301"], ["line 1", "line 2"], "f.txt")


def test_repeats_allowed_are_returned_for_warnings():
    names = ["dog", "cat", "dog", "caf\u00e9", "cafe\u0301"]
    places = [f"category {i}" for i in range(5)]
    repeats = check_class_list(names, places, "x.json", repeats_allowed=True)
    assert repeats == [(0, 2), (3, 4)]
    same, twins = repeated_name_warnings(names, places, repeats)
    assert same.startswith("category 0 and category 2 are both named 'dog'")
    assert "differ only in Unicode normalisation" in twins


def test_class_files_split_lines_at_newlines_only():
    assert class_file_lines("a\r\nb\rc\nd\x85e\u2028f") == ["a", "b", "c", "d\x85e\u2028f"]


def test_the_label_file_is_written_only_of_one_line_names():
    assert label_file_text(["dog", "caf\u00e9"]) == "dog\ncaf\u00e9\n".encode()
    with pytest.raises(ClassNameError, match="labels.txt: the class name 'a\\\\rb'"):
        label_file_text(["a\rb"], "labels.txt")
