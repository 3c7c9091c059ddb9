"""One small conversion per declared format (its declared ``sample``, laid out by
``tests/format_inputs.py``), through ``recordbeam.convert`` on Beam's in-memory runner:
two pictures with one box (or class) each, written whole. The edit loop's check that
every format still converts end to end (``make test-fast``); the formats' own files hold
the thorough tests, and ``tests/interop/test_each_format_tf.py`` reads the same outputs
with TensorFlow."""

from __future__ import annotations

import pytest
from format_inputs import BOX, HEIGHT, INPUTS, NAMES, WIDTH, converted

import recordbeam
from recordbeam import feature_keys
from recordbeam.sources.format import SampleImage, formats


@pytest.mark.parametrize("kind", sorted(formats()))
def test_every_declared_format_declares_a_sample_its_example_reads(kind):
    fmt = formats()[kind]
    pictures = [name for name, content in fmt.sample.items() if isinstance(content, SampleImage)]
    assert len(pictures) == len(NAMES), f"{kind} declares no sample of {len(NAMES)} pictures"
    paths = fmt.example[1::2]
    assert all(any(name == path or name.startswith(f"{path}/") for name in fmt.sample)
               for path in paths), f"{kind}'s example names {paths}, which its sample lacks"


@pytest.mark.parametrize("kind", sorted(INPUTS))
def test_each_format_converts_two_pictures_whole(kind, tmp_path_factory):
    done = converted(kind, tmp_path_factory)
    out, split = done.output, done.split
    assert done.manifest["splits"][split]["examples"] == len(NAMES)
    assert not (out / "rejects.jsonl").exists() or (out / "rejects.jsonl").read_text() == ""
    examples = list(recordbeam.read(str(out), split=split))
    assert len(examples) == len(NAMES)
    expected = [BOX[0] / WIDTH, BOX[1] / HEIGHT, BOX[2] / WIDTH, BOX[3] / HEIGHT]
    for example in examples:
        assert example[feature_keys.ENCODED].item().startswith(b"\xff\xd8")
        if feature_keys.OBJECT_LABEL in example:  # the sample's one object (else a class)
            boxes = [list(example[key]) for key in feature_keys.BOX]
            assert [round(float(b[0]), 4) for b in boxes] == [round(e, 4) for e in expected]
