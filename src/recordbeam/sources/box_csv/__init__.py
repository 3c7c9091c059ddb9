"""Box CSV (Roboflow's TensorFlow Object Detection CSV): one ``_annotations.csv`` per split,
beside its images. The reader is :mod:`recordbeam.sources.box_csv.reader`: its parsing and
checks; its read transform (tables and image listings joined on workers) it shares with
Open Images, :mod:`recordbeam.sources.csv_boxes`."""

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
    name="box-csv",
    summary="box CSV per split (Roboflow's TensorFlow Object Detection CSV): "
            "<split>/_annotations.csv beside the images",
    options=(
        input_option("the exported folder: <split>/_annotations.csv (filename,width,height,"
                     "class,xmin,ymin,xmax,ymax; one row per box) beside the images"),
        images_option("folder holding the <split>/ folders of images (default: ROOT)"),
        allow_outside_root_option("ROOT and --images"),
        annotation_rejects_option("boxes", "malformed row, degenerate box"),
    ),
    prepare=prepared_in(f"{__name__}.reader"),
    public=public_in(f"{__name__}.reader", "ReadBoxCsv", "BoxCsvOptions", "BoxCsvEncoder"),
    example=("--input", "export"),
    sample={
        **{f"export/train/{n}.jpg": SAMPLE_IMAGE for n in "ab"},
        "export/train/_annotations.csv": "filename,width,height,class,xmin,ymin,xmax,ymax\n"
        + "".join(f"{n}.jpg,40,30,dog,4,3,20,15\n" for n in "ab")},
)
