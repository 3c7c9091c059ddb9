"""Kept so that ``--runner recordbeam.runner.LocalRunner`` keeps working.

The local runner lives in :mod:`recordbeam.local.runner`.
"""

from recordbeam.local.runner import LocalRunner

__all__ = ["LocalRunner"]
