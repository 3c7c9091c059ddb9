"""Lets Beam's ``--setup_file ./setup.py`` install recordbeam on Dataflow workers.

All metadata lives in pyproject.toml; setuptools reads it from there.
"""

from setuptools import setup

setup()
