"""COCO from ``s3://`` to ``s3://`` through Beam's S3 filesystem, against a moto server
started on 127.0.0.1 by the test. Proves no data path goes through local-only calls."""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import pytest
from growing_corpus import Corpus, incremental_through_store, store_argv

from recordbeam.cli.main import main
from recordbeam.tfrecord.example import decode_example
from recordbeam.tfrecord.framing import read_records

pytestmark = pytest.mark.slow


@pytest.fixture()
def s3(monkeypatch):
    moto_server = pytest.importorskip("moto.server")
    boto3 = pytest.importorskip("boto3")
    pytest.importorskip("apache_beam.io.aws.s3filesystem")
    for key, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                       "AWS_DEFAULT_REGION": "us-east-1"}.items():
        monkeypatch.setenv(key, value)
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    client = boto3.client("s3", endpoint_url=endpoint)
    client.create_bucket(Bucket="data")
    yield client, [
        f"--s3_endpoint_url={endpoint}", "--s3_access_key_id=testing",
        "--s3_secret_access_key=testing", "--s3_region_name=us-east-1",
    ]
    server.stop()


def test_convert_from_s3_to_s3_and_read_back(s3, coco_sample, capsys):
    client, s3_args = s3
    for name in sorted(os.listdir(coco_sample.images_dir)):
        client.upload_file(os.path.join(coco_sample.images_dir, name), "data", f"coco/images/{name}")
    client.upload_file(coco_sample.annotations, "data", "coco/instances.json")
    common = ["--max-reject-fraction", "0.5", "--quiet", "--shards", "2",
              "--direct_running_mode=in_memory", "--direct_num_workers=1", *s3_args]
    code = main(["convert", "coco", "--images", "s3://data/coco/images",
                 "--annotations", "s3://data/coco/instances.json", "--output", "s3://data/out",
                 *common])
    assert code == 0
    keys = sorted(o["Key"] for o in client.list_objects_v2(Bucket="data", Prefix="out/")["Contents"])
    assert keys == ["out/dataset_info.json", "out/features.json",  # TFDS metadata
                    "out/hashes/train-00000-of-00002.hashes",  # image hashes, per shard
                    "out/hashes/train-00001-of-00002.hashes",
                    "out/image.object.class.label.labels.txt",
                    "out/labels.txt", "out/manifest.json", "out/rejects.jsonl",
                    "out/train-00000-of-00002.tfrecord", "out/train-00001-of-00002.tfrecord"]
    source_ids = set()
    for key in keys[-2:]:
        body = client.get_object(Bucket="data", Key=key)["Body"]
        for record in read_records(body, path=key):
            source_ids.add(decode_example(record)["image/source_id"][0].decode())
    assert len(source_ids) == len(coco_sample.expected["good_images"])

    # A second run with --if-changed finds the output up to date, through S3 as well.
    code = main(["convert", "coco", "--images", "s3://data/coco/images",
                 "--annotations", "s3://data/coco/instances.json", "--output", "s3://data/out",
                 "--if-changed", *common])
    assert code == 0
    assert "is up to date" in capsys.readouterr().out


@pytest.mark.case(
    "Glob characters in `s3://` folder names (`photos [1]` beside `photos 1`, output "
    "`out [v2]`), through Beam's S3 filesystem",
    "read and written as literal keys: the dataset's own images, never the sibling's; a "
    "rerun into `out [v2]` succeeds; no temp keys left")
def test_bracketed_s3_folders_are_literal_names(s3, coco_sample):
    client, s3_args = s3
    names = sorted(os.listdir(coco_sample.images_dir))
    for name in names:
        client.upload_file(os.path.join(coco_sample.images_dir, name), "data",
                           f"photos [1]/images/{name}")
        # The same names beside it, none of them an image: read by mistake, each a reject.
        client.put_object(Bucket="data", Key=f"photos 1/images/{name}", Body=b"sibling")
    client.upload_file(coco_sample.annotations, "data", "photos [1]/instances.json")
    argv = ["convert", "coco", "--images", "s3://data/photos [1]/images",
            "--annotations", "s3://data/photos [1]/instances.json",
            "--output", "s3://data/out [v2]", "--max-reject-fraction", "0.5", "--quiet",
            "--direct_running_mode=in_memory", "--direct_num_workers=1", *s3_args]

    assert main(argv) == 0
    manifest = json.loads(client.get_object(Bucket="data", Key="out [v2]/manifest.json")["Body"]
                          .read())
    train = manifest["splits"]["train"]
    assert train["examples"] == len(coco_sample.expected["good_images"])
    assert train["input_files"] == len(names) + 1  # its images and the annotations, no more
    assert not [source for source in _reject_sources(client) if "photos 1/" in source]

    assert main(argv) == 0  # the rerun replaces the first run's files by their literal keys
    keys = [o["Key"] for o in client.list_objects_v2(Bucket="data", Prefix="out [v2]/")["Contents"]]
    assert not [key for key in keys if key.startswith("out [v2]/.")]


def _reject_sources(client) -> list[str]:
    body = client.get_object(Bucket="data", Key="out [v2]/rejects.jsonl")["Body"].read()
    return [json.loads(line)["source"] for line in body.decode().splitlines()]


def test_incremental_runs_from_s3_to_s3_keep_what_did_not_change(s3, tmp_path):
    """A corpus synced to S3 grows and changes; an incremental run from s3:// to s3://
    keeps the shards that did not change and holds what a full rebuild holds."""
    client, s3_args = s3
    rng = random.Random(9)
    corpus = Corpus.make("coco", tmp_path / "in", 9)
    # A rejected image: Beam's S3 writer cannot write an empty object (a multipart upload
    # of no part), such as the rejects.jsonl of a run without rejects.
    corpus.mutate("break", rng)
    corpus.write()

    def put(name, path):
        client.upload_file(path, "data", f"corpus/{name}")

    def delete(name):
        client.delete_object(Bucket="data", Key=f"corpus/{name}")

    argv = store_argv("coco", "s3://data/corpus", "s3://data/inc", "--incremental",
                      "--shard-size", "4KiB", *s3_args)
    incremental_through_store(corpus, rng, argv, put, delete,
                              lambda: _download(client, "inc/", tmp_path / "inc"),
                              tmp_path / "full")


def _download(client, prefix: str, into) -> Path:
    for item in client.list_objects_v2(Bucket="data", Prefix=prefix)["Contents"]:
        target = into / item["Key"].removeprefix(prefix)
        target.parent.mkdir(parents=True, exist_ok=True)
        client.download_file("data", item["Key"], str(target))
    return into


def test_annotations_read_in_byte_ranges_through_s3(s3, coco_sample, monkeypatch):
    """The ranged annotations read seeks into the object (4 KiB ranges): the output is the
    one the streamed pass over the whole object gives."""
    from recordbeam.sources.coco import annotation_ranges

    client, s3_args = s3
    for name in sorted(os.listdir(coco_sample.images_dir)):
        client.upload_file(os.path.join(coco_sample.images_dir, name), "data", f"c/images/{name}")
    client.upload_file(coco_sample.annotations, "data", "c/instances.json")
    common = ["--max-reject-fraction", "0.5", "--quiet", "--direct_running_mode=in_memory",
              "--direct_num_workers=1", *s3_args]
    outputs = {}
    for name, range_bytes in (("whole", 1 << 30), ("cut", 4096)):
        # "whole" is streamed (a small file), "cut" read in 4 KiB ranges.
        monkeypatch.setattr(annotation_ranges, "RANGED_FROM_BYTES", range_bytes)
        monkeypatch.setattr(annotation_ranges, "MIN_RANGE_BYTES", range_bytes)
        monkeypatch.setattr(annotation_ranges, "MAX_RANGE_BYTES", range_bytes)
        assert main(["convert", "coco", "--images", "s3://data/c/images", "--annotations",
                     "s3://data/c/instances.json", "--output", f"s3://data/{name}",
                     *common]) == 0
        listed = client.list_objects_v2(Bucket="data", Prefix=f"{name}/")["Contents"]
        outputs[name] = {o["Key"].split("/", 1)[1]: client.get_object(
            Bucket="data", Key=o["Key"])["Body"].read() for o in listed}
    assert len(outputs["whole"]) > 5
    assert outputs["cut"] == outputs["whole"]
