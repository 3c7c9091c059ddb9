"""A file a read-side command writes at a path the user gives (``report --html``,
``check --write-label-map``): refused before any reading when the path cannot be a file,
and written with its missing folders created, as ``convert`` creates ``--output``."""

from __future__ import annotations

import os

from recordbeam.errors import UsageError


def check_output_file(path: str, option: str, name: str) -> None:
    """Raise :class:`UsageError` when the local ``path`` given to ``option`` is a folder
    (``name``: the file name to suggest in it) or lies below a file. Other filesystems
    are left to the write."""
    from recordbeam import filesystems  # Beam: not while the command parses its arguments

    local = filesystems.local_path(path)
    if local is None:
        return
    if os.path.isdir(local):
        raise UsageError(f"{option} {path} is a folder; give a file path, e.g. "
                         f"{option} {os.path.join(path, name)}")
    # The nearest existing folder above it: a file there means no folder can be created.
    parent = filesystems.nearest_existing_local(os.path.dirname(local) or ".")
    if not os.path.isdir(parent):
        raise UsageError(f"{option} {path}: {parent} is a file, not a folder; choose a path "
                         "in a folder")


def write_output_file(path: str, data: bytes, option: str) -> None:
    """Write ``data`` to ``path``, creating its missing local folders; a failure is a
    :class:`UsageError` naming ``option`` and the path."""
    from recordbeam import filesystems

    local = filesystems.local_path(path)
    try:
        if local is None:
            filesystems.write_bytes(path, data)
            return
        folder = os.path.dirname(local)
        if folder:
            os.makedirs(folder, exist_ok=True)
        with open(local, "wb") as f:
            f.write(data)
    except OSError as error:
        raise UsageError(f"cannot write {option} {path}: {error.strerror or error}; choose a "
                         "path you can write") from None
