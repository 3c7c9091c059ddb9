"""``python -m recordbeam`` runs the ``recordbeam`` command."""

import sys

from recordbeam.cli import main

sys.exit(main())
