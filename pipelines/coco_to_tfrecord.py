"""COCO instances + images -> sharded TFRecords, on any Beam runner.

Local (FnApiRunner, one worker per core):
    python pipelines/coco_to_tfrecord.py --images DIR --annotations instances.json --output OUT

Dataflow (docs/deploy/dataflow.md; every option: docs/formats/):
    python pipelines/coco_to_tfrecord.py --images gs://B/train2017 \
        --annotations gs://B/annotations/instances_train2017.json --output gs://B/coco-tfrecord \
        --runner DataflowRunner --project P --region R --temp_location gs://B/tmp \
        --setup_file ./setup.py

Our options are those of ``recordbeam convert coco``; every other option goes to
Beam, and one that Beam does not define either is refused (exit 2), never ignored.
"""

import sys

from recordbeam.cli.main import console

if __name__ == "__main__":
    console(["convert", "coco", *sys.argv[1:]])
