"""The Flex Templates' parameter files are exactly the ``convert`` commands' options, and a
launcher's way of passing them (``--name=value``, switches ``=true`` / ``=false``) parses."""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path

import pytest

from recordbeam.cli.parser import build_parser

TOOL = Path(__file__).resolve().parents[2] / "tools" / "flex_template_metadata.py"


def _tool():
    spec = importlib.util.spec_from_file_location("flex_template_metadata", TOOL)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


tool = _tool()
KINDS = list(tool.convert_parsers())


def test_committed_files_are_what_the_parser_makes_now():
    wanted = tool.rendered()
    assert sorted(tool.METADATA.glob("*.json")) == sorted(wanted), (
        "one metadata file per convert format: run python tools/flex_template_metadata.py")
    for path, text in wanted.items():
        assert path.read_text(encoding="utf-8") == text, (
            f"{path.name} is out of date: run python tools/flex_template_metadata.py")
    assert tool.main(["--check"]) == 0


@pytest.mark.parametrize("kind", KINDS)
def test_parameters_are_exactly_the_commands_options(kind):
    help_line, parser = tool.convert_parsers()[kind]
    committed = json.loads((tool.METADATA / f"{tool.script_name(kind)}.json").read_text())
    flags = [a.option_strings[-1] for a in parser._actions
             if a.option_strings and a.dest != "help"]
    assert [p["name"] for p in committed["parameters"]] == [
        f.removeprefix("--").replace("-", "_") for f in flags]
    required = {a.option_strings[-1].removeprefix("--").replace("-", "_")
                for a in parser._actions if a.required}
    assert {p["name"] for p in committed["parameters"] if not p["isOptional"]} == required
    assert all(p["label"] and p["helpText"] for p in committed["parameters"])
    assert (tool.PIPELINES / f"{tool.script_name(kind)}_to_tfrecord.py").is_file()


@pytest.mark.parametrize("kind", KINDS)
def test_each_default_satisfies_its_parameters_regex(kind):
    _, parser = tool.convert_parsers()[kind]
    defaults = {a.option_strings[-1].removeprefix("--").replace("-", "_"): a.default
                for a in parser._actions if a.option_strings}
    committed = json.loads((tool.METADATA / f"{tool.script_name(kind)}.json").read_text())
    checked = 0
    for entry in committed["parameters"]:
        default = defaults[entry["name"]]
        if default is None or "regexes" not in entry:
            continue
        text = str(default).lower() if isinstance(default, bool) else str(default)
        assert all(re.fullmatch(r, text) for r in entry["regexes"]), (entry["name"], text)
        checked += 1
    assert checked >= 8


@pytest.mark.parametrize("kind", KINDS)
def test_a_launchers_parameters_parse_as_the_commands_options(kind):
    """Every required parameter given as a path, every switch as ``=true``: the command
    reads the underscore names and the values a launcher writes."""
    committed = json.loads((tool.METADATA / f"{tool.script_name(kind)}.json").read_text())
    args = [f"--{p['name']}=gs://bucket/{p['name']}" for p in committed["parameters"]
            if not p["isOptional"]]
    switches = [p["name"] for p in committed["parameters"]
                if p.get("regexes") == [tool.TRUE_OR_FALSE]]
    assert switches
    parsed, extra = build_parser().parse_known_args(
        ["convert", kind, *args, *(f"--{name}=true" for name in switches)])
    assert extra == []
    assert all(getattr(parsed, name) is True for name in switches)
    parsed, _ = build_parser().parse_known_args(
        ["convert", kind, *args, *(f"--{name}=false" for name in switches)])
    assert not any(getattr(parsed, name) for name in switches)


def test_a_switch_given_another_value_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_known_args(["convert", "coco", "--images=gs://b/i",
                                         "--output=gs://b/o", "--if_changed=yes"])
    assert exit_.value.code == 2
    assert "argument --if-changed: takes no value, or true or false; got 'yes'" in (
        capsys.readouterr().err)


def test_an_underscore_spelling_that_is_no_option_stays_unknown():
    _, extra = build_parser().parse_known_args(
        ["convert", "coco", "--images=i", "--output=o", "--max_num_workers=3", "--if_chnaged"])
    assert extra == ["--max_num_workers=3", "--if_chnaged"]
