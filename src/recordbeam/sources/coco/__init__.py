"""COCO: an instances (detection), person keypoints or LVIS JSON, and/or a captions JSON,
+ a folder of images. The reader is :mod:`recordbeam.sources.coco.reader`; the modules
beside it hold its roles: ``json_stream`` (reading the JSON), ``checks`` (each item),
``input_tasks`` (the first stage), ``join`` (by file name, then by image id), ``labels``
(categories as written), ``encoder`` and ``records`` (what the stages hand each other)."""

from recordbeam.options import Flag, Option, Path
from recordbeam.sources.format import (
    SAMPLE_IMAGE,
    Format,
    annotation_rejects_option,
    include_masks_option,
    prepared_in,
    public_in,
)

FORMAT = Format(
    name="coco",
    summary="COCO instances (keypoints, LVIS, captions) JSON + image folder",
    options=(
        Option("images", "folder of images named by file_name", Path(), required=True,
               metavar="DIR"),
        Option("annotations", "COCO instances JSON file (person keypoints and LVIS files too) "
               "(default: none; then --captions is required)", Path(), metavar="FILE"),
        Option("contiguous_labels", "write labels 1..K in category-id order (default: COCO's "
               "category ids)", Flag(), default=False),
        Option("allow_outside_root", "also read files outside --images: file_names with '..' "
               "or absolute paths, and symbolic links leading out (default: refused)", Flag(),
               default=False),
        include_masks_option("the segmentations"),
        Option("include_keypoints", "write image/object/keypoint/{x,y,visibility,num,text} "
               "from a person keypoints file (default: off; the summary counts keypoints not "
               "written)", Flag(), default=False),
        Option("captions", "COCO captions JSON (captions_*.json): write image/caption, joined "
               "by image id; alone (no --annotations) its own images are converted (default: "
               "none)", Path(), metavar="FILE"),
        annotation_rejects_option(
            "annotations", "unknown image or category, invalid box or mask, duplicate id"),
    ),
    prepare=prepared_in(f"{__name__}.reader"),
    public=(*public_in(f"{__name__}.reader", "ReadCoco"),
            *public_in(f"{__name__}.options", "CocoOptions"),
            *public_in(f"{__name__}.encoder", "CocoEncoder")),
    example=("--images", "train2017", "--annotations", "annotations/instances_train2017.json"),
    sample={
        **{f"train2017/{n}.jpg": SAMPLE_IMAGE for n in "ab"},
        "annotations/instances_train2017.json": {
            "images": [{"id": i, "file_name": f"{n}.jpg", "width": 40, "height": 30}
                       for i, n in enumerate("ab", 1)],
            "annotations": [{"id": i, "image_id": i, "category_id": 1, "iscrowd": 0,
                             "bbox": [4, 3, 16, 12], "area": 192} for i in (1, 2)],
            "categories": [{"id": 1, "name": "dog"}]}},
    instead=dict.fromkeys(
        ("--input", "--root"), "convert coco takes --images FOLDER and --annotations FILE"),
)
