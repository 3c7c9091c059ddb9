"""YOLO folder: darknet (obj.data, obj.names) or Ultralytics (data.yaml, images/, labels/) -> sharded TFRecords, on any Beam runner.

Made by tools/generate_pipelines.py from the declaration of ``recordbeam convert yolo``;
change that, not this file.

Local (FnApiRunner, one worker per core):
    python pipelines/yolo_to_tfrecord.py --input datasets/coco8 --output OUT

Dataflow (docs/deploy/dataflow.md; every option: docs/formats/yolo.md):
    python pipelines/yolo_to_tfrecord.py --input gs://B/datasets/coco8 --output gs://B/yolo-tfrecord \\
        --runner DataflowRunner --project P --region R --temp_location gs://B/tmp \\
        --setup_file ./setup.py

Our options are those of ``recordbeam convert yolo``; every other option goes to Beam,
and one that Beam does not define either is refused (exit 2), never ignored.
"""

import sys

from recordbeam.cli.main import console

if __name__ == "__main__":
    console(["convert", "yolo", *sys.argv[1:]])
