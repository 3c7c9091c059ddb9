"""The code `recordbeam schema` prints parses our shards with tf.io.parse_single_example."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
tf = pytest.importorskip("tensorflow")

import numpy as np  # noqa: E402

import recordbeam  # noqa: E402
from recordbeam import pipeline  # noqa: E402
from recordbeam.cli import main as cli  # noqa: E402
from recordbeam.sources.coco.reader import CocoOptions  # noqa: E402
from recordbeam.sources.coco.reader import to_tfrecord as coco_to_tfrecord  # noqa: E402
from recordbeam.testing.samples import make_coco_sample  # noqa: E402
from recordbeam.write.image_encoder import ImageChecks  # noqa: E402
from recordbeam.write.sink import ShardOptions  # noqa: E402

pytestmark = pytest.mark.interop

IN_MEMORY = ["--direct_running_mode=in_memory", "--direct_num_workers=1"]


@pytest.fixture(scope="module")
def out(tmp_path_factory):
    root = tmp_path_factory.mktemp("schema")
    sample = make_coco_sample(str(root / "sample"), num_images=24, seed=0)
    target = str(root / "out")
    coco = CocoOptions(sample.images_dir, sample.annotations, "train")
    shards = ShardOptions(num_shards=2, max_reject_fraction=0.5)
    pipeline.run(
        lambda p: coco_to_tfrecord(p, target, coco, shards, ImageChecks()),
        target,
        beam_args=IN_MEMORY,
        show_progress=False,
    )
    return target


def generated_namespace(out, capsys, *flags):
    assert cli.main(["schema", out, *flags]) == cli.EXIT_OK
    namespace: dict = {}
    exec(capsys.readouterr().out, namespace)  # noqa: S102 - the code under test is this text
    return namespace


@pytest.mark.parametrize("flags", [(), ("--ragged",)])
def test_generated_code_parses_every_record(out, capsys, flags):
    namespace = generated_namespace(out, capsys, *flags)
    reader = recordbeam.read(out)
    files = reader.shard_paths

    def parse_dense(serialized):
        parsed = namespace["parse"](serialized)
        return {
            k: v.values if isinstance(v, tf.sparse.SparseTensor) else v for k, v in parsed.items()
        }

    dataset = tf.data.TFRecordDataset(files).map(parse_dense)
    parsed = list(dataset.as_numpy_iterator())
    ours = list(reader)
    assert len(parsed) == len(ours) == reader.manifest["totals"]["examples"] > 0
    for theirs, mine in zip(parsed, ours, strict=True):
        assert set(theirs) == set(mine)
        for name, value in mine.items():
            np.testing.assert_array_equal(np.asarray(theirs[name]), value)


def test_json_spec_matches_code(out, capsys):
    import json

    assert cli.main(["schema", out, "--json"]) == cli.EXIT_OK
    spec = json.loads(capsys.readouterr().out)["feature_description"]
    namespace = generated_namespace(out, capsys)
    for name, entry in spec.items():
        feature = namespace["feature_description"][name]
        assert type(feature).__name__ == entry["type"]
        assert feature.dtype.name == entry["dtype"]
