"""The named records sources hand between their stages, and the coders they cross
shuffles with: every field survives, the encoding stays compact (no pickled class), and
the sources' PCollections carry the types so Beam picks these coders."""

from __future__ import annotations

import pickle

import apache_beam as beam
import pytest
from apache_beam.typehints import Tuple

from recordbeam.records import ImageRecord
from recordbeam.sources.coco.reader import CocoOptions, ReadCoco
from recordbeam.sources.coco.records import (
    Annotation,
    AnnotationBatch,
    ImageEntry,
    ImageNotLocated,
    JoinKey,
    JoinKeyCoder,
    JoinMessage,
    JoinMessageCoder,
    ListedFile,
    LocatedImage,
    ObjectLabel,
    pack_annotations,
    unpack_annotations,
    unpack_objects,
)
from recordbeam.sources.record_coder import ImageRecordCoder
from recordbeam.sources.result import SourceRead

MESSAGES = [
    ListedFile("/data/images/a b.jpg", 123_456, 1735689600.25),
    ListedFile("/data/\\udcff.jpg", 0),
    ImageEntry(7, "a b.jpg", 640, 480),
    ImageEntry("img-7", "sub/a.jpg", None, None),
    ImageEntry(2**70, "big.jpg", 1, None),
    AnnotationBatch(7, pack_annotations([Annotation(1, 3, (0.0, 1.0, 2.0, 3.0), 6.0, 0)])),
    ImageNotLocated("duplicate_file_name"),
    LocatedImage(7, "a.jpg", "/data/images/a.jpg", 99, 640, 480),
    LocatedImage("7", "a.jpg", "gs://bucket/a.jpg", 1, None, 3, 1735689600.123456),
]


@pytest.mark.parametrize("message", MESSAGES, ids=lambda m: type(m).__name__)
def test_join_messages_survive_their_coder_with_every_field(message):
    coder = JoinMessageCoder()
    decoded = coder.decode(coder.encode(message))
    assert decoded == message and type(decoded) is type(message)
    assert type(decoded.image_id if hasattr(decoded, "image_id") else None) is type(
        message.image_id if hasattr(message, "image_id") else None)


def test_join_messages_are_encoded_without_class_or_field_names():
    located = LocatedImage(7, "a.jpg", "/d/a.jpg", 99, 640, 480, 1.5e9)
    encoded = JoinMessageCoder().encode(located)
    assert b"LocatedImage" not in encoded and b"image_id" not in encoded
    # kind byte, id, two length-prefixed texts, size, width, height, modification time
    assert len(encoded) < len("a.jpg") + len("/d/a.jpg") + 16 + 8
    assert len(encoded) < len(pickle.dumps(located, protocol=pickle.HIGHEST_PROTOCOL)) / 3


def test_join_keys_are_deterministic_and_tell_file_names_from_image_ids():
    coder = JoinKeyCoder()
    assert coder.is_deterministic()
    by_name, by_id = JoinKey("7"), JoinKey("7", by_image_id=True)
    assert coder.encode(by_name) != coder.encode(by_id)
    for key in (by_name, by_id, JoinKey("\0caf\\udce9.jpg")):
        assert coder.decode(coder.encode(key)) == key


def test_packed_annotations_read_back_by_name_and_stay_as_compact_as_tuples():
    plain = [Annotation(1, 3, (0, 0, 2, 2), 4.0, 1), Annotation("x", 5, (1, 1, 1, 1), 1.0, 0)]
    masked = [Annotation(2, 3, (0, 0, 2, 2), 4.0, 0, [[0, 0, 2, 0, 2, 2]])]
    assert unpack_annotations(pack_annotations(plain)) == tuple(plain)
    assert unpack_annotations(pack_annotations(masked))[0].segmentation == [[0, 0, 2, 0, 2, 2]]
    # the five required fields, as the annotations travelled before they had names
    as_tuples = pickle.dumps(tuple(tuple(a)[:5] for a in plain), protocol=pickle.HIGHEST_PROTOCOL)
    assert len(pack_annotations(plain)) == len(as_tuples)
    objects = [ObjectLabel(1, 90, "dog", (0, 0, 1, 1), 1.0, 0)]
    assert unpack_objects(pack_annotations(objects))[0].text == "dog"


@pytest.mark.parametrize("labels", [
    {"source_id": "7", "filename": "a.jpg", "width": None, "height": 3, "objects": b"\x80"},
    {"label": 3, "text": "cat", "source_id": "cat/1.jpg"},
    {"row": {"x": 1.5, "tags": ["a", "b"], "n": None, "big": 2**70},
     "images": (("image", "/m/a.png", 10),), "line": 2},
    {"text": "caf\udce9", "source_id": "caf\udce9/1.jpg"},  # a class folder not in UTF-8
])
def test_image_records_survive_their_coder(labels):
    record = ImageRecord("caf\udce9/1.jpg", "/root/caf\udce9/1.jpg", 10, "val", labels)
    coder = beam.coders.registry.get_coder(ImageRecord)
    assert isinstance(coder, ImageRecordCoder)
    decoded = coder.decode(coder.encode(record))
    assert decoded == record
    assert [type(v) for v in decoded.labels.values()] == [type(v) for v in labels.values()]


def _element_types(pipeline: beam.Pipeline) -> dict[str, object]:
    """Each applied transform's label -> its main input's element type."""
    found: dict[str, object] = {}

    class Visitor(beam.pipeline.PipelineVisitor):
        def visit_transform(self, node):
            if node.inputs:
                found[node.full_label] = node.inputs[0].element_type

    pipeline.visit(Visitor())
    return found


def test_coco_stages_carry_named_types_so_shuffles_use_the_compact_coders(tmp_path):
    p = beam.Pipeline()
    read = p | "Read" >> ReadCoco(CocoOptions(str(tmp_path), str(tmp_path / "a.json"),
                                              allow_outside_root=True))
    types = _element_types(p)
    registry = beam.coders.registry
    assert registry.get_coder(types["Read/JoinFilesByName"]) == registry.get_coder(
        Tuple[JoinKey, JoinMessage])
    assert str(registry.get_coder(types["Read/JoinAnnotationsById"])).endswith(
        "JoinMessageCoder]")
    assert read.records.element_type is ImageRecord
    assert isinstance(read, SourceRead) and read.sizes is not None


def test_every_image_source_types_its_records(tmp_path):
    from recordbeam.sources.imagefolder.reader import ImageFolderOptions, ReadImageFolder
    from recordbeam.sources.manifest.reader import ReadTable, TableOptions

    manifest = tmp_path / "m.csv"
    manifest.write_text("image,label\na.jpg,1\n", encoding="utf-8")
    p = beam.Pipeline()
    folder = p | "Folder" >> ReadImageFolder(ImageFolderOptions(str(tmp_path)))
    table = p | "Table" >> ReadTable(TableOptions(str(manifest)))
    grouped = p | "Grouped" >> ReadTable(TableOptions(str(manifest), group_by="label"))
    for read in (folder, table, grouped):
        assert isinstance(read, SourceRead)
        assert read.records.element_type is ImageRecord


def test_built_rows_cross_the_group_shuffle_as_their_fields():
    from recordbeam.sources.manifest.reader import BuiltRow
    from recordbeam.sources.record_coder import NamedTupleCoder

    row = BuiltRow("val", 12, {"label": 3, "tags": ["a"], "score": None},
                   (("image", "/m/a.png", 10), ("depth", "/m/a_d.png", 7)))
    coder = beam.coders.registry.get_coder(BuiltRow)
    assert isinstance(coder, NamedTupleCoder)
    encoded = coder.encode(row)
    assert coder.decode(encoded) == row and type(coder.decode(encoded)) is BuiltRow
    assert b"BuiltRow" not in encoded
