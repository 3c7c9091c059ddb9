"""The format core stays usable without Beam, and nothing at runtime needs TensorFlow."""

from __future__ import annotations

import ast
import inspect
import pkgutil
import subprocess
import sys
from pathlib import Path

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


# --- Beam's runner internals stay in the local runner -----------------------------------

#: The local runner: the only modules that may reach into Beam's runner, each use fenced
#: by ``recordbeam.runner_internals`` (or a check of its own, in the same modules).
LOCAL_RUNNER_MODULES = {"runner", "runner_internals", "standby", "local_feed", "local_shuffle",
                        "local_worker", "malloc_arenas"}

#: Beam's runner internals, as parts of an imported module's dotted name.
RUNNER_INTERNAL_MODULES = ("apache_beam.runners.portability", "apache_beam.runners.worker",
                           "data_plane", "fn_api_runner")

#: Private attributes used elsewhere, and why that is allowed.
ALLOWED_PRIVATE = {
    # Not Beam: the command's fast exit.
    ("cli", "os._exit"),
    ("__main__", "os._exit"),
    # Not Beam: argparse keeps its subcommand parsers only in private attributes; the
    # command reads them to name the closest option of the right subcommand.
    ("cli", "argparse._SubParsersAction"),
    ("cli", "parser._actions"),
    # Streamed listings, used only while Beam's match works that way
    # (filesystems.STREAMED_LISTINGS), else FileSystems.match.
    ("filesystems", "system._url_dirname"),
    ("filesystems", "system._list"),
}

SOURCES = Path(recordbeam.__file__).parent
PIPELINES = SOURCES.parents[1] / "pipelines"


def _sources() -> list[tuple[str, Path]]:
    found = [(path.stem, path) for path in sorted(SOURCES.glob("*.py"))]
    found += [(f"pipelines/{path.stem}", path) for path in sorted(PIPELINES.glob("*.py"))]
    assert len(found) > 30  # the scan looks where the code is
    return found


def _imported_modules(tree: ast.AST) -> list[str]:
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names += [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
    return names


def _private_uses(tree: ast.AST) -> set[str]:
    """``x._name`` (not on self or cls), ``getattr(x, "_name")`` and ``from m import _name``."""
    uses: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _is_private(node.attr):
            uses.add(f"{ast.unparse(node.value)}.{node.attr}")
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
              and node.func.id in ("getattr", "setattr", "hasattr") and len(node.args) >= 2
              and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str)
              and _is_private(node.args[1].value)):
            uses.add(f"{ast.unparse(node.args[0])}.{node.args[1].value}")
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("apache_beam"):
            uses |= {f"{node.module}.{a.name}" for a in node.names if _is_private(a.name)}
    return {use for use in uses if not _on_our_own_object(use)}


def _is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _on_our_own_object(use: str) -> bool:
    owner = use.rsplit(".", 1)[0]
    return owner in ("self", "cls") or owner.startswith("super(")


def test_only_the_local_runner_imports_beams_runner_internals():
    offenders = []
    for module, path in _sources():
        if module in LOCAL_RUNNER_MODULES:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        offenders += [f"{module}: {name}" for name in _imported_modules(tree)
                      if any(part in name for part in RUNNER_INTERNAL_MODULES)]
    assert offenders == []


def test_only_the_local_runner_uses_private_attributes():
    offenders = []
    for module, path in _sources():
        if module in LOCAL_RUNNER_MODULES:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        offenders += [f"{module}: {use}" for use in sorted(_private_uses(tree))
                      if (module, use) not in ALLOWED_PRIVATE]
    assert offenders == []


def test_the_scan_sees_private_uses_and_runner_imports():
    code = ("from apache_beam.runners.worker import data_plane\n"
            "from apache_beam.io.filesystem import _private_helper\n"
            "x = data_plane._DEFAULT_SIZE_FLUSH_THRESHOLD\n"
            "y = getattr(data_plane, '_GrpcDataChannel', None)\n"
            "self._mine = super()._theirs = 1\n")
    tree = ast.parse(code)
    assert _private_uses(tree) == {"data_plane._DEFAULT_SIZE_FLUSH_THRESHOLD",
                                   "data_plane._GrpcDataChannel",
                                   "apache_beam.io.filesystem._private_helper"}
    assert "apache_beam.runners.worker" in _imported_modules(tree)


def test_the_allowed_private_listing_is_fenced():
    # filesystems may call Beam's private lister only behind its check of Beam's match.
    from recordbeam import filesystems

    tree = ast.parse(inspect.getsource(filesystems.iter_match))
    fenced = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}
    assert "STREAMED_LISTINGS" in fenced
