"""recordbeam.local.shuffle: the spilling buffer gives the workers what Beam's buffer gives."""

from __future__ import annotations

import gc
import os
import random
import subprocess
import sys
import tempfile

import pytest
from apache_beam.coders import coders
from apache_beam.runners.portability.fn_api_runner import execution
from apache_beam.transforms import core
from apache_beam.transforms.window import GlobalWindows

from recordbeam.local import shuffle as local_shuffle
from recordbeam.local.shuffle import SpillingGroupingBuffer, spilling_shuffles

# The local runner's own machinery: where it is off (an untested Beam), these skip.
pytestmark = pytest.mark.fast_path

BeamGroupingBuffer = execution.GroupingBuffer
BeamBundleContextManager = execution.BundleContextManager
KEY = coders.StrUtf8Coder()
VALUE = coders.BytesCoder()
PRE = coders.WindowedValueCoder(coders.TupleCoder([KEY, VALUE]), coders.GlobalWindowCoder())
POST = coders.WindowedValueCoder(
    coders.TupleCoder([KEY, coders.IterableCoder(VALUE)]), coders.GlobalWindowCoder())
GLOBAL = core.Windowing(GlobalWindows())


def _spilling_installed() -> bool:
    """Whether Beam's runner builds spilling buffers now, as Beam's own module says."""
    return (execution.GroupingBuffer is SpillingGroupingBuffer
            and execution.BundleContextManager is not BeamBundleContextManager)


def _chunks(seed: int, elements: int, keys: int) -> list[bytes]:
    """What a worker sends a shuffle: runs of encoded (key, value) elements."""
    rng = random.Random(seed)
    encode = PRE.get_impl().encode_nested
    encoded = [
        encode(GlobalWindows.windowed_value((f"key-{rng.randrange(keys)}", rng.randbytes(rng.randrange(60)))))
        for _ in range(elements)
    ]
    chunks, i = [], 0
    while i < len(encoded):
        step = rng.randrange(1, 40)
        chunks.append(b"".join(encoded[i:i + step]))
        i += step
    return chunks


def _filled(buffer, chunks):
    for chunk in chunks:
        buffer.append(chunk)
    return buffer


def _spilling(tmp_path, budget: int) -> SpillingGroupingBuffer:
    return SpillingGroupingBuffer(PRE, POST, GLOBAL, budget=budget, folder=str(tmp_path))


def _groups(part) -> list[tuple[str, list[bytes]]]:
    """The groups of a part, each chunk decoded on its own (as a worker does)."""
    decode = POST.get_impl().decode_all
    return [(g.value[0], list(g.value[1])) for chunk in part for g in decode(chunk)]


def _contents(parts) -> dict[str, list[bytes]]:
    found = {}
    for part in parts:
        for key, values in _groups(part):
            assert key not in found, f"{key} in two groups"
            found[key] = values
    return found


@pytest.mark.parametrize("budget", [0, 5_000, 10**9])
@pytest.mark.parametrize("n", [1, 2, 3])
@pytest.mark.parametrize("seed", range(3))
def test_parts_hold_beams_groups_with_beams_balance(tmp_path, budget, n, seed):
    chunks = _chunks(seed, elements=2_000, keys=[7, 300, 3_000][seed])
    theirs = _filled(BeamGroupingBuffer(PRE, POST, GLOBAL), chunks).partition(n)
    ours = _filled(_spilling(tmp_path, budget), chunks).partition(n)
    assert len(ours) == n
    assert _contents(ours) == _contents(theirs)  # values of a key in arrival order
    assert [len(_groups(p)) for p in ours] == [len(_groups(p)) for p in theirs]
    if budget == 10**9:  # never spilled: Beam's own result
        assert ours == theirs
        assert not os.listdir(tmp_path)


def test_spilled_parts_are_chunks_of_whole_groups_and_can_be_read_again(tmp_path, monkeypatch):
    monkeypatch.setattr(local_shuffle, "PART_CHUNK", 2_000)
    buffer = _filled(_spilling(tmp_path, 0), _chunks(1, elements=3_000, keys=500))
    parts = buffer.partition(2)
    sizes = [len(chunk) for part in parts for chunk in part]
    assert len(sizes) > 10  # several chunks per part, each decoded alone by _groups
    assert [_groups(p) for p in parts] == [_groups(p) for p in parts]
    assert buffer.partition(3) is parts  # like Beam's: partitioned once
    assert list(buffer) == [chunk for part in parts for chunk in part]
    with pytest.raises(RuntimeError, match="after read"):
        buffer.append(_chunks(2, 1, 1)[0])


def test_a_shuffle_spills_only_past_its_budget(tmp_path):
    chunks = _chunks(0, elements=500, keys=50)
    total = sum(map(len, chunks))
    below = _filled(_spilling(tmp_path, total), chunks)
    assert below.spilled_bytes == 0 and not os.listdir(tmp_path)
    above = _filled(_spilling(tmp_path, total - 1), chunks)
    assert above.spilled_bytes == total
    assert above._table == {}


def test_spill_files_go_with_clear_and_with_the_buffer(tmp_path):
    chunks = _chunks(0, elements=500, keys=50)
    buffer = _filled(_spilling(tmp_path, 0), chunks)
    assert os.listdir(tmp_path)
    buffer.clear()
    gc.collect()
    assert not os.listdir(tmp_path)
    assert buffer.cleared
    buffer.reset()
    parts = _filled(buffer, chunks).partition(2)
    assert len(os.listdir(tmp_path)) == 1  # the parts; the spill went once read
    del buffer, parts
    gc.collect()
    assert not os.listdir(tmp_path)


@pytest.mark.parametrize("first_budget, second_budget", [(0, 0), (0, 10**9), (10**9, 0),
                                                         (10**9, 10**9), (3_000, 3_000)])
def test_extend_puts_the_other_buffers_values_after_ours(tmp_path, first_budget, second_budget):
    first, second = _chunks(0, 800, 100), _chunks(1, 800, 100)
    beams = _filled(BeamGroupingBuffer(PRE, POST, GLOBAL), first)
    beams.extend(_filled(BeamGroupingBuffer(PRE, POST, GLOBAL), second))
    ours = _filled(_spilling(tmp_path, first_budget), first)
    other = _filled(_spilling(tmp_path, second_budget), second)
    ours.extend(other)
    ours.append(first[0])  # after the extension, still in order
    beams.append(first[0])
    assert _contents(ours.partition(2)) == _contents(beams.partition(2))
    # The other buffer still holds what it held.
    alone = _filled(BeamGroupingBuffer(PRE, POST, GLOBAL), second)
    assert _contents(other.partition(1)) == _contents(alone.partition(1))


def test_list_buffers_are_ignored_by_extend_as_in_beam(tmp_path):
    buffer = _spilling(tmp_path, 0)
    buffer.extend(execution.ListBuffer(None))
    assert _contents(buffer.partition(1)) == {}


def test_other_windowings_stay_in_memory(tmp_path):
    from apache_beam.transforms.window import FixedWindows

    windowed = SpillingGroupingBuffer(PRE, POST, core.Windowing(FixedWindows(10)), budget=0,
                                      folder=str(tmp_path))
    assert windowed._budget is None


def test_the_hook_works_on_this_beam_version():
    # Fails on a Beam upgrade that moves what the hook needs: runs would silently keep
    # every shuffle in memory again.
    assert local_shuffle.AVAILABLE
    assert execution.GroupingBuffer is BeamGroupingBuffer
    with spilling_shuffles():
        assert _spilling_installed()
        with spilling_shuffles():
            assert execution.GroupingBuffer is SpillingGroupingBuffer
        assert _spilling_installed()
        assert local_shuffle._run_folder is None  # made at the first spill only
        buffer = _filled(execution.GroupingBuffer(PRE, POST, GLOBAL, budget=0), _chunks(0, 50, 5))
        [spill_file] = [s._file.path for s in buffer._spills]
        assert os.path.basename(os.path.dirname(spill_file)).startswith("recordbeam-shuffle-")
    assert execution.GroupingBuffer is BeamGroupingBuffer
    assert not os.path.exists(os.path.dirname(spill_file))


def test_the_hook_is_undone_when_the_run_fails():
    with pytest.raises(ValueError), spilling_shuffles():
        buffer = _filled(execution.GroupingBuffer(PRE, POST, GLOBAL, budget=0), _chunks(0, 50, 5))
        folder = os.path.dirname(buffer._spills[0]._file.path)
        raise ValueError("a failing run")
    assert execution.GroupingBuffer is BeamGroupingBuffer
    assert not os.path.exists(folder)


BeamListBuffer = execution.ListBuffer
ELEMENT = PRE.get_impl()


def _listed(buffer, chunks):
    for chunk in chunks:
        buffer.append(chunk)
    return buffer


def _spilling_list(tmp_path, budget: int) -> local_shuffle.SpillingListBuffer:
    return local_shuffle.SpillingListBuffer(ELEMENT, budget=budget, folder=str(tmp_path))


@pytest.mark.parametrize("n", [1, 2, 3, 200])
def test_a_materialized_collection_past_its_budget_gives_beams_parts_from_disk(tmp_path, n):
    chunks = _chunks(0, elements=2_000, keys=300)
    assert 3 < len(chunks) < 200  # 200 workers: Beam re-deals the elements themselves
    theirs = _listed(BeamListBuffer(ELEMENT), chunks)
    ours = _listed(_spilling_list(tmp_path, budget=sum(map(len, chunks[:3]))), chunks)
    assert ours.spilled and len(os.listdir(tmp_path)) == 1
    assert ours._inputs.size == sum(map(len, chunks))  # nothing held in memory
    assert [list(part) for part in ours.partition(n)] == [
        list(part) for part in theirs.partition(n)]
    assert list(ours) == chunks  # as a side input reads it, in arrival order


def test_a_materialized_collection_within_its_budget_is_beams(tmp_path):
    chunks = _chunks(1, elements=500, keys=50)
    ours = _listed(_spilling_list(tmp_path, budget=sum(map(len, chunks))), chunks)
    assert not ours.spilled and not os.listdir(tmp_path)
    assert ours.partition(2) == _listed(BeamListBuffer(ELEMENT), chunks).partition(2)


def test_a_spilled_copy_reads_the_same_files_and_appends_after_reading_go_on_disk(tmp_path):
    first, later = _chunks(2, 600, 50), _chunks(3, 300, 50)
    ours = _listed(_spilling_list(tmp_path, budget=0), first)
    twin = ours.copy()  # a second consuming stage
    assert isinstance(twin, local_shuffle.SpillingListBuffer) and list(twin) == first
    _listed(ours, later)  # the first file is sealed by the copy: a second one opens
    assert list(ours) == first + later and list(twin) == first
    assert len(os.listdir(tmp_path)) == 2


def test_extending_keeps_both_collections_in_order_wherever_they_are(tmp_path):
    first, second = _chunks(4, 400, 50), _chunks(5, 400, 50)
    for budget in (0, 10**9):
        for other in (_listed(_spilling_list(tmp_path, 0), second),
                      _listed(BeamListBuffer(ELEMENT), second)):
            ours = _listed(_spilling_list(tmp_path, budget), first)
            ours.extend(other)
            assert list(ours) == first + second
            beams = _listed(BeamListBuffer(ELEMENT), first)
            beams.extend(other)  # Beam's buffer reads a spilled one whole
            assert list(beams) == first + second


def test_materialized_spill_files_go_with_clear_and_with_the_buffer(tmp_path):
    ours = _listed(_spilling_list(tmp_path, budget=0), _chunks(6, 300, 50))
    assert os.listdir(tmp_path)
    ours.clear()
    gc.collect()
    assert not os.listdir(tmp_path) and ours.cleared
    ours.reset()
    _listed(ours, _chunks(6, 10, 5))
    del ours
    gc.collect()
    assert not os.listdir(tmp_path)


def test_the_hook_makes_the_runner_materialize_into_spilling_buffers():
    # Fails on a Beam upgrade that moves what the hook needs: materialized collections
    # (rows waiting for a side input) would silently stay in memory again.
    beams_manager = execution.BundleContextManager
    with spilling_shuffles():
        manager = execution.BundleContextManager
        assert issubclass(manager, beams_manager) and manager is not beams_manager
        assert _spilling_installed()
    assert execution.BundleContextManager is beams_manager


@pytest.mark.parametrize("text", ["8MB", "-1", "1.5e6", ""])
def test_a_shuffle_budget_that_is_no_byte_count_is_refused_with_the_variable_named(
        monkeypatch, text):
    monkeypatch.setenv("RECORDBEAM_SHUFFLE_MEMORY", text)
    with pytest.raises(ValueError, match=r"RECORDBEAM_SHUFFLE_MEMORY must be a whole number"):
        local_shuffle._budget_from_environment()


def test_the_shuffle_budget_comes_from_the_environment_or_its_default(monkeypatch):
    monkeypatch.setenv("RECORDBEAM_SHUFFLE_MEMORY", "33554432")
    assert local_shuffle._budget_from_environment() == 32 << 20
    monkeypatch.delenv("RECORDBEAM_SHUFFLE_MEMORY")
    assert local_shuffle._budget_from_environment() == 8 << 20


def test_only_a_spill_folder_of_runs_counts_as_spilled_to(tmp_path, monkeypatch):
    # An output folder under TMPDIR (/tmp/out) is not where the runner spills: a full
    # disk there must be reported as the output's.
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    assert local_shuffle.spilled_under(str(tmp_path / "recordbeam-shuffle-x1" / "shuffle-a")) == str(tmp_path)
    assert local_shuffle.spilled_under(str(tmp_path / "out" / ".recordbeam-tmp-1" / "train.tfrecord")) is None
    assert local_shuffle.spilled_under(str(tmp_path / "out" / "recordbeam-shuffle-x1" / "f")) is None
    assert local_shuffle.spilled_under("") is None


def test_a_run_removes_the_spill_folders_of_launchers_that_are_gone(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    orphan = tmp_path / f"recordbeam-shuffle-{int(gone.stdout)}-abc123"
    alive = tmp_path / f"recordbeam-shuffle-{os.getppid()}-def456"  # pytest's parent: alive
    unnamed = tmp_path / "recordbeam-shuffle-ghi789"  # names no pid
    for folder in (orphan, alive, unnamed):
        folder.mkdir()
        (folder / "shuffle-x").write_bytes(b"spilled")
    with spilling_shuffles():
        buffer = _filled(execution.GroupingBuffer(PRE, POST, GLOBAL, budget=0), _chunks(0, 50, 5))
        ours = os.path.dirname(buffer._spills[0]._file.path)
        assert os.path.basename(ours).startswith(f"recordbeam-shuffle-{os.getpid()}-")
        assert not orphan.exists()
        assert alive.exists() and unnamed.exists()
    assert not os.path.exists(ours)
