"""Reading one JSON document in byte ranges gives exactly what ``json.loads`` of the whole
document gives, wherever the cuts fall, whatever the strings hold."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from lanes import examples

from recordbeam.sources.json_ranges import (
    JsonRangeError,
    array_marks,
    array_plan,
    backslashes_before,
    entry_states,
    split_ranges,
    summarize,
)


def read_array(document: bytes, key: str | None, range_bytes: int) -> list[tuple[int, object]]:
    """Every pass, one range after another, in this process, as workers run them on ranges
    of a file: ``(index, element)`` of the array ``key`` of the top object of ``document``
    (None: the array that is the document), range by range."""
    ranges = list(split_ranges(len(document), range_bytes))
    before = [backslashes_before(document[:start]) for start, _end in ranges]
    states = entry_states([(start, summarize(document[start:end], run))
                           for (start, end), run in zip(ranges, before, strict=True)])
    marks = [array_marks(document[start:end], start, state, 0 if key is None else 1, run)
             for (start, end), state, run in zip(ranges, states, before, strict=True)]
    plan = array_plan(marks, key, lambda begin, end: document[begin:end])
    found = []
    for span, first in zip(plan.spans, plan.first_index, strict=True):
        if span is not None:
            if len(plan.spans) - plan.spans.count(None) > 1 and not document[span[0]:span[1]].strip():
                raise ValueError("an empty element")  # as byte_ranges.parse_span
            items = json.loads(b"[" + document[span[0]:span[1]] + b"]")
            found += list(enumerate(items, first))
    return found


#: Strings made of what confuses a scanner: brackets, quotes, backslashes, separators.
HOSTILE = st.text(alphabet=st.sampled_from(list('{}[]",:\\ abc\n\t\u00e9\u2028\U0001f600')),
                  max_size=12)
SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-10**6, 10**6),
                    st.floats(allow_nan=False, allow_infinity=False), HOSTILE)
VALUES = st.recursive(SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(HOSTILE, inner, max_size=4)), max_leaves=20)
LAYOUTS = st.sampled_from([
    {}, {"ensure_ascii": False}, {"indent": 2}, {"separators": (",", ":")},
    {"indent": "\t", "ensure_ascii": False}])


def _document(sections: dict, layout: dict) -> bytes:
    return json.dumps(sections, **layout).encode()


@settings(max_examples=examples(300), deadline=None)
@given(items=st.lists(VALUES, max_size=8), other=VALUES, layout=LAYOUTS,
       range_bytes=st.integers(1, 64), data=st.data())
def test_elements_of_a_section_are_what_json_loads_finds(items, other, layout, range_bytes, data):
    # The wanted key also appears deeper down, and other top-level values hold anything.
    sections = {"info": {"annotations": other}, "annotations": items, "zz": other}
    order = data.draw(st.permutations(list(sections)))
    document = _document({key: sections[key] for key in order}, layout)
    assert read_array(document, "annotations", range_bytes) == list(enumerate(items))


@settings(max_examples=examples(200), deadline=None)
@given(items=st.lists(VALUES, min_size=1, max_size=6), range_bytes=st.integers(1, 32),
       data=st.data())
def test_a_document_cut_short_is_refused(items, range_bytes, data):
    document = _document({"annotations": items, "categories": []}, {})
    cut = data.draw(st.integers(1, len(document) - 1))
    with pytest.raises(JsonRangeError):
        read_array(document[:cut], "annotations", range_bytes)


@pytest.mark.parametrize("document", [
    b'{"annotations": [1,]}',  # an empty element
    b'{"annotations": [1]}}',  # closed twice
    b'{"a": 1}{"annotations": []}',  # two documents
    b'{"annotations": [1], "annotations": [2]}',  # a key twice
    b'["annotations"]',  # not an object
])
def test_broken_structure_is_refused(document):
    with pytest.raises((JsonRangeError, ValueError)):  # ValueError: the element's parse
        read_array(document, "annotations", 3)


def test_a_section_that_is_missing_or_empty_has_no_elements():
    assert read_array(b'{"images": [1, 2]}', "annotations", 4) == []
    assert read_array(b'{"annotations": [ ]}', "annotations", 2) == []


def test_a_section_that_is_no_list_is_refused():
    with pytest.raises(JsonRangeError):  # the streamed pass reads the file, and says so
        read_array(b'{"annotations": 3, "x": []}', "annotations", 4)


def test_escapes_split_across_ranges():
    """A run of backslashes cut by a range boundary decides whether the next quote ends the
    string: counted from the bytes before the range."""
    value = 'a\\\\\\"},{"b'  # backslashes and a quote that does not end the string
    document = json.dumps({"annotations": [value, {"k": value}]}).encode()
    for range_bytes in range(1, len(document) + 1):
        found = read_array(document, "annotations", range_bytes)
        assert found == [(0, value), (1, {"k": value})]


def test_summary_does_not_depend_on_where_the_range_starts():
    """One pass per range, before anything is known about its start: both possible states
    are summarized, and the state at the start picks one."""
    document = b'{"a": "}}}", "b": [{"c": "[["}]}'
    middle = document.index(b'}}}')  # inside a string
    summary = summarize(document[middle:])
    assert summary.quote_parity == 1
    # Read from outside a string, ``}}}`` would close three brackets at once: impossible
    # here, and the state at the start says it is the rest of a string.
    assert summary.lowest_depth == (-3, -1)
    head = summarize(document[:middle])
    states = entry_states([(0, head), (middle, summary)])
    assert states[1].inside_string == 1 and states[1].depth == 1


def test_backslashes_before_counts_the_run_at_the_end():
    assert backslashes_before(b'ab\\\\') == 2
    assert backslashes_before(b'ab') == 0
    assert backslashes_before(b'') == 0


@settings(max_examples=examples(300), deadline=None)
@given(items=st.lists(VALUES, max_size=8), layout=LAYOUTS, range_bytes=st.integers(1, 64))
def test_an_array_read_in_ranges_gives_each_element_with_its_index(items, layout, range_bytes):
    document = json.dumps(items, **layout).encode()
    assert read_array(document, None, range_bytes) == list(enumerate(items))


@pytest.mark.parametrize("document", [
    b'{"a": [1, 2]}', b'[1, 2] [3]', b'[1], 2', b'"[1, 2]"', b'[1, 2]]', b'[[1, 2]'])
def test_a_document_that_is_not_one_array_has_no_plan(document):
    with pytest.raises(JsonRangeError):
        read_array(document, None, 3)
