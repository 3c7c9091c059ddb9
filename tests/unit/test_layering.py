"""The layers the folders show: what each package may import, the format core without
Beam, nothing at runtime needing TensorFlow, and Beam's internals only in ``local/``."""

from __future__ import annotations

import ast
import json
import pkgutil
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import recordbeam

SOURCES = Path(recordbeam.__file__).parent
PIPELINES = SOURCES.parents[1] / "pipelines"

#: Modules that must import neither Beam nor TensorFlow: the TFRecord core, image work,
#: and what reads or describes a finished folder without a pipeline.
BEAM_FREE = ["tfrecord.framing", "tfrecord.index", "tfrecord.example", "tfrecord.tensor",
             "tfrecord.wire", "tfrecord.feature_spec", "tfrecord.protos", "images.checks",
             "images.boxes", "images.masks", "images.transcode", "records", "errors", "feature_keys",
             "dataset.manifest", "dataset.names", "dataset.schema", "dataset.reader",
             "dataset.wholeness", "write.encoder",
             "write.planning", "testing.samples", "images.perceptual_hash",
             "dataset.image_hashes", "dataset.duplicate_groups", "dataset.near_groups",
             "dataset.find_duplicates"]

#: Which of recordbeam's top-level packages and modules each one may import: a floor
#: uses the floors below it, never one above. ``local.internals`` is the one fence around
#: Beam's private members, so any floor may ask it (it imports Beam only when asked).
MAY_IMPORT = {
    "errors": set(),
    "records": set(),
    "feature_keys": set(),
    "tfrecord": {"errors"},
    "images": {"errors"},
    "local": {"errors"},
    "job_server": {"errors"},
    # Which credentials reach gs://, settled before a process's first access to it.
    "gcs_credentials": {"local"},
    # One S3 client per thread for the calls made once per file.
    "s3_client": {"local"},
    # Whether a bucket can be used, asked before a process's first access to it.
    "store_access": {"errors", "local"},
    "filesystems": {"errors", "local", "gcs_credentials", "s3_client", "store_access"},
    "testing": set(),
    "dataset": {"errors", "records", "filesystems", "tfrecord", "images", "local"},
    "write": {"errors", "records", "filesystems", "tfrecord", "images", "dataset", "local"},
    # What a conversion can be told, declared once for the command, the API and the docs.
    "options": {"errors", "records", "images", "write"},
    "sources": {"errors", "records", "filesystems", "tfrecord", "images", "dataset", "write",
                "local", "options"},
    "pipeline": {"errors", "records", "filesystems", "tfrecord", "images", "dataset", "write",
                 "sources", "local", "job_server", "gcs_credentials"},
    # recordbeam.convert: a declared format's checks and run, from Python.
    "converter": {"errors", "options", "sources", "local", "pipeline", "write", "images"},
    "cli": {"errors", "records", "filesystems", "tfrecord", "images", "dataset", "write",
            "sources", "local", "job_server", "pipeline", "testing", "gcs_credentials",
            "options", "converter"},
    # Re-exports of names users already type (see test_public_names.py).
    "runner": {"local"},
    "sink": {"write"},
    "__main__": {"cli"},
    "__init__": {"dataset", "converter"},
}

#: Rooms every floor may import: they import nothing of ours.
FOR_EVERY_FLOOR = {"feature_keys"}  # the Examples' feature names


def _modules() -> list[tuple[str, Path]]:
    """(dotted name below recordbeam, path) of every source module."""
    found = []
    for path in sorted(SOURCES.rglob("*.py")):
        parts = path.relative_to(SOURCES).with_suffix("").parts
        found.append((".".join(parts), path))
    assert len(found) > 40  # the scan looks where the code is
    return found


def _imports(tree: ast.AST) -> list[str]:
    """Every module an AST imports, also inside functions (a deferred import is still a
    dependency), as dotted names; ``from recordbeam import x`` gives ``recordbeam.x``."""
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names += [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
    return names


def _recordbeam_modules(tree: ast.AST, known: set[str]) -> set[str]:
    """The recordbeam modules an AST imports (names below ``recordbeam.``)."""
    found = set()
    for name in _imports(tree):
        if name.startswith("recordbeam."):
            dotted = name.removeprefix("recordbeam.")
            while dotted and dotted not in known:
                dotted = dotted.rpartition(".")[0]
            if dotted:
                found.add(dotted)
    return found


def _floor(module: str) -> str:
    head = module.split(".")[0]
    return "__init__" if module == "__init__" else head


def test_every_package_imports_only_the_floors_below_it():
    modules = dict(_modules())
    known = {name.removesuffix(".__init__") for name in modules} | set(modules)
    offenders = []
    for module, path in modules.items():
        floor = _floor(module)
        assert floor in MAY_IMPORT, f"{module}: a new top-level room; give it a floor here"
        for used in _recordbeam_modules(ast.parse(path.read_text(encoding="utf-8")), known):
            target = _floor(used)
            if target not in ("", floor, *FOR_EVERY_FLOOR) and target not in MAY_IMPORT[floor]:
                offenders.append(f"{module} imports {used}")
    assert offenders == []


def test_no_import_cycles_between_modules():
    modules = dict(_modules())
    known = {name.removesuffix(".__init__") for name in modules} | set(modules)
    graph: dict[str, set[str]] = defaultdict(set)
    for module, path in modules.items():
        name = module.removesuffix(".__init__")
        used = _recordbeam_modules(ast.parse(path.read_text(encoding="utf-8")), known)
        graph[name] |= {u.removesuffix(".__init__") for u in used} - {name}
    cycles: list[str] = []
    state: dict[str, str] = {}  # "open" while on the current path, then "done"

    def visit(node: str, trail: list[str]) -> None:
        state[node] = "open"
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                cycles.append(" -> ".join(trail[trail.index(nxt):] + [nxt]))
            elif nxt not in state:
                visit(nxt, trail + [nxt])
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    assert cycles == []


def test_the_layer_scan_catches_an_upward_import():
    tree = ast.parse("from recordbeam.sources.coco import ReadCoco\n"
                     "def f():\n    from recordbeam import pipeline\n")
    assert _recordbeam_modules(tree, {"sources.coco", "pipeline"}) == {"sources.coco", "pipeline"}


#: Floors whose behaviour comes from their arguments only. The local runner and the
#: command read their configuration from the environment; nothing on the data path does
#: (tests inject faults from outside it: tests/reliability/shard_faults.py).
NO_ENVIRONMENT = ("tfrecord", "images", "sources", "write", "dataset", "records", "errors")


def _environment_reads(tree: ast.AST) -> list[str]:
    """``os.environ``, ``os.getenv`` and ``from os import environ/getenv`` in an AST."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in ("environ", "getenv", "environb"):
            found.append(ast.unparse(node))
        elif isinstance(node, ast.ImportFrom) and node.module == "os":
            found += [f"os.{a.name}" for a in node.names if a.name in ("environ", "getenv")]
    return found


def test_the_data_path_reads_no_environment_variables():
    offenders = [f"{module}: {use}" for module, path in _modules()
                 if _floor(module) in NO_ENVIRONMENT
                 for use in _environment_reads(ast.parse(path.read_text(encoding="utf-8")))]
    assert offenders == []


def test_the_environment_scan_sees_a_read():
    tree = ast.parse("import os\nfrom os import getenv\nx = os.environ.get('A')\n")
    assert _environment_reads(tree) == ["os.getenv", "os.environ"]


def _modules_loading(modules: list[str], forbidden: tuple[str, ...]) -> dict[str, list[str]]:
    """For each of ``modules``, imported in turn in one fresh interpreter, the
    ``forbidden`` top-level packages loaded once it is imported. Imports only add to
    ``sys.modules``: a module after which none is loaded loads none of them itself."""
    code = ("import importlib, json, sys\n"
            f"found = {{}}\nfor name in {modules!r}:\n"
            "    importlib.import_module('recordbeam.' + name)\n"
            "    loaded = {m.split('.')[0] for m in sys.modules}\n"
            f"    found[name] = sorted(loaded & {set(forbidden)!r})\n"
            "print(json.dumps(found))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True)
    return json.loads(result.stdout)


def test_core_modules_import_neither_beam_nor_tensorflow():
    loaded = _modules_loading(BEAM_FREE, ("apache_beam", "tensorflow"))
    assert {name: found for name, found in loaded.items() if found} == {}


def test_the_import_scan_sees_what_a_module_loads():
    assert _modules_loading(["tfrecord.framing"], ("crc32c",)) == {"tfrecord.framing": ["crc32c"]}


def test_no_runtime_module_imports_tensorflow():
    names = [m.name for m in pkgutil.walk_packages(recordbeam.__path__, "recordbeam.")
             if not m.name.endswith("__main__")]
    code = ("import importlib, sys\n"
            f"for name in {names!r}:\n"
            "    importlib.import_module(name)\n"
            "print('tensorflow' in sys.modules, 'tensorflow_datasets' in sys.modules)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True)
    assert result.stdout.split()[-2:] == ["False", "False"]


def test_the_command_parses_its_arguments_without_beam():
    # Standby workers start right after parsing, so they import Beam while the launcher does.
    code = ("import sys, recordbeam.cli.main as cli, recordbeam.local.standby\n"
            "cli.build_parser().parse_known_args(['convert', 'coco', '--images', 'i',\n"
            "    '--annotations', 'a.json', '--output', 'o', '--direct_num_workers=2'])\n"
            "print('apache_beam' in sys.modules)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True)
    assert result.stdout.split() == ["False"]


# --- Beam's runner internals stay in local/ ---------------------------------------------

#: Beam's runner internals, as parts of an imported module's dotted name.
RUNNER_INTERNAL_MODULES = ("apache_beam.runners.portability", "apache_beam.runners.worker",
                           "data_plane", "fn_api_runner")

#: Private attributes used outside local/, none of them Beam's, and why.
ALLOWED_PRIVATE = {
    # The command's fast exit once its output is flushed.
    ("cli.main", "os._exit"),
    ("__main__", "os._exit"),
    # argparse keeps its subcommand parsers only in private attributes; the command reads
    # them to name the closest option of the right subcommand.
    ("cli.parser", "argparse._SubParsersAction"),
    ("cli.parser", "parser._actions"),
    # A NamedTuple's _fields and _replace are its documented public API (the underscore only keeps it
    # apart from the field names).
    ("sources.coco.records", "ObjectLabel._fields"),
    ("sources.coco.records", "kind._fields"),
    ("sources.cvat.reader", "images[0]._replace"),
}


def _scanned() -> list[tuple[str, Path]]:
    found = _modules()
    found += [(f"pipelines/{path.stem}", path) for path in sorted(PIPELINES.glob("*.py"))]
    return [(module, path) for module, path in found if not module.startswith("local.")]


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


def test_only_local_imports_beams_runner_internals():
    offenders = []
    for module, path in _scanned():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        offenders += [f"{module}: {name}" for name in _imports(tree)
                      if any(part in name for part in RUNNER_INTERNAL_MODULES)]
    assert offenders == []


def test_only_local_uses_private_attributes():
    offenders = []
    for module, path in _scanned():
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
    assert "apache_beam.runners.worker" in _imports(tree)
