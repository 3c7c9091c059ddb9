"""Every feature name of the Examples is spelled once, in ``recordbeam.feature_keys``."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import recordbeam
from recordbeam import feature_keys

SOURCES = Path(recordbeam.__file__).parent


def _docstrings(tree: ast.AST) -> set[int]:
    """ids of the docstring nodes of a module, its classes and functions."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                found.add(id(body[0].value))
    return found


def _spelled_keys(path: Path) -> list[str]:
    """``line: text`` of each plain string in ``path`` that names a feature
    (``image/...``); docstrings, messages and the text parts of f-strings are prose."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    prose = _docstrings(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            prose |= {id(part) for part in node.values}
    return [f"{node.lineno}: {node.value}" for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str)
            and re.fullmatch(r"image/[a-z0-9_/]*", node.value) and id(node) not in prose]


def test_no_module_spells_a_feature_key_of_its_own():
    modules = [p for p in sorted(SOURCES.rglob("*.py")) if p.name != "feature_keys.py"]
    assert len(modules) > 40  # the scan looks where the code is
    spelled = {str(p.relative_to(SOURCES)): keys for p in modules if (keys := _spelled_keys(p))}
    assert spelled == {}


def test_the_scan_finds_a_key_where_one_is_spelled(tmp_path):
    module = tmp_path / "m.py"
    module.write_text('"""image/encoded in prose."""\n'
                      'KEY = "image/encoded"\n'
                      'MESSAGE = f"image/height is {1}"\n'
                      'SAID = "image/source_id is missing"\n', encoding="utf-8")
    assert _spelled_keys(module) == ["2: image/encoded"]


def test_the_kind_tables_name_declared_keys_only():
    declared = {value for name, value in vars(feature_keys).items()
                if name.isupper() and isinstance(value, str)}
    for table in (feature_keys.IMAGE_KINDS, feature_keys.DETECTION_KINDS,
                  feature_keys.IMAGE_LABEL_KINDS):
        assert set(table) <= declared
        assert set(table.values()) <= {"bytes", "int64", "float"}
    values = [value for name, value in vars(feature_keys).items()
              if name.isupper() and isinstance(value, str)]
    assert len(values) == len(declared)  # no feature under two names
    assert feature_keys.image_key("key/sha256") == feature_keys.SHA256
