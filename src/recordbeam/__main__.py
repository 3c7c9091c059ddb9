"""``python -m recordbeam`` runs the ``recordbeam`` command."""

from recordbeam.cli import console

console()
