"""YOLO folder (darknet or Ultralytics) -> sharded TFRecords, on any Beam runner.

Local (FnApiRunner, one worker per core):
    python pipelines/yolo_to_tfrecord.py --input datasets/coco8 --output OUT

Dataflow (docs/deploy/dataflow.md; every option: docs/formats/):
    python pipelines/yolo_to_tfrecord.py --input gs://B/coco8 --output gs://B/yolo-tfrecord \
        --runner DataflowRunner --project P --region R --temp_location gs://B/tmp \
        --setup_file ./setup.py

Our options are those of ``recordbeam convert yolo``; every other option goes to Beam,
and one that Beam does not define either is refused (exit 2), never ignored.
"""

import sys

from recordbeam.cli.main import console

if __name__ == "__main__":
    console(["convert", "yolo", *sys.argv[1:]])
