"""The format core stays usable without Beam, and nothing at runtime needs TensorFlow."""

from __future__ import annotations

import pkgutil
import subprocess
import sys

import pytest

import recordbeam

CORE = ["framing", "index", "example", "tensor", "wire", "images", "boxes", "feature_spec",
        "manifest", "planning", "records", "masks", "transcode", "schema", "reader", "samples"]


def _loaded_after_import(module: str) -> set[str]:
    code = (f"import sys, recordbeam.{module}; "
            "print(' '.join(sorted({m.split('.')[0] for m in sys.modules})))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True)
    return set(result.stdout.split())


@pytest.mark.parametrize("module", CORE)
def test_core_module_imports_neither_beam_nor_tensorflow(module):
    loaded = _loaded_after_import(module)
    assert "apache_beam" not in loaded and "tensorflow" not in loaded


def test_no_runtime_module_imports_tensorflow():
    names = [m.name for m in pkgutil.iter_modules(recordbeam.__path__)]
    code = ("import importlib, sys\n"
            f"for name in {names!r}:\n"
            "    if name != '__main__':\n"
            "        importlib.import_module('recordbeam.' + name)\n"
            "print('tensorflow' in sys.modules, 'tensorflow_datasets' in sys.modules)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True)
    assert result.stdout.split()[-2:] == ["False", "False"]


def test_the_command_parses_its_arguments_without_beam():
    # Standby workers start right after parsing, so they import Beam while the launcher does.
    code = ("import sys, recordbeam.cli as cli, recordbeam.standby\n"
            "cli.build_parser().parse_known_args(['convert', 'coco', '--images', 'i',\n"
            "    '--annotations', 'a.json', '--output', 'o', '--direct_num_workers=2'])\n"
            "print('apache_beam' in sys.modules)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True)
    assert result.stdout.split() == ["False"]
