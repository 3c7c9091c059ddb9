"""ARCHITECTURE.md's checklist for adding an input format, held: in a copy of the project,
Label Studio's package cloned under another name (``lsclone``) is a format of the command
and the API by its declaration alone; each guard the checklist names fails naming what
the clone still lacks; and once the checklist's steps are done, and nothing else, every
guard passes and the clone converts its small input."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ElementTree
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
#: What a copy of the project needs for the command, the guards and the generators.
COPIED = ("src", "tests", "docs", "tools", "pipelines", "deploy/flex-template/metadata",
          "README.md", "mkdocs.yml", "pyproject.toml", "ARCHITECTURE.md")
#: The guards of the checklist (ARCHITECTURE.md, "Adding an input format").
GUARDS = (
    "tests/reliability/test_format_tables.py",
    "tests/unit/test_generated_pipelines.py::test_every_declared_format_has_its_script_as_declared",
    "tests/unit/test_flex_template_metadata.py::test_committed_files_are_what_the_parser_makes_now",
    "tests/unit/test_docs.py::test_every_input_format_has_a_page_with_its_options_table",
    "tests/unit/test_format_lists.py",
)


def _copy(root: Path) -> None:
    for name in COPIED:
        source, target = REPO / name, root / name
        if source.is_dir():
            shutil.copytree(source, target, ignore=shutil.ignore_patterns(
                "__pycache__", ".hypothesis", "*.egg-info"))
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(source, target)
    package = root / "src/recordbeam/sources"
    shutil.copytree(package / "labelstudio", package / "lsclone",
                    ignore=shutil.ignore_patterns("__pycache__"))
    for path in (package / "lsclone").glob("*.py"):
        _edit(path, lambda text: text.replace("LabelStudio", "LsClone").replace(
            "labelstudio", "lsclone").replace("Label Studio", "LS Clone"))


def _edit(path: Path, change) -> None:
    path.write_text(change(path.read_text(encoding="utf-8")), encoding="utf-8")


def _run(root: Path, *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *argv], cwd=root, capture_output=True, text=True,
                          timeout=300, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(root / "src"),
                                            "HOME": str(root)})


def _guards(root: Path, *extra: str) -> dict[str, str]:
    """Each guard test run in the copy -> its failure text ("" when it passed)."""
    report = root / "guards.xml"
    _run(root, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
         f"--junitxml={report}", *GUARDS, *extra)
    outcomes = {}
    for case in ElementTree.parse(report).iter("testcase"):
        failed = case.find("failure") if case.find("failure") is not None else case.find("error")
        outcomes[f"{case.get('classname')}.{case.get('name')}"] = (
            "" if failed is None else f"{failed.get('message')}\n{failed.text}")
    return outcomes


def _follow_the_checklist(root: Path) -> None:
    # 1. Its tests: its datasets of every format (here Label Studio's, under the clone's
    # command); its small input is the sample it declares.
    _edit(root / "tests/reliability/format_datasets.py", lambda text: text + (
        "\nBUILDERS['lsclone'] = lambda root: __import__('dataclasses').replace("
        "_labelstudio(root), kind='lsclone')\nFORMATS = tuple(sorted(BUILDERS))\n"))
    _edit(root / "tests/reliability/labelled_datasets.py", lambda text: text + (
        "\nCLASS_NAME_FORMATS['lsclone'] = lambda root, names, **options: "
        "['lsclone', *labelstudio(root, names, **options)[1:]]\n"))
    _edit(root / "tests/reliability/test_class_name_trust.py", lambda text: text.replace(
        'FOUND = {\n', 'FOUND = {\n    "lsclone": "hot\\ndog",\n', 1))
    # 2. The generator.
    done = _run(root, "tools/generate_pipelines.py")
    assert done.returncode == 0, done.stderr
    # 3. Its page.
    page = (root / "docs/formats/labelstudio.md").read_text(encoding="utf-8")
    (root / "docs/formats/lsclone.md").write_text(page.replace("# Label Studio", "# LS Clone", 1)
                                                  .replace("convert labelstudio", "convert lsclone"),
                                                  encoding="utf-8")
    # 4. The two lists of the formats.
    _edit(root / "README.md", lambda text: text.replace(
        "([`convert labelstudio`](docs/formats/labelstudio.md))",
        "([`convert labelstudio`](docs/formats/labelstudio.md), "
        "[`convert lsclone`](docs/formats/lsclone.md))", 1))
    _edit(root / "docs/index.md", lambda text: text.replace(
        "[Label Studio](formats/labelstudio.md),",
        "[Label Studio](formats/labelstudio.md), [LS Clone](formats/lsclone.md),", 1))


def test_a_new_format_needs_the_checklist_and_nothing_more(tmp_path):
    root = tmp_path / "project"
    _copy(root)
    # The declaration alone gives the command and the API.
    helped = _run(root, "-m", "recordbeam", "convert", "lsclone", "--help")
    assert helped.returncode == 0 and "--use-predictions" in helped.stdout, helped.stderr
    api = _run(root, "-c", "import recordbeam.sources as s; print(s.ReadLsClone.__module__)")
    assert api.stdout.strip() == "recordbeam.sources.lsclone.reader", api.stderr
    # Each guard names the clone until its step is done.
    before = _guards(root)
    assert len(before) >= len(GUARDS)
    failing = {name for name, failure in before.items() if failure}
    for guard in GUARDS:
        module = re.sub(r"\.py(::.*)?$", "", guard).replace("/", ".")
        assert any(name.startswith(module) for name in failing), f"{guard} did not fail"
    assert all("lsclone" in before[name] for name in failing), {
        name: before[name][-400:] for name in failing if "lsclone" not in before[name]}
    _follow_the_checklist(root)
    after = _guards(root, "tests/integration/test_each_format.py::"
                    "test_each_format_converts_two_pictures_whole[lsclone]")
    assert [name for name, failure in after.items() if failure] == [], {
        name: failure[-600:] for name, failure in after.items() if failure}
    assert any(name.endswith("[lsclone]") for name in after)
