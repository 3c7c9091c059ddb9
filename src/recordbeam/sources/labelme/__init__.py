"""labelme: a folder of labelme JSONs, one per image, each naming its image by
``imagePath``. The reader is :mod:`recordbeam.sources.labelme.reader`."""

from recordbeam.sources import format as fmt

FORMAT = fmt.Format(
    name="labelme",
    summary="folder of labelme JSONs, one per image",
    options=(
        fmt.input_option("the folder of labelme JSONs (any depth); each JSON's imagePath, "
                         "relative to it, names its image"),
        fmt.images_option("folder of the images, laid out as the JSONs below ROOT (default: "
                          "where each imagePath points)"),
        fmt.classes_option("file with one class name per line, in label order, labels 1..K; "
                           "labelme's __ignore__ and _background_ lines are skipped (default: the "
                           "labels found, sorted)"),
        fmt.include_masks_option("its polygons and circles (a rectangle's mask is its box)"),
        fmt.allow_outside_root_option("ROOT and --images"),
        fmt.annotation_rejects_option("objects", "unknown class, invalid or degenerate shape"),
    ),
    prepare=fmt.prepared_in(f"{__name__}.reader"),
    public=fmt.public_in(f"{__name__}.reader", "ReadLabelme", "LabelmeOptions", "LabelmeEncoder"),
    example=("--input", "labelme_folder"),
    sample={
        **{f"labelme_folder/{n}.jpg": fmt.SAMPLE_IMAGE for n in "ab"},
        **{f"labelme_folder/{n}.json": {
            "version": "5.2.1", "flags": {}, "imagePath": f"{n}.jpg", "imageData": None,
            "imageHeight": 30, "imageWidth": 40,
            "shapes": [{"label": "dog", "points": [[4, 3], [20, 15]], "group_id": None,
                        "shape_type": "rectangle", "flags": {}}]} for n in "ab"}},
)
