"""An Open Images folder (box tables, class descriptions, images/<split>/) -> sharded TFRecords.

Local (FnApiRunner, one worker per core):
    python pipelines/openimages_to_tfrecord.py --input open-images --output OUT

Dataflow (docs/deploy/dataflow.md; every option: docs/formats/):
    python pipelines/openimages_to_tfrecord.py --input gs://B/open-images --output gs://B/openimages-tfrecord \
        --runner DataflowRunner --project P --region R --temp_location gs://B/tmp \
        --setup_file ./setup.py

Our options are those of ``recordbeam convert openimages``; every other option goes to Beam,
and one that Beam does not define either is refused (exit 2), never ignored.
"""

import sys

from recordbeam.cli.main import console

if __name__ == "__main__":
    console(["convert", "openimages", *sys.argv[1:]])
