"""A CSV or JSON Lines manifest (one row per example) -> sharded TFRecords, on any Beam runner.

Local:
    python pipelines/manifest_to_tfrecord.py --manifest data.csv --output OUT \
        [--split train=0.8,val=0.2] [--group-by video]

Our options are those of ``recordbeam convert manifest``; every other option goes to
Beam, and one that Beam does not define either is refused (exit 2), never ignored.
"""

import sys

from recordbeam.cli.main import console

if __name__ == "__main__":
    console(["convert", "manifest", *sys.argv[1:]])
