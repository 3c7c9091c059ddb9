"""Open Images CSVs: *-annotations-bbox.csv, class-descriptions*.csv, images/<split>/ -> sharded TFRecords, on any Beam runner.

Made by tools/generate_pipelines.py from the declaration of ``recordbeam convert openimages``;
change that, not this file.

Local (FnApiRunner, one worker per core):
    python pipelines/openimages_to_tfrecord.py --input open-images --output OUT

Dataflow (docs/deploy/dataflow.md; every option: docs/formats/openimages.md):
    python pipelines/openimages_to_tfrecord.py --input gs://B/open-images --output gs://B/openimages-tfrecord \\
        --runner DataflowRunner --project P --region R --temp_location gs://B/tmp \\
        --setup_file ./setup.py

Our options are those of ``recordbeam convert openimages``; every other option goes to Beam,
and one that Beam does not define either is refused (exit 2), never ignored.
"""

import sys

from recordbeam.cli.main import console

if __name__ == "__main__":
    console(["convert", "openimages", *sys.argv[1:]])
