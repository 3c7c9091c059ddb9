"""KITTI object detection: ``<split>/image_2/`` + ``<split>/label_2/``. The reader is
:mod:`recordbeam.sources.kitti.reader`."""

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
    name="kitti",
    summary="KITTI detection folder: <split>/image_2/, <split>/label_2/",
    options=(
        input_option("the KITTI folder: each <split>/ holding image_2/ and label_2/ "
                     "(training/, testing/ ...) is a split named as its folder; or image_2/ "
                     "and label_2/ themselves, one split named by --split"),
        images_option("folder holding <split>/image_2/ (default: ROOT)"),
        allow_outside_root_option("ROOT and --images"),
        annotation_rejects_option("objects", "malformed line, degenerate box"),
    ),
    prepare=prepared_in(f"{__name__}.reader"),
    public=public_in(f"{__name__}.reader", "ReadKitti", "KittiOptions", "KittiEncoder"),
    example=("--input", "kitti"),
    sample={
        **{f"kitti/training/image_2/{n}.jpg": SAMPLE_IMAGE for n in "ab"},
        **{f"kitti/training/label_2/{n}.txt": "Car 0.00 0 -1.57 4.00 3.00 20.00 15.00 1.5 1.6 "
           "3.9 1.0 1.7 20.0 -1.5\n" for n in "ab"}},
)
