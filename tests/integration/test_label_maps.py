"""A second split written into a folder must agree with the label map of the splits
already there: otherwise the run is refused (exit 1) before anything is written, naming
the labels and both names."""

from __future__ import annotations

import json
import os

import apache_beam as beam
import pytest
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from read_back import folder_files

from recordbeam.cli import main as cli
from recordbeam.dataset.manifest import LabelMapMismatch
from recordbeam.testing.samples import make_image_folder_sample
from recordbeam.tfrecord.example import encode_example
from recordbeam.write.sink import ExampleEncoder, ShardOptions, WriteShards

IN_MEMORY = ("--direct_running_mode=in_memory", "--direct_num_workers=1")
LENIENT = ("--max-reject-fraction", "0.5", "--quiet")




def _coco(sample, annotations: str, out, split: str, *extra: str) -> int:
    return cli.main(["convert", "coco", "--images", sample.images_dir, "--annotations",
                     annotations, "--output", str(out), "--split", split, *extra, *LENIENT,
                     *IN_MEMORY])


@pytest.fixture()
def train_folder(coco_sample, tmp_path, capsys):
    out = tmp_path / "out"
    assert _coco(coco_sample, coco_sample.annotations, out, "train") == 0, capsys.readouterr().err
    capsys.readouterr()
    return out


def test_val_with_the_same_categories_joins_the_folder(coco_sample, train_folder, capsys):
    assert _coco(coco_sample, coco_sample.annotations, train_folder, "val") == 0
    manifest = json.loads((train_folder / "manifest.json").read_text())
    assert set(manifest["splits"]) == {"train", "val"}


@pytest.mark.case(
    'Second split whose category 1 has another name',
    'refused (exit 1) naming the label and both names; the folder is untouched',
)
def test_a_renamed_category_is_refused_naming_the_label_and_both_names(
        coco_sample, coco_json, train_folder, tmp_path, capsys):
    before = folder_files(train_folder)
    document = dict(coco_json)
    first = document["categories"][0]
    document["categories"] = [{**first, "name": "renamed"}, *document["categories"][1:]]
    renamed = tmp_path / "renamed.json"
    renamed.write_text(json.dumps(document))
    assert _coco(coco_sample, str(renamed), train_folder, "val") == cli.EXIT_DATA
    err = capsys.readouterr().err
    assert f"label {first['id']} is {first['name']!r} there but 'renamed' in this run" in err
    assert "holds the split train," in err and "Traceback" not in err
    assert folder_files(train_folder) == before


@pytest.mark.case(
    'Second split with `--contiguous-labels` into a folder written with category ids',
    'refused (exit 1): the labels would mean other classes',
)
def test_contiguous_labels_against_category_ids_are_refused(coco_sample, train_folder, capsys):
    before = folder_files(train_folder)
    code = _coco(coco_sample, coco_sample.annotations, train_folder, "val", "--contiguous-labels")
    assert code == cli.EXIT_DATA
    assert "there but label" in capsys.readouterr().err  # category 5: label 5 vs label 4
    assert folder_files(train_folder) == before


def test_rewriting_the_only_split_may_change_the_labels(
        coco_sample, train_folder, capsys):
    code = _coco(coco_sample, coco_sample.annotations, train_folder, "train", "--contiguous-labels")
    assert code == 0, capsys.readouterr().err


@pytest.mark.case(
    'Second split of class folders missing a class',
    'refused (exit 1): its labels would shift',
)
def test_class_folders_missing_a_class_are_refused(tmp_path, capsys):
    # val lacks the first class: sorted folder names would shift every label by one.
    sample = make_image_folder_sample(tmp_path / "train", include_bad=False)
    val = make_image_folder_sample(tmp_path / "val", include_bad=False)
    for name in os.listdir(os.path.join(val.root, val.classes[0])):
        os.remove(os.path.join(val.root, val.classes[0], name))
    out = tmp_path / "out"
    argv = ["convert", "imagefolder", "--output", str(out), *LENIENT, *IN_MEMORY]
    assert cli.main([*argv, "--root", sample.root]) == 0
    before = folder_files(out)
    assert cli.main([*argv, "--root", val.root, "--split", "val"]) == cli.EXIT_DATA
    err = capsys.readouterr().err
    assert f"label 0 is {sample.classes[0]!r} there but {sample.classes[1]!r} in this run" in err
    assert folder_files(out) == before


@pytest.mark.case(
    'Disagreeing label map that reaches the commit (launcher check skipped)',
    'the commit refuses it; nothing is renamed into place',
)
def test_the_commit_refuses_a_disagreeing_map_when_the_launcher_did_not_check(tmp_path):
    out = tmp_path / "out"

    def write(split: str, names: dict[str, str]) -> None:
        with beam.Pipeline(runner=FnApiRunner()) as p:  # Beam 2.60 knows it by class only
            metadata = p | f"Meta{split}" >> beam.Create([{"label_map": names}])
            _ = (p | f"Examples{split}" >> beam.Create([encode_example({"x": [1]})])
                 | WriteShards(str(out), ExampleEncoder(split), options=ShardOptions(num_shards=1),
                               metadata=metadata))

    write("train", {"0": "cat", "1": "dog"})
    before = folder_files(out)
    with pytest.raises(Exception, match="label 1 is 'dog' there but 'wolf' in this run") as caught:
        write("val", {"0": "cat", "1": "wolf"})
    assert "LabelMapMismatch" in str(caught.value) or isinstance(caught.value, LabelMapMismatch)
    assert folder_files(out) == before  # the temp folder is gone too
