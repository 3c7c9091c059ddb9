"""Launchers as a user builds them: fresh ``python -m venv`` environments holding only what
venv and pip give them, recordbeam installed with pip from a copy of this checkout.

- ``stock_venv``: the machine's Python 3 as it comes (Python 3.11's venv brings
  setuptools 65, older than the 77 that reads PEP 639 licenses), ``pip install '.[gcp]'``;
  built once per session, shared by the tests that use it;
- :func:`venv_without_setuptools`: a venv with no setuptools, as Python 3.12 and later
  make them (the machine's Python with setuptools uninstalled, or a Python 3.12+ found
  by :func:`newer_python`), built by the one test that uses it.

The packages come from the index once per Python version and session, into a wheelhouse
(``pip wheel '.[gcp]'``: pip's resolver, the index's wheels, and wheels built from the
one sdist among them, google-apitools); each venv installs from it with ``--no-index``,
since this machine's index answers are not kept by pip's cache (each venv would download
its ~150 MB of wheels again). ``--no-compile`` skips writing .pyc files, half of an
install's ~2 minutes here; Python compiles on import all the same.

``gs://`` paths reach the GCS emulator of ``tests/gcs_emulator.py``; nothing reaches
Google. Every subprocess has a timeout.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import gcs_emulator
import pytest

REPO = Path(__file__).parents[2]
PIP = ("--disable-pip-version-check", "--quiet")
INSTALL_TIMEOUT = 1200  # s; a cold pip cache downloads Beam and Google's clients
RUN_TIMEOUT = 300
IMAGES = "gs://data/coco/train2017"
ANNOTATIONS = "gs://data/coco/annotations/instances_train2017.json"


@dataclass(frozen=True)
class Venv:
    """A launcher's environment: where it is and what it held before recordbeam came."""

    path: Path
    python_version: str
    setuptools_before: str | None  # its setuptools version as created, None when absent

    @property
    def python(self) -> str:
        return str(self.path / "bin" / "python")

    def package_version(self, name: str) -> str | None:
        found = run([self.python, "-c", "import importlib.metadata as m, sys\n"
                     "try: print(m.version(sys.argv[1]))\n"
                     "except m.PackageNotFoundError: print('')", name])
        return found.stdout.strip() or None


def run(argv: list[str], *, timeout: float = RUN_TIMEOUT, check: bool = True,
        **kwargs) -> subprocess.CompletedProcess:
    """A subprocess with output captured; ``check`` fails the test with its output."""
    env = kwargs.pop("env", None) or venv_environment()
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env,
                          **kwargs)
    if check and done.returncode != 0:
        pytest.fail(f"{' '.join(argv)} exited {done.returncode}\n{done.stdout}\n{done.stderr}")
    return done


def venv_environment(**extra: str) -> dict[str, str]:
    """This environment without what points at the test environment's packages (a venv
    must find only its own)."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    return {**env, **extra}


def launcher_environment(emulator_url: str) -> dict[str, str]:
    return venv_environment(**{gcs_emulator.VARIABLE: emulator_url})


def base_python() -> str:
    """The Python venvs are made from: ``RECORDBEAM_VENV_PYTHON``, else ``python3`` on PATH."""
    return os.environ.get("RECORDBEAM_VENV_PYTHON") or shutil.which("python3") or sys.executable


def newer_python() -> str | None:
    """A Python 3.12 or later that can make venvs: ``RECORDBEAM_NEWER_PYTHON``, else
    ``python3.14`` ... ``python3.12`` on PATH, else pyenv's installed versions. None when
    this machine has none (PyPI has no CPython builds that pip installs)."""
    candidates = [os.environ.get("RECORDBEAM_NEWER_PYTHON")]
    candidates += [shutil.which(f"python3.{minor}") for minor in (14, 13, 12)]
    pyenv = os.environ.get("PYENV_ROOT") or os.path.expanduser("~/.pyenv")
    candidates += sorted(glob.glob(os.path.join(pyenv, "versions", "3.1[2-9]*", "bin", "python3")),
                         reverse=True)
    for candidate in filter(None, candidates):
        probe = subprocess.run(
            [candidate, "-c", "import sys, venv, ensurepip; print(sys.version_info >= (3, 12))"],
            capture_output=True, text=True, timeout=60, env=venv_environment())
        if probe.returncode == 0 and probe.stdout.strip() == "True":
            return candidate
    return None


def make_venv(python: str, where: Path, *, without_setuptools: bool = False) -> Venv:
    """``python -m venv where``; ``without_setuptools``: uninstall the setuptools it brings."""
    run([python, "-m", "venv", str(where)], timeout=INSTALL_TIMEOUT)
    bare = Venv(where, "", None)
    version = run([bare.python, "-c", "import platform; print(platform.python_version())"])
    venv = Venv(where, version.stdout.strip(), bare.package_version("setuptools"))
    if without_setuptools and venv.setuptools_before:
        run([venv.python, "-m", "pip", "uninstall", "-y", *PIP, "setuptools"],
            timeout=INSTALL_TIMEOUT)
        venv = Venv(where, venv.python_version, None)
    return venv


class Wheelhouses:
    """One folder of wheels per Python version: what ``pip install '.[gcp]'`` resolves to
    from the index, and setuptools, which pip's isolated build of recordbeam needs."""

    def __init__(self, root: Path, checkout: Path) -> None:
        self.root, self.checkout = root, checkout
        self._built: dict[str, Path] = {}

    def install(self, venv: Venv, requirement: str) -> None:
        """``pip install requirement`` in ``venv``, from its version's wheelhouse."""
        house = self._for(venv)
        run([venv.python, "-m", "pip", "install", *PIP, "--no-compile", "--no-index",
             "--find-links", str(house), requirement], cwd=self.checkout, timeout=INSTALL_TIMEOUT)

    def folder(self, venv: Venv) -> Path:
        """The wheelhouse of ``venv``'s Python version, built on first use."""
        return self._for(venv)

    def _for(self, venv: Venv) -> Path:
        version = ".".join(venv.python_version.split(".")[:2])
        if version not in self._built:
            house = self.root / version
            run([venv.python, "-m", "pip", "wheel", *PIP, "--wheel-dir", str(house), ".[gcp]",
                 "setuptools>=64"], cwd=self.checkout, timeout=INSTALL_TIMEOUT)
            self._built[version] = house
        return self._built[version]


