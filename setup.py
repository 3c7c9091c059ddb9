"""Lets Beam's ``--setup_file ./setup.py`` install recordbeam on Dataflow workers.

Metadata lives in pyproject.toml, except the license: Beam's stager builds the package
with whatever setuptools the submitting environment has, and only setuptools 77 and later
read an SPDX ``license_expression`` (PEP 639); older ones take the plain ``license`` text.
"""

import setuptools
from setuptools import setup

_major = int(setuptools.__version__.split(".")[0])
setup(**({"license_expression": "Apache-2.0"} if _major >= 77 else {"license": "Apache-2.0"}))
