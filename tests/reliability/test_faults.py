"""Faults: a worker failing mid-shard, SIGKILL at any moment, a full disk, foreign files.

Beam's local FnApiRunner does not retry a failed bundle (the run fails), so a retry is
shown two ways: the failed run is rerun into the same folder, and the shard-writing DoFn
is called again after it failed, as a runner that retries (Dataflow, Flink) would.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import apache_beam as beam
import fullfs
import pytest
import shard_faults
from apache_beam.coders import BytesCoder
from in_new_processes import set_up_then_exec
from lanes import exhaustive, one_in_make_test
from reliability_data import convert_argv, runs_then_raises, snapshot

from recordbeam.cli import main as cli
from recordbeam.dataset.layout import MANIFEST, TEMP_PREFIX
from recordbeam.testing.samples import make_coco_sample
from recordbeam.tfrecord.example import encode_example
from recordbeam.tfrecord.framing import open_records
from recordbeam.write.encoder import ExampleEncoder
from recordbeam.write.planning import ShardOptions, order_key
from recordbeam.write.sink import _pack_keyed, _WriteShard

CASE = pytest.mark.case


@pytest.fixture(scope="module")
def sample(tmp_path_factory):
    return make_coco_sample(tmp_path_factory.mktemp("sample"), num_images=40, include_bad=False)


@pytest.fixture(scope="module")
def clean(sample, tmp_path_factory) -> dict[str, bytes]:
    """Every file of an undisturbed run with three shards."""
    out = tmp_path_factory.mktemp("clean") / "out"
    assert (
        cli.main(convert_argv(sample.images_dir, sample.annotations, str(out), "--shards", "3"))
        == 0
    )
    return snapshot(out)


def _shards(files) -> list[str]:
    return sorted(n for n in files if "/" not in n and ".tfrecord" in n)


def _temp_files(out) -> list[str]:
    return [n for n in snapshot(out) if n.startswith(TEMP_PREFIX)]


# ----------------------------------------------------------------- retries


@CASE(
    "A shard's writes fail mid-shard (injected I/O error), then the run is retried into the same folder",
    "run fails (exit 3), nothing final written, its temp folder removed; the rerun equals "
    "a clean run byte for byte",
)
def test_failed_shard_then_rerun_equals_clean_run(sample, clean, tmp_path, monkeypatch, capsys):
    out = tmp_path / "out"
    marker = tmp_path / "fired"
    shard_faults.install(monkeypatch, shard=1, after=5, marker=marker)
    argv = convert_argv(sample.images_dir, sample.annotations, str(out), "--shards", "3")
    assert cli.main(argv) == 3
    err = capsys.readouterr().err
    assert "recordbeam: test fault: shard 1 failed after 5 records\n" in err
    assert "InjectedFault" not in err  # messages carry no type names
    assert marker.exists()
    assert snapshot(out) == {}  # its temp folder removed, its lock given up
    assert cli.main(argv) == 0  # the marker exists: the "retry" goes through
    assert snapshot(out) == clean


def _examples(n: int):
    records = [encode_example({"n": [i], "text": f"record {i}"}) for i in range(n)]
    return [(order_key(ExampleEncoder().identity(r), "s"), r) for r in records]


@CASE(
    "Shard task retried after failing mid-shard (DoFn called again, as Dataflow/Flink retry)",
    "the retry writes a new temp file; every record once; the failed attempt's file is never used",
)
def test_retried_shard_task_writes_every_record_once(tmp_path, monkeypatch):
    coder = BytesCoder()
    shard_faults.install(monkeypatch, shard=0, after=4, marker=tmp_path / "fired")
    temp = tmp_path / f"{TEMP_PREFIX}run"
    writer = _WriteShard(ExampleEncoder(), ShardOptions(num_shards=1), str(temp), coder)
    os.makedirs(temp)
    writer.setup()
    keyed = _examples(12)
    group = (("train", 0, 1), [_pack_keyed(key, r, coder) for key, r in keyed])
    with pytest.raises(shard_faults.InjectedFault):
        list(writer.process(group))
    [failed] = os.listdir(temp)
    outputs = list(writer.process(group))
    [result] = [o for o in outputs if hasattr(o, "temp_path")]
    assert os.path.basename(result.temp_path) != failed
    expected = [r for _key, r in sorted(keyed)]
    assert list(open_records(result.temp_path)) == expected
    assert result.examples == 12
    assert len(list(open_records(str(temp / failed)))) == 4


# ----------------------------------------------------------------- SIGKILL


def _group_alive(pgid: int) -> list[int]:
    """Processes of the group that are not zombies."""
    alive = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            alive.append(int(pid))
    return alive


def _kill_when(argv, out, ready, timeout=60.0) -> str:
    """Start a conversion, SIGKILL its whole process group once ``ready(out, elapsed)``."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "recordbeam", *argv],
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    started = time.monotonic()
    state = "finished before the kill"
    while proc.poll() is None and time.monotonic() - started < timeout:
        if ready(out, time.monotonic() - started):
            os.killpg(proc.pid, signal.SIGKILL)
            state = "killed"
            break
        time.sleep(0.002)
    proc.wait()
    deadline = time.monotonic() + 10
    while _group_alive(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _group_alive(proc.pid), "worker processes outlived the kill"
    return state


def _after(seconds):
    return lambda out, elapsed: elapsed >= seconds


def _temp_shard_written(out, elapsed):
    return any(".tfrecord." in n for n in _temp_files(out)) if os.path.isdir(out) else False


def _plan_written(out, elapsed):
    return any(n.endswith("plan.json") for n in _temp_files(out)) if os.path.isdir(out) else False


def _final_shard_renamed(out, elapsed):
    return os.path.isdir(out) and any(n.startswith("train-") for n in os.listdir(out))


def _check_not_finished_or_complete(out) -> None:
    files = snapshot(out) if os.path.isdir(out) else {}
    if MANIFEST not in files:
        return  # not finished, and it does not look finished
    manifest = json.loads(files[MANIFEST])
    for shard in manifest["splits"]["train"]["shards"]:
        assert len(files[shard["file"]]) == shard["bytes"]
        assert sum(1 for _ in open_records(os.path.join(out, shard["file"]))) == shard["examples"]


@CASE(
    "SIGKILL at 0.5 s, once the temp folder exists, while shards are written (2 worker "
    "processes), and as the first shard is renamed into place",
    "nothing looks finished (or the manifest is complete); no process lingers; the next run "
    "equals a clean run byte for byte",
)
@exhaustive  # one kill point and its rerun: test_failed_shard_then_rerun_equals_clean_run
def test_sigkill_at_any_moment_then_rerun(sample, clean, tmp_path):
    out = str(tmp_path / "out")
    base = [
        "convert",
        "coco",
        "--images",
        sample.images_dir,
        "--annotations",
        sample.annotations,
        "--output",
        out,
        "--quiet",
        "--shards",
        "3",
    ]
    in_memory = ["--direct_running_mode=in_memory", "--direct_num_workers=1"]
    multi = ["--direct_running_mode=multi_processing", "--direct_num_workers=2"]
    moments = [
        (_after(0.5), in_memory),
        (_plan_written, in_memory),
        (_temp_shard_written, multi),
        (_final_shard_renamed, in_memory),
    ]
    states = []
    for ready, mode in moments:
        states.append(_kill_when(base + mode, out, ready))
        _check_not_finished_or_complete(out)
    assert states[:3] == ["killed"] * 3, states  # the last one may finish before it is hit
    assert cli.main(convert_argv(sample.images_dir, sample.annotations, out, "--shards", "3")) == 0
    assert snapshot(out) == clean


# ----------------------------------------------------------------- Ctrl-C


@contextlib.contextmanager
def _signals_as_a_terminal_gives_them():
    """Start the command with SIGINT, SIGTERM and SIGHUP at their defaults and unblocked,
    as a command typed at a terminal has them.

    A process inherits an ignored or blocked signal across exec: a non-interactive shell
    ignores SIGINT for the jobs it starts with ``&``, and ``nohup`` ignores SIGHUP. pytest
    started that way would pass them on, and the command keeps an ignored signal on
    purpose (a background job must not stop on the terminal's Ctrl-C, a ``nohup`` run
    not on its hang-up), so the run would finish and these tests fail. A handled signal
    is reset to its default in the new program, so catching each here for the moment of
    the start gives the command the default."""
    stops = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    before = {signum: signal.signal(signum, signal.default_int_handler if signum ==
                                    signal.SIGINT else lambda *_: None) for signum in stops}
    blocked = signal.pthread_sigmask(signal.SIG_UNBLOCK, set(stops))
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
        for signum, handler in before.items():
            signal.signal(signum, handler)


def _run_to_stop(sample, tmp_path) -> tuple[str, Path, list[str], dict[str, str]]:
    """``(out, TMPDIR, command, environment)`` of a conversion to stop while it writes.
    No --quiet: a terminal or pipe on stderr shows no progress line either. Its shuffles
    spill past 64 KiB, so it has spill files in its TMPDIR when it is stopped. Its shard 0
    holds its second record (``shard_faults.holding_environment``; :func:`_writing_started`
    waits for it, :func:`_stopped` releases it only if the run did not stop): the run is
    surely writing when it is stopped, however fast or loaded the machine."""
    out = str(tmp_path / "out")
    temp = tmp_path / "tmpdir"
    temp.mkdir()
    command = [sys.executable, "-m", "recordbeam", "convert", "coco", "--images",
               sample.images_dir, "--annotations", sample.annotations, "--output", out,
               "--direct_num_workers=2"]
    return out, temp, command, {
        **os.environ, "TMPDIR": str(temp), "RECORDBEAM_SHUFFLE_MEMORY": "65536",
        **shard_faults.holding_environment(tmp_path / "writing")}


def _writing_started(proc: subprocess.Popen, out: str, meanwhile=lambda: time.sleep(0.002)):
    """Whether the run of ``_run_to_stop`` is writing (its shard 0 held), not ended."""
    holding = Path(out).parent / "writing"
    started = time.monotonic()
    while proc.poll() is None and not holding.exists():
        assert time.monotonic() - started < 120, "the run never started writing"
        meanwhile()
    return proc.poll() is None


def _stopped(proc: subprocess.Popen, out: str) -> tuple[str, str]:
    """The stopped run's output. A run that does not stop within 30 s has its held write
    released: it then finishes and commits, which the test's assertions find."""
    try:
        return proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        shard_faults.release(Path(out).parent / "writing")
        return proc.communicate(timeout=60)


def _left_nothing(proc: subprocess.Popen, out: str, temp: Path) -> None:
    deadline = time.monotonic() + 10
    while _group_alive(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _group_alive(proc.pid), "processes outlived the stopped command"
    assert snapshot(out) == {}  # no manifest, no shard, no temp folder
    assert sorted(os.listdir(temp)) == []  # no spilled shuffle, no Beam temp folder


@pytest.mark.parametrize(
    "whom, signum",
    one_in_make_test([
        pytest.param("group", signal.SIGINT, marks=CASE(
            "Ctrl-C while shards are written (SIGINT to the whole process group, as a "
            "terminal sends it)",
            "one line naming the log, exit 130; nothing committed, the temp folder removed; "
            "no process lingers")),
        pytest.param("launcher", signal.SIGINT, marks=CASE(
            "SIGINT to the launcher alone (kill -INT) while shards are written",
            "the same: one line, exit 130, nothing committed, no process lingers")),
        pytest.param("group", signal.SIGTERM, marks=CASE(
            "SIGTERM to the whole process group while shards are written (a scheduler "
            "killing its task)",
            "one line 'terminated (SIGTERM)', exit 143; nothing committed, the temp folder "
            "and the spilled shuffles in TMPDIR removed; no process lingers")),
        pytest.param("launcher", signal.SIGTERM, marks=CASE(
            "SIGTERM to the launcher alone while shards are written (`timeout`, `kill`)",
            "the same: one line, exit 143, nothing committed or left in TMPDIR, no process "
            "lingers")),
        pytest.param("launcher", signal.SIGHUP, marks=CASE(
            "SIGHUP to the launcher while shards are written (`kill -HUP`)",
            "one line 'hung up (SIGHUP)', exit 129; nothing committed or left in TMPDIR, no "
            "process lingers")),
    ]),
    ids=["group", "launcher", "group-sigterm", "launcher-sigterm", "launcher-sighup"],
)
def test_ctrl_c_says_one_line_and_leaves_nothing(larger_sample, tmp_path, whom, signum):
    out, temp, command, env = _run_to_stop(larger_sample, tmp_path)
    with _signals_as_a_terminal_gives_them():
        proc = subprocess.Popen(command, start_new_session=True, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env=env)
    assert _writing_started(proc, out), proc.communicate()
    if whom == "group":
        os.killpg(proc.pid, signum)
    else:
        os.kill(proc.pid, signum)
    stdout, stderr = _stopped(proc, out)
    lines = stderr.splitlines()
    assert proc.returncode == 128 + signum, stderr
    assert len(lines) == 1, stderr
    said = {signal.SIGINT: "interrupted", signal.SIGTERM: "terminated (SIGTERM)",
            signal.SIGHUP: "hung up (SIGHUP)"}[signum]
    prefix = f"recordbeam: {said}; nothing was committed to {out}; log: "
    assert lines[0].startswith(prefix), stderr
    log_path = lines[0][len(prefix):]
    assert os.path.isfile(log_path)
    os.unlink(log_path)
    assert "examples" not in stdout  # no summary: the run did not finish
    _left_nothing(proc, out, temp)


#: A new session's leader opening a terminal makes it its controlling terminal, as a login
#: shell's foreground command has it.
TAKE_TERMINAL = set_up_then_exec(
    "fd = os.open(sys.argv[1], os.O_RDWR); [os.dup2(fd, n) for n in (0, 1, 2)]; os.close(fd)")


@CASE("The terminal closes while shards are written (an ssh session drops: SIGHUP to "
      "the foreground group, and the terminal is gone)",
      "exit 129; nothing committed, the temp folder and the spilled shuffles in TMPDIR "
      "removed; no process lingers")
@exhaustive
def test_a_terminal_that_hangs_up_leaves_nothing(larger_sample, tmp_path):
    out, temp, command, env = _run_to_stop(larger_sample, tmp_path)
    master, terminal = os.openpty()
    with _signals_as_a_terminal_gives_them():  # the command, in a session of that terminal
        proc = subprocess.Popen([*TAKE_TERMINAL, os.ttyname(terminal),
                                 *command[1:]], start_new_session=True, env=env,
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
    said = bytearray()

    def keep_the_terminal_from_filling():
        while select.select([master], [], [], 0.002)[0]:
            said.extend(os.read(master, 65536))

    assert _writing_started(proc, out, keep_the_terminal_from_filling), bytes(said)
    os.close(terminal)  # held until now: a terminal nobody holds reads as EIO
    os.close(master)  # the terminal hangs up: SIGHUP to its session's foreground group
    _stopped(proc, out)
    assert proc.returncode == 129, bytes(said)
    for log in temp.glob("recordbeam-*.log"):  # the log of a stopped run stays
        log.unlink()
    _left_nothing(proc, out, temp)


# ----------------------------------------------------------------- full disk


@pytest.fixture(scope="module")
def bytes_before_finalize(sample, tmp_path_factory) -> int:
    """Bytes a run writes before the finalize step stages its files (plan and shards)."""
    out = tmp_path_factory.mktemp("fullfs-clean") / "out"
    fullfs.set_budget(None)
    argv = convert_argv(sample.images_dir, sample.annotations, fullfs.url(out), "--shards", "3")
    assert cli.main(argv) == 0
    written = fullfs.bytes_by_file()
    return sum(n for name, n in written.items() if name == "plan.json" or ".tfrecord." in name)


@pytest.mark.parametrize(
    "when",
    one_in_make_test([
        pytest.param(
            "first write",
            marks=CASE(
                "Disk full at the first write (ENOSPC)",
                "run fails (exit 3) saying 'out of space on <folder>', nothing committed; no "
                "temp file or lock left; the rerun succeeds once space is free",
            ),
        ),
        pytest.param(
            "mid-shard",
            marks=CASE(
                "Disk full while a shard is written (ENOSPC)",
                "run fails (exit 3) saying 'out of space', nothing committed; its temp files "
                "removed; the rerun succeeds once space is free",
            ),
        ),
        pytest.param(
            "finalize",
            marks=CASE(
                "Disk full while finalizing (ENOSPC), over a previous output",
                "run fails (exit 3) saying 'out of space'; the previous output is left intact, "
                "no temp file left; the rerun succeeds",
            ),
        ),
    ], keep=1),
)
def test_disk_full_fails_without_partial_output(
    sample, clean, bytes_before_finalize, tmp_path, capsys, when
):
    out = tmp_path / "out"
    budget = {
        "first write": 0,
        "mid-shard": bytes_before_finalize // 2,
        "finalize": bytes_before_finalize + 1,
    }[when]
    if when == "finalize":
        out.mkdir()
        for name, data in clean.items():
            (out / name).parent.mkdir(parents=True, exist_ok=True)  # hashes/ too
            (out / name).write_bytes(data)
    fullfs.set_budget(budget)
    argv = convert_argv(sample.images_dir, sample.annotations, fullfs.url(out), "--shards", "3")
    try:
        code = cli.main(argv)
    finally:
        refused = fullfs.refused_writes()
        fullfs.set_budget(None)
    err = capsys.readouterr().err
    assert code == 3
    assert refused >= 1
    first, *rest = err.splitlines()
    assert first.startswith(f"recordbeam: out of space on {fullfs.url(out)}"), err
    assert "Errno" not in err and "OSError" not in err
    if rest:  # the run's log, kept for a run that failed
        assert len(rest) == 1 and "the run's log is in" in rest[0], err
        os.unlink(rest[0].rsplit(" ", 1)[1])
    left = snapshot(out) if out.exists() else {}
    assert left == (clean if when == "finalize" else {})  # no temp file, no lock
    assert cli.main(argv) == 0  # space is free again
    assert snapshot(out) == clean


# ----------------------------------------------------------------- output folder


@CASE(
    "Output folder holding foreign files (top level, hidden, nested, shard-like name in a "
    "subfolder)",
    "refused (exit 2) and untouched; with `--overwrite` written beside them, "
    "never deleted, also on a rerun with another shard count",
)
def test_foreign_files_are_never_deleted(sample, tmp_path, capsys):
    out = tmp_path / "out"
    foreign = {
        "notes.txt": b"mine",
        ".hidden": b"also mine",
        "sub/train-00000-of-00001.tfrecord": b"not a shard of this folder",
        "sub/deeper/data.bin": b"\x00\x01",
    }
    for name, data in foreign.items():
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        (out / name).write_bytes(data)
    argv = convert_argv(sample.images_dir, sample.annotations, str(out), "--shards", "2")
    assert cli.main(argv) == 2
    assert "--overwrite" in capsys.readouterr().err
    assert snapshot(out) == foreign
    assert cli.main(argv + ["--overwrite"]) == 0
    assert cli.main(argv + ["--shards", "3", "--overwrite"]) == 0
    after = snapshot(out)
    assert {n: after[n] for n in foreign} == foreign
    assert _shards(after) == [f"train-0000{i}-of-00003.tfrecord" for i in range(3)]


@CASE("Ctrl-C once the run's commit is done, before the runner has returned",
      "exit 130; the one line says the run had committed the folder and the output is "
      "complete; the folder equals a clean run's")
def test_ctrl_c_after_the_commit_says_the_output_is_complete(larger_sample, larger_clean, tmp_path,
                                                             capsys, monkeypatch):
    monkeypatch.setattr(beam.Pipeline, "run", runs_then_raises(KeyboardInterrupt()))
    out = tmp_path / "out"
    code = cli.main(convert_argv(larger_sample.images_dir, larger_sample.annotations, str(out),
                                 "--shards", "2"))
    lines = capsys.readouterr().err.splitlines()
    assert code == 130, lines
    prefix = (f"recordbeam: interrupted; the run had committed {out} before it stopped: the "
              "output is complete; log: ")
    assert len(lines) == 1 and lines[0].startswith(prefix), lines
    os.unlink(lines[0][len(prefix):])
    assert snapshot(out) == larger_clean
