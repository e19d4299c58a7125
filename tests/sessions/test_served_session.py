"""
Tests for the router's side of sessions that survive failures
(docs/client-protocol.md, "Sessions that survive failures"): the
connection TTL, disconnected sessions and their keep-alive, reattachment
with replayed commands, re-sent answers and deliveries, the recovery
buffer and max-depth, Processed and Received, duplicate ids (through the
session, the engine and the store), the 001→002 schema upgrade, and the
session events.

Everything is deterministic: a C{task.Clock}, connections over
C{StringTransport}s driven frame by frame, and the real SQLite store run
inline.
"""

import sqlite3
from dataclasses import replace

import pytest

from meshroute import events as event_names
from meshroute.wire import client_frames as f
from meshroute.sessions.connection_core import DEFAULT_TTL_MS
from meshroute.sessions.liveness import PARTIAL_FRAME_TIMEOUT_S
from meshroute.sessions.limits import ClientLimits
from meshroute.sessions.native_listener import ClientFactory
from meshroute.sessions.settings import DROP_NEWEST, SessionSettings
from meshroute.messages import Message
from meshroute.store import InlineExecutor, SQLiteStore
from meshroute.store.database import migrations
from meshroute.wire.codec import FrameDecoder, encode

from support.fake_router import ROUTER, FakeEngine
from support.router_connection import Connection, deliveries, only
from support.served_sessions import SETTINGS, factory, make_factory  # noqa: F401 (a fixture)
from support.router_engine import engine_on, engine_store
from meshroute.testing.memory_mesh import MemoryMesh

from meshroute.events import read_events

@pytest.fixture
def auto_engine(tmp_path, clock):
    engine = FakeEngine(str(tmp_path / "auto.sqlite"), clock, auto=True)
    yield engine
    engine.close()


def session_of(factory, session_id: str) -> dict:
    (described,) = [s for s in factory.sessions.describe() if s["session_id"] == session_id]
    return described


# -- the connection TTL ---------------------------------------------------------


def test_a_silent_connection_is_closed_after_exactly_its_ttl(factory, clock, engine):
    connection = Connection(factory)
    opened = connection.open(ttl_ms=3000)
    assert opened.ttl_ms == 3000
    clock.advance(2.999)
    assert not connection.aborted
    clock.advance(0.001)
    assert connection.aborted
    (described,) = factory.sessions.describe()
    assert described["state"] == "disconnected"
    (event,) = engine.events.named(event_names.SESSION_DISCONNECTED)
    assert event["reason"] == "ttl" and event["session_id"] == opened.session_id


def test_the_ttl_counts_from_the_last_thing_heard(factory, clock):
    connection = Connection(factory)
    connection.open(ttl_ms=3000)
    clock.advance(2)
    connection.send(f.Ping(1))
    clock.advance(2)  # 4 s since Open, 2 s since the Ping
    assert not connection.aborted
    clock.advance(0.999)
    assert not connection.aborted
    clock.advance(0.001)  # 3 s since the Ping
    assert connection.aborted


def test_the_ttl_is_checked_every_check_interval(engine, clock):
    factory = make_factory(engine, clock, connection_ttl_check_interval_ms=2000)
    connection = Connection(factory)
    connection.open(ttl_ms=2500)
    clock.advance(2)
    clock.advance(0.5)
    assert not connection.aborted  # silent for its TTL, but no check yet
    clock.advance(1.499)
    assert not connection.aborted
    clock.advance(0.001)  # the check at 4 s
    assert connection.aborted


def test_the_override_replaces_the_clients_ttl(engine, clock):
    factory = make_factory(engine, clock, connection_ttl_override=1500,
                           connection_ttl_check_interval_ms=500)
    connection = Connection(factory)
    assert connection.open(ttl_ms=60000).ttl_ms == 1500
    clock.advance(1.499)
    assert not connection.aborted
    clock.advance(0.001)
    assert connection.aborted
    never = Connection(factory)
    assert never.open(ttl_ms=-1).ttl_ms == 1500


def test_an_override_of_minus_one_never_closes(engine, clock):
    factory = make_factory(engine, clock, connection_ttl_override=-1)
    connection = Connection(factory)
    assert connection.open(ttl_ms=-1).ttl_ms == -1
    clock.advance(10 * 3600)
    assert not connection.aborted and not connection.closed


def test_a_connection_that_never_opens_gets_the_default_ttl(engine, clock):
    # A stage-valid-timeout longer than the TTL, else it closes first.
    factory = make_factory(engine, clock,
                           limits=ClientLimits(stage_valid_timeout_ms=2 * DEFAULT_TTL_MS))
    connection = Connection(factory)
    clock.advance(DEFAULT_TTL_MS / 1000 - 1)
    assert not connection.aborted
    clock.advance(1)
    assert connection.aborted
    assert factory.sessions.describe() == []


def test_the_ttl_timer_runs_only_while_there_are_connections(factory, clock):
    assert clock.getDelayedCalls() == []
    first, second = Connection(factory), Connection(factory)
    assert len(clock.getDelayedCalls()) == 1  # one timer for the factory
    first.send(f.Ping(1))  # before Open: a bad command
    first.lose()
    second.lose()
    assert clock.getDelayedCalls() == []


def test_a_ttl_close_leaves_the_session_resumable(factory, clock, engine):
    engine.enqueue("q", b"1")
    connection = Connection(factory)
    opened = connection.open(ttl_ms=1000)
    connection.send(f.Subscribe(1, 1, "q", 5))
    connection.received()
    clock.advance(1)
    assert connection.aborted
    connection.lose()  # the transport reports it later
    again = Connection(factory)
    resumed = again.open(opened.session_id, 1, 0)
    assert (resumed.reattached, resumed.last_command_id) == (True, 1)
    assert [d.body for d in deliveries(again.after_open)] == [b"1"]


# -- partial frames: the deadline and the buffer bounds (issue 8, scenario 11) ----------


def partial_send(size: int = 1000) -> bytes:
    """
    A Send frame of about C{size} bytes but its last 10.
    """
    return encode(f.Send(1, "q", {}, b"x" * size, True))[:-10]


def test_bytes_of_a_partial_frame_are_not_life(factory, clock, engine):
    """
    A client trickling one byte at a time into a frame it never finishes
    is closed after its TTL: only whole frames count.
    """
    connection = Connection(factory)
    opened = connection.open(ttl_ms=3000)
    for byte in partial_send()[:3]:
        clock.advance(0.999)
        connection.protocol.dataReceived(bytes([byte]))
    assert not connection.aborted
    clock.advance(0.003)  # 3 s since Open, the last whole frame
    assert connection.aborted
    (event,) = engine.events.named(event_names.SESSION_DISCONNECTED)
    assert (event["reason"], event["session_id"]) == ("ttl", opened.session_id)


def test_a_partial_frame_has_a_deadline_even_without_a_ttl(factory, clock, engine):
    connection = Connection(factory)
    opened = connection.open(ttl_ms=-1)
    clock.advance(100)
    connection.protocol.dataReceived(partial_send())
    clock.advance(PARTIAL_FRAME_TIMEOUT_S - 1)
    connection.send(f.Ping(1))  # A whole frame, yet the partial one is still late.
    assert not connection.aborted
    clock.advance(1)
    assert connection.aborted
    (event,) = engine.events.named(event_names.SESSION_DISCONNECTED)
    assert (event["reason"], event["session_id"]) == ("frame-timeout", opened.session_id)
    assert factory.buffered > 0
    connection.lose()
    assert factory.buffered == 0


def test_a_frame_completed_in_time_is_not_late(factory, clock, engine):
    connection = Connection(factory)
    connection.open(ttl_ms=-1)
    data = encode(f.Send(1, "q", {}, b"x" * 1000, True)) + partial_send()
    connection.protocol.dataReceived(data[:500])
    clock.advance(PARTIAL_FRAME_TIMEOUT_S - 1)
    # The first frame completes, the next one begins: its deadline is its own.
    connection.protocol.dataReceived(data[500:])
    clock.advance(PARTIAL_FRAME_TIMEOUT_S - 1)
    assert not connection.aborted
    assert len(engine.submitted) == 1
    clock.advance(1)
    assert connection.aborted


def test_partial_frames_buffered_across_the_listener_are_bounded(engine, clock):
    """
    The bytes of partial frames held for all connections together stay
    under the listener's bound: the connection that would pass it is
    closed (its session stays resumable), the others carry on.
    """
    factory = ClientFactory(engine, clock, max_frame_size=1100, settings=SETTINGS,
                            max_buffered=1500)
    first, second = Connection(factory), Connection(factory)
    first.open(ttl_ms=-1)
    second_opened = second.open(ttl_ms=-1)
    first.protocol.dataReceived(partial_send(1000))
    assert factory.buffered > 1000
    second.protocol.dataReceived(partial_send(1000))
    assert second.aborted and not first.aborted
    (event,) = engine.events.named(event_names.SESSION_DISCONNECTED)
    assert (event["reason"], event["session_id"]) == ("buffers-full", second_opened.session_id)
    second.lose()
    first.protocol.dataReceived(encode(f.Send(1, "q", {}, b"x" * 1000, True))[
        len(partial_send(1000)):])
    assert len(engine.submitted) == 1 and factory.buffered == 0
    third = Connection(factory)
    third.open(ttl_ms=-1)
    third.protocol.dataReceived(partial_send(1000))
    assert not third.aborted


# -- disconnected sessions and keep-alive -----------------------------------------


def test_a_disconnected_session_expires_exactly_at_keep_alive(factory, clock, engine):
    engine.enqueue("q", b"1", b"2")
    connection = Connection(factory)
    opened = connection.open()
    connection.send(f.Subscribe(1, 1, "q", 5))
    assert len(deliveries(connection.received())) == 2
    clock.advance(10)
    connection.send(f.Ping(1))
    connection.lose()
    clock.advance(4.75)
    described = session_of(factory, opened.session_id)
    assert described["state"] == "disconnected"
    assert described["expires_in_s"] == 0.25
    assert engine.queues.consumer_counts() == {"q": 1}
    clock.advance(0.25)
    assert factory.sessions.describe() == []
    (expired,) = engine.events.named(event_names.SESSION_EXPIRED)
    assert (expired["session_id"], expired["requeued"]) == (opened.session_id, 2)
    # Its unacknowledged deliveries went back, flagged redelivered.
    other = Connection(factory)
    other.open()
    other.send(f.Subscribe(1, 1, "q", 5))
    assert [(d.body, d.redelivered) for d in deliveries(other.received())] == [
        (b"1", True), (b"2", True)]


def test_resuming_an_expired_session_recreates_it(factory, clock, engine):
    connection = Connection(factory)
    opened = connection.open(client_id="shop-7")
    connection.send(f.Send(1, "q", {}, b"x", True))
    connection.lose()
    clock.advance(5)
    again = Connection(factory)
    recreated = again.open(opened.session_id, 0, 0, client_id="shop-7")
    assert (recreated.reattached, recreated.last_command_id) == (False, 0)
    assert recreated.session_id != opened.session_id
    (event,) = engine.events.named(event_names.SESSION_RECREATED)
    assert event == {"session_id": recreated.session_id, "client_id": "shop-7",
                     "requested_session_id": opened.session_id}
    # Command ids start again from 1 in the new session.
    again.send(f.Send(1, "q", {}, b"y", True))
    assert len(engine.submitted) == 2


def test_a_closed_session_cannot_be_resumed(factory, engine):
    connection = Connection(factory)
    opened = connection.open()
    connection.send(f.Close(1))
    assert connection.received() == [f.Closed()]
    assert connection.closed
    connection.lose()
    again = Connection(factory)
    recreated = again.open(opened.session_id)
    assert recreated.reattached is False and recreated.session_id != opened.session_id
    (closed,) = engine.events.named(event_names.SESSION_CLOSED)
    assert (closed["session_id"], closed["reason"]) == (opened.session_id, "client")
    assert len(engine.events.named(event_names.SESSION_RECREATED)) == 1


def test_a_connection_error_ends_the_session(factory, engine):
    connection = Connection(factory)
    opened = connection.open()
    connection.protocol.dataReceived(b"\x00\x00\x00\x01\xc1")
    assert connection.closed
    connection.lose()
    assert factory.sessions.describe() == []
    (closed,) = engine.events.named(event_names.SESSION_CLOSED)
    assert (closed["session_id"], closed["reason"]) == (opened.session_id, f.PROTOCOL_ERROR)
    assert Connection(factory).open(opened.session_id).reattached is False


def test_a_lost_connection_while_closing_ends_the_session(factory, engine):
    connection = Connection(factory)
    opened = connection.open()
    connection.send(f.Send(1, "q", {}, b"x", True), f.Close(2))
    connection.lose()
    engine.submitted[0].deferred.callback("id-1")
    assert factory.sessions.describe() == []
    assert Connection(factory).open(opened.session_id).reattached is False


def test_a_session_open_elsewhere_is_taken_over(factory, engine):
    old = Connection(factory)
    opened = old.open()
    old.send(f.Send(1, "q", {}, b"x", True))
    new = Connection(factory)
    resumed = new.open(opened.session_id, 0, 0)
    assert (resumed.reattached, resumed.last_command_id) == (True, 1)
    assert old.aborted
    reasons = [e["reason"] for e in engine.events.named(event_names.SESSION_DISCONNECTED)]
    assert reasons == ["taken-over"]
    old.lose()  # changes nothing any more
    engine.submitted[0].deferred.callback("id-1")
    assert new.received() == [f.Confirm(1, "id-1")]
    assert old.received() == []
    assert session_of(factory, opened.session_id)["state"] == "open"


# -- reattachment: commands ---------------------------------------------------------


def test_answers_completed_while_disconnected_are_resent(factory, engine, clock):
    connection = Connection(factory)
    opened = connection.open()
    connection.send(f.Send(1, "q", {}, b"1", True), f.Send(2, "q", {}, b"2", True),
                    f.Send(3, "q", {}, b"3", True))
    engine.submitted[0].deferred.callback("id-1")
    assert connection.received() == [f.Confirm(1, "id-1")]
    connection.lose()
    engine.submitted[2].deferred.callback("id-3")
    engine.submitted[1].deferred.errback(f_error("backlog-full", "full"))
    again = Connection(factory)
    resumed = again.open(opened.session_id, answered_up_to=1)
    assert (resumed.reattached, resumed.last_command_id) == (True, 3)
    # Answers above answered_up_to, in command order.
    assert again.after_open == [f.Error(2, "backlog-full", "full"), f.Confirm(3, "id-3")]
    clock.advance(0)
    # Every command was answered: no Processed.
    assert again.received() == []
    (event,) = engine.events.named(event_names.SESSION_REATTACHED)
    assert (event["answers_resent"], event["last_command_id"]) == (2, 3)


def test_an_answer_the_client_missed_is_resent_even_if_already_written(factory, engine):
    connection = Connection(factory)
    opened = connection.open()
    connection.send(f.Send(1, "q", {}, b"1", True))
    engine.submitted[0].deferred.callback("id-1")
    connection.lose()  # the Confirm was written but never arrived
    again = Connection(factory)
    again.open(opened.session_id, answered_up_to=0)
    assert again.after_open == [f.Confirm(1, "id-1")]


def test_replayed_commands_are_not_carried_out_again(factory, engine):
    connection = Connection(factory)
    opened = connection.open()
    connection.send(f.Send(1, "q", {}, b"1", True), f.Send(2, "q", {}, b"2", True))
    engine.submitted[0].deferred.callback("id-1")
    connection.lose()
    again = Connection(factory)
    again.open(opened.session_id, answered_up_to=0)
    assert again.after_open == [f.Confirm(1, "id-1")]
    # A client replaying too much: commands up to last_command_id are
    # not carried out again, their held answers are re-sent; the rest go on.
    again.send(f.Send(1, "q", {}, b"1", True), f.Send(2, "q", {}, b"2", True),
               f.Send(3, "q", {}, b"3", True))
    assert [s.body for s in engine.submitted] == [b"1", b"2", b"3"]
    assert again.received() == [f.Confirm(1, "id-1")]
    engine.submitted[1].deferred.callback("id-2")
    engine.submitted[2].deferred.callback("id-3")
    assert again.received() == [f.Confirm(2, "id-2"), f.Confirm(3, "id-3")]
    assert not again.closed


def test_a_command_id_beyond_the_next_is_still_a_bad_command(factory):
    connection = Connection(factory)
    opened = connection.open()
    connection.send(f.Send(1, "q", {}, b"1", True))
    connection.lose()
    again = Connection(factory)
    again.open(opened.session_id)
    again.send(f.Send(3, "q", {}, b"3", True))
    (error,) = again.received()
    assert (error.command_id, error.code) == (0, f.BAD_COMMAND)
    assert "expected 2" in error.detail


@pytest.mark.parametrize("cut_after", range(0, 11))
def test_no_command_is_lost_or_carried_out_twice(tmp_path, clock, cut_after):
    """
    A client sends ten messages and acknowledges what it receives; the
    connection is cut after the router read C{cut_after} of its commands.
    The client resumes and replays the commands above last_command_id:
    every message is enqueued exactly once, and every answer arrives.
    """
    engine = FakeEngine(str(tmp_path / "store.sqlite"), clock, auto=True)
    try:
        factory = make_factory(engine, clock)
        commands = [f.Send(n, "q", {}, b"%d" % n, True) for n in range(1, 11)]
        connection = Connection(factory)
        opened = connection.open()
        connection.send(*commands[:cut_after])
        answers = {frame.command_id: frame for frame in connection.received()
                   if isinstance(frame, f.Confirm)}
        # Only some of the answers made it to the client.
        kept = {n: a for n, a in answers.items() if n <= cut_after // 2}
        connection.lose()
        again = Connection(factory)
        resumed = again.open(opened.session_id, answered_up_to=max(kept, default=0))
        assert resumed.last_command_id == cut_after
        for frame in again.after_open:
            kept[frame.command_id] = frame
        again.send(*commands[resumed.last_command_id:])
        for frame in again.received():
            kept[frame.command_id] = frame
        assert sorted(kept) == list(range(1, 11))
        fetched = engine.store._submit(
            lambda connection: [row[0] for row in connection.execute(
                "SELECT body FROM messages ORDER BY id")])
        assert fetched.result == [b"%d" % n for n in range(1, 11)]
    finally:
        engine.close()


# -- reattachment: deliveries ---------------------------------------------------------


def test_delivery_ids_are_per_session(factory, engine):
    engine.enqueue("q", b"1", b"2")
    first, second = Connection(factory), Connection(factory)
    first.open()
    second.open()
    first.send(f.Subscribe(1, 1, "q", 1))
    second.send(f.Subscribe(1, 1, "q", 1))
    assert [d.delivery_id for d in deliveries(first.received())] == [1]
    assert [d.delivery_id for d in deliveries(second.received())] == [1]


def test_deliveries_above_delivered_up_to_are_resent(factory, engine):
    sent = engine.enqueue("q", *[b"%d" % n for n in range(1, 6)])
    connection = Connection(factory)
    opened = connection.open()
    connection.send(f.Subscribe(1, 7, "q", 5))
    got = deliveries(connection.received())
    assert [d.delivery_id for d in got] == [1, 2, 3, 4, 5]
    connection.lose()
    again = Connection(factory)
    again.open(opened.session_id, answered_up_to=1, delivered_up_to=2)
    assert deliveries(again.after_open) == got[2:]
    assert [d.msg_id for d in got[2:]] == [m.msg_id for m in sent[2:]]
    # They stay unacknowledged until acknowledged, like the rest.
    again.send(f.Ack(2, [1, 2, 3, 4, 5]))
    assert engine.queues.depths() == {}


def test_unacknowledged_deliveries_not_in_the_recovery_buffer_are_requeued(engine, clock):
    factory = make_factory(engine, clock, recovery_buffer_size=2)
    engine.enqueue("q", *[b"%d" % n for n in range(1, 6)])
    connection = Connection(factory)
    opened = connection.open()
    connection.send(f.Subscribe(1, 1, "q", 5))
    assert len(deliveries(connection.received())) == 5
    connection.lose()
    again = Connection(factory)
    again.open(opened.session_id, answered_up_to=1, delivered_up_to=1)
    got = deliveries(again.after_open)
    # 4 and 5 from the recovery buffer; 2 and 3 went back to the queue,
    # flagged redelivered, and (their credit returned) come again.
    assert [(d.delivery_id, d.body, d.redelivered) for d in got] == [
        (4, b"4", False), (5, b"5", False), (6, b"2", True), (7, b"3", True)]
    (event,) = engine.events.named(event_names.SESSION_REATTACHED)
    assert (event["deliveries_resent"], event["requeued"]) == (2, 2)


def test_requeued_deliveries_may_go_to_another_consumer(engine, clock):
    factory = make_factory(engine, clock, recovery_buffer_size=0)
    engine.enqueue("q", b"1", b"2")
    connection = Connection(factory)
    opened = connection.open()
    connection.send(f.Subscribe(1, 1, "q", 2))
    connection.received()
    connection.lose()
    other = Connection(factory)
    other.open()
    other.send(f.Subscribe(1, 1, "q", 10))
    assert other.received() == [f.Confirm(1, "")]
    again = Connection(factory)
    again.open(opened.session_id, answered_up_to=1, delivered_up_to=0)
    requeued = deliveries(again.after_open) + deliveries(other.received())
    assert sorted((d.body, d.redelivered) for d in requeued) == [(b"1", True), (b"2", True)]


def test_deliveries_while_disconnected_are_queued_and_sent_on_resume(factory, engine):
    engine.enqueue("q", b"1")
    connection = Connection(factory)
    opened = connection.open()
    connection.send(f.Subscribe(1, 1, "q", 10))
    connection.received()
    connection.lose()
    engine.enqueue("q", b"2", b"3")
    assert session_of(factory, opened.session_id)["queued"] == 2
    again = Connection(factory)
    again.open(opened.session_id, answered_up_to=1, delivered_up_to=0)
    assert [(d.delivery_id, d.body) for d in deliveries(again.after_open)] == [
        (1, b"1"), (2, b"2"), (3, b"3")]
    assert session_of(factory, opened.session_id)["queued"] == 0
    engine.enqueue("q", b"4")
    assert [(d.delivery_id, d.body) for d in deliveries(again.received())] == [(4, b"4")]


def test_acknowledged_and_unsubscribed_deliveries_are_not_resent(factory, engine):
    engine.enqueue("a", b"a1", b"a2")
    engine.enqueue("b", b"b1")
    connection = Connection(factory)
    opened = connection.open()
    connection.send(f.Subscribe(1, 1, "a", 5), f.Subscribe(2, 2, "b", 5))
    got = deliveries(connection.received())
    assert [d.body for d in got] == [b"a1", b"a2", b"b1"]
    connection.send(f.Ack(3, [got[0].delivery_id]), f.Unsubscribe(4, 2))
    connection.lose()
    again = Connection(factory)
    again.open(opened.session_id, answered_up_to=4, delivered_up_to=0)
    assert [d.body for d in deliveries(again.after_open)] == [b"a2"]


# -- max-depth ------------------------------------------------------------------------


def test_at_max_depth_persistent_messages_stay_in_their_queue(engine, clock):
    factory = make_factory(engine, clock, max_depth=2)
    connection = Connection(factory)
    opened = connection.open()
    connection.send(f.Subscribe(1, 1, "q", 100))
    connection.received()
    connection.lose()
    engine.enqueue("q", *[b"%d" % n for n in range(1, 6)])
    assert session_of(factory, opened.session_id)["queued"] == 2
    assert engine.events.named("message.dropped") == []
    # Another consumer gets what the full session did not take.
    other = Connection(factory)
    other.open()
    other.send(f.Subscribe(1, 1, "q", 1))
    assert [d.body for d in deliveries(other.received())] == [b"3"]
    again = Connection(factory)
    again.open(opened.session_id, answered_up_to=1)
    assert [d.body for d in deliveries(again.after_open)] == [b"1", b"2", b"4", b"5"]


def test_at_max_depth_non_persistent_messages_drop_oldest(engine, clock):
    factory = make_factory(engine, clock, max_depth=2)
    connection = Connection(factory)
    opened = connection.open()
    connection.send(f.Subscribe(1, 1, "q", 10))
    connection.received()
    connection.lose()
    for n in range(1, 5):
        engine.queues.put_transient("q", engine.message("q", b"%d" % n, persistent=False))
    dropped = engine.events.named("message.dropped")
    assert [(e["reason"], e["session_id"], e["queue"]) for e in dropped] == [
        ("max-depth", opened.session_id, "q")] * 2
    again = Connection(factory)
    again.open(opened.session_id, answered_up_to=1)
    got = deliveries(again.after_open)
    assert [d.body for d in got] == [b"3", b"4"]
    # The dropped ones gave their credit back: 8 more may come.
    for n in range(5, 15):
        engine.queues.put_transient("q", engine.message("q", b"%d" % n, persistent=False))
    assert [d.body for d in deliveries(again.received())] == [b"%d" % n for n in range(5, 13)]


def test_at_max_depth_non_persistent_messages_drop_newest(engine, clock):
    factory = make_factory(engine, clock, max_depth=2, max_depth_policy=DROP_NEWEST)
    connection = Connection(factory)
    opened = connection.open()
    connection.send(f.Subscribe(1, 1, "q", 10))
    connection.received()
    connection.lose()
    messages = [engine.message("q", b"%d" % n, persistent=False) for n in range(1, 5)]
    for message in messages:
        engine.queues.put_transient("q", message)
    assert [e["msg_id"] for e in engine.events.named("message.dropped")] == [
        messages[2].msg_id, messages[3].msg_id]
    again = Connection(factory)
    again.open(opened.session_id, answered_up_to=1)
    assert [d.body for d in deliveries(again.after_open)] == [b"1", b"2"]


def test_drop_oldest_never_drops_a_persistent_message(engine, clock):
    factory = make_factory(engine, clock, max_depth=1)
    connection = Connection(factory)
    opened = connection.open()
    connection.send(f.Subscribe(1, 1, "q", 10))
    connection.received()
    connection.lose()
    engine.enqueue("q", b"p")
    engine.queues.put_transient("q", engine.message("q", b"t", persistent=False))
    assert len(engine.events.named("message.dropped")) == 1
    again = Connection(factory)
    again.open(opened.session_id, answered_up_to=1)
    assert [d.body for d in deliveries(again.after_open)] == [b"p"]


# -- Processed and Received -------------------------------------------------------------


def test_processed_is_cumulative_and_sent_once_per_turn(factory, engine, clock):
    engine.enqueue("q", b"1")
    connection = Connection(factory)
    connection.open()
    connection.send(f.Send(1, "q", {}, b"x", True), f.Subscribe(2, 1, "q", 1),
                    f.Credit(3, 1, 1))
    delivery_id = deliveries(connection.received())[0].delivery_id
    connection.send(f.Ack(4, [delivery_id]))
    clock.advance(0)
    assert only(connection.received(), f.Processed) == []  # Send 1 is not done
    engine.submitted[0].deferred.callback("id-1")
    assert connection.received() == [f.Confirm(1, "id-1")]
    clock.advance(0)
    assert connection.received() == [f.Processed(4)]
    clock.advance(0)
    assert connection.received() == []  # only when it grew
    connection.send(f.Credit(5, 1, 1), f.Credit(6, 1, 1))
    assert connection.received() == []
    clock.advance(0)
    assert connection.received() == [f.Processed(6)]


def test_processed_waits_for_acknowledgements_to_be_durable(factory, engine, clock):
    from twisted.internet.defer import Deferred

    engine.enqueue("q", b"1")
    connection = Connection(factory)
    connection.open()
    connection.send(f.Subscribe(1, 1, "q", 1))
    (delivery,) = deliveries(connection.received())
    consumed = Deferred()
    real_consume = engine.store.consume
    engine.queues.store = type("SlowStore", (), {
        "consume": lambda self, ids: consumed.addCallback(lambda _: real_consume(ids)),
        "__getattr__": lambda self, name: getattr(engine.store, name),
    })()
    connection.send(f.Ack(2, [delivery.delivery_id]))
    clock.advance(0)
    # The Subscribe was answered; the Ack is not done before it is durable.
    assert connection.received() == []
    consumed.callback(None)
    clock.advance(0)
    assert connection.received() == [f.Processed(2)]


def test_answered_commands_need_no_processed(factory, engine, clock):
    """
    A command's answer tells the client it is done: a producer whose
    sends are all confirmed is sent no Processed.  One comes once a
    command without an answer of its own is done, covering all before it.
    """
    connection = Connection(factory)
    connection.open()
    connection.send(f.Send(1, "q", {}, b"1", True), f.Send(2, "q", {}, b"2", True))
    for submitted in engine.submitted:
        submitted.deferred.callback("id")
    clock.advance(0)
    assert [type(frame) for frame in connection.received()] == [f.Confirm, f.Confirm]
    connection.send(f.Ack(3, []), f.Send(4, "q", {}, b"4", True))
    engine.submitted[2].deferred.callback("id-4")
    clock.advance(0)
    assert connection.received() == [f.Confirm(4, "id-4"), f.Processed(4)]


def test_processed_is_sent_again_on_resume(factory, engine, clock):
    connection = Connection(factory)
    opened = connection.open()
    connection.send(f.Subscribe(1, 1, "q", 1), f.Credit(2, 1, 1))
    connection.lose()  # before the turn ended: Processed(2) never went
    clock.advance(0)
    again = Connection(factory)
    again.open(opened.session_id, answered_up_to=1)
    clock.advance(0)
    assert again.received() == [f.Processed(2)]


def test_received_frees_held_answers_and_recovery_entries(factory, engine):
    engine.enqueue("q", b"1", b"2", b"3")
    connection = Connection(factory)
    opened = connection.open()
    connection.send(f.Subscribe(1, 1, "q", 3), f.Send(2, "q", {}, b"x", True))
    engine.submitted[0].deferred.callback("id-2")
    connection.received()
    described = session_of(factory, opened.session_id)
    assert (described["answers_held"], described["recovery"]) == (2, 3)
    connection.send(f.Received(1, 2))
    described = session_of(factory, opened.session_id)
    assert (described["answers_held"], described["recovery"]) == (1, 1)
    connection.send(f.Received(2, 3))
    described = session_of(factory, opened.session_id)
    assert (described["answers_held"], described["recovery"]) == (0, 0)
    assert connection.received() == []  # Received is not answered
    connection.lose()
    again = Connection(factory)
    again.open(opened.session_id, answered_up_to=2, delivered_up_to=3)
    assert again.after_open == []


def test_received_before_open_is_a_bad_command(factory):
    connection = Connection(factory)
    connection.send(f.Received(0, 0))
    (error,) = connection.received()
    assert (error.command_id, error.code) == (0, f.BAD_COMMAND)


def test_a_client_that_never_reports_receipt_stops_being_resumable(engine, clock, monkeypatch):
    from meshroute.sessions import answers as answers_module

    monkeypatch.setattr(answers_module, "MAX_HELD_ANSWERS", 3)
    factory = make_factory(engine, clock)
    connection = Connection(factory)
    opened = connection.open()
    for n in range(1, 5):
        connection.send(f.Subscribe(n, n, "q", 0))
    described = session_of(factory, opened.session_id)
    assert (described["resumable"], described["answers_held"]) == (False, 0)
    observed = []
    connection.lose()
    observed = engine.events.named(event_names.SESSION_EXPIRED)
    assert [e["resumable"] for e in observed] == [False]
    assert Connection(factory).open(opened.session_id).reattached is False


def test_taking_over_a_session_that_is_not_resumable_recreates_it(engine, clock, monkeypatch):
    """
    Issue 8, scenario 8: a client that never reports receipt stops being
    resumable; resuming it while its old connection is still attached
    takes that connection away, ends the session, and answers
    Opened(reattached=false) with a new session, instead of raising
    NoTransition out of dataReceived.
    """
    from meshroute.sessions import answers as answers_module

    monkeypatch.setattr(answers_module, "MAX_HELD_ANSWERS", 3)
    factory = make_factory(engine, clock)
    old = Connection(factory)
    opened = old.open(client_id="shop-7")
    for n in range(1, 5):
        old.send(f.Subscribe(n, n, "q", 0))
    new = Connection(factory)
    recreated = new.open(opened.session_id, 0, 0, client_id="shop-7")
    assert (recreated.reattached, recreated.last_command_id) == (False, 0)
    assert recreated.session_id != opened.session_id
    assert old.aborted
    (expired,) = engine.events.named(event_names.SESSION_EXPIRED)
    assert (expired["session_id"], expired["resumable"]) == (opened.session_id, False)
    (event,) = engine.events.named(event_names.SESSION_RECREATED)
    assert event["requested_session_id"] == opened.session_id
    assert [s["session_id"] for s in factory.sessions.describe()] == [recreated.session_id]
    new.send(f.Send(1, "q", {}, b"y", True))
    assert len(engine.submitted) == 1


# -- duplicate ids ------------------------------------------------------------------------


def test_a_duplicate_id_is_accepted_once_across_sessions(auto_engine, clock):
    factory = make_factory(auto_engine, clock)
    first, second = Connection(factory), Connection(factory)
    first.open()
    second.open()
    first.send(f.Send(1, "q", {}, b"x", True, "producer-1:1"))
    (confirm,) = first.received()
    second.send(f.Send(1, "q", {}, b"x", True, "producer-1:1"),
                f.Send(2, "q", {}, b"y", True, "producer-1:2"))
    again, other = second.received()
    assert again == f.Confirm(1, confirm.msg_id)
    assert other.msg_id != confirm.msg_id
    assert auto_engine.queues.depths() == {"q": 2}


def test_a_duplicate_id_is_passed_to_the_engine(factory, engine):
    connection = Connection(factory)
    connection.open()
    connection.send(f.Send(1, "q", {}, b"x", True, "d-1"), f.Send(2, "q", {}, b"x", True))
    assert [s.duplicate_id for s in engine.submitted] == ["d-1", ""]


@pytest.fixture
def real_engine(tmp_path, clock):
    store = engine_store(tmp_path, clock)
    yield engine_on(store, clock)
    store.close()


def results(d) -> list:
    got = []
    d.addBoth(got.append)
    return got


def test_the_engine_accepts_a_duplicate_id_once(real_engine, clock):
    (first,) = results(real_engine.submit("q", b"x", {}, True, duplicate_id="d-1"))
    (second,) = results(real_engine.submit("q", b"x", {}, True, duplicate_id="d-1"))
    (third,) = results(real_engine.submit("q", b"x", {}, True))
    assert second == first and third != first
    assert real_engine.queues.depths() == {"q": 2}
    (duplicate,) = real_engine.events.named(event_names.MESSAGE_DUPLICATE)
    assert duplicate == {"msg_id": first, "origin": ROUTER, "reason": "duplicate-id",
                         "duplicate_id": "d-1", "dest": f"q@{ROUTER}"}
    assert len(real_engine.events.named(event_names.MESSAGE_ENQUEUED)) == 2


def test_the_engine_accepts_a_non_persistent_duplicate_id_once(real_engine):
    (first,) = results(real_engine.submit("q", b"x", {}, False, duplicate_id="d-1"))
    (second,) = results(real_engine.submit("q", b"x", {}, False, duplicate_id="d-1"))
    assert second == first
    assert real_engine.queues.depths() == {"q": 1}


def test_a_refused_send_does_not_record_its_duplicate_id(real_engine):
    from meshroute.router.admission import UnknownRouter

    (refused,) = results(real_engine.submit("q@router-x", b"x", {}, True, duplicate_id="d-1"))
    assert isinstance(refused.value, UnknownRouter)
    (accepted,) = results(real_engine.submit("q", b"x", {}, True, duplicate_id="d-1"))
    assert isinstance(accepted, str)
    assert real_engine.queues.depths() == {"q": 1}


def message(n: int, dest_router: str = ROUTER, persistent: bool = True) -> Message:
    return Message(f"{ROUTER}:t:{n}", ROUTER, dest_router, "q", b"body %d" % n,
                   persistent=persistent, accepted_at=1000.0 + n)


def open_store(path, clock, window_s=60.0) -> SQLiteStore:
    store = SQLiteStore(str(path), "normal", InlineExecutor(), router=ROUTER, clock=clock,
                        duplicate_id_window_s=window_s)
    store.open()
    return store


def outcome(d):
    (result,) = results(d)
    if hasattr(result, "raiseException"):
        result.raiseException()
    return result


def test_the_store_accepts_once_per_duplicate_id_across_a_restart(tmp_path, clock):
    store = open_store(tmp_path / "s.db", clock)
    assert outcome(store.accept_once(message(1), "d-1")) is None
    assert outcome(store.accept_once(message(2), "d-1")) == message(1).msg_id
    assert outcome(store.accept_once(message(3, dest_router="router-c"), "d-2")) is None
    assert store.queue_depths() == {"q": 1} and store.backlog_depths() == {"router-c": 1}
    outcome(store.close())
    store = open_store(tmp_path / "s.db", clock)
    try:
        assert outcome(store.accept_once(message(4), "d-1")) == message(1).msg_id
        assert outcome(store.accept_once(message(5), "d-2")) == message(3).msg_id
        assert store.queue_depths() == {"q": 1}
    finally:
        store.close()


def test_the_store_finds_the_message_of_a_duplicate_id_within_the_window(tmp_path, clock):
    store = open_store(tmp_path / "s.db", clock, window_s=60.0)
    try:
        assert outcome(store.duplicate_of("d-1")) is None
        outcome(store.accept_once(message(1), "d-1"))
        clock.advance(59)
        assert outcome(store.duplicate_of("d-1")) == message(1).msg_id
        clock.advance(2)
        assert outcome(store.duplicate_of("d-1")) is None
    finally:
        store.close()


def test_a_duplicate_message_id_undoes_the_duplicate_id(tmp_path, clock):
    from meshroute.store import DuplicateMessage

    store = open_store(tmp_path / "s.db", clock)
    try:
        assert outcome(store.accept(message(1))) is None
        with pytest.raises(DuplicateMessage):
            outcome(store.accept_once(message(1), "d-1"))
        assert outcome(store.accept_once(message(2), "d-1")) is None
        assert store.queue_depths() == {"q": 2}
    finally:
        store.close()


def test_a_non_persistent_message_is_not_stored(tmp_path, clock):
    store = open_store(tmp_path / "s.db", clock)
    try:
        assert outcome(store.accept_once(message(1, persistent=False), "d-1")) is None
        assert outcome(store.accept_once(message(2, persistent=False), "d-1")) == \
            message(1).msg_id
        assert store.queue_depths() == {}
    finally:
        store.close()


def test_duplicate_ids_last_exactly_the_window_and_are_pruned(tmp_path, clock):
    clock.advance(1000)
    store = open_store(tmp_path / "s.db", clock, window_s=60)
    assert outcome(store.accept_once(message(1), "d-1")) is None
    clock.advance(30)
    assert outcome(store.accept_once(message(2), "d-2")) is None
    clock.advance(30)  # d-1 is exactly 60 s old: still within the window
    assert outcome(store.accept_once(message(3), "d-1")) == message(1).msg_id
    clock.advance(0.5)  # now it is older
    assert outcome(store.prune_duplicate_ids()) == 1
    assert outcome(store.accept_once(message(3), "d-1")) is None
    assert outcome(store.accept_once(message(4), "d-2")) == message(2).msg_id
    outcome(store.close())
    clock.advance(61)
    store = open_store(tmp_path / "s.db", clock, window_s=60)  # prunes at open
    try:
        rows = outcome(store.executor.submit(
            lambda connection: connection.execute(
                "SELECT count(*) FROM duplicate_ids").fetchone()[0]))
        assert rows == 0
        assert outcome(store.accept_once(message(5), "d-2")) is None
    finally:
        store.close()


def test_accept_once_leaves_pruning_to_the_pruner(tmp_path, clock):
    """
    A send with a duplicate id writes its own row and nothing else: expired
    rows are the pruner's (L{meshroute.store.pruning}), off the send path,
    and an expired id counts as absent meanwhile.
    """
    store = open_store(tmp_path / "s.db", clock, window_s=10)
    try:
        for n in range(5):
            outcome(store.accept_once(message(n), f"d-{n}"))
        clock.advance(11)
        outcome(store.accept_once(message(9), "d-9"))
        assert outcome(store.accept_once(message(10), "d-0")) is None
        rows = outcome(store.executor.submit(
            lambda connection: [r[0] for r in connection.execute(
                "SELECT duplicate_id FROM duplicate_ids ORDER BY id")]))
        assert rows == ["d-1", "d-2", "d-3", "d-4", "d-9", "d-0"]
        assert outcome(store.prune_duplicate_ids()) == 4
    finally:
        store.close()


def test_a_version_1_store_is_upgraded(tmp_path, clock):
    path = tmp_path / "old.db"
    (version, name, sql) = migrations()[0]
    assert (version, name) == (1, "001-initial.sql")
    connection = sqlite3.connect(path, isolation_level=None)
    connection.executescript(
        f"BEGIN;\n{sql}\n;\nINSERT INTO meta (key, value) VALUES ('schema_version', 1);\n"
        f"INSERT INTO meta (key, value) VALUES ('router', '{ROUTER}');\nCOMMIT;")
    connection.close()
    old = open_store(path, clock)
    outcome(old.accept(message(1)))
    outcome(old.close())
    # Pretend it was a version 1 store holding a message.
    connection = sqlite3.connect(path, isolation_level=None)
    connection.executescript("DROP TABLE duplicate_ids; DROP TABLE ha_voter_records; "
                             "DROP TABLE replication_state; DROP TABLE peer_epochs; "
                             "DROP TABLE known_routers; "
                             "DROP TABLE prepared_transactions; DROP TABLE prepared_sends; "
                             "DROP TABLE prepared_acks; DROP TABLE committed_xids; "
                             "DROP TABLE durable_subscriptions; DROP TABLE topic_interest; "
                             "DROP TABLE retained_messages; "
                             "ALTER TABLE links DROP COLUMN peer_store_id; "
                             "DROP INDEX messages_expiring; "
                             "ALTER TABLE messages DROP COLUMN expires_ms; "
                             "DELETE FROM meta WHERE key = 'store_id'; "
                             "UPDATE meta SET value = 1 WHERE key = 'schema_version';")
    connection.close()
    store = open_store(path, clock)
    try:
        latest = migrations()[-1][0]
        assert store.applied_versions == list(range(2, latest + 1))
        assert store.schema_version == latest
        assert len(store.store_id) == 32
        assert store.queue_depths() == {"q": 1}
        assert outcome(store.accept_once(message(2), "d-1")) is None
        assert outcome(store.accept_once(message(3), "d-1")) == message(2).msg_id
    finally:
        store.close()


def test_the_schema_ships_the_duplicate_ids_step():
    assert [name for _, name, _ in migrations()][:2] == [
        "001-initial.sql", "002-duplicate-ids.sql"]


# -- what the admin API and the event log show ---------------------------------------------


def test_sessions_as_the_admin_api_shows_them(factory, engine, clock):
    engine.enqueue("q", b"1")
    connection = Connection(factory)
    opened = connection.open(client_id="shop-7", ttl_ms=30000)
    connection.send(f.Subscribe(1, 1, "q", 5))
    described = session_of(factory, opened.session_id)
    assert described == {
        "session_id": opened.session_id, "client_id": "shop-7", "user": None, "protocol": "native",
        "state": "open",
        "ttl_ms": 30000, "queued": 0, "recovery": 1, "answers_held": 1, "subscriptions": 1,
        "unacknowledged": 1, "last_command_id": 1, "processed_up_to": 1, "resumable": True,
        "disconnected_for_s": None, "expires_in_s": None,
    }
    connection.lose()
    engine.enqueue("q", b"2")
    clock.advance(2)
    described = session_of(factory, opened.session_id)
    assert (described["state"], described["queued"], described["disconnected_for_s"],
            described["expires_in_s"]) == ("disconnected", 1, 2.0, 3.0)
    assert factory.describe() == factory.sessions.describe()


def test_session_events(factory, engine, clock):
    connection = Connection(factory)
    opened = connection.open(client_id="shop-7", ttl_ms=30000)
    connection.lose()
    clock.advance(1)
    again = Connection(factory)
    again.open(opened.session_id, client_id="shop-7")
    again.send(f.Close(1))
    names = [name for name, _ in engine.events.records if name.startswith("session.")]
    assert names == ["session.opened", "session.disconnected", "session.reattached",
                     "session.closed"]
    by_name = {name: fields for name, fields in engine.events.records}
    assert by_name["session.opened"] == {"session_id": opened.session_id,
                                         "client_id": "shop-7", "ttl_ms": 30000,
                                         "protocol": "native"}
    assert by_name["session.disconnected"]["reason"] == "connection-lost"
    assert by_name["session.disconnected"]["keep_alive_ms"] == 5000
    assert by_name["session.reattached"]["disconnected_for_s"] == 1.0
    assert all(fields["session_id"] == opened.session_id and fields["client_id"] == "shop-7"
               for _, fields in engine.events.records)


def test_a_router_wires_its_session_settings_and_shows_its_sessions(tmp_path):
    """
    A whole router (the memory mesh's): its configuration reaches the
    client listener and the store, sessions show in describe_sessions and
    their events in the event log.
    """
    from twisted.internet.protocol import Factory, Protocol

    from meshroute.testing.memory_mesh import MemoryMesh
    from meshroute.sessions.settings import ClientListenerConfig, ClientReconnectConfig
    from meshroute.events import read_events

    mesh = MemoryMesh(tmp_path)
    config = replace(
        mesh.config("router-a", listen=False),
        clients=ClientListenerConfig(("clients-a",), connection_ttl_override=1500,
                                     connection_ttl_check_interval_ms=500,
                                     duplicate_id_window_ms=120_000, send_answer_hold_ms=7),
        client_reconnect=ClientReconnectConfig(keep_alive_ms=3000, max_depth=5,
                                               max_depth_policy="drop-newest",
                                               recovery_buffer_size=8),
    )
    router = mesh.start(config)
    assert router.clients.native.settings == SessionSettings(
        connection_ttl_override=1500, connection_ttl_check_interval_ms=500,
        keep_alive_ms=3000, max_depth=5, max_depth_policy="drop-newest",
        recovery_buffer_size=8, send_answer_hold_ms=7)
    assert router.store.duplicate_id_window_s == 120

    class Raw(Protocol):
        def connectionMade(self):
            self.data = b""

        def dataReceived(self, data):
            self.data += data

    connecting = mesh.network._connect("a-client", "clients-a", Factory.forProtocol(Raw))
    (client,) = results(connecting)
    client.transport.write(encode(f.Open([1], "shop-7", "", 60000)))
    mesh.network.flush()
    (opened,) = FrameDecoder(frames=f.FROM_ROUTER).feed(client.data)
    assert opened.ttl_ms == 1500
    (described,) = router.describe_sessions()
    assert (described["state"], described["ttl_ms"]) == ("open", 1500)
    mesh.run(1.5)  # silent for the override: closed, the session disconnected
    (described,) = router.describe_sessions()
    assert described["state"] == "disconnected"
    mesh.run(3)
    assert router.describe_sessions() == []
    mesh.stop("router-a")
    names = [e["event"] for e in read_events(str(tmp_path / "router-a"))
             if e["event"].startswith("session.")]
    assert names == ["session.opened", "session.disconnected", "session.expired"]


def f_error(code: str, detail: str):
    from meshroute.errors import MeshrouteError

    error = MeshrouteError(detail)
    error.code = code
    return error


def test_a_stopped_router_closes_its_client_connections(tmp_path):
    """
    An HA instance that stops serving (fenced, handed over) stops its
    router inside a process that lives on: a client still connected
    would wait forever for answers from a router that no longer works,
    instead of moving on to the active instance.
    """
    mesh = MemoryMesh(tmp_path)
    router = mesh.add("router-a")
    connection = Connection(router.clients.native)
    connection.open()
    mesh.stop("router-a")
    assert connection.aborted
    assert [e for e in read_events(router.events.data_dir)
            if e["event"] == event_names.SESSION_DISCONNECTED]
