"""A box CSV export (<split>/_annotations.csv beside the images) -> sharded TFRecords.

Local (FnApiRunner, one worker per core):
    python pipelines/box_csv_to_tfrecord.py --input export --output OUT

Dataflow (docs/deploy/dataflow.md; every option: docs/formats/):
    python pipelines/box_csv_to_tfrecord.py --input gs://B/export --output gs://B/box_csv-tfrecord \
        --runner DataflowRunner --project P --region R --temp_location gs://B/tmp \
        --setup_file ./setup.py

Our options are those of ``recordbeam convert box-csv``; every other option goes to Beam,
and one that Beam does not define either is refused (exit 2), never ignored.
"""

import sys

from recordbeam.cli.main import console

if __name__ == "__main__":
    console(["convert", "box-csv", *sys.argv[1:]])
