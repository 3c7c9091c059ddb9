"""CVAT for images (and for video) 1.1 XML: ``annotations.xml`` (or ``<subset>.xml``) +
``images/``. The reader is :mod:`recordbeam.sources.cvat.reader`."""

from recordbeam.sources.format import (
    Format,
    allow_outside_root_option,
    annotation_rejects_option,
    images_option,
    include_masks_option,
    input_option,
    prepared_in,
    public_in,
)

FORMAT = Format(
    name="cvat",
    summary="CVAT for images or video 1.1 XML: annotations.xml (or <subset>.xml), images/",
    options=(
        input_option("the CVAT export folder: annotations.xml or <subset>.xml files, and "
                     "images/ (or images/<subset>/)"),
        images_option("folder of the images (default: ROOT/images)"),
        include_masks_option("its polygon or CVAT mask, or its box when it has neither"),
        allow_outside_root_option("ROOT and --images"),
        annotation_rejects_option("objects", "unknown label, invalid box, malformed points "
                                  "or rle"),
    ),
    prepare=prepared_in(f"{__name__}.reader"),
    public=public_in(f"{__name__}.reader", "ReadCvat", "CvatOptions", "CvatEncoder"),
    example=("--input", "cvat-export"),
)
