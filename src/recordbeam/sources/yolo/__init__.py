"""YOLO: darknet (``obj.data``, ``obj.names``) and Ultralytics (``data.yaml``) folders, and
folders of images and labels with a class names file. The reader is
:mod:`recordbeam.sources.yolo.reader`."""

from recordbeam.sources.format import (
    SAMPLE_IMAGE,
    Format,
    allow_outside_root_option,
    annotation_rejects_option,
    classes_option,
    include_masks_option,
    input_option,
    prepared_in,
    public_in,
)

FORMAT = Format(
    name="yolo",
    summary="YOLO folder: darknet (obj.data, obj.names) or Ultralytics "
            "(data.yaml, images/, labels/)",
    options=(
        input_option("the YOLO folder as exported: obj.data + obj.names + lists of images "
                     "(darknet), or data.yaml + images/<split>/ + labels/<split>/ "
                     "(Ultralytics); without either, images/ + labels/ (or labels beside "
                     "images) and a classes.txt"),
        classes_option("class names, one per line, class 0 first, for a folder without "
                       "obj.data or data.yaml (default: its classes.txt, obj.names or "
                       "_darknet.labels)"),
        include_masks_option("the segment lines (the box for box lines)"),
        allow_outside_root_option("ROOT", ", and the folders or lists data.yaml names "
                                  "outside ROOT"),
        annotation_rejects_option("objects", "unknown class id, malformed line, empty box"),
    ),
    prepare=prepared_in(f"{__name__}.reader"),
    public=public_in(f"{__name__}.reader", "ReadYolo", "YoloOptions", "YoloEncoder"),
    example=("--input", "datasets/coco8"),
    sample={
        **{f"datasets/coco8/images/train/{n}.jpg": SAMPLE_IMAGE for n in "ab"},
        **{f"datasets/coco8/labels/train/{n}.txt": "0 0.3 0.3 0.4 0.4\n" for n in "ab"},
        "datasets/coco8/data.yaml": "train: images/train\nnames: [dog]\n"},
    instead={
        "--images": "YOLO finds each image's labels from the image's path, so the images "
                    "are where obj.data or data.yaml say; give their folder as --input",
    },
)
