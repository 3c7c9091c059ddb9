"""Local runs send each stage's input to the workers piece by piece while the stage runs."""

from __future__ import annotations

import time

import apache_beam as beam
import pytest
from apache_beam.testing.util import assert_that, equal_to

from recordbeam.local import feed as local_feed
from recordbeam.local import shuffle as local_shuffle
from recordbeam.local import worker as local_worker
from recordbeam.local.internals import minor_version
from recordbeam.local.runner import pipeline_options

# The local runner's own machinery: where it is off (an untested Beam), these skip.
pytestmark = pytest.mark.fast_path

# cloudpickle (Beam 2.77's default): Beam 2.60's dill would send the lambdas of these tests
# by reference to this module, which the worker processes cannot import.
MULTI_PROCESS = ["--direct_running_mode=multi_processing", "--direct_num_workers=2",
                 "--pickle_library=cloudpickle"]
IN_MEMORY = ["--direct_running_mode=in_memory", "--direct_num_workers=1"]


#: Beam caps its send queues from 2.77 on; before, the feed stays Beam's (docs/deploy/local.md).
FEED_EXPECTED = minor_version(beam.__version__) >= (2, 77)


def _feed_installed() -> bool:
    """Whether Beam's runner feeds inputs in pieces now, as Beam's own module says."""
    return local_feed.fn_runner.BundleManager is local_feed.PieceByPieceBundleManager


def test_the_installed_beam_takes_the_feed_from_2_77_on():
    # A Beam upgrade that moves what this relies on must fail here, not quietly bring
    # back whole-input sends (the launcher's memory would grow with the data again).
    assert local_feed.AVAILABLE == FEED_EXPECTED
    with local_feed.feeding_in_pieces():
        assert _feed_installed() == FEED_EXPECTED
        if FEED_EXPECTED:
            assert local_feed.data_plane._DEFAULT_SEND_QUEUE_MAX_BYTES == local_feed.QUEUE_BYTES
        assert local_feed.data_plane._DEFAULT_SIZE_FLUSH_THRESHOLD == (
            local_worker.MESSAGE_BYTES if FEED_EXPECTED else 10 << 20)
    assert not _feed_installed()
    if FEED_EXPECTED:
        assert local_feed.data_plane._DEFAULT_SEND_QUEUE_MAX_BYTES == 100 << 20
    assert local_feed.data_plane._DEFAULT_SIZE_FLUSH_THRESHOLD == 10 << 20


def _grouping_pipeline(options):
    pairs = [(f"k{i % 41}", f"{i:0100d}") for i in range(3_000)]  # ~300 KB to send
    expected: dict[str, list[str]] = {}
    for key, value in pairs:
        expected.setdefault(key, []).append(value)
    p = beam.Pipeline(options=options)
    grouped = (p | beam.Create(pairs) | beam.GroupByKey()
               | beam.MapTuple(lambda key, values: (key, sorted(values))))
    assert_that(grouped, equal_to(list(expected.items())))
    return p


def test_a_spilled_shuffle_reaches_the_workers_in_pieces(monkeypatch):
    monkeypatch.setattr(local_shuffle, "SHUFFLE_MEMORY", 0)
    monkeypatch.setattr(local_shuffle, "PART_CHUNK", 1024)
    sent: list[int] = []
    send = local_feed._Sender.run

    def counting_run(sender):
        pieces = list(sender._pieces)
        sent.append(len(pieces))
        sender._pieces = pieces
        send(sender)

    monkeypatch.setattr(local_feed._Sender, "run", counting_run)
    _grouping_pipeline(pipeline_options(MULTI_PROCESS)).run().wait_until_finish()
    if FEED_EXPECTED:
        assert max(sent) > 10  # the grouped input went out as many messages, not one
    else:
        assert sent == []  # Beam's own send, whole; every group still arrived


def test_an_input_that_cannot_be_sent_fails_the_run(monkeypatch):
    monkeypatch.setattr(local_shuffle, "SHUFFLE_MEMORY", 0)

    def broken(part):
        yield from []
        raise OSError("the spill file went away")

    monkeypatch.setattr(local_shuffle._Part, "__iter__", broken)
    # Before Beam 2.77 Beam's runner reads the input itself, and fails the same way.
    failure = "sending a stage's input to a worker failed.*" if FEED_EXPECTED else ""
    with pytest.raises(Exception, match=failure + "went away"):
        _grouping_pipeline(pipeline_options(MULTI_PROCESS)).run().wait_until_finish()
    assert not _feed_installed()


def test_an_in_memory_run_gets_every_piece_of_a_slow_input(monkeypatch):
    # The in-memory channel gives the worker what has arrived when it starts reading
    # and drops the rest: pieces that trickle in (a spilled shuffle read from a slow
    # disk) must all be there before the stage starts, or groups go missing silently.
    monkeypatch.setattr(local_shuffle, "SHUFFLE_MEMORY", 0)
    monkeypatch.setattr(local_shuffle, "PART_CHUNK", 1024)
    read = local_shuffle._Part.__iter__

    def slow(part):
        for piece in read(part):
            time.sleep(0.01)
            yield piece

    monkeypatch.setattr(local_shuffle._Part, "__iter__", slow)
    channels: list[str] = []
    send = local_feed.PieceByPieceBundleManager._send_input_to_worker

    def recording_send(manager, *args):
        channels.append(type(manager._worker_handler.data_conn).__name__)
        send(manager, *args)

    monkeypatch.setattr(local_feed.PieceByPieceBundleManager, "_send_input_to_worker",
                        recording_send)
    _grouping_pipeline(pipeline_options(IN_MEMORY)).run().wait_until_finish()
    if FEED_EXPECTED:
        assert "InMemoryDataChannel" in channels  # the feed was installed, chose the whole send
    else:
        assert channels == []  # Beam's own send


def test_worker_processes_send_outputs_in_small_messages(monkeypatch):
    # ~6 MB of output from one stage: Beam's workers would send it in messages of up
    # to 10 MB, each held by the launcher while it is received, queued and decoded.
    sizes: list[int] = []
    append = local_shuffle.SpillingGroupingBuffer.append

    def recording_append(buffer, data):
        sizes.append(len(data))
        append(buffer, data)

    monkeypatch.setattr(local_shuffle.SpillingGroupingBuffer, "append", recording_append)
    with beam.Pipeline(options=pipeline_options(MULTI_PROCESS)) as p:
        counts = (p | beam.Create(range(6)) | beam.Reshuffle()
                  | beam.FlatMap(lambda i: ((j % 7, b"x" * 1000) for j in range(1000)))
                  | beam.GroupByKey() | beam.MapTuple(lambda key, values: len(list(values))))
        assert_that(counts | beam.CombineGlobally(sum), equal_to([6000]))
    assert sum(sizes) > 6_000_000
    assert max(sizes) <= local_worker.MESSAGE_BYTES + 4096  # one message, one more element


def test_smaller_messages_sets_the_flush_size_of_beams_streams(monkeypatch):
    from apache_beam.runners.worker import data_plane

    streams = (data_plane.SizeBasedBufferingClosableOutputStream,
               data_plane.TimeBasedBufferingClosableOutputStream)
    for stream in streams:  # restored after the test: this process is not a worker
        monkeypatch.setattr(stream.__init__, "__defaults__", stream.__init__.__defaults__)
    monkeypatch.setattr(data_plane, "_DEFAULT_SIZE_FLUSH_THRESHOLD", 10 << 20)
    assert local_worker.smaller_messages(data_plane)
    assert data_plane._DEFAULT_SIZE_FLUSH_THRESHOLD == local_worker.MESSAGE_BYTES
    flushed: list[int] = []
    stream = data_plane.SizeBasedBufferingClosableOutputStream(
        close_callback=lambda data: None, flush_callback=lambda data: flushed.append(len(data)))
    for _ in range(3000):
        stream.write(b"y" * 1000)
        stream.maybe_flush()
    assert flushed and max(flushed) <= local_worker.MESSAGE_BYTES + 1000
