"""Every declared format's output read back by TensorFlow: its small input converted
(``tests/format_inputs.py``, the same conversion ``test_each_format.py`` checks), each
shard read with ``tf.data.TFRecordDataset``, each record parsed with the code ``recordbeam
schema`` prints for the folder, each image decoded by ``tf.io.decode_image``."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
tf = pytest.importorskip("tensorflow")

import numpy as np  # noqa: E402
from format_inputs import HEIGHT, INPUTS, NAMES, WIDTH, converted  # noqa: E402

import recordbeam  # noqa: E402
from recordbeam import feature_keys  # noqa: E402
from recordbeam.cli import main as cli  # noqa: E402

pytestmark = pytest.mark.interop


@pytest.mark.parametrize("kind", sorted(INPUTS))
def test_tensorflow_parses_what_each_format_writes(kind, capsys, tmp_path_factory):
    done = converted(kind, tmp_path_factory)
    capsys.readouterr()
    assert cli.main(["schema", str(done.output), "--split", done.split]) == cli.EXIT_OK
    namespace: dict = {}
    exec(capsys.readouterr().out, namespace)  # noqa: S102 - the code under test is this text
    reader = recordbeam.read(str(done.output), split=done.split)

    def dense(serialized):
        parsed = namespace["parse"](serialized)
        return {k: v.values if isinstance(v, tf.sparse.SparseTensor) else v
                for k, v in parsed.items()}

    parsed = list(tf.data.TFRecordDataset(reader.shard_paths).map(dense).as_numpy_iterator())
    ours = list(reader)
    assert len(parsed) == len(ours) == len(NAMES)
    for theirs, mine in zip(parsed, ours, strict=True):
        assert set(theirs) == set(mine)
        for name, value in mine.items():
            np.testing.assert_array_equal(np.asarray(theirs[name]), value)
        image = tf.io.decode_image(theirs[feature_keys.ENCODED]).numpy()
        assert image.shape == (HEIGHT, WIDTH, 3)
