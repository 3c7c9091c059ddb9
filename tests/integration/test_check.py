"""`recordbeam check --for` on folders the converters wrote: the demo's COCO folder fits
every consumer, a Pascal VOC folder (ids like ``2007_000027``) does not fit the trainers
that turn ``image/source_id`` into a number."""

from __future__ import annotations

import pytest
from PIL import Image

from recordbeam.cli import main as cli
from recordbeam.dataset.consumers import CONSUMERS

IN_MEMORY = ["--direct_running_mode=in_memory", "--direct_num_workers=1"]


@pytest.fixture(scope="module")
def demo_out(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("check") / "demo")
    assert cli.main(["demo", "--num-images", "8", "--output", out, "--index", "--quiet",
                     *IN_MEMORY]) == 0
    return out


@pytest.mark.parametrize("consumer", list(CONSUMERS))
def test_the_demo_folder_fits_every_consumer(demo_out, consumer, capsys):
    assert cli.main(["check", demo_out, "--for", consumer]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith(f"{demo_out} for {consumer} (")
    assert all(": ok (" in line or "not applicable" in line for line in lines[1:])


def test_a_voc_folder_fails_source_id_for_model_garden_and_efficientdet(tmp_path, capsys):
    root = tmp_path / "voc"
    for folder in ("Annotations", "JPEGImages", "ImageSets/Main"):
        (root / folder).mkdir(parents=True)
    for stem in ("2007_000027", "2007_000032"):
        Image.new("RGB", (80, 40), (90, 20, 200)).save(root / "JPEGImages" / f"{stem}.jpg")
        (root / "Annotations" / f"{stem}.xml").write_text(
            f"<annotation><filename>{stem}.jpg</filename><size><width>80</width><height>40"
            "</height><depth>3</depth></size><object><name>dog</name><difficult>0</difficult>"
            "<bndbox><xmin>8</xmin><ymin>4</ymin><xmax>40</xmax><ymax>20</ymax></bndbox>"
            "</object></annotation>")
    (root / "ImageSets/Main/train.txt").write_text("2007_000027\n2007_000032\n")
    out = str(tmp_path / "out")
    assert cli.main(["convert", "voc", "--input", str(root), "--output", out, "--quiet", *IN_MEMORY]) == 0
    capsys.readouterr()
    for consumer in ("model-garden", "efficientdet"):
        assert cli.main(["check", out, "--for", consumer]) == 1
        captured = capsys.readouterr()
        assert "  source-id: FAILED, 2 violations" in captured.out
        assert "record 0: image/source_id is '2007_0000" in captured.out
        assert "1 rule failed (source-id)" in captured.err
    assert cli.main(["check", out, "--for", "od-api"]) == 0
