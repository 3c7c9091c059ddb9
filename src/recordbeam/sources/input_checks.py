"""What every format checks of its inputs before a job starts: folders and files that are
there, JSON files that start as JSON, class lists that read, and a typed ``--split`` that
the input's own splits would override. Each failure is a ``UsageError`` (exit 2) naming
the path and what the option takes."""

from __future__ import annotations

import os
from collections.abc import Sequence

from recordbeam import filesystems
from recordbeam.errors import UsageError
from recordbeam.sources.format import Request
from recordbeam.sources.json_depth import BOM

#: What a missing or empty image folder's message advises, for formats with --images.
PASS_IMAGES = " (pass --images if the images are elsewhere)"

#: Said of an input without any annotation file, after where they were looked for.
NO_OBJECTS = ", so every image would be written without objects; "
UNLABELED = " (to write unlabeled images, use convert imagefolder)"


#: The first bytes of the archives tools export datasets as, and their names.
_ARCHIVES = ((b"PK\x03\x04", "zip"), (b"\x1f\x8b", "gzip"), (b"7z\xbc\xaf\x27\x1c", "7z"),
             (b"Rar!", "RAR"), (b"BZh", "bzip2"), (b"\xfd7zXZ\x00", "xz"))


def archive_kind(start: bytes) -> str | None:
    """The kind of archive a file starting with ``start`` (its first 512 bytes) is, or None."""
    if start[257:262] == b"ustar":
        return "tar"
    return next((kind for magic, kind in _ARCHIVES if start.startswith(magic)), None)


def _archive_of(local: str) -> str | None:
    with open(local, "rb") as f:
        return archive_kind(f.read(512))


def refuse_file(path: str, advice: str) -> None:
    """Refuse a local file (an archive named as one) where a folder is wanted (``advice``
    follows the message: what the option takes, or which one to check)."""
    local = filesystems.local_path(path)
    if local is not None and os.path.isfile(local):
        archive = _archive_of(local)
        if archive:
            raise UsageError(f"{path} is a {archive} archive, not a folder: extract it and "
                             f"pass the folder it holds{advice}")
        raise UsageError(f"{path} is a file, not a folder{advice}")


def require_folder(path: str, advice: str) -> None:
    """A folder that is there and holds files (``advice``: as for :func:`refuse_file`)."""
    refuse_file(path, advice)
    # Listing, not exists(): a gs:// or s3:// "folder" is not an object of its own.
    if not filesystems.has_files(path):
        raise UsageError(f"{path}: no such folder, or it holds no files{advice}")


def require_images_option(request: Request) -> None:
    """An --images folder given beside --input: there, with files (else the whole job would
    run to reject every image as missing)."""
    if request.values.get("images"):
        require_folder(request.values["images"], " (check --images)")


def require_file(path: str, flag: str, kind: str, what: str) -> None:
    """An input file that is there and is no folder (``kind`` names the file, ``what``
    says what ``flag`` takes)."""
    local = filesystems.local_path(path)
    if local is not None and os.path.isdir(local):
        raise UsageError(f"{path} is a folder; {flag} takes {what}")
    if not filesystems.exists(path):
        raise UsageError(f"{path}: no such {kind} (check {flag})")


def require_classes_file(path: str | None) -> None:
    """A --classes file that exists and reads as class names (a small file; the job reads
    it again)."""
    if path:
        require_file(path, "--classes", "classes file", "a text file with one class name per line")
        from recordbeam.sources.classes_file import read_classes_file

        read_classes_file(path)


def require_json_object(path: str, flag: str, what: str, opening: bytes = b"{") -> None:
    """A local file given as a JSON document starts like one (not an image, a CSV...): its
    first bytes are named, not the parser's error from a worker. ``opening`` is how the
    document starts: ``{`` for an object, ``[`` for an array. Files on object stores are
    left to the parser: a small read there can fetch a large block."""
    if filesystems.local_path(path) is None:
        return
    start = b""
    with filesystems.open_read(path) as f:
        while chunk := f.read(1 << 16):  # whitespace may come first, any amount of it
            start = (start + chunk).removeprefix(BOM).lstrip()
            if start:
                break
    if start.startswith(opening):
        return
    if not start:
        raise UsageError(f"{path} holds no JSON (it is empty or blank); {flag} takes {what}")
    kind = "a JSON array" if opening == b"[" else "a JSON object"
    archive = archive_kind(start)
    if archive:
        raise UsageError(f"{path} is a {archive} archive, not {kind}: extract it and pass the "
                         f"JSON file it holds; {flag} takes {what}")
    raise UsageError(
        f"{path} is not {kind} (it starts with {shown_start(start)}); {flag} takes {what}")


def shown_start(data: bytes) -> str:
    """The first characters of ``data`` as text, or its first bytes in hex when binary."""
    for cut in range(24, 28):  # a cut inside a multi-byte character moves on to its end
        try:
            return repr(data[:cut].decode("utf-8"))
        except UnicodeDecodeError as error:
            if error.start < cut - 3:
                break
    return "the bytes " + " ".join(f"{b:02x}" for b in data[:8])


def refuse_split(request: Request, splits: Sequence[str], named_by: str, *,
                 accepted: bool | None = None) -> None:
    """Refuse a typed --split (not the default) when the input's files name the splits
    (``named_by`` says where): it would be ignored, and a run writing splits other than the
    one asked for replaces them in OUT. By default a --split is accepted only when it names
    the input's one split (an input without splits of its own has the one --split names);
    ``accepted`` overrides that where the format uses --split."""
    if accepted is None:
        accepted = list(splits) == [request.split]
    if request.split_given and not accepted:
        raise UsageError(f"--split {request.split} would be ignored: {named_by} "
                         f"({', '.join(splits)}); drop --split")
