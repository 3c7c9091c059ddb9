"""CVAT for images (and for video) 1.1 XML: ``annotations.xml`` (or ``<subset>.xml``) +
``images/``. The reader is :mod:`recordbeam.sources.cvat.reader`."""

from recordbeam.sources import format as fmt

FORMAT = fmt.Format(
    name="cvat",
    summary="CVAT for images or video 1.1 XML: annotations.xml (or <subset>.xml), images/",
    options=(
        fmt.input_option("the CVAT export folder: annotations.xml or <subset>.xml files, and "
                         "images/ (or images/<subset>/)"),
        fmt.images_option("folder of the images (default: ROOT/images)"),
        fmt.include_masks_option("its polygon or CVAT mask, or its box when it has neither"),
        fmt.allow_outside_root_option("ROOT and --images"),
        fmt.annotation_rejects_option("objects", "unknown label, invalid box, malformed points "
                                      "or rle"),
    ),
    prepare=fmt.prepared_in(f"{__name__}.reader"),
    public=fmt.public_in(f"{__name__}.reader", "ReadCvat", "CvatOptions", "CvatEncoder"),
    example=("--input", "cvat-export"),
    sample={
        **{f"cvat-export/images/{n}.jpg": fmt.SAMPLE_IMAGE for n in "ab"},
        "cvat-export/annotations.xml": (
            "<annotations><version>1.1</version><meta><task><name>t</name><labels><label>"
            "<name>dog</name></label></labels></task></meta>" + "".join(
                f'<image id="{i}" name="{n}.jpg" width="40" height="30"><box label="dog" '
                'occluded="0" xtl="4" ytl="3" xbr="20" ybr="15"/></image>'
                for i, n in enumerate("ab")) + "</annotations>")},
)
