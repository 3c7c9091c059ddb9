"""Label Studio: its JSON export (an array of tasks) + the folder its image references
resolve under. The reader is :mod:`recordbeam.sources.labelstudio.reader`."""

from recordbeam.options import Choice, Flag, Option, Path, Text
from recordbeam.sources import format as fmt

FORMAT = fmt.Format(
    name="labelstudio",
    summary="Label Studio JSON export (an array of tasks) + the folder of its images",
    options=(
        fmt.input_option("Label Studio's JSON export (Export > JSON): one file holding an "
                         "array of tasks", metavar="FILE"),
        Option("images", "the folder the tasks' images resolve under: Label Studio's media "
               "folder (holding upload/) for uploads, its LOCAL_FILES_DOCUMENT_ROOT for local "
               "files, the bucket folder (s3://B/P, gs://B/P) for cloud storage (default: "
               "the folder holding the export)", Path(), metavar="DIR"),
        Option("image_key", "the task's data field naming its image, the $name of the labeling "
               "config's <Image value=\"$name\"> (default: image)", Text(), default="image",
               metavar="FIELD"),
        Option("annotation", "which annotation of a task is written: ground-truth (the one "
               "marked ground truth, else the latest), latest (the last updated), first (the "
               "first created); never a cancelled one (default: ground-truth)",
               Choice(("ground-truth", "latest", "first")), default="ground-truth"),
        Option("use_predictions", "write a task's latest prediction when it has no annotation "
               "(default: off; predictions are counted, not written)", Flag(), default=False),
        fmt.classes_option("file with one class name per line, in label order, labels 1..K "
                           "(default: the labels and choices found, sorted)"),
        fmt.include_masks_option("its polygon or turned rectangle (an upright rectangle's is "
                                 "its box)"),
        fmt.allow_outside_root_option("--images"),
        fmt.annotation_rejects_option("objects", "unknown class, invalid rectangle or "
                                      "polygon, result without value"),
    ),
    prepare=fmt.prepared_in(f"{__name__}.reader"),
    public=fmt.public_in(f"{__name__}.reader", "ReadLabelStudio", "LabelStudioOptions",
                         "LabelStudioEncoder"),
    example=("--input", "project-1-export.json", "--images", "media"),
    sample={
        **{f"media/upload/1/0c5e1d7{i}-{n}.jpg": fmt.SAMPLE_IMAGE for i, n in enumerate("ab")},
        "project-1-export.json": [{
            "id": i + 1, "data": {"image": f"/data/upload/1/0c5e1d7{i}-{n}.jpg"},
            "annotations": [{"id": i + 1, "was_cancelled": False, "ground_truth": False,
                             "result": [{
                "id": f"box{i}", "type": "rectanglelabels", "from_name": "label",
                "to_name": "image", "original_width": 40, "original_height": 30,
                "value": {"x": 10, "y": 10, "width": 40, "height": 40, "rotation": 0,
                          "rectanglelabels": ["dog"]}}]}]} for i, n in enumerate("ab")]},
)
