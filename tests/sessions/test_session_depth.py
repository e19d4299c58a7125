"""
Tests for the bound of a client session's own queue
(L{meshroute.sessions.depth}, docs/client-protocol.md "The session's own
queue"): the pure rule under arbitrary sequences of events, and the
session holding deliveries for a client that is away or does not read,
with C{queue-depth} while connected and C{max-depth} while disconnected
and until, after the client returns, its queue drained to 80%.
"""

import pytest
from hypothesis import given
from hypothesis import strategies as st
from twisted.internet.testing import StringTransport

from meshroute.sessions.depth import REVERT_FRACTION, SessionDepth
from meshroute.sessions.native_listener import ClientFactory
from meshroute.sessions.settings import DROP_OLDEST, SessionSettings
from meshroute.wire import client_frames as f

from support.router_connection import Connection

# -- the rule --------------------------------------------------------------------

events = st.lists(st.one_of(st.just(("disconnect",)),
                            st.tuples(st.just("queued"), st.integers(0, 200))), max_size=40)


@given(st.integers(0, 100), st.integers(0, 100), events)
def test_the_bound_is_max_depth_from_a_disconnect_until_drained_to_80_percent(
        queue_depth, extra, sequence):
    max_depth = queue_depth + extra
    depth = SessionDepth(queue_depth, max_depth)
    expanded = False
    for event in sequence:
        if event[0] == "disconnect":
            depth.disconnected()
            expanded = True
        else:
            depth.drained_to(event[1])
            if event[1] <= max_depth * REVERT_FRACTION:
                expanded = False
        assert depth.limit == (max_depth if expanded else queue_depth)


def test_queue_depth_may_not_exceed_max_depth():
    with pytest.raises(ValueError):
        SessionDepth(11, 10)
    assert SessionDepth(10, 10).limit == 10


# -- the session -------------------------------------------------------------------


class FillingTransport(StringTransport):
    """
    A transport whose buffer is full (it pauses its producer, as a TCP
    transport does) once it took C{room} more frames.
    """

    def __init__(self) -> None:
        super().__init__()
        self.room: int | None = None

    def write(self, data) -> None:
        super().write(data)
        if self.room is not None:
            self.room -= 1
            if self.room == 0 and self.producer is not None:
                self.producer.pauseProducing()

    def drain(self, room: int | None) -> None:
        "The client read everything; the next C{room} frames fit (None: any)."
        self.room = room
        self.producer.resumeProducing()


class SlowReader(Connection):
    def __init__(self, factory) -> None:
        super().__init__(factory, FillingTransport())

    def stop_reading(self) -> None:
        self.protocol.pauseProducing()


def bodies(frames) -> list[bytes]:
    return [frame.body for frame in frames if isinstance(frame, f.Deliver)]


@pytest.fixture
def make_factory(engine, clock):
    def make(**settings):
        settings = {"keep_alive_ms": 60000, "max_depth_policy": DROP_OLDEST, **settings}
        return ClientFactory(engine, clock, settings=SessionSettings(**settings))
    return make


def own_queue(factory, session_id):
    return factory.sessions.sessions[session_id].own_queue


def test_a_connected_client_that_does_not_read_gets_queue_depth(make_factory, engine):
    factory = make_factory(queue_depth=2, max_depth=10)
    reader = SlowReader(factory)
    opened = reader.open()
    reader.send(f.Subscribe(1, 1, "q", 100))
    reader.received()
    reader.stop_reading()
    engine.enqueue("q", b"1", b"2", b"3", b"4")
    queue = own_queue(factory, opened.session_id)
    # Two held for the client; the others stay in their queue, where
    # another consumer takes them.
    assert len(queue.pending) == 2 and queue.depth.limit == 2
    assert reader.received() == []
    other = Connection(factory)
    other.open()
    other.send(f.Subscribe(1, 1, "q", 10))
    assert bodies(other.received()) == [b"3", b"4"]
    reader.transport.drain(None)
    assert bodies(reader.received()) == [b"1", b"2"]
    assert queue.pending == type(queue.pending)()


def test_non_persistent_messages_past_queue_depth_are_dropped(make_factory, engine):
    factory = make_factory(queue_depth=2, max_depth=10)
    reader = SlowReader(factory)
    opened = reader.open()
    reader.send(f.Subscribe(1, 1, "q", 100))
    reader.stop_reading()
    for n in range(1, 5):
        engine.queues.put_transient("q", engine.message("q", b"%d" % n, persistent=False))
    dropped = engine.events.named("message.dropped")
    assert [(e["reason"], e["session_id"]) for e in dropped] == [
        ("max-depth", opened.session_id)] * 2
    reader.received()
    reader.transport.drain(None)
    assert bodies(reader.received()) == [b"3", b"4"]


def test_after_a_return_max_depth_holds_until_the_queue_drained_to_80_percent(
        make_factory, engine):
    factory = make_factory(queue_depth=2, max_depth=10)
    connection = Connection(factory)
    opened = connection.open()
    connection.send(f.Subscribe(1, 1, "q", 100))
    connection.received()
    connection.lose()
    engine.enqueue("q", *[b"%d" % n for n in range(1, 11)])
    queue = own_queue(factory, opened.session_id)
    # Disconnected: max-depth.
    assert len(queue.pending) == 10 and queue.holding and queue.depth.limit == 10
    # Back, its buffer full after Opened and one delivery: the bound
    # stays at max-depth while 9 wait (above 80% of 10).
    again = SlowReader(factory)
    again.transport.room = 2
    again.open(opened.session_id, answered_up_to=1)
    assert bodies(again.after_open) == [b"1"]
    assert len(queue.pending) == 9 and queue.depth.limit == 10
    # Two more read: 7 wait, at most 8: the bound is queue-depth again,
    # and the queue is over it, so a new persistent message stays in its
    # queue.
    again.transport.drain(2)
    assert bodies(again.received()) == [b"2", b"3"]
    assert queue.depth.limit == 2 and queue.holding
    engine.enqueue("q", b"11")
    assert len(queue.pending) == 7
    # All read: the new one follows.
    again.transport.drain(None)
    assert bodies(again.received()) == [b"%d" % n for n in range(4, 12)]
    assert len(queue.pending) == 0 and not queue.holding


def test_unsubscribing_forgets_what_the_session_held_for_it(make_factory, engine):
    factory = make_factory(queue_depth=5, max_depth=10)
    reader = SlowReader(factory)
    opened = reader.open()
    reader.send(f.Subscribe(1, 1, "q", 100))
    reader.received()
    reader.stop_reading()
    engine.enqueue("q", b"1", b"2")
    queue = own_queue(factory, opened.session_id)
    assert len(queue.pending) == 2
    reader.send(f.Unsubscribe(2, 1))
    assert len(queue.pending) == 0 and not queue.holding
    reader.transport.drain(None)
    assert bodies(reader.received()) == []
    # Back in the queue, for the next consumer.
    other = Connection(factory)
    other.open()
    other.send(f.Subscribe(1, 1, "q", 10))
    assert bodies(other.received()) == [b"1", b"2"]
