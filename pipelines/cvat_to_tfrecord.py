"""CVAT for images 1.1 export -> sharded TFRecords, on any Beam runner.

Local (FnApiRunner, one worker per core):
    python pipelines/cvat_to_tfrecord.py --input cvat-export --output OUT

Dataflow (docs/deploy/dataflow.md; every option: docs/formats/):
    python pipelines/cvat_to_tfrecord.py --input gs://B/cvat-export --output gs://B/cvat-tfrecord \
        --runner DataflowRunner --project P --region R --temp_location gs://B/tmp \
        --setup_file ./setup.py

Our options are those of ``recordbeam convert cvat``; every other option goes to Beam,
and one that Beam does not define either is refused (exit 2), never ignored.
"""

import sys

from recordbeam.cli.main import console

if __name__ == "__main__":
    console(["convert", "cvat", *sys.argv[1:]])
