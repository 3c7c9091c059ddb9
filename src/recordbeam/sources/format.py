"""What an input format is: one declaration per format, from which everything that offers
it is made.

Each format is a package of :mod:`recordbeam.sources` whose ``__init__`` declares a
:class:`Format` named ``FORMAT``: its name, a one-line summary, its own options
(:class:`recordbeam.options.Option`) and ``prepare``, which checks the inputs before any
job and says how to build the conversion (:class:`Conversion`). The ``convert``
subcommands, the Python API (:func:`recordbeam.convert`), the scripts in ``pipelines/``
and the option tables of the docs are all made from these declarations, so adding a
format is adding its package.

A declaration imports no Beam (the command's parser is made from it, and commands such as
``inspect`` must start fast): ``prepare`` imports the format's reader when it is called.
"""

from __future__ import annotations

import importlib
import os
import pkgutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import TYPE_CHECKING, Any, NamedTuple

from recordbeam.options import Option

if TYPE_CHECKING:
    import apache_beam as beam

    from recordbeam.images.transcode import ImageFixes
    from recordbeam.write.image_encoder import ImageChecks
    from recordbeam.write.planning import ShardOptions
    from recordbeam.write.sink import WriteShards


@dataclass(frozen=True)
class Request:
    """A conversion as asked: the output folder, the split (``split_given``: typed, not
    the default, which an input naming its own splits refuses), and the format's own
    option values, checked and with their defaults."""

    output: str
    split: str
    values: Mapping[str, Any]
    split_given: bool = False

    def __getattr__(self, name: str) -> Any:
        try:
            return self.values[name]
        except KeyError:
            raise AttributeError(name) from None


@dataclass(frozen=True)
class Conversion:
    """What a format makes of a request once its inputs are checked.

    Attributes:
        splits: the splits the run writes.
        input_patterns: what ``--if-changed`` lists to fingerprint the inputs.
        settings: ``settings(shards, checks, fixes)``: everything besides the input files
            that shapes the output (recorded in the manifest and the fingerprint).
        build: ``build(p, shards, checks, fixes)`` adds the conversion to pipeline ``p``
            and returns the sink.
        after_run: said once the run is committed (``after_run(output)``), or None.
    """

    splits: Sequence[str]
    input_patterns: Sequence[str]
    settings: Callable[[ShardOptions, ImageChecks, ImageFixes | None], dict[str, Any]]
    build: Callable[[beam.Pipeline, ShardOptions, ImageChecks, ImageFixes | None], WriteShards]
    after_run: Callable[[str], None] | None = None


@dataclass(frozen=True)
class Format:
    """One input format.

    Attributes:
        name: the subcommand (``convert voc``), the Python API's ``format``, the script
            ``pipelines/<name>_to_tfrecord.py`` and the docs page.
        summary: one line, for ``--help`` and the docs.
        options: the format's own options, before the options every conversion has.
        prepare: checks a :class:`Request`'s inputs before any job (raising
            ``UsageError`` or ``DataError`` naming what is wrong) and returns its
            :class:`Conversion`.
        description: said under the summary in ``--help`` (the layout it reads).
        example: the options naming an example dataset, its paths relative (the docs and
            the ``pipelines/`` script show them locally and under ``gs://B/``).
    """

    name: str
    summary: str
    options: tuple[Option, ...]
    prepare: Callable[[Request], Conversion]
    description: str = ""
    example: tuple[str, ...] = ()
    #: The smallest input the format reads, laid out (:func:`lay_out_sample`) where the
    #: ``example``'s paths lead: each file's path, and its text, a JSON value (a dict or a
    #: list, written as JSON) or :data:`SAMPLE_IMAGE`. Two pictures, each with the object
    #: :data:`SAMPLE_BOX` (or the class ``dog``); every format's is converted by the tests.
    sample: Mapping[str, Any] = field(default_factory=dict)
    #: Options of other commands a user may bring here, and what this one takes instead
    #: (``--images`` given to ``convert yolo``): said in place of a typo suggestion.
    instead: Mapping[str, str] = field(default_factory=dict)
    #: What a Beam pipeline of one's own imports from :mod:`recordbeam.sources`, as full
    #: dotted paths (:func:`public_in`): the read transform, its options and its encoder.
    public: tuple[str, ...] = ()

    @property
    def script(self) -> str:
        return f"pipelines/{self.name.replace('-', '_')}_to_tfrecord.py"


class SampleImage(NamedTuple):
    """A picture of a sample, written as a JPEG of this size, of one colour (another for
    each picture)."""

    width: int = 40
    height: int = 30


SAMPLE_IMAGE = SampleImage()
#: The object of each picture of a sample, in pixels: (xmin, ymin, xmax, ymax).
SAMPLE_BOX = (4, 3, 20, 15)


def lay_out_sample(fmt: Format, root: str | os.PathLike[str]) -> dict[str, str]:
    """Write ``fmt.sample`` below the folder ``root``; returns the options of its
    ``example`` (paths below ``root``), as :func:`recordbeam.convert` takes them."""
    import io
    import json
    from pathlib import Path

    from PIL import Image

    pictures = 0
    for name, content in fmt.sample.items():
        path = Path(root, name)
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, SampleImage):  # each of its own colour: no two are the same
            buffer = io.BytesIO()
            pictures += 1
            Image.new("RGB", content, (200, 80, 40 * pictures)).save(buffer, "JPEG")
            path.write_bytes(buffer.getvalue())
        else:
            path.write_text(content if isinstance(content, str) else json.dumps(content),
                            encoding="utf-8")
    by_flag = {flag: option for option in fmt.options for flag in option.flags}
    pairs = zip(fmt.example[0::2], fmt.example[1::2], strict=True)
    return {by_flag[flag].name: os.path.join(root, value) for flag, value in pairs}


@cache
def formats() -> dict[str, Format]:
    """Every format, by name: each package of :mod:`recordbeam.sources` that declares a
    ``FORMAT``, in name order."""
    found = {}
    here = os.path.dirname(__file__)  # the recordbeam.sources package
    for module in pkgutil.iter_modules([here], f"{__package__}."):
        if module.ispkg:
            declared = getattr(importlib.import_module(module.name), "FORMAT", None)
            if isinstance(declared, Format):
                found[declared.name] = declared
    return dict(sorted(found.items()))


def prepared_in(module: str) -> Callable[[Request], Conversion]:
    """A ``prepare`` that calls ``module``'s own (the format's reader), importing it only
    when a conversion is prepared: a declaration imports no Beam."""

    def prepare(request: Request) -> Conversion:
        return importlib.import_module(module).prepare(request)

    return prepare


def public_in(module: str, *names: str) -> tuple[str, ...]:
    """The dotted paths of ``names`` defined in ``module``, for :attr:`Format.public`."""
    return tuple(f"{module}.{name}" for name in names)


# --- options several formats declare, each with its own words --------------------------


def input_option(help: str, *, metavar: str = "ROOT", aliases: tuple[str, ...] = ()) -> Option:
    """--input: the folder (or file) the format reads."""
    from recordbeam.options import Path

    return Option("input", help, Path(), required=True, metavar=metavar, aliases=aliases)


def images_option(help: str) -> Option:
    """--images: where the images are, when not where the format's layout puts them."""
    from recordbeam.options import Path

    return Option("images", help, Path(), metavar="DIR")


def classes_option(help: str) -> Option:
    from recordbeam.options import Path

    return Option("classes", help, Path(), metavar="FILE")


def include_masks_option(masks_from: str) -> Option:
    from recordbeam.options import Flag

    return Option("include_masks", f"write image/object/mask: one 0/1 PNG per object from "
                  f"{masks_from} (default: off)", Flag(), default=False)


def allow_outside_root_option(folders: str, also: str = "") -> Option:
    """--allow-outside-root: ``folders`` names what the command is given, ``also`` what
    else it would read outside them."""
    from recordbeam.options import Flag

    return Option("allow_outside_root", f"also read files that symbolic links lead outside "
                  f"{folders}{also} (default: refused, rejected outside_root without being "
                  "opened)", Flag(), default=False)


def annotation_rejects_option(things: str, reasons: str) -> Option:
    """The limit on rejected ``things`` (objects, boxes...); ``reasons`` lists typical ones."""
    from recordbeam.options import ANY_FRACTION

    return Option("max_annotation_reject_fraction",
                  f"fail when more than this fraction (0 to 1) of {things} is rejected "
                  f"({reasons}...; {things} of rejected images count as image rejects) "
                  "(default: --max-reject-fraction)", ANY_FRACTION, metavar="F")
