"""KITTI detection folder: <split>/image_2/, <split>/label_2/ -> sharded TFRecords, on any Beam runner.

Made by tools/generate_pipelines.py from the declaration of ``recordbeam convert kitti``;
change that, not this file.

Local (FnApiRunner, one worker per core):
    python pipelines/kitti_to_tfrecord.py --input kitti --output OUT

Dataflow (docs/deploy/dataflow.md; every option: docs/formats/kitti.md):
    python pipelines/kitti_to_tfrecord.py --input gs://B/kitti --output gs://B/kitti-tfrecord \\
        --runner DataflowRunner --project P --region R --temp_location gs://B/tmp \\
        --setup_file ./setup.py

Our options are those of ``recordbeam convert kitti``; every other option goes to Beam,
and one that Beam does not define either is refused (exit 2), never ignored.
"""

import sys

from recordbeam.cli.main import console

if __name__ == "__main__":
    console(["convert", "kitti", *sys.argv[1:]])
