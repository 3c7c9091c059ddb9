"""Pascal VOC: ``Annotations/*.xml`` + ``JPEGImages/`` (+ split lists, label map), or a flat
export with each XML beside its image. The reader is :mod:`recordbeam.sources.voc.reader`."""

from recordbeam.sources.format import (
    SAMPLE_IMAGE,
    Format,
    allow_outside_root_option,
    annotation_rejects_option,
    images_option,
    input_option,
    prepared_in,
    public_in,
)

FORMAT = Format(
    name="voc",
    summary="Pascal VOC folder: Annotations/*.xml, JPEGImages/, ImageSets/Main/",
    options=(
        input_option("the VOC folder as exported: Annotations/, JPEGImages/, optional "
                     "ImageSets/Main/<split>.txt and labelmap.txt; or a flat export, each "
                     "<id>.xml beside its image (in train/, valid/, test/ folders as Roboflow "
                     "writes them)"),
        images_option("folder of the images (default: ROOT/JPEGImages)"),
        allow_outside_root_option("ROOT and --images"),
        annotation_rejects_option("objects", "unknown class, invalid or degenerate box"),
    ),
    prepare=prepared_in(f"{__name__}.reader"),
    public=public_in(f"{__name__}.reader", "ReadVoc", "VocOptions", "VocEncoder"),
    example=("--input", "VOCdevkit/VOC2012"),
    sample={
        **{f"VOCdevkit/VOC2012/JPEGImages/{n}.jpg": SAMPLE_IMAGE for n in "ab"},
        **{f"VOCdevkit/VOC2012/Annotations/{n}.xml": (
            f"<annotation><filename>{n}.jpg</filename><size><width>40</width><height>30"
            "</height><depth>3</depth></size><object><name>dog</name><bndbox><xmin>4</xmin>"
            "<ymin>3</ymin><xmax>20</xmax><ymax>15</ymax></bndbox></object></annotation>")
           for n in "ab"}},
    instead=dict.fromkeys(
        ("--label-map", "--labels", "--classes"),
        "VOC's classes are the lines of labelmap.txt in --input, else the names in the XMLs"),
)
