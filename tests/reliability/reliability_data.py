"""Small builders shared by the reliability tests: image bytes, files, folder snapshots."""

from __future__ import annotations

import io
import json
import os

from PIL import Image
from read_back import folder_files

IN_MEMORY = ("--direct_running_mode=in_memory", "--direct_num_workers=1")


def jpeg(width: int = 32, height: int = 24, color: tuple[int, int, int] = (200, 30, 30)) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (width, height), color).save(buffer, "JPEG")
    return buffer.getvalue()


def png(width: int, height: int, mode: str = "L") -> bytes:
    buffer = io.BytesIO()
    Image.new(mode, (width, height)).save(buffer, "PNG", optimize=True)
    return buffer.getvalue()


def write(path: str | os.PathLike[str], data: bytes) -> str:
    with open(path, "wb") as f:
        f.write(data)
    return os.fspath(path)


def read_jsonl(path: str | os.PathLike[str]) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


#: Relative path -> bytes of every file below a folder.
snapshot = folder_files


def runs_then_raises(error: BaseException):
    """A stand-in for ``apache_beam.Pipeline.run`` (to monkeypatch) that runs the pipeline
    to its end, its commit included, then raises ``error`` as the runner would on its way
    out."""
    import apache_beam as beam

    real_run = beam.Pipeline.run

    def run(pipeline, *args, **kwargs):
        real_run(pipeline, *args, **kwargs).wait_until_finish()
        raise error
    return run


def convert_argv(images: str, annotations: str, output: str, *extra: str) -> list[str]:
    return [
        "convert",
        "coco",
        "--images",
        images,
        "--annotations",
        annotations,
        "--output",
        output,
        "--quiet",
        *extra,
        *IN_MEMORY,
    ]
