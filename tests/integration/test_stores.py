"""A dataset in an object store, converted into a folder of the same store, and every
command that reads a finished folder, on each store: S3 through moto's server at an
endpoint (``--s3_endpoint_url``, as MinIO and Ceph are reached; its credentials given
only as options) and GCS through its emulator (``tests/stores.py``).

Runs use the default runner (local worker processes) unless the runner is the subject:
the folder must hold the bytes a local run writes, on a dataset without rejects (an empty
``rejects.jsonl``) and on one with them. ``make test`` converts once per store; the other
cases of the matrix run in ``make test-all``.
"""

from __future__ import annotations

import dataclasses
import io
import json
import random
from pathlib import Path

import pytest
import stores
from beam_services import free_port, job_service
from growing_corpus import Corpus, incremental_through_store, store_argv
from lanes import exhaustive

import recordbeam
from recordbeam.cli.main import main
from recordbeam.dataset.image_hashes import decode_hash_file
from recordbeam.dataset.names import MANIFEST, REJECTS, TEMP_PREFIX, is_hash_file
from recordbeam.dataset.reader import ReaderError
from recordbeam.testing.samples import make_coco_sample
from recordbeam.tfrecord.framing import open_records, read_records

IN_MEMORY = ("--direct_running_mode=in_memory", "--direct_num_workers=1")
#: The sample with rejects rejects about a quarter of its images on purpose.
LENIENT = "0.5"


@pytest.fixture(scope="module")
def samples(coco_sample, tmp_path_factory):
    """The datasets stored: ``rejects`` (the COCO sample with every bad case) and
    ``clean`` (none: its run writes an empty ``rejects.jsonl``)."""
    clean = make_coco_sample(tmp_path_factory.mktemp("clean"), num_images=8, seed=1,
                             include_bad=False)
    return {"rejects": coco_sample, "clean": clean}


@pytest.fixture(scope="module")
def store(request, samples):
    """A running store (``indirect`` parameter: ``s3`` or ``gs``) holding each sample at
    ``<root>/<name>/images`` and ``<root>/<name>/instances.json``."""
    with stores.STORES[request.param]() as running:
        for name, sample in samples.items():
            running.upload_folder(sample.images_dir, f"{running.root}/{name}/images")
            running.upload_file(sample.annotations, f"{running.root}/{name}/instances.json")
        running.runs = {}
        yield running


def _convert(store, dataset: str, output: str, *extra: str, images: str | None = None,
             annotations: str | None = None) -> list[str]:
    return ["convert", "coco",
            "--images", images or f"{store.root}/{dataset}/images",
            "--annotations", annotations or f"{store.root}/{dataset}/instances.json",
            "--output", output, "--shards", "2", "--max-reject-fraction", LENIENT, "--quiet",
            *store.argv, *extra]


def _converted(store, dataset: str) -> str:
    """``dataset`` converted from the store into it on the default runner, once per store."""
    if dataset not in store.runs:
        out = f"{store.root}/out-{dataset}"
        assert main(_convert(store, dataset, out)) == 0
        store.runs[dataset] = out
    return store.runs[dataset]


class _LocalRuns(dict):
    """Each sample converted from and into local folders with the same options, on first
    use."""

    def __init__(self, samples, tmp_path_factory) -> None:
        super().__init__()
        self._samples, self._tmp = samples, tmp_path_factory

    def __missing__(self, name: str) -> Path:
        sample = self._samples[name]
        out = self._tmp.mktemp(f"local-{name}") / "out"
        assert main(["convert", "coco", "--images", sample.images_dir, "--annotations",
                     sample.annotations, "--output", str(out), "--shards", "2",
                     "--max-reject-fraction", LENIENT, "--quiet", *IN_MEMORY]) == 0
        self[name] = out
        return out


@pytest.fixture(scope="module")
def local_runs(samples, tmp_path_factory):
    return _LocalRuns(samples, tmp_path_factory)


def _local_snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file()}


def _assert_written_as_locally(written: dict[str, bytes], local: dict[str, bytes],
                               local_images: str, store_images: str) -> None:
    """The store's folder holds the local run's files: the same bytes, but where a file
    names its inputs (rejects, image hashes, the manifest's settings and fingerprint)."""
    assert sorted(written) == sorted(local)
    assert any(".tfrecord" in name for name in written)
    named = (MANIFEST, REJECTS)
    assert {n: b for n, b in written.items() if n not in named and not is_hash_file(n)} == {
        n: b for n, b in local.items() if n not in named and not is_hash_file(n)}
    moved = local[REJECTS].replace(local_images.encode(), store_images.encode())
    assert sorted(written[REJECTS].splitlines()) == sorted(moved.splitlines())
    for name in [n for n in local if is_hash_file(n)]:
        ours, theirs = decode_hash_file(written[name]), decode_hash_file(local[name])
        assert [dataclasses.replace(e, source=e.source.replace(local_images, store_images))
                for e in theirs.entries] == list(ours.entries)
    assert _split_facts(written[MANIFEST]) == _split_facts(local[MANIFEST])


def _split_facts(manifest: bytes) -> dict:
    split = json.loads(manifest)["splits"]["train"]
    return {k: v for k, v in split.items() if k not in ("settings", "inputs_fingerprint")}


@pytest.mark.case(
    "A dataset in S3 (an endpoint of its own, as MinIO or Ceph) or GCS converted into the "
    "same store on the default runner, with and without rejects",
    "every worker reaches the store with the run's options; the folder holds the bytes of a "
    "local run, an empty `rejects.jsonl` included")
@pytest.mark.parametrize(("store", "dataset"), [
    ("s3", "clean"),
    ("gs", "rejects"),
    pytest.param("s3", "rejects", marks=exhaustive),
    pytest.param("gs", "clean", marks=exhaustive),
], indirect=["store"])
def test_convert_writes_the_bytes_of_a_local_run(store, dataset, samples, local_runs):
    out = _converted(store, dataset)
    _assert_written_as_locally(store.snapshot(out), _local_snapshot(local_runs[dataset]),
                               samples[dataset].images_dir, f"{store.root}/{dataset}/images")
    if dataset == "clean":
        assert store.read(f"{out}/{REJECTS}") == b""


@pytest.mark.parametrize("runner", ["in-memory", "portable"])
@pytest.mark.parametrize("store", [pytest.param("s3", marks=exhaustive),
                                   pytest.param("gs", marks=exhaustive)], indirect=True)
def test_other_runners_write_the_same_bytes(store, runner, samples, local_runs, tmp_path):
    out = f"{store.root}/out-{runner}"
    if runner == "in-memory":
        assert main(_convert(store, "clean", out, *IN_MEMORY)) == 0
    else:
        port = free_port()
        with job_service(port, tmp_path / "job_service.log"):
            assert main(_convert(store, "clean", out, "--runner=PortableRunner",
                                 f"--job_endpoint=localhost:{port}",
                                 "--environment_type=LOOPBACK")) == 0
    _assert_written_as_locally(store.snapshot(out), _local_snapshot(local_runs["clean"]),
                               samples["clean"].images_dir, f"{store.root}/clean/images")


@pytest.mark.parametrize("store", ["s3"], indirect=True)
def test_a_run_on_s3_builds_one_client_per_thread(store, monkeypatch):
    """Beam's S3 filesystem builds a boto3 client for each call (0.13-0.28 s of CPU each,
    a dozen per run before the images); a run builds one per thread and set of options
    (``recordbeam.s3_client``), and a second run with the same options none. In memory:
    the clients counted are this process's."""
    from apache_beam.io.aws import s3io

    built = []
    make = s3io.S3IO.__init__
    monkeypatch.setattr(s3io.S3IO, "__init__",
                        lambda self, *a, **k: (built.append(1), make(self, *a, **k))[1])
    out = f"{store.root}/one-client"
    assert main(_convert(store, "clean", out, *IN_MEMORY, "--overwrite")) == 0
    assert len(built) <= 1
    assert main(_convert(store, "clean", out, *IN_MEMORY, "--overwrite")) == 0
    assert len(built) <= 1


@pytest.mark.parametrize("store", ["gs", pytest.param("s3", marks=exhaustive)], indirect=True)
def test_inspect_verify_check_report_and_read_a_folder_in_a_store(store, local_runs, tmp_path,
                                                                   capsys):
    out = _converted(store, "rejects")
    assert main(["inspect", out, "-n", "1", *store.argv]) == 0
    assert "image/source_id" in capsys.readouterr().out
    assert main(["verify", out, *store.argv]) == 0
    assert main(["check", "--for", "torch", out, *store.argv]) == 0
    html = tmp_path / "report.html"
    assert main(["report", out, "--html", str(html), "--gallery", "2", *store.argv]) == 0
    assert html.stat().st_size > 1000
    if store.scheme == "gs":  # recordbeam.read takes no Beam options: gs:// from the environment
        remote, local = recordbeam.read(out), recordbeam.read(str(local_runs["rejects"]))
        assert [e["image/source_id"].item() for e in remote] == [
            e["image/source_id"].item() for e in local]
        last = len(remote) - 1
        assert remote[last]["image/encoded"].item() == local[last]["image/encoded"].item()


@pytest.mark.parametrize("store", [pytest.param("s3", marks=exhaustive),
                                   pytest.param("gs", marks=exhaustive)], indirect=True)
def test_reshard_from_a_store_into_it_keeps_every_record(store, local_runs):
    out = _converted(store, "rejects")
    assert main(["reshard", f"{out}/train-*.tfrecord", f"{store.root}/resharded", "--shards",
                 "3", "--quiet", *store.argv]) == 0
    names = store.names(f"{store.root}/resharded")
    assert [n for n in names if n.endswith(".tfrecord")] == [
        f"train-{i:05d}-of-00003.tfrecord" for i in range(3)]
    resharded = [record for n in names if n.endswith(".tfrecord")
                 for record in read_records(io.BytesIO(store.read(f"{store.root}/resharded/{n}")))]
    local = [record for path in sorted(local_runs["rejects"].glob("train-*.tfrecord"))
             for record in open_records(str(path))]
    assert sorted(resharded) == sorted(local)


@pytest.mark.parametrize("store", [pytest.param("s3", marks=exhaustive),
                                   pytest.param("gs", marks=exhaustive)], indirect=True)
def test_if_changed_finds_a_folder_in_a_store_up_to_date_then_rebuilds_it(store, samples,
                                                                         capsys):
    argv = _convert(store, "clean", f"{store.root}/again", "--if-changed")
    assert main(argv) == 0
    first = store.read(f"{store.root}/again/{MANIFEST}")
    capsys.readouterr()
    assert main(argv) == 0
    assert "is up to date" in capsys.readouterr().out
    # One more image in the input folder: the fingerprint changes, the split is rebuilt.
    copy = f"{store.root}/clean/images/zz-copy.jpg"
    store.upload_file(next(Path(samples["clean"].images_dir).iterdir()), copy)
    try:
        assert main(argv) == 0
        assert "is up to date" not in capsys.readouterr().out
        assert json.loads(store.read(f"{store.root}/again/{MANIFEST}")) != json.loads(first)
    finally:
        store.delete(copy)


@pytest.mark.case("Conversion into an object store that fails at its commit (rejects over "
                  "the limit)",
                  "exit 1; no manifest.json in the folder; `recordbeam.read` refuses it")
@pytest.mark.parametrize("store", [pytest.param("gs", marks=exhaustive),
                                   pytest.param("s3", marks=exhaustive)], indirect=True)
def test_a_run_that_fails_at_its_commit_leaves_no_finished_looking_folder(store):
    out = f"{store.root}/failed"
    argv = _convert(store, "rejects", out)
    argv[argv.index("--max-reject-fraction") + 1] = "0"
    assert main(argv) == 1
    assert MANIFEST not in store.names(out)
    if store.scheme == "gs":
        with pytest.raises(ReaderError, match="not a finished recordbeam output"):
            recordbeam.read(out)


@pytest.mark.case(
    "Glob characters in object store folder names (`photos [1]` beside `photos 1`, output "
    "`out [v2]`)",
    "read and written as literal names: the dataset's own images, never the sibling's; a "
    "rerun into `out [v2]` replaces the first run's files (Beam's GCS delete matches globs: "
    "the names are escaped); no temp objects left")
@pytest.mark.parametrize("store", [pytest.param("s3", marks=exhaustive),
                                   pytest.param("gs", marks=exhaustive)], indirect=True)
def test_bracketed_folders_are_literal_names(store, coco_sample):
    names = sorted(p.name for p in Path(coco_sample.images_dir).iterdir())
    store.upload_folder(coco_sample.images_dir, f"{store.root}/photos [1]/images")
    store.upload_file(coco_sample.annotations, f"{store.root}/photos [1]/instances.json")
    for name in names:  # the same names beside it, none an image: read by mistake, rejects
        store.put(f"{store.root}/photos 1/images/{name}", b"sibling")
    out = f"{store.root}/out [v2]"
    argv = _convert(store, "", out, images=f"{store.root}/photos [1]/images",
                    annotations=f"{store.root}/photos [1]/instances.json")

    assert main(argv) == 0
    train = json.loads(store.read(f"{out}/{MANIFEST}"))["splits"]["train"]
    assert train["examples"] == len(coco_sample.expected["good_images"])
    assert train["input_files"] == len(names) + 1  # its images and the annotations, no more
    rejects = store.read(f"{out}/{REJECTS}").decode().splitlines()
    assert not [line for line in rejects if "photos 1/" in json.loads(line)["source"]]

    assert main(argv) == 0  # the rerun deletes and renames by literal names
    assert not [n for n in store.names(out) if n.startswith(TEMP_PREFIX)]
    assert json.loads(store.read(f"{out}/{MANIFEST}"))["splits"]["train"] == train


@pytest.mark.parametrize("store", [pytest.param("s3", marks=exhaustive),
                                   pytest.param("gs", marks=exhaustive)], indirect=True)
def test_incremental_runs_in_a_store_keep_what_did_not_change(store, tmp_path):
    """A corpus synced to a store grows and changes; an incremental run from the store into
    it keeps the shards that did not change and holds what a full rebuild holds."""
    rng = random.Random(9)
    corpus = Corpus.make("coco", tmp_path / "in", 9)

    def download():
        store.download(f"{store.root}/inc", tmp_path / "inc")
        return tmp_path / "inc"

    argv = store_argv("coco", f"{store.root}/corpus", f"{store.root}/inc", "--incremental",
                      "--shard-size", "4KiB", *store.argv)
    incremental_through_store(
        corpus, rng, argv, lambda name, path: store.upload_file(path, f"{store.root}/corpus/{name}"),
        lambda name: store.delete(f"{store.root}/corpus/{name}"), download, tmp_path / "full")
    assert not [name for name in store.names(f"{store.root}/inc") if name.startswith(".")]


@pytest.mark.parametrize("store", [pytest.param("s3", marks=exhaustive),
                                   pytest.param("gs", marks=exhaustive)], indirect=True)
def test_annotations_read_in_byte_ranges_write_what_the_stream_writes(store, monkeypatch):
    """A large annotation file's ranged read seeks into the object: cut into 4 KiB ranges,
    the sample's annotations give the folder the streamed pass gave. In memory: the ranges'
    size is changed in this process."""
    from recordbeam.sources.coco import annotation_ranges

    streamed = store.snapshot(_converted(store, "rejects"))
    for name in ("RANGED_FROM_BYTES", "MIN_RANGE_BYTES", "MAX_RANGE_BYTES"):
        monkeypatch.setattr(annotation_ranges, name, 4096)
    out = f"{store.root}/out-ranged"
    assert main(_convert(store, "rejects", out, *IN_MEMORY)) == 0
    annotations = f"{store.root}/rejects/instances.json"
    assert annotation_ranges.read_in_ranges(annotations)
    assert len(annotation_ranges.file_ranges(annotations, 4096, 4096)) > 3
    ranged = store.snapshot(out)
    assert sorted(ranged) == sorted(streamed)
    assert {n: b for n, b in ranged.items() if n != MANIFEST} == {
        n: b for n, b in streamed.items() if n != MANIFEST}
    assert _split_facts(ranged[MANIFEST]) == _split_facts(streamed[MANIFEST])


@pytest.mark.case(
    "A store that cannot be used: its bucket missing, or its endpoint not answering",
    "exit 2 within seconds, one line naming the store, the bucket or endpoint and what to "
    "check; no retries of minutes")
@pytest.mark.parametrize(("store", "case"), [
    ("s3", "no bucket"), ("gs", "no endpoint"),
    pytest.param("s3", "no endpoint", marks=exhaustive),
    pytest.param("gs", "no bucket", marks=exhaustive)], indirect=["store"])
def test_a_store_that_cannot_be_used_is_a_usage_error(store, case, samples, monkeypatch, capsys):
    argv = _convert(store, "clean", f"{store.root}/unused")
    closed = f"http://127.0.0.1:{free_port()}"
    if case == "no bucket":
        argv = _convert(store, "clean", f"{store.scheme}://no-such-bucket/out")
        said = f"{store.scheme}://no-such-bucket"
        expected = "the bucket does not exist"
    elif store.scheme == "s3":
        argv = [f"--s3_endpoint_url={closed}" if a.startswith("--s3_endpoint_url=") else a
                for a in argv]
        said, expected = f"s3://data at {closed}", "cannot be reached"
    else:
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", closed)
        said, expected = f"gs://data on the storage emulator at {closed}", "cannot be reached"
    capsys.readouterr()
    assert main(argv) == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.startswith(f"recordbeam: {said}") and expected in last, last


@pytest.mark.case(
    "Empty files written to an object store: the shard of a split with no example (an "
    "empty `rejects.jsonl`: the store conversions of a clean dataset)",
    "each is an object of 0 bytes, as the local run's file; the folder reads back")
@pytest.mark.parametrize("store", [pytest.param("s3", marks=exhaustive),
                                   pytest.param("gs", marks=exhaustive)], indirect=True)
def test_empty_files_are_written_as_empty_objects(store, tmp_path):
    images = tmp_path / "empty" / "images"
    images.mkdir(parents=True)
    (images / "a.jpg").write_bytes(b"not an image: its one example is a reject")
    (tmp_path / "empty" / "instances.json").write_text(json.dumps(
        {"images": [{"id": 1, "file_name": "a.jpg", "width": 4, "height": 3}],
         "annotations": [], "categories": []}))
    store.upload_folder(images, f"{store.root}/empty/images")
    store.upload_file(tmp_path / "empty" / "instances.json", f"{store.root}/empty/instances.json")
    local = tmp_path / "local"
    argv = ["convert", "coco", "--images", str(images), "--annotations",
            str(tmp_path / "empty" / "instances.json"), "--quiet", "--max-reject-fraction", "1"]
    assert main([*argv, "--output", str(local), *IN_MEMORY]) == 0
    out = f"{store.root}/out-empty"
    assert main(["convert", "coco", "--images", f"{store.root}/empty/images", "--annotations",
                 f"{store.root}/empty/instances.json", "--output", out, "--quiet",
                 "--max-reject-fraction", "1", *store.argv]) == 0
    written, expected = store.snapshot(out), _local_snapshot(local)
    assert sorted(written) == sorted(expected)
    empty = sorted(name for name, data in expected.items() if data == b"")
    assert any(".tfrecord" in name for name in empty), empty  # the split's one shard
    assert all(written[name] == b"" for name in empty)
    assert main(["verify", out, *store.argv]) == 0
