"""Each declared format's smallest input: its declared ``sample`` (two 40x30 pictures with
one box, or one class, each), and that input converted once per test run on Beam's
in-memory runner (:func:`converted`), for the tests that every format still converts
(``tests/integration/test_each_format.py``) and that TensorFlow reads each format's
output (``tests/interop/test_each_format_tf.py``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from once import once_per_run

import recordbeam
from recordbeam.sources.format import SAMPLE_BOX, SAMPLE_IMAGE, formats, lay_out_sample

IN_MEMORY = ("--direct_running_mode=in_memory", "--direct_num_workers=1")
WIDTH, HEIGHT = SAMPLE_IMAGE
#: The box every picture holds, in pixels: (xmin, ymin, xmax, ymax).
BOX = SAMPLE_BOX
NAMES = ("a", "b")

#: Each format's small input: writes it below a folder, returns the options naming it.
INPUTS: dict[str, Callable[[Path], dict]] = {
    name: partial(lay_out_sample, fmt) for name, fmt in formats().items()}


@dataclass(frozen=True)
class Converted:
    """A format's input converted: the output folder, its one split, and its manifest."""

    output: Path
    split: str
    manifest: dict


def converted(kind: str, tmp_path_factory) -> Converted:
    """``kind``'s small input converted, once per test run (read only)."""

    def convert(root: Path) -> Converted:
        options = INPUTS[kind](root / "in")
        result = recordbeam.convert(kind, output=str(root / "out"), beam_args=IN_MEMORY,
                                    quiet=True, **options)
        (split,) = result.manifest["splits"]
        return Converted(root / "out", split, dict(result.manifest))

    return once_per_run(tmp_path_factory, f"each-format-{kind}", convert)
