"""What a conversion can be told, each option declared once.

An :class:`Option` is a name, a help text, a default and a :class:`Kind` of value. From
the same declarations come the command's flags (``--max-side 640``), the Python API's
keywords (``recordbeam.convert("coco", ..., max_side=640)``), the option tables of the
docs and the parameters of the Flex Template. A kind reads a value typed on the command
line (:meth:`Kind.parse`) and checks one given in Python (:meth:`Kind.check`); both refuse
the same values with the same words.

The options every conversion has are declared here, in groups (:data:`OUTPUT`,
:data:`CHECKS`, :data:`FIXES`, :data:`RUN`); each input format declares its own beside
its reader (:mod:`recordbeam.sources`). Imports no Beam.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from recordbeam.errors import UsageError


class ValueRefused(ValueError):
    """A value an option does not take; the message says what it takes."""


class Kind:
    """A kind of value: how text becomes one, and which ones are accepted."""

    #: A regular expression of the text accepted (for templates' parameter checks).
    pattern: str | None = None
    metavar: str | None = None

    def parse(self, text: str) -> Any:
        return self.check(text)

    def check(self, value: Any) -> Any:
        """The value to use, or :class:`ValueRefused`."""
        return value


class Text(Kind):
    def check(self, value: Any) -> str:
        if not isinstance(value, str):
            raise ValueRefused(f"takes text, got {value!r}")
        return value


@dataclass(frozen=True)
class Path(Text):
    """A path or URL that must not be empty (``""`` would be the filesystem's root, or the
    working folder, depending on who reads it); ``wanted`` says what to give instead."""

    wanted: str = "a path"

    def check(self, value: Any) -> str:
        value = super().check(value)
        if not value.strip():
            raise ValueRefused(f"is empty; give {self.wanted}")
        return value


class Flag(Kind):
    """A switch: given or not (on the command line ``--x``, or ``--x=true|false`` as
    Beam's own switches and the Flex Template launcher write them)."""

    pattern = "^(true|false)$"

    def parse(self, text: str) -> bool:
        lowered = text.lower()
        if lowered not in ("true", "false"):
            raise ValueRefused(f"takes true or false, got {text!r}")
        return lowered == "true"

    def check(self, value: Any) -> bool:
        if not isinstance(value, bool):
            raise ValueRefused(f"takes True or False, got {value!r}")
        return value


@dataclass(frozen=True)
class WholeNumber(Kind):
    """An integer of at least ``minimum`` (``meaning`` says so in words)."""

    minimum: int
    meaning: str
    maximum: int = 2**63 - 1  # what an int64 feature or field can hold

    pattern = "^[0-9]+$"

    def parse(self, text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise ValueRefused(f"{text!r} is not a whole number") from None
        return self.check(value)

    def check(self, value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueRefused(f"takes a whole number, got {value!r}")
        if value < self.minimum:
            raise ValueRefused(f"must be {self.meaning}, got {value}")
        if value > self.maximum:
            raise ValueRefused(f"must be at most {self.maximum}, got {value}")
        return value


@dataclass(frozen=True)
class Fraction(Kind):
    """A number between 0 and 1, each end included as asked."""

    zero_allowed: bool
    one_allowed: bool

    pattern = r"^(0(\.[0-9]*)?|1(\.0*)?|\.[0-9]+)$"
    metavar = "F"

    def parse(self, text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise ValueRefused(f"{text!r} is not a number") from None
        return self.check(value)

    def check(self, value: Any) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueRefused(f"takes a number, got {value!r}")
        low_ok = value > 0 or (self.zero_allowed and value == 0)
        high_ok = value < 1 or (self.one_allowed and value == 1)
        if not (low_ok and high_ok):
            low = "[0" if self.zero_allowed else "(0"
            high = "1]" if self.one_allowed else "1)"
            raise ValueRefused(f"must be a fraction in {low}, {high}, got {value}")
        return float(value)


class Size(Kind):
    """A size in bytes above 0: a number, or text with a unit (``128MiB``); kept as given
    (the writer reads it with :func:`recordbeam.write.planning.parse_size`)."""

    pattern = r"^[0-9]+(\.[0-9]+)?\s*([KMGkmg]([Ii]?[Bb])?|[Bb])?$"
    metavar = "SIZE"

    def check(self, value: Any) -> str | int:
        from recordbeam.write.planning import parse_size

        if isinstance(value, bool) or not isinstance(value, int | str):
            raise ValueRefused(f"takes a size such as 128MiB or a number of bytes, got {value!r}")
        try:
            size = parse_size(str(value))
        except ValueError as error:
            raise ValueRefused(str(error)) from None
        if size <= 0:
            raise ValueRefused(f"must be above 0 bytes, got {value!r}")
        return value


@dataclass(frozen=True)
class Choice(Kind):
    values: tuple[str, ...]

    def check(self, value: Any) -> str:
        if value not in self.values:
            raise ValueRefused(f"takes one of {', '.join(self.values)}, got {value!r}")
        return value

    @property
    def pattern(self) -> str:  # type: ignore[override]
        return "^(" + "|".join(re.escape(v) for v in self.values) + ")$"


@dataclass(frozen=True)
class Option:
    """One option: ``name`` is its keyword in Python (``max_side``) and, with dashes, its
    flag (``--max-side``); ``aliases`` are other flags that mean the same."""

    name: str
    help: str
    kind: Kind = field(default_factory=Text)
    default: Any = None
    required: bool = False
    metavar: str | None = None
    aliases: tuple[str, ...] = ()

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    @property
    def flags(self) -> tuple[str, ...]:
        return (self.flag, *self.aliases)

    def check(self, value: Any) -> Any:
        """The value given in Python, checked; :class:`UsageError` names the option."""
        if value is None and not self.required:
            return None
        try:
            return self.kind.check(value)
        except ValueRefused as refused:
            raise UsageError(f"{self.name} {refused}") from None

    def parse(self, text: str) -> Any:
        return self.kind.parse(text)


def find(options: Sequence[Option], name: str) -> Option | None:
    return next((option for option in options if option.name == name), None)


def checked(options: Sequence[Option], given: dict[str, Any], what: str) -> dict[str, Any]:
    """``given`` keyword values checked against ``options``, defaults filled in. Raises
    :class:`UsageError` for a name no option has (with the closest one), a missing
    required option, or a value its kind refuses."""
    import difflib

    known = {option.name: option for option in options}
    for name in given:
        if name not in known:
            close = difflib.get_close_matches(name, list(known), n=1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            raise UsageError(f"{what} takes no option {name!r}{hint}")
    values = {}
    for name, option in known.items():
        if name in given:
            values[name] = option.check(given[name])
        elif option.required:
            raise UsageError(f"{what} needs {name}")
        else:
            values[name] = option.default
    return values



# --- the options every conversion has ----------------------------------------------------

POSITIVE = WholeNumber(1, "1 or more")
ANY_FRACTION = Fraction(zero_allowed=True, one_allowed=True)

#: How images may be fixed on the way (``recordbeam.images.transcode.ImageFixes``).
FIXES = (
    Option("transcode", "re-encode images that are not 8-bit RGB JPEG (jpeg) or PNG (png), "
           "and convert GIF, BMP, WebP and TIFF; default: keep (bytes written as they are, "
           "other formats rejected)", Choice(("keep", "jpeg", "png")), default="keep"),
    Option("jpeg_quality", "quality of re-encoded JPEGs (default: 95)",
           WholeNumber(1, "between 1 and 100", maximum=100), metavar="1-100"),
    Option("max_side", "downsize images whose longer side exceeds this many pixels, keeping "
           "the aspect (default: no downsizing)", POSITIVE, metavar="PIXELS"),
    Option("apply_exif", "rotate pixels by the EXIF orientation, width and height swap "
           "(default: off; images are written unrotated and counted)", Flag(), default=False),
)


def output_options() -> tuple[Option, ...]:
    """Where a conversion writes and what it refuses: OUT, the split, the shards, the
    reject limit, the image limits, --quiet and --if-changed."""
    from recordbeam.images.checks import DEFAULT_MAX_IMAGE_BYTES, DEFAULT_MAX_PIXELS
    from recordbeam.records import DEFAULT_MAX_REJECT_FRACTION, DUPLICATE_MODES

    max_bytes = f"{DEFAULT_MAX_IMAGE_BYTES // 2**20}MiB"
    return (
        Option("output", "output folder, on any Beam filesystem (local, gs://, s3://)",
               Path("the path of a folder"), required=True, metavar="OUT"),
        Option("split", "split name used in shard names (default: train)", Text(),
               default="train"),
        *shard_options("the shards", "when --shards is not given, in bytes or with a unit: B, "
                       "KiB, MiB, GiB, KB, MB, GB"),
        Option("max_reject_fraction", "fail and commit nothing when more than this fraction "
               f"(0 to 1) of the images is rejected (default: {DEFAULT_MAX_REJECT_FRACTION})",
               ANY_FRACTION, default=DEFAULT_MAX_REJECT_FRACTION, metavar="F"),
        Option("max_pixels", "reject images whose header claims more pixels, width x height "
               f"(decompression bombs); 0: no limit (default: {DEFAULT_MAX_PIXELS:,})",
               WholeNumber(0, "0 (no limit) or more pixels"), default=DEFAULT_MAX_PIXELS,
               metavar="PIXELS"),
        Option("max_image_bytes", f"reject larger image files unread, in bytes or with a unit "
               f"(default: {max_bytes})", Size(), default=max_bytes, metavar="SIZE"),
        Option("verify_decode", "fully decode every image, slower (default: header checks "
               "only)", Flag(), default=False),
        Option("duplicates", "images with the same bytes, in a split or across the splits of "
               "OUT: keep (write all, list them in OUT/duplicates.jsonl), drop (write one copy, "
               "the others are 'duplicate' rejects), drop-across-splits (drop a later split's "
               "copies of an earlier split's image), off (do not look) (default: keep)",
               Choice(DUPLICATE_MODES), default="keep"),
        Option("near_duplicates", "also look for near duplicates (re-encoded, resized, "
               "slightly cropped copies; a small decode per image) and list them in "
               "OUT/near-duplicates.jsonl (default: off)", Flag(), default=False),
        QUIET,
        Option("if_changed", "exit 0 at once when OUT already holds a finished output of the "
               "same inputs (names, sizes, modification times), options and recordbeam version "
               "(default: always convert)", Flag(), default=False),
        Option("incremental", "keep the shards of OUT whose examples did not change and "
               "encode only new and changed inputs (an image's name, size and modification "
               "time, and its own annotations); other options or another recordbeam version "
               "rebuild the split (default: rebuild the split)", Flag(), default=False),
        Option("verify_unchanged", "with --incremental: compare images by the hash of their "
               "bytes (every image is read) instead of their size and modification time (default: "
               "off)",
               Flag(), default=False),
        Option("compact_below", "with --incremental: fold shards smaller than F (0 to 1) times "
               "--shard-size into shards near --shard-size (default: never)",
               Fraction(zero_allowed=False, one_allowed=True), metavar="F"),
    )


def shard_options(shards: str, shard_size_when: str) -> tuple[Option, ...]:
    """How the shards are cut and where they may go (``shards`` names them in the help,
    ``shard_size_when`` says when --shard-size counts and how it is written)."""
    return (
        Option("shards", "number of shards (default: total input bytes / --shard-size)",
               POSITIVE, metavar="N"),
        Option("shard_size", f"target shard size {shard_size_when} (default: 128MiB)", Size(),
               default="128MiB", metavar="SIZE"),
        Option("compression", f"compression of {shards} (default: none)",
               Choice(("none", "gzip", "zlib")), default="none"),
        Option("index", "also write <shard>.idx index files (default: off)", Flag(),
               default=False),
        Option("overwrite", "write into a folder that holds files recordbeam did not write; "
               "they are kept (default: refuse such a folder)", Flag(), default=False),
        Option("break_lock", "take OUT's lock even if another run holds it: only when that run "
               "is gone for good (default: refuse a folder another run writes)", Flag(),
               default=False),
    )


QUIET = Option("quiet", "no progress line (default: a progress line on a terminal)", Flag(),
               default=False)
DETACH = Option("detach", "remote runners only: submit the job, print its id and exit 0 "
                "without waiting; the job commits OUT itself (default: wait for the end)",
                Flag(), default=False)


def conversion_options() -> tuple[Option, ...]:
    """What every ``convert`` takes after its format's own options, in ``--help`` order."""
    return (*FIXES, *output_options(), DETACH)
