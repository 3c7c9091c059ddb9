"""The names of the features in the Examples recordbeam writes, in one place.

Every encoder, reader, ``check`` rule, the report and the schema name a feature through
these constants, so a key is spelled once. The names are those of TensorFlow's Object
Detection API, which Model Garden's ``TfExampleDecoder`` and TFDS's detection builders
read: ``image/...`` for the picture and its labels, ``image/object/...`` for one value per
object (the lists of an Example line up by object).

This module imports nothing: any floor of the package may use it. A format adds to a
copy of a kind table, never to the table.
"""

from __future__ import annotations

#: The image's own features start so (a manifest with several image columns writes
#: ``<column>/encoded``... instead).
IMAGE_PREFIX = "image/"

# The image.
ENCODED = "image/encoded"
FORMAT = "image/format"
HEIGHT = "image/height"
WIDTH = "image/width"
FILENAME = "image/filename"
SOURCE_ID = "image/source_id"
SHA256 = "image/key/sha256"

# Labels of the whole image.
CLASS_LABEL = "image/class/label"
CLASS_TEXT = "image/class/text"
CAPTION = "image/caption"
NEG_CATEGORY_IDS = "image/neg_category_ids"  # LVIS: categories verified absent
NOT_EXHAUSTIVE_CATEGORY_IDS = "image/not_exhaustive_category_ids"  # LVIS

#: Every per-object feature starts so; its lists hold one value per object.
OBJECT_PREFIX = "image/object/"

# Objects: boxes normalized to [0, 1] of the image, their classes.
XMIN = "image/object/bbox/xmin"
YMIN = "image/object/bbox/ymin"
XMAX = "image/object/bbox/xmax"
YMAX = "image/object/bbox/ymax"
#: The four box coordinates, in the order a box is drawn: (xmin, ymin, xmax, ymax).
BOX = (XMIN, YMIN, XMAX, YMAX)
OBJECT_LABEL = "image/object/class/label"
OBJECT_TEXT = "image/object/class/text"

# Objects: COCO's extras.
IS_CROWD = "image/object/is_crowd"
AREA = "image/object/area"
MASK = "image/object/mask"
KEYPOINT_X = "image/object/keypoint/x"
KEYPOINT_Y = "image/object/keypoint/y"
KEYPOINT_VISIBILITY = "image/object/keypoint/visibility"
KEYPOINT_TEXT = "image/object/keypoint/text"
KEYPOINT_NUM = "image/object/keypoint/num"

# Objects: the flags other formats carry.
DIFFICULT = "image/object/difficult"  # VOC
TRUNCATED = "image/object/truncated"  # VOC (0/1), KITTI (a fraction), Open Images
OCCLUDED = "image/object/occluded"  # KITTI, CVAT, Open Images
VIEW = "image/object/view"  # VOC's pose
TRACK_ID = "image/object/track_id"  # CVAT for video
GROUP_OF = "image/object/group_of"  # Open Images
DEPICTION = "image/object/depiction"  # Open Images

# Objects: KITTI's 3D boxes, in the camera's coordinates.
ALPHA = "image/object/alpha"
BOX_3D_HEIGHT = "image/object/3d_bbox/height"
BOX_3D_WIDTH = "image/object/3d_bbox/width"
BOX_3D_LENGTH = "image/object/3d_bbox/length"
BOX_3D_X = "image/object/3d_bbox/x"
BOX_3D_Y = "image/object/3d_bbox/y"
BOX_3D_Z = "image/object/3d_bbox/z"
BOX_3D_ROT_Y = "image/object/3d_bbox/rot_y"

#: The features every image Example has, with their kinds (``bytes``, ``int64``, ``float``).
IMAGE_KINDS = {
    ENCODED: "bytes",
    FORMAT: "bytes",
    HEIGHT: "int64",
    WIDTH: "int64",
    FILENAME: "bytes",
    SOURCE_ID: "bytes",
    SHA256: "bytes",
}

#: The features every detection Example has besides :data:`IMAGE_KINDS`: its boxes and
#: their classes.
DETECTION_KINDS = {
    XMIN: "float",
    XMAX: "float",
    YMIN: "float",
    YMAX: "float",
    OBJECT_LABEL: "int64",
    OBJECT_TEXT: "bytes",
}

#: The classes of a whole image (class folders, manifests, COCO's image labels).
IMAGE_LABEL_KINDS = {CLASS_LABEL: "int64", CLASS_TEXT: "bytes"}


def image_key(field: str) -> str:
    """The feature key of one of the image's own fields (``encoded``, ``key/sha256``...)."""
    return IMAGE_PREFIX + field
