"""The scripts of ``pipelines/`` are what the formats' declarations make, one per format."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _tool():
    spec = importlib.util.spec_from_file_location("generate_pipelines",
                                                  ROOT / "tools" / "generate_pipelines.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_every_declared_format_has_its_script_as_declared():
    tool = _tool()
    assert tool.stale() == [], "run python tools/generate_pipelines.py"


def test_a_script_runs_the_convert_command_of_its_format():
    from recordbeam.sources.format import formats

    tool = _tool()
    for fmt in formats().values():
        text = tool.render(fmt)
        assert f'console(["convert", "{fmt.name}", *sys.argv[1:]])' in text
        assert f"python {fmt.script} {' '.join(fmt.example)} --output OUT" in text
        compile(text, fmt.script, "exec")  # a script Python can run


def test_a_changed_declaration_makes_the_check_fail(tmp_path, monkeypatch):
    tool = _tool()
    monkeypatch.setattr(tool, "ROOT", tmp_path)
    (tmp_path / "pipelines").mkdir()
    assert tool.main(["--check"]) == 1  # no script yet
    assert tool.main([]) == 0
    assert tool.main(["--check"]) == 0
    script = next((tmp_path / "pipelines").iterdir())
    script.write_text(script.read_text() + "# edited by hand\n")
    assert tool.main(["--check"]) == 1
