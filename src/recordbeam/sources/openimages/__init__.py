"""Open Images: box tables, class descriptions and image-level labels as CSVs, the images
in one folder per split. The reader is :mod:`recordbeam.sources.openimages.reader`: its
parsing and checks; its read transform (tables and image listings joined on workers) it
shares with box CSV, :mod:`recordbeam.sources.csv_boxes`."""

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
    name="openimages",
    summary="Open Images CSVs: *-annotations-bbox.csv, class-descriptions*.csv, images/<split>/",
    options=(
        input_option("the Open Images folder: <split>-annotations-bbox.csv, "
                     "class-descriptions*.csv and optional <split>-annotations-human-imagelabels"
                     "*.csv (in ROOT or ROOT/annotations), images/<split>/<ImageID>.jpg"),
        images_option("folder holding the <split>/ folders of images (default: ROOT/images)"),
        allow_outside_root_option("ROOT and --images"),
        annotation_rejects_option("boxes", "unknown LabelName, malformed row, degenerate box"),
    ),
    prepare=prepared_in(f"{__name__}.reader"),
    public=public_in(f"{__name__}.reader", "ReadOpenImages", "OpenImagesOptions", "OpenImagesEncoder"),
    example=("--input", "open-images"),
    sample={
        **{f"open-images/images/train/{n}.jpg": SAMPLE_IMAGE for n in "ab"},
        "open-images/train-annotations-bbox.csv": (
            "ImageID,Source,LabelName,Confidence,XMin,XMax,YMin,YMax,IsOccluded,IsTruncated,"
            "IsGroupOf,IsDepiction,IsInside\n"
            + "".join(f"{n},xclick,/m/dog,1,0.1,0.5,0.1,0.5,0,0,0,0,0\n" for n in "ab")),
        "open-images/class-descriptions-boxable.csv": "/m/dog,Dog\n"},
)
