"""Class names as label files hold them: one name per line.

``labels.txt`` and TFDS's ``<feature>.labels.txt`` list one class name per line, and
their readers find the names by splitting lines: Python's ``splitlines`` breaks at any of
``\\n \\r \\v \\f \\x1c \\x1d \\x1e \\x85 \\u2028 \\u2029``; TFDS splits at ``\\n`` after
universal newlines, strips each line and drops blank ones. A name holding a line break,
or no visible text, would move every later name to another label. So every input format
checks its class names here, whatever file they come from:

* a name that cannot be one line of a label file (:func:`name_problem`: empty or blank,
  a line break, another control character) is refused: the run fails naming it when it
  comes from a class list (COCO categories, YOLO names, CVAT labels, class folders, a
  ``--classes`` file, Open Images class descriptions), and the object is an annotation
  reject ``invalid_class_name`` when the name is found on an object (VOC, labelme, KITTI,
  box CSV, CVAT shapes);
* two names that differ only in Unicode normalisation (``café`` typed as NFC and as NFD,
  :func:`normalisation_twins`) look the same everywhere but are two classes: refused
  wherever the name is what identifies the class;
* one name given to two classes is legal where an id tells the classes apart (COCO
  category ids, Open Images label ids): the run writes them, with a ``duplicate_class_name``
  warning (:func:`repeated_name_warnings`), since a class text then stands for two labels.

No Beam, no I/O.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Sequence

from recordbeam.errors import DataError

#: The reason code of an object whose class name cannot be written (see :func:`name_problem`).
INVALID_CLASS_NAME = "invalid_class_name"
#: The reason code of the warning about two classes with one name.
DUPLICATE_CLASS_NAME = "duplicate_class_name"

#: Characters that end a line for ``str.splitlines`` (and so for most readers of a label file).
LINE_BREAKS = frozenset("\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029")


_LINE_END = re.compile(r"\r\n|\r|\n")


def class_file_lines(text: str) -> list[str]:
    """The lines of a file of class names, ended by ``\n``, ``\r\n`` or ``\r`` only: any
    other line break stays in its line, so the name holding it is refused rather than
    quietly split into two classes."""
    return _LINE_END.split(text)


class ClassNameError(DataError):
    """A class list holds a name that cannot be written, or two that cannot be told apart."""


def _character(char: str) -> str:
    name = unicodedata.name(char, "")
    return f"U+{ord(char):04X}" + (f" {name}" if name else "")


def name_problem(name: object) -> str | None:
    """Why ``name`` cannot be a class name (one line of a label file), or None when it can."""
    if not isinstance(name, str):
        return f"is {type(name).__name__}, not text"
    if not name.strip():
        return "is empty" if not name else "is only white space"
    for char in name:
        if char in LINE_BREAKS:
            return f"holds a line break ({_character(char)})"
        if unicodedata.category(char) in ("Cc", "Cs") and char != "\t":
            return f"holds the control character {_character(char)}"
    return None


def shown(name: str) -> str:
    """A name as messages quote it: escapes for everything not plain ASCII, so two names
    that differ only in normalisation look different (``'caf\\xe9'``, ``'cafe\\u0301'``)."""
    return ascii(name)


def normal_form(name: str) -> str:
    """The key two names share when they differ only in Unicode normalisation."""
    return unicodedata.normalize("NFC", name)


def normalisation_twins(names: Iterable[str]) -> list[tuple[str, str]]:
    """Pairs ``(first, other)`` of distinct names with one NFC form, in the order met."""
    first: dict[str, str] = {}
    pairs = []
    for name in names:
        key = normal_form(name)
        seen = first.setdefault(key, name)
        if seen != name:
            pairs.append((seen, name))
    return pairs


def twins_message(first: str, other: str, where_first: str, where_other: str) -> str:
    return (
        f"the class names {shown(first)} ({where_first}) and {shown(other)} ({where_other}) "
        "differ only in Unicode normalisation (NFC and NFD): they look the same but would "
        "be two classes. Spell them one way (NFC, as most tools write) and convert again"
    )


def check_class_list(names: Sequence[str], places: Sequence[str], source: str, *,
                     repeats_allowed: bool = False) -> list[tuple[int, int]]:
    """Check the class list of the file (or folder) ``source``; ``places[i]`` says where in
    it ``names[i]`` is given (``line 3``, ``category 7``), for messages.

    Raises :class:`ClassNameError` for a name :func:`name_problem` refuses, and for one
    name given twice or two that differ only in normalisation, unless ``repeats_allowed``
    (the classes have ids of their own): those repeats are then returned as ``(i, j)``
    index pairs (``j`` later), for :func:`repeated_name_warnings`.
    """
    for name, place in zip(names, places, strict=True):
        problem = name_problem(name)
        if problem:
            raise ClassNameError(f"{source}: the class name {shown(name)} ({place}) "
                                 f"{problem}; a class name is written as one line of "
                                 "labels.txt. Fix the name")
    first: dict[str, int] = {}
    repeats = []
    for index, name in enumerate(names):
        earlier = first.setdefault(normal_form(name), index)
        if earlier == index:
            continue
        if not repeats_allowed:
            if names[earlier] == name:
                raise ClassNameError(f"{source}: class {shown(name)} ({places[index]}) "
                                     f"already appears ({places[earlier]}); list each class "
                                     "once")
            raise ClassNameError(f"{source}: " + twins_message(
                names[earlier], name, places[earlier], places[index]))
        repeats.append((earlier, index))
    return repeats


def repeated_name_warnings(names: Sequence[str], places: Sequence[str],
                           repeats: Iterable[tuple[int, int]]) -> list[str]:
    """One sentence per repeat :func:`check_class_list` returned, for a ``warning``
    reject ``duplicate_class_name``."""
    details = []
    for earlier, index in repeats:
        first, other = names[earlier], names[index]
        if first == other:
            said = f"{places[earlier]} and {places[index]} are both named {shown(first)}"
        else:
            said = (f"{places[earlier]} is named {shown(first)} and {places[index]} "
                    f"{shown(other)}, which differ only in Unicode normalisation")
        details.append(f"{said}: both are written, each under its own label, but a class "
                       "text then stands for two labels and labels.txt lists the name twice; "
                       "rename one if they are different classes, or merge them")
    return details


def label_file_text(names: Sequence[str], where: str = "the class names") -> bytes:
    """``labels.txt``: one name per line. Raises :class:`ClassNameError` for a name that
    cannot be one line (every format checks its names before this; a hand-edited
    manifest read by ``reshard`` is checked here)."""
    for name in names:
        problem = name_problem(name)
        if problem:
            raise ClassNameError(f"{where}: the class name {shown(name)} {problem}; it "
                                 "cannot be written as one line of labels.txt")
    return "".join(f"{name}\n" for name in names).encode("utf-8")
