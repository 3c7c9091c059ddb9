"""Label Studio JSON export (an array of tasks) + the folder of its images -> sharded TFRecords, on any Beam runner.

Made by tools/generate_pipelines.py from the declaration of ``recordbeam convert labelstudio``;
change that, not this file.

Local (FnApiRunner, one worker per core):
    python pipelines/labelstudio_to_tfrecord.py --input project-1-export.json --images media --output OUT

Dataflow (docs/deploy/dataflow.md; every option: docs/formats/labelstudio.md):
    python pipelines/labelstudio_to_tfrecord.py --input gs://B/project-1-export.json --images gs://B/media --output gs://B/labelstudio-tfrecord \\
        --runner DataflowRunner --project P --region R --temp_location gs://B/tmp \\
        --setup_file ./setup.py

Our options are those of ``recordbeam convert labelstudio``; every other option goes to Beam,
and one that Beam does not define either is refused (exit 2), never ignored.
"""

import sys

from recordbeam.cli.main import console

if __name__ == "__main__":
    console(["convert", "labelstudio", *sys.argv[1:]])
