"""CSV or JSON Lines manifest: one row per example -> sharded TFRecords, on any Beam runner.

Made by tools/generate_pipelines.py from the declaration of ``recordbeam convert manifest``;
change that, not this file.

Local (FnApiRunner, one worker per core):
    python pipelines/manifest_to_tfrecord.py --input data.csv --output OUT

Dataflow (docs/deploy/dataflow.md; every option: docs/formats/manifest.md):
    python pipelines/manifest_to_tfrecord.py --input gs://B/data.csv --output gs://B/manifest-tfrecord \\
        --runner DataflowRunner --project P --region R --temp_location gs://B/tmp \\
        --setup_file ./setup.py

Our options are those of ``recordbeam convert manifest``; every other option goes to Beam,
and one that Beam does not define either is refused (exit 2), never ignored.
"""

import sys

from recordbeam.cli.main import console

if __name__ == "__main__":
    console(["convert", "manifest", *sys.argv[1:]])
