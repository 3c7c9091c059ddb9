"""What a Dataflow or portable-runner worker gets from a job, done on this machine.

The launcher side is Beam's own: its ``Stager`` builds and collects the job's files from
the job's options, into a folder instead of a bucket. The worker side follows the boot
program of Beam's Python SDK container (``sdks/python/container/boot.go`` and
``piputil.go`` in apache/beam): in a Python that holds apache-beam (what the container
image holds), it installs the staged requirements in two rounds (first from the staged
files only, then with the index), then each extra package (forced, then with its
dependencies), then ``workflow.tar.gz``; the SDK worker processes then run with that
Python first on ``PATH``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

import apache_beam
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.portability.stager import Stager
from beam_services import free_port, serving  # noqa: F401 - free_port: the tests' import

ROOT = Path(__file__).resolve().parents[2]

#: Names the container's boot program gives the files it installs (Beam's stager's names).
REQUIREMENTS_FILE = "requirements.txt"
EXTRA_PACKAGES_FILE = "extra_packages.txt"
WORKFLOW_FILE = "workflow.tar.gz"
#: A Beam SDK staged with the job; none is here: the container's Beam is the job's.
SDK_FILES = ("dataflow_python_sdk.tar",)

#: Environment variables that would let a worker's Python or pip see the launcher's
#: environment (this checkout's sources, its index settings) instead of its own.
_LAUNCHER_ONLY = ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PYTHONSTARTUP")


class FolderStager(Stager):
    """Beam's stager, with a folder as the staging location."""

    def stage_artifact(self, local_path_to_artifact: str, artifact_name: str,
                       sha256: str) -> None:
        shutil.copyfile(local_path_to_artifact, artifact_name)

    def commit_manifest(self) -> str:
        return "staged-in-a-folder"


def stage_job(beam_args: Sequence[str], staging: Path, temp: Path) -> list[str]:
    """Stage what a job with these Beam options stages, into ``staging``; the staged names."""
    staging.mkdir(parents=True, exist_ok=True)
    temp.mkdir(parents=True, exist_ok=True)
    _token, staged = FolderStager().create_and_stage_job_resources(
        PipelineOptions(list(beam_args)), temp_dir=str(temp), staging_location=str(staging))
    return staged


def project_copy(dest: Path) -> Path:
    """This checkout's files (tracked, and new ones git does not ignore) in ``dest``: what a
    user's clone holds, without this checkout's build leftovers."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"], cwd=ROOT,
        check=True, capture_output=True, timeout=60).stdout.decode().split("\0")
    for name in filter(None, listed):
        source = ROOT / name
        if source.is_file():  # a tracked file deleted in the work tree is not copied
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / name)
    return dest


def run(command: Sequence[str], *, env: dict[str, str] | None = None, cwd: Path | None = None,
        timeout: float = 600, check: bool = True) -> subprocess.CompletedProcess:
    done = subprocess.run(list(command), env=env, cwd=cwd, capture_output=True, text=True,
                          timeout=timeout)
    if check and done.returncode != 0:
        raise AssertionError(f"{' '.join(command)} exited {done.returncode}:\n"
                             f"{done.stdout[-4000:]}\n{done.stderr[-4000:]}")
    return done


def make_container_venv(path: Path) -> Path:
    """A venv holding Python and the launcher's apache-beam version: the SDK container."""
    run([sys.executable, "-m", "venv", str(path)], timeout=300)
    python = str(path / "bin" / "python")
    run([python, "-m", "pip", "install", "--disable-pip-version-check", "--quiet",
         f"apache-beam=={apache_beam.__version__}"], env=worker_env(path, index=True),
        timeout=1200)
    return path


def copy_venv(source: Path, dest: Path) -> Path:
    """A copy of a venv, used as ``dest/bin/python`` (its scripts keep the old path). Its
    files are hard links to the source's: pip and Python replace files, never write into
    them, so what is installed in the copy leaves the source as it was (0.6 s against 14
    for a full copy here)."""
    shutil.copytree(source, dest, symlinks=True, copy_function=os.link)
    return dest


def worker_env(venv: Path, *, index: bool) -> dict[str, str]:
    """The environment of a worker's processes: ``venv``'s Python first on PATH, nothing of
    the launcher's; with ``index`` False, pip sees no index and no configured link (every
    file must come with the job, or pip fails)."""
    env = {k: v for k, v in os.environ.items() if k not in _LAUNCHER_ONLY}
    env["PATH"] = str(venv / "bin") + os.pathsep + env.get("PATH", "")
    if not index:
        env = {k: v for k, v in env.items() if not k.startswith("PIP_")}
        env["PIP_CONFIG_FILE"] = os.devnull
        env["PIP_NO_INDEX"] = "1"
    return env


def install_staged_files(venv: Path, staged: Path, env: dict[str, str]) -> list[str]:
    """Install a job's staged files in ``venv`` in the order and with the pip commands of
    the SDK container's boot program; returns the commands run (for failure messages)."""
    files = set(os.listdir(staged))
    assert not files & set(SDK_FILES) and not any(f.startswith("apache_beam") for f in files), (
        f"a Beam SDK was staged ({sorted(files)}); these workers use the container's")
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--no-cache-dir",
           "--disable-pip-version-check"]
    commands: list[list[str]] = []
    if REQUIREMENTS_FILE in files:
        requirements = str(staged / REQUIREMENTS_FILE)
        # The first round may fail (boot logs it and goes on); the second decides.
        run([*pip, "-r", requirements, "--no-index", "--no-deps", "--find-links", str(staged)],
            env=env, check=False)
        commands.append([*pip, "-r", requirements, "--find-links", str(staged)])
    if EXTRA_PACKAGES_FILE in files:
        for package in (staged / EXTRA_PACKAGES_FILE).read_text().split():
            commands.append([*pip, "--upgrade", "--force-reinstall", "--no-deps",
                             str(staged / package)])
            commands.append([*pip, str(staged / package)])
    if WORKFLOW_FILE in files:
        commands.append([*pip, str(staged / WORKFLOW_FILE)])
    for command in commands:
        run(command, env=env)
    return [" ".join(c) for c in commands]


@contextlib.contextmanager
def beam_service(python: Path, module_args: Sequence[str], port: int, log: Path,
                 env: dict[str, str]) -> Iterator[str]:
    """Run ``python -m MODULE ARGS`` (a Beam job service or worker pool) until the block
    ends; yields ``localhost:port`` once it listens. Stops it and its children after."""
    with serving(["-m", *module_args], port, log, python=str(python), env=env,
                 start_seconds=120):
        yield f"localhost:{port}"
