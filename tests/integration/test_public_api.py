"""The public Python API is what docs/api.md documents: every name in a public module's
``__all__`` is there and imports, every entry there resolves, and the page's own example
of a pipeline composed from ``recordbeam.sources`` and ``recordbeam.sink`` runs and writes
what ``recordbeam convert`` writes."""

from __future__ import annotations

import importlib
import io
import os
import re
import sys
from pathlib import Path

import pytest
from PIL import Image

import recordbeam
from recordbeam.sources.format import formats
from recordbeam.write.image_encoder import ImageExampleEncoder

sys.path.insert(0, str(Path(__file__).parents[2] / "docs"))
import hooks  # noqa: E402 - docs/hooks.py, the MkDocs hook that fills the page in

API_PAGE = Path(__file__).parents[2] / "docs" / "api.md"
PUBLIC_MODULES = ("recordbeam", "recordbeam.sources", "recordbeam.sink", "recordbeam.runner")
IN_MEMORY = ("--direct_running_mode=in_memory", "--direct_num_workers=1")


def _page() -> str:
    """docs/api.md as the site shows it (its generated entries filled in)."""
    return hooks.on_page_markdown(API_PAGE.read_text(encoding="utf-8"), None, None, None)


def _documented() -> list[str]:
    return re.findall(r"^::: ([\w.]+)$", _page(), re.MULTILINE)


def _resolve(dotted: str):
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            target = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for name in parts[cut:]:
            target = getattr(target, name)
        return target
    raise ModuleNotFoundError(dotted)


@pytest.mark.parametrize("dotted", _documented())
def test_every_documented_name_resolves(dotted):
    assert _resolve(dotted) is not None


@pytest.mark.parametrize("module", PUBLIC_MODULES)
def test_every_public_name_imports_and_is_documented(module):
    public = importlib.import_module(module)
    documented = {_resolve(d) for d in _documented()}
    names = [n for n in public.__all__ if n != "__version__"]
    assert names
    for name in names:
        value = getattr(public, name)
        assert value in documented or (
            f"`{module}.{name}(" in _page()), (
            f"{module}.{name} is public but docs/api.md does not document it")


@pytest.mark.parametrize("name", list(formats()))
def test_every_format_declares_its_read_transform_options_and_encoder(name):
    import apache_beam as beam

    declared = [_resolve(path) for path in formats()[name].public]
    kinds = [
        [c for c in declared if isinstance(c, type) and issubclass(c, beam.PTransform)],
        [c for c in declared if c.__name__.endswith("Options")],
        [c for c in declared if isinstance(c, type) and issubclass(c, ImageExampleEncoder)],
    ]
    assert [len(k) for k in kinds] == [1, 1, 1], declared


def test_a_private_name_is_not_offered_by_the_public_modules():
    import recordbeam.sources

    with pytest.raises(AttributeError):
        _ = recordbeam.sources.ReadCocoJson  # a name no module of ours defines


def _example() -> str:
    page = API_PAGE.read_text(encoding="utf-8")
    section = page[page.index("### Composing your own pipeline"):]
    return re.search(r"```python\n(.*?)```", section, re.DOTALL).group(1)


def _voc_folder(root: Path) -> None:
    for name, box in (("a", (4, 3, 20, 15)), ("b", (2, 2, 30, 20))):
        (root / "JPEGImages").mkdir(parents=True, exist_ok=True)
        (root / "Annotations").mkdir(parents=True, exist_ok=True)
        buffer = io.BytesIO()
        Image.new("RGB", (40, 30), (200, 80, 40)).save(buffer, "JPEG")
        (root / "JPEGImages" / f"{name}.jpg").write_bytes(buffer.getvalue())
        x0, y0, x1, y1 = box
        (root / "Annotations" / f"{name}.xml").write_text(
            f"<annotation><filename>{name}.jpg</filename><size><width>40</width>"
            f"<height>30</height><depth>3</depth></size><object><name>dog</name><bndbox>"
            f"<xmin>{x0}</xmin><ymin>{y0}</ymin><xmax>{x1}</xmax><ymax>{y1}</ymax>"
            "</bndbox></object></annotation>", encoding="utf-8")


def test_the_documented_pipeline_writes_what_convert_writes(tmp_path, monkeypatch):
    _voc_folder(tmp_path / "VOCdevkit" / "VOC2012")
    monkeypatch.chdir(tmp_path)
    code = _example().replace("beam.Pipeline()", f"beam.Pipeline(argv={list(IN_MEMORY)!r})")
    exec(compile(code, "docs/api.md", "exec"), {})
    recordbeam.convert("voc", input="VOCdevkit/VOC2012", output="converted", shards=2,
                       beam_args=IN_MEMORY)
    composed = sorted(p for p in os.listdir("out") if p.endswith(".tfrecord"))
    assert composed == ["train-00000-of-00002.tfrecord", "train-00001-of-00002.tfrecord"]
    for name in composed:
        assert (tmp_path / "out" / name).read_bytes() == (
            tmp_path / "converted" / name).read_bytes(), name
    examples = list(recordbeam.read("out", split="train"))
    assert sorted(e["image/filename"].item() for e in examples) == [b"a.jpg", b"b.jpg"]
