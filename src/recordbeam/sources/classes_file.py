"""The ``--classes`` file of the formats that take one (class folders, labelme): one class
name per line, in label order. Read on the launcher to check it before any job, and again
on a worker by the run."""

from __future__ import annotations

from recordbeam import filesystems
from recordbeam.dataset.class_names import check_class_list, class_file_lines
from recordbeam.errors import DataError


class ClassesFileError(DataError, ValueError):
    """A classes file that cannot be read as class names."""


def read_classes_file(path: str) -> list[str]:
    """Class names from a file, one per line in label order; blank lines are skipped."""
    with filesystems.open_read(path) as f:
        data = f.read()
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise ClassesFileError(f"{path} is not UTF-8 text; --classes takes a text file with "
                               "one class name per line, saved as UTF-8") from None
    lines = [(number, line.strip()) for number, line in enumerate(class_file_lines(text), 1)]
    listed = [(number, name) for number, name in lines if name]
    if not listed:
        raise ClassesFileError(f"{path} lists no classes; write one class name per line")
    names = [name for _number, name in listed]
    check_class_list(names, [f"line {number}" for number, _name in listed], path)
    return names
