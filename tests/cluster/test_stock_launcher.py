"""The documented Dataflow command (docs/deploy/dataflow.md, and its copy in the README)
from launchers a user makes with ``python -m venv`` and pip
(see ``launchers.py``), as a dry run whose ``gs://`` paths reach the GCS emulator.

A dry run builds the job as a submission does: Beam's stager builds ``--setup_file``
into a source package with the launcher's own setuptools (``python -m build
--no-isolation`` if ``build`` is installed, else ``python setup.py sdist``), or takes the
wheel given with ``--extra_package``, the line says what was built, and recordbeam's
launcher checks read the inputs and the output folder. Only the submission to Dataflow is
left out.
"""

from __future__ import annotations

import glob
import shlex
import shutil
from pathlib import Path

import pytest
from launchers import (
    ANNOTATIONS,
    IMAGES,
    PIP,
    REPO,
    base_python,
    launcher_environment,
    make_venv,
    newer_python,
    run,
)

OUTPUT = "gs://data/coco-tfrecord"
DRY_RUN_STARTS = ("dry run: the DataflowRunner job graph was built and checked, and what it "
                  "stages for its workers was built (")
DRY_RUN_ENDS = f"); nothing was submitted and nothing was written to {OUTPUT}"


#: Where users copy the Dataflow command from: the docs page, and the README's example.
DOCS_PAGE, DOCS_SECTION = "docs/deploy/dataflow.md", "## Submit a job\n"
README, README_SECTION = "README.md", "### Dataflow\n"


def documented_command(path: str, heading: str) -> list[str]:
    """The launch command under ``heading`` in ``path``, as it is written there."""
    text = (REPO / path).read_text(encoding="utf-8")
    section = text[text.index(heading):]
    start = section.index("python pipelines/coco_to_tfrecord.py")
    lines = []
    for line in section[start:].splitlines():
        lines.append(line.rstrip().removesuffix("\\"))
        if not line.rstrip().endswith("\\"):
            break
    return shlex.split(" ".join(lines))


def dataflow_command() -> list[str]:
    """The documented Dataflow command, its bucket and project filled in."""
    command = [word.replace("gs://BUCKET/", "gs://data/").replace("PROJECT", "example-project")
               for word in documented_command(DOCS_PAGE, DOCS_SECTION)]
    assert command[command.index("--images") + 1] == IMAGES
    assert command[command.index("--annotations") + 1] == ANNOTATIONS
    assert command[command.index("--output") + 1] == OUTPUT
    return command


def test_the_documented_command_is_the_one_tested():
    command = dataflow_command()
    assert command[:2] == ["python", "pipelines/coco_to_tfrecord.py"]
    assert command[-2:] == ["--setup_file", "./setup.py"]
    # The README's copy is the same command, so what is tested is what either shows.
    assert documented_command(README, README_SECTION) == documented_command(DOCS_PAGE,
                                                                            DOCS_SECTION)


def launch(venv, *, extra_package: str | None = None) -> list[str]:
    """The documented command in ``venv`` as a dry run; with ``extra_package``, the wheel
    instead of the setup file."""
    command = [venv.python, *dataflow_command()[1:], "--dry_run=True"]
    if extra_package:
        at = command.index("--setup_file")
        command[at:at + 2] = ["--extra_package", extra_package]
    return command


def dry_run(venv, checkout, emulator, *, extra_package: str | None = None):
    done = run(launch(venv, extra_package=extra_package), cwd=checkout,
               env=launcher_environment(emulator.url), check=False)
    assert done.returncode == 0, done.stderr
    said = done.stdout.strip()
    assert said.startswith(DRY_RUN_STARTS) and said.endswith(DRY_RUN_ENDS), said
    # recordbeam itself, as the workers will install it: the setup file's package, or the wheel.
    staged = said.removeprefix(DRY_RUN_STARTS).removesuffix(DRY_RUN_ENDS).split(", ")
    assert (Path(extra_package).name if extra_package else "workflow.tar.gz") in staged, said
    assert "Traceback" not in done.stderr
    # The credentials line, and none of Beam's search for credentials.
    assert (f"recordbeam: gs:// goes to the storage emulator at {emulator.url} "
            "(STORAGE_EMULATOR_HOST), without credentials") in done.stderr.splitlines()
    assert "Unable to find default credentials" not in done.stderr
    assert emulator.names(OUTPUT) == []
    return done


def test_setup_file_from_a_stock_venv(stock_venv, checkout, emulator):
    # A stock venv of the machine's Python: 3.11's brings setuptools 65 (no PEP 639).
    print(f"Python {stock_venv.python_version}, setuptools {stock_venv.setuptools_before}")
    dry_run(stock_venv, checkout, emulator)


def test_a_wheel_instead_of_the_setup_file(stock_venv, checkout, emulator):
    run([stock_venv.python, "-m", "pip", "wheel", *PIP, "--no-deps", ".", "-w", "dist/"],
        cwd=checkout, timeout=600)
    [wheel] = glob.glob(str(checkout / "dist" / "recordbeam-*.whl"))
    dry_run(stock_venv, checkout, emulator, extra_package=wheel)


@pytest.mark.parametrize("python", ["machine", "newer"])
def test_a_venv_without_setuptools(python, wheelhouses, checkout, emulator, coco_sample,
                                   tmp_path):
    """A venv as Python 3.12 and later make them: first recordbeam alone, as a user of the
    portable runner may install it (``--setup_file`` then says how in one line), then the
    ``gcp`` extra, which brings the setuptools Beam's stager builds the package with."""
    interpreter = base_python() if python == "machine" else newer_python()
    if interpreter is None:
        pytest.skip("no Python 3.12 or later on this machine (RECORDBEAM_NEWER_PYTHON may "
                    "name one); [machine] stands in for its venvs")
    venv = make_venv(interpreter, tmp_path / "venv", without_setuptools=True)
    try:
        _without_then_with_setuptools(venv, wheelhouses, checkout, emulator, coco_sample,
                                      tmp_path)
    finally:
        shutil.rmtree(venv.path, ignore_errors=True)  # ~800 MB


def _without_then_with_setuptools(venv, wheelhouses, checkout, emulator, coco_sample,
                                  tmp_path):
    print(f"Python {venv.python_version}")
    assert venv.setuptools_before is None

    wheelhouses.install(venv, ".")
    assert venv.package_version("setuptools") is None
    done = run([str(venv.path / "bin" / "recordbeam"), "convert", "coco",
                "--images", coco_sample.images_dir, "--annotations", coco_sample.annotations,
                "--output", str(tmp_path / "out"), "--runner", "PortableRunner",
                "--job_endpoint", "localhost:1", "--setup_file", "./setup.py"],
               cwd=checkout, check=False)
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines() == [
        "recordbeam: --setup_file ./setup.py is built by this Python environment's setuptools, "
        f"and it has none ({venv.python}): pip install setuptools, or build a wheel "
        "(pip wheel --no-deps . -w dist/) and pass --extra_package with it instead of "
        "--setup_file"]

    wheelhouses.install(venv, ".[gcp]")
    assert venv.package_version("setuptools") is not None
    dry_run(venv, checkout, emulator)


@pytest.mark.parametrize("typo", ["./setup.pyy"])
def test_a_setup_file_that_is_not_there_is_named(stock_venv, checkout, emulator, typo):
    command = launch(stock_venv)
    command[command.index("./setup.py")] = typo
    done = run(command, cwd=checkout,
               env=launcher_environment(emulator.url), check=False)
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines()[-1] == (
        f"recordbeam: --setup_file {typo}: no such file; give the setup.py of a recordbeam "
        "checkout (./setup.py from its top folder)")
