"""
Tests for what the Twisted client does with client protocol version 4
(docs/client-protocol.md, "Batches"), against the router's real
L{ClientProtocol}, message engine and SQLite store (inline), through
iosim on a C{task.Clock}: sends of one turn travel as one SendBatch and
are stored with one store call, answered message by message; a consumer
takes DeliverBatch frames and acknowledges a turn's messages with one
frame; L{Producer} keeps a window of sends in flight, and a slow
consumer holds the producer back without an error, a loss or unbounded
memory; older routers get Send frames.
"""

import pytest

from meshroute.client import TOO_LARGE, ClientOptions, Producer, SendError, UnblockedError
from meshroute.client import router_connection, send_batching
from meshroute.client.command_stream import RECEIVED_DELAY_S
from meshroute.client.commands import SendDeferred, SendGroup, SendOutcomes
from meshroute.sessions import native_connection as connection_module
from meshroute.wire import client_frames as f
from meshroute.wire.codec import FrameDecoder
from meshroute.sessions import sends as sends_module
from meshroute.sessions import served as served_module
from meshroute.router.queues import READ_AHEAD

from support.client_testing import failure_of, result_of
from support.fake_router import Harness
from support.router_engine import engine, store  # noqa: F401 (fixtures)


@pytest.fixture
def harness(engine, clock):
    return Harness(engine, clock)


@pytest.fixture
def batches(monkeypatch) -> list:
    """
    The SendBatch frames the router carries out, as (first id, messages).
    """
    seen = []
    carry_out = sends_module.Sends.relay_batch

    def relay_batch(sends, frame, skip):
        seen.append((frame.first_command_id, len(frame.messages)))
        return carry_out(sends, frame, skip)

    monkeypatch.setattr(sends_module.Sends, "relay_batch", relay_batch)
    return seen


@pytest.fixture
def frames_to_client(monkeypatch) -> list:
    """
    Every frame the router writes to a client, by type name.
    """
    written = []
    write = connection_module.NativeConnectionCore.write

    def recording(core, frame):
        written.append(type(frame).__name__)
        return write(core, frame)

    monkeypatch.setattr(connection_module.NativeConnectionCore, "write", recording)
    return written


def test_the_sends_of_one_turn_are_one_send_batch_and_one_store_call(harness, store, batches):
    client = harness.connect()
    before = store.executor.commits
    sends = [client.send("q", b"%d" % n) for n in range(50)]
    harness.flush()
    assert batches == [(1, 50)]
    assert store.executor.commits == before + 1
    ids = [result_of(d) for d in sends]
    assert len(set(ids)) == 50
    assert store.queue_depths() == {"q": 50}


def test_the_sends_of_a_turn_are_handed_to_the_kernel_once_written(harness, monkeypatch):
    client = harness.connect()
    flushed = []
    monkeypatch.setattr(router_connection, "flush_now",
                        lambda transport: flushed.append(b"".join(transport.stream)))
    client.send("q", b"a")
    client.send("q", b"b")
    assert flushed == []
    harness.clock.advance(0)
    [written] = flushed
    [frame] = FrameDecoder(frames=f.FROM_CLIENT).feed(written)
    assert isinstance(frame, f.SendBatch) and len(frame.messages) == 2
    harness.flush()  # the answers arrive: reported once RECEIVED_DELAY_S passed
    client.send("q", b"c")
    harness.clock.advance(0)
    [sent] = FrameDecoder(frames=f.FROM_CLIENT).feed(flushed[1])
    assert isinstance(sent, f.Send)
    harness.clock.advance(RECEIVED_DELAY_S)
    # The transport's stream still holds the Send: what was added since.
    [received] = FrameDecoder(frames=f.FROM_CLIENT).feed(flushed[2][len(flushed[1]):])
    assert received == f.Received(2, 0)


def test_a_refused_send_in_a_batch_fails_alone(harness, batches):
    client = harness.connect()
    good, bad, also_good = (client.send("q", b"a"), client.send("q@nowhere", b"b"),
                            client.send("q", b"c"))
    harness.flush()
    assert batches == [(1, 3)]
    assert result_of(good) and result_of(also_good)
    assert failure_of(bad).code == f.UNKNOWN_ROUTER


def test_send_many_is_one_deferred(harness, store, batches):
    client = harness.connect()
    d = client.send_many("q", [b"a", b"b", b"c"])
    harness.flush()
    assert len(result_of(d)) == 3
    assert batches == [(1, 3)]


def test_send_many_fails_with_the_first_failure(harness):
    client = harness.connect()
    d = client.send_many("q@nowhere", [b"a", b"b"])
    harness.flush()
    assert failure_of(d).code == f.UNKNOWN_ROUTER


def test_other_commands_keep_their_place_after_the_sends_of_the_turn(harness, engine):
    client = harness.connect()
    got = []
    client.send("q", b"before")
    subscribed = client.subscribe("q", lambda m: (got.append(m.body), m.ack()))
    client.send("q", b"after")
    harness.flush()
    assert result_of(subscribed)
    assert got == [b"before", b"after"]


def test_a_consumer_takes_deliver_batches_and_acks_a_turn_with_one_frame(
        harness, store, frames_to_client, monkeypatch):
    acks = []
    take_ack = served_module.HOT_FRAMES[f.Ack]
    monkeypatch.setitem(served_module.HOT_FRAMES, f.Ack,
                        lambda core, frame: (acks.append(frame.delivery_ids),
                                             take_ack(core, frame)))
    producer = harness.connect("producer")
    consumer = harness.connect("consumer")
    got = []
    consumer.subscribe("q", lambda m: (got.append(m.body), m.ack()), prefetch=100)
    harness.flush()
    for n in range(20):
        producer.send("q", b"%d" % n)
    harness.flush()
    harness.clock.advance(ClientOptions.ack_delay_ms / 1000)
    harness.flush()
    assert got == [b"%d" % n for n in range(20)]
    assert frames_to_client.count("DeliverBatch") == 1
    assert "Deliver" not in frames_to_client
    assert len(acks) == 1 and len(acks[0]) == 20
    assert store.queue_depths() == {}


def test_a_version_3_router_gets_a_send_per_message(harness, batches, monkeypatch):
    monkeypatch.setattr(f, "SUPPORTED_VERSIONS", (1, 2, 3))
    client = harness.connect()
    sends = [client.send("q", b"%d" % n) for n in range(3)]
    harness.flush()
    assert batches == []
    assert all(result_of(d) for d in sends)


def test_a_producer_keeps_at_most_its_window_in_flight(harness, engine):
    client = harness.connect()
    producer = client.producer(window=4)
    assert isinstance(producer, Producer)
    sends = [producer.send("q", b"%d" % n) for n in range(10)]
    assert (producer.in_flight, producer.waiting) == (4, 6)
    ready = producer.ready()
    assert not ready.called
    harness.flush()
    assert ready.called
    assert [result_of(d) is not None for d in sends] == [True] * 10
    assert (producer.in_flight, producer.waiting) == (0, 0)


def test_a_slow_consumer_holds_the_producer_back_without_loss(harness, engine, store, clock):
    """
    A producer of 2,000 persistent messages with a window of 50, a
    consumer with a prefetch of 10 that takes one message per tick: the
    producer only ever has its window in flight, the router holds no more
    sends than that, the consumer no more than its prefetch, and the
    queue's backlog waits in the store, not in the router's memory;
    every message arrives once, in order.
    """
    producer_client = harness.connect("producer")
    consumer_client = harness.connect("consumer")
    producer = producer_client.producer(window=50)
    got, unacknowledged = [], []
    consumer_client.subscribe("q", unacknowledged.append, prefetch=10)
    harness.flush()
    total, sent = 2000, 0
    sessions = {core.client_id: core for core in harness.factory.sessions.sessions.values()}
    peaks = {"in_flight": 0, "router": 0, "unacked": 0, "memory": 0}
    while len(got) < total:
        while sent < total and producer.ready().called:
            producer.send("q", b"%d" % sent)
            sent += 1
        harness.flush()
        peaks["in_flight"] = max(peaks["in_flight"], producer.in_flight + producer.waiting)
        peaks["router"] = max(peaks["router"], sessions["producer"].sends.in_progress)
        peaks["unacked"] = max(peaks["unacked"], len(unacknowledged))
        queue = engine.queues._queues.get("q")
        if queue is not None:
            peaks["memory"] = max(peaks["memory"], len(queue.buffer) + len(queue.returned))
        # The slow consumer: one message per tick.
        if unacknowledged:
            message = unacknowledged.pop(0)
            got.append(message.body)
            message.ack()
        clock.advance(0.001)
    harness.flush()
    assert got == [b"%d" % n for n in range(total)]
    assert peaks["in_flight"] <= 50 and peaks["router"] <= 50 and peaks["unacked"] <= 10
    # The backlog (up to ~2,000 here) waited in the store: the router read
    # ahead at most its READ_AHEAD of it.
    assert store.queue_depths() == {}
    assert 0 < peaks["memory"] <= READ_AHEAD


def test_ack_through_acknowledges_every_earlier_message_with_one_frame(harness, store,
                                                                       monkeypatch):
    frames = []
    take = served_module.HOT_FRAMES[f.AckThrough]
    monkeypatch.setitem(served_module.HOT_FRAMES, f.AckThrough,
                        lambda core, frame: (frames.append(frame), take(core, frame)))
    producer = harness.connect("producer")
    consumer = harness.connect("consumer")
    got = []
    consumer.subscribe("q", got.append, prefetch=10)
    harness.flush()
    for n in range(25):
        producer.send("q", b"%d" % n)
    harness.flush()
    assert len(got) == 10
    got[6].ack_through()
    got[2].ack()  # already covered: nothing more
    harness.flush()
    assert len(frames) == 1
    # Seven acknowledged: seven more delivered (the prefetch stays full).
    assert len(got) == 17
    assert store.queue_depths() == {"q": 18}
    got[-1].ack_through()
    harness.flush()
    assert len(got) == 25
    got[-1].ack_through()
    harness.flush()
    assert store.queue_depths() == {}


def test_producer_send_many_keeps_its_window_with_one_deferred(harness, store, batches):
    """
    A send_many larger than the window: the window's worth goes out (in
    SendBatch frames of at most SEND_BATCH_MAX_MESSAGES), the rest waits
    in the producer and goes out as answers make room, and the one
    Deferred fires with every id, in order.
    """
    client = harness.connect()
    producer = client.producer(window=1500)
    d = producer.send_many("q", [b"%d" % n for n in range(4000)])
    assert (producer.in_flight, producer.waiting) == (1500, 2500)
    ready = producer.ready()
    assert not ready.called
    for _ in range(10):
        harness.clock.advance(0)
        harness.flush()
    ids = result_of(d)
    assert len(ids) == len(set(ids)) == 4000
    assert ready.called
    assert (producer.in_flight, producer.waiting) == (0, 0)
    assert sum(n for _, n in batches) == 4000
    assert max(n for _, n in batches) <= send_batching.SEND_BATCH_MAX_MESSAGES
    assert store.queue_depths() == {"q": 4000}


def test_send_many_of_a_body_too_large_fails_at_once_and_sends_nothing(harness, store,
                                                                       batches):
    client = harness.connect()
    d = client.send_many("q", [b"a", b"x" * f.MAX_FRAME_SIZE, b"c"])
    assert failure_of(d).code == TOO_LARGE
    harness.flush()
    assert batches == [] and store.queue_depths() == {}


def test_send_many_of_nothing_fires_at_once(harness):
    client = harness.connect()
    assert result_of(client.send_many("q", [])) == []
    assert result_of(client.producer(window=2).send_many("q", [])) == []


def test_send_many_in_a_transaction(harness, store):
    client = harness.connect(transacted=True)
    d = client.send_many("q", [b"a", b"b", b"c"])
    committed = client.commit()
    harness.flush()
    assert len(result_of(d)) == 3
    assert result_of(committed) is None
    assert store.queue_depths() == {"q": 3}


def test_send_many_to_a_version_3_router_is_a_send_per_message(harness, batches,
                                                               monkeypatch):
    monkeypatch.setattr(f, "SUPPORTED_VERSIONS", (1, 2, 3))
    client = harness.connect()
    d = client.producer(window=2).send_many("q", [b"a", b"b", b"c"])
    harness.flush()
    assert batches == []
    assert len(set(result_of(d))) == 3


# -- where a command's answers go: SendOutcomes, pure --------------------------------


def test_an_answer_for_a_run_reaches_each_target_once():
    one, group = SendDeferred(), SendGroup(3)
    settled = []
    group.on_settled = settled.append
    # One command: the first message a send's, the next three a group's
    # (its first three); a second command carries none of them.
    outcomes = SendOutcomes(4, [(0, one, 0), (1, group, 0)])
    outcomes.answered(0, ["m0", "m1", "m2"])
    assert result_of(one) == "m0"
    assert settled == [2] and not group.deferred.called
    outcomes.answered(3, ["m3"])
    assert result_of(group.deferred) == ["m1", "m2", "m3"]


def test_a_group_fails_with_its_first_failure_once_every_send_has_its_outcome():
    group = SendGroup(4)
    first, second = SendOutcomes(2, [(0, group, 0)]), SendOutcomes(2, [(0, group, 2)])
    second.failed(1, SendError("backlog-full", "later"))
    first.failed(1, SendError("bad-address", "earlier"))
    first.answered(0, ["m0"])
    assert not group.deferred.called
    # The session is lost: only the message without an outcome fails again.
    second.errback(UnblockedError("gone"))
    second.errback(UnblockedError("gone again"))
    assert failure_of(group.deferred).code == "bad-address"
