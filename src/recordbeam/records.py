"""The small typed records that flow between pipeline stages.

Every input kind (COCO, class folders, manifests) turns its data into ``ImageRecord``s,
so everything after the join is the same code. Records hold paths and labels, never
image bytes: they are what crosses Beam's shuffle.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class ImageRecord:
    """One example to write: an image file and what is known about it.

    Attributes:
        identity: stable id of the example (COCO image id, relative path...); its hash
            fixes the shard and the order, so it must not depend on where data lives.
        path: full path or URL of the image on any Beam filesystem.
        size: the file's size in bytes from the listing (used for shard planning).
        split: output split name, e.g. ``train``.
        labels: what the input kind knows about the image (objects, class...), read by
            the matching example builder.
        modified: the modification time (seconds) of each file the example is made from,
            as the listing gave it, in the order its encoder's ``input_files`` names them
            (one for most formats: ``path``); what ``--incremental`` compares, unopened.
    """

    identity: str
    path: str
    size: int
    split: str = "train"
    labels: Mapping[str, Any] = field(default_factory=dict)
    modified: tuple[float, ...] = ()


#: The namespace of recordbeam's Beam metrics (examples written, rejects, unlisted files...).
COUNTER_NAMESPACE = "recordbeam"

#: Default for ``max_reject_fraction``: more than 1% of images rejected usually means a
#: wrong path or a broken copy, not a few bad files, so the run fails instead of
#: quietly writing a much smaller dataset.
DEFAULT_MAX_REJECT_FRACTION = 0.01


#: ``--duplicates``: ``keep`` (found and listed, every copy written), ``drop`` (one copy
#: written), ``drop-across-splits`` (a later split's copies of an earlier split's image
#: dropped), ``off`` (not looked for).
DUPLICATE_MODES = ("keep", "drop", "drop-across-splits", "off")
DROP_MODES = ("drop", "drop-across-splits")

#: The largest label an Example holds: ``int64_list`` values are 64-bit signed integers.
MAX_LABEL = 2**63 - 1


#: Annotation reject reasons that mean "its image was not written": those losses count
#: against ``max_reject_fraction`` (images), not against the annotation limit.
LOST_WITH_IMAGE = ("image_missing", "image_rejected")

#: The count (in the manifest's ``counts``) of objects written: with the annotation
#: rejects, what the annotation reject fraction is taken over.
OBJECTS_WRITTEN = "boxes_written"
#: The counts of the other annotations written (COCO's captions and image-level labels):
#: their rejects are annotation rejects, so the fraction is taken over them too.
CAPTIONS_WRITTEN = "captions_written"
IMAGE_LABELS_WRITTEN = "image_labels_written"
ANNOTATIONS_WRITTEN = (OBJECTS_WRITTEN, CAPTIONS_WRITTEN, IMAGE_LABELS_WRITTEN)


@dataclass(frozen=True)
class Reject:
    """Something that was not written, and why.

    Attributes:
        kind: ``image`` (an example was lost), ``annotation`` (an object or row was
            dropped but its image was written) or ``warning`` (written, but worth a look,
            e.g. JSON size disagreeing with the image header).
        source: the file path, or ``annotation <id>`` / ``<file>:<line>``.
        reason: a short code (``truncated``, ``missing``, ``unknown_category``...).
        detail: one human sentence: what is wrong and what to do.
        split: the split it was meant for; None means the run's default split.
    """

    kind: str
    source: str
    reason: str
    detail: str
    split: str | None = None

    def to_json(self) -> str:
        return json.dumps(
            {"kind": self.kind, "source": self.source, "reason": self.reason,
             "detail": self.detail, "split": self.split},
            ensure_ascii=False,
            sort_keys=True,
        )

    @staticmethod
    def from_json(line: str) -> Reject:
        d = json.loads(line)
        return Reject(d["kind"], d["source"], d["reason"], d["detail"], d.get("split"))
