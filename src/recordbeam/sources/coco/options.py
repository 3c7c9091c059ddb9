"""What a COCO conversion reads, and how it labels what it reads (:class:`CocoOptions`)."""

from __future__ import annotations

from dataclasses import dataclass

from recordbeam import filesystems


@dataclass(frozen=True)
class CocoOptions:
    """What to read and how to label it.

    Attributes:
        images_dir: folder holding the images named by ``file_name`` (any Beam filesystem).
        annotations: path of the COCO instances (or person keypoints, or LVIS) JSON; None
            with ``captions`` alone, whose images are then the captions file's.
        split: split name of the output.
        contiguous_labels: write labels 1..K in category-id order instead of COCO's ids.
        allow_outside_root: read files outside ``images_dir`` too: ``file_name``s with
            ``..`` or absolute paths, and symbolic links leading out of the folder. Off by
            default so a crafted annotation file cannot make the job read arbitrary files.
        include_masks: also write ``image/object/mask`` (one 0/1 PNG per object) from the
            polygons or RLEs in ``segmentation``; segmentations are dropped otherwise.
        include_keypoints: also write ``image/object/keypoint/*`` from the annotations'
            ``keypoints`` and the categories' keypoint names; without it, annotations that
            hold keypoints are counted as not written.
        captions: path of a COCO captions JSON (``captions_*.json``) whose captions are
            joined by image id into ``image/caption``.
    """

    images_dir: str
    annotations: str | None
    split: str = "train"
    contiguous_labels: bool = False
    allow_outside_root: bool = False
    include_masks: bool = False
    include_keypoints: bool = False
    captions: str | None = None

    def input_roots(self) -> filesystems.InputRoots | None:
        """The folders this run reads (see :class:`recordbeam.filesystems.InputRoots`)."""
        return filesystems.input_roots((self.images_dir,), self.allow_outside_root)

    def __post_init__(self) -> None:
        if not self.annotations and not self.captions:
            raise ValueError("CocoOptions needs an annotations file, a captions file or both")

    @property
    def images_file(self) -> str:
        """The file whose ``images`` and ``categories`` are read: the annotations, else
        the captions."""
        return self.annotations or self.captions  # type: ignore[return-value]
