"""ImageNet-style class folders: ``ROOT/<class>/<image>`` (or ``ROOT/<split>/<class>/``).
The reader is :mod:`recordbeam.sources.imagefolder.reader`."""

from recordbeam.options import Fraction, Option, WholeNumber
from recordbeam.records import MAX_LABEL
from recordbeam.sources.format import (
    SAMPLE_IMAGE,
    Format,
    allow_outside_root_option,
    classes_option,
    input_option,
    prepared_in,
    public_in,
)

FORMAT = Format(
    name="imagefolder",
    summary="ImageNet-style class folders: ROOT/<class>/<image>",
    options=(
        input_option("folder of class folders (or of train/ and val/ split folders)",
                     metavar="DIR", aliases=("--root",)),
        classes_option("file with one class name per line, in label order (default: folder "
                       "names sorted)"),
        Option("label_offset", "label of the first class; 1 keeps 0 for background, as slim "
               "does (default: 0)",
               WholeNumber(0, f"between 0 and {MAX_LABEL} (labels are 64-bit integers)",
                           maximum=MAX_LABEL),
               default=0, metavar="N"),
        Option("val_fraction", "write this share (0 to 1) of a flat layout's images to val, by "
               "a hash of their path (default: no val split)",
               Fraction(zero_allowed=False, one_allowed=False)),
        allow_outside_root_option("--input"),
    ),
    prepare=prepared_in(f"{__name__}.reader"),
    public=public_in(f"{__name__}.reader", "ReadImageFolder", "ImageFolderOptions", "ClassificationEncoder"),
    example=("--input", "imagenet/train"),
    sample={f"imagenet/train/dog/{n}.jpg": SAMPLE_IMAGE for n in "ab"},
    instead={"--images": "convert imagefolder takes the class folders' parent as --input"},
)
