"""COCO from ``s3://`` to ``s3://`` through Beam's S3 filesystem, against a moto server
started on 127.0.0.1 by the test. Proves no data path goes through local-only calls."""

from __future__ import annotations

import os

import pytest

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
