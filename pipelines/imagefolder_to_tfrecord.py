"""ImageNet-style class folders (ROOT/<class>/<image>) -> sharded TFRecords, on any Beam runner.

Local:
    python pipelines/imagefolder_to_tfrecord.py --root DIR --output OUT [--label-offset 1]

Dataflow: add --runner DataflowRunner --project P --region R --temp_location gs://B/tmp
--setup_file ./setup.py (see docs/deploy/dataflow.md).

Our options are those of ``recordbeam convert imagefolder``; every other option goes to
Beam, and one that Beam does not define either is refused (exit 2), never ignored.
"""

import sys

from recordbeam.cli.main import console

if __name__ == "__main__":
    console(["convert", "imagefolder", *sys.argv[1:]])
