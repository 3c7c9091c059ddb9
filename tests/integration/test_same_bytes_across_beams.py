"""The same conversion writes the same bytes on two Beams: this environment's, and the one
of the Python that ``RECORDBEAM_REFERENCE_PYTHON`` names.

``make test-newest-beam`` runs it with the newest Beam on the package index here (newer
than the Makefile's ``NEWEST_BEAM``, so local runs are Beam's plain FnApiRunner) and the
Makefile's ``.venv`` as the reference (``NEWEST_BEAM``, the local runner's own path): a
Beam release that changes what recordbeam writes fails here the day it ships. Without the
variable there is no second environment to compare with, and the test skips, saying so.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import in_new_processes
import pytest

REFERENCE_PYTHON = os.environ.get("RECORDBEAM_REFERENCE_PYTHON")

pytestmark = [
    pytest.mark.skipif(not REFERENCE_PYTHON, reason="RECORDBEAM_REFERENCE_PYTHON names no "
                       "second environment to compare with (make test-newest-beam sets it)"),
]


def _beam_of(python: str) -> str:
    return subprocess.run([python, "-c", "import apache_beam; print(apache_beam.__version__)"],
                          capture_output=True, text=True, check=True).stdout.strip()


def _convert(python: str, coco_sample, output: Path, **environ: str) -> dict[str, bytes]:
    done = subprocess.run(
        [python, "-m", "recordbeam", "convert", "coco", "--images", coco_sample.images_dir,
         "--annotations", coco_sample.annotations, "--output", str(output), "--shards", "3",
         "--max-reject-fraction", "0.5", "--quiet", "--direct_num_workers=2"],
        capture_output=True, text=True, timeout=600, env=environ or None)
    assert done.returncode == 0, f"{python}: {done.stderr}"
    return {n: (output / n).read_bytes() for n in os.listdir(output) if ".tfrecord" in n}


def test_a_conversion_writes_the_reference_beams_bytes(coco_sample, tmp_path):
    here = _convert(sys.executable, coco_sample, tmp_path / "here")
    # The reference as it is installed: none of the changes tests make in new processes
    # (such as RECORDBEAM_PRETEND_BEAM's).
    plain = {k: v for k, v in os.environ.items() if k != in_new_processes.VARIABLE}
    reference = _convert(REFERENCE_PYTHON, coco_sample, tmp_path / "reference", **plain)
    beams = f"Beam {_beam_of(sys.executable)} here, {_beam_of(REFERENCE_PYTHON)} in the reference"
    assert len(here) == 3, beams
    assert here == reference, beams
