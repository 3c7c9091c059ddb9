"""The local runner's public name: ``--runner recordbeam.runner.LocalRunner``.

It is defined in :mod:`recordbeam.local.runner`, which is private.
"""

from recordbeam.local.runner import LocalRunner

__all__ = ["LocalRunner"]
