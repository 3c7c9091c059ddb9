"""ImageNet-style class folders: ROOT/<class>/<image> -> sharded TFRecords, on any Beam runner.

Made by tools/generate_pipelines.py from the declaration of ``recordbeam convert imagefolder``;
change that, not this file.

Local (FnApiRunner, one worker per core):
    python pipelines/imagefolder_to_tfrecord.py --input imagenet/train --output OUT

Dataflow (docs/deploy/dataflow.md; every option: docs/formats/imagefolder.md):
    python pipelines/imagefolder_to_tfrecord.py --input gs://B/imagenet/train --output gs://B/imagefolder-tfrecord \\
        --runner DataflowRunner --project P --region R --temp_location gs://B/tmp \\
        --setup_file ./setup.py

Our options are those of ``recordbeam convert imagefolder``; every other option goes to Beam,
and one that Beam does not define either is refused (exit 2), never ignored.
"""

import sys

from recordbeam.cli.main import console

if __name__ == "__main__":
    console(["convert", "imagefolder", *sys.argv[1:]])
