"""KITTI folder -> sharded TFRecords, on any Beam runner.

Local (FnApiRunner, one worker per core):
    python pipelines/kitti_to_tfrecord.py --input kitti --output OUT

Dataflow (docs/deploy/dataflow.md; every option: docs/formats/):
    python pipelines/kitti_to_tfrecord.py --input gs://B/kitti --output gs://B/kitti-tfrecord \
        --runner DataflowRunner --project P --region R --temp_location gs://B/tmp \
        --setup_file ./setup.py

Our options are those of ``recordbeam convert kitti``; every other option goes to Beam,
and one that Beam does not define either is refused (exit 2), never ignored.
"""

import sys

from recordbeam.cli.main import console

if __name__ == "__main__":
    console(["convert", "kitti", *sys.argv[1:]])
