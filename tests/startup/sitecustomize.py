"""Set-up the tests ask of every Python process they start (see ``tests/in_new_processes.py``).

Python imports ``sitecustomize`` as it starts, from the first folder of its path that has
one: with this folder on PYTHONPATH, each module named in ``RECORDBEAM_TEST_STARTUP``
(comma-separated, importable from PYTHONPATH) is imported and its ``in_new_process()``
called, before the process runs anything else.
"""

import importlib
import os

for _name in filter(None, os.environ.get("RECORDBEAM_TEST_STARTUP", "").split(",")):
    importlib.import_module(_name).in_new_process()
