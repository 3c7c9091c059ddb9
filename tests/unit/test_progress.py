"""The progress line rewrites itself on a terminal only; logs get plain lines."""

from __future__ import annotations

import io
import json
import time

from recordbeam.dataset.names import PLAN
from recordbeam.write.progress import ProgressReporter


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _running_run(tmp_path):
    (tmp_path / PLAN).write_text(json.dumps({"input_bytes": {"train": 4096}}))
    (tmp_path / "train-00000-of-00001.tfrecord.0").write_bytes(b"x" * 1024)
    return str(tmp_path)


def _report(stream, temp_dir) -> str:
    with ProgressReporter(temp_dir, interval=0.01, log_interval=0.01, stream=stream):
        deadline = time.monotonic() + 10
        while "writing" not in stream.getvalue() and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.05)
    return stream.getvalue()


def test_a_log_gets_whole_lines_without_carriage_returns(tmp_path):
    text = _report(io.StringIO(), _running_run(tmp_path))
    assert "\r" not in text
    lines = text.splitlines(keepends=True)
    assert lines and all(line.endswith("\n") for line in lines)
    assert lines[0].startswith("writing: 1.0 KiB of ~4.0 KiB (25%)")


def test_a_terminal_gets_one_line_rewritten_in_place(tmp_path):
    text = _report(_Terminal(), _running_run(tmp_path))
    assert text.startswith("\rwriting: 1.0 KiB of ~4.0 KiB (25%)")
    assert text.count("\n") == 1 and text.endswith("\n")  # one newline, at the end
