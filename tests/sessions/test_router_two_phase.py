"""
Tests for the router's side of two-phase commit (protocol version 7,
docs/client-protocol.md "Two-phase commit"): Prepare, CommitXid,
RollbackXid and Recover over real sessions, the real message engine and
the real SQLite store run inline, on a C{task.Clock}; what a prepared
transaction holds (its sends not accepted, its acknowledged messages
locked to it), what outlives its session and the router's process (a new
engine on the same store file), and the outcomes a transaction manager
relies on: exactly once, unknown xids, heuristic outcomes that are said.
"""

import sqlite3

import pytest
from twisted.internet.defer import Deferred

from meshroute import events as event_names
from meshroute.router.engine import MessageEngine
from meshroute.routing.table import RouteTable
from meshroute.sessions import transaction as transaction_module
from meshroute.store import InlineExecutor, SQLiteStore
from meshroute.wire import client_frames as f

from support.fake_router import ROUTER, RecordingEvents
from support.router_connection import Connection, only
from support.router_connection import every_delivery as deliveries
from support.router_engine import engine, store  # noqa: F401 (fixtures)
from support.served_sessions import SETTINGS, factory, make_factory  # noqa: F401 (a fixture)

XID = (1, "tm-1:0042", "mq")
OTHER_XID = (1, "tm-1:0043", "mq")


class Version7(Connection):
    """
    A connection of version 7, whose deliveries come in C{DeliverBatch}
    frames at the end of the router's turn: what it received is read at
    the end of that turn, but C{Processed} (not what these tests watch).
    """

    def received(self) -> list:
        self.factory.clock.advance(0)
        return [frame for frame in super().received() if not isinstance(frame, f.Processed)]


def open_v7(connection: Connection) -> f.Opened:
    connection.send(f.Open([7], "tm", "", 60000))
    frames = connection.received()
    assert isinstance(frames[0], f.Opened) and frames[0].version == 7, frames
    return frames[0]


def session(factory) -> Connection:  # noqa: F811
    connection = Version7(factory)
    open_v7(connection)
    return connection


@pytest.fixture
def connection(factory):  # noqa: F811
    return session(factory)


def delivered(connection: Connection, queue: str, credit: int = 10,
              subscription: int = 1, command_id: int = 1) -> list[f.Deliver]:
    connection.send(f.Subscribe(command_id, subscription, queue, credit))
    return deliveries(connection.received())


def bodies(factory, queue: str) -> list[bytes]:  # noqa: F811
    """
    What a new consumer of C{queue} gets now (it then leaves).
    """
    other = session(factory)
    got = delivered(other, queue)
    other.send(f.Close(2))
    return [d.body for d in got]


def prepare_one(connection: Connection, engine, xid=XID):  # noqa: F811
    """
    C{connection} consumes one message of C{in}, then prepares a
    transaction that acknowledges it and sends one message to C{out}.

    @return: the delivery acknowledged.
    """
    engine.submit("in", b"work", {}, True)
    (work,) = delivered(connection, "in")
    connection.send(f.Begin(2), f.Ack(3, [work.delivery_id]),
                    f.Send(4, "out", {}, b"result", True, "result-1"), f.Prepare(5, *xid))
    return work


def test_a_prepared_transaction_holds_its_sends_and_locks_its_acknowledged_messages(
        factory, connection, engine, store):
    prepare_one(connection, engine)
    frames = connection.received()
    assert only(frames, f.Confirm) == [f.Confirm(5, "")]  # the send waits for the decision
    assert only(frames, f.Error) == []
    assert engine.queues.depths() == {}  # "out" has nothing; "in"'s message is locked
    assert bodies(factory, "in") == [] and bodies(factory, "out") == []
    assert [e["dest"] for e in engine.events.named(event_names.MESSAGE_ACCEPTED)] == [
        f"in@{ROUTER}"]
    (prepared,) = engine.events.named(event_names.TRANSACTION_PREPARED)
    assert (prepared["xid"], prepared["sends"], prepared["acks"]) == (list(XID), 1, 1)


def test_the_session_that_prepared_commits_and_its_sends_are_answered_first(
        factory, connection, engine, store):
    prepare_one(connection, engine)
    connection.received()
    connection.send(f.CommitXid(6, *XID, False))
    confirms = only(connection.received(), f.Confirm)
    assert [c.command_id for c in confirms] == [4, 6]
    assert confirms[0].msg_id
    assert bodies(factory, "out") == [b"result"]
    assert store.queue_depths() == {"out": 1}
    assert [e["queue"] for e in engine.events.named(event_names.MESSAGE_CONSUMED)] == ["in"]
    (committed,) = engine.events.named(event_names.TRANSACTION_COMMITTED)
    assert (committed["one_phase"], committed["sends"], committed["acks"]) == (False, 1, 1)


def test_another_session_recovers_and_commits_it_once(factory, connection, engine, store):
    prepare_one(connection, engine)
    connection.send(f.Close(6))
    assert connection.received()[-1] == f.Closed()  # closing does not roll it back
    manager = session(factory)
    manager.send(f.Recover(1))
    assert manager.received() == [f.Recovered(1, [list(XID)])]
    manager.send(f.CommitXid(2, *XID, False))
    assert only(manager.received(), f.Confirm) == [f.Confirm(2, "")]
    # The answer was lost, say: the commit again changes nothing.
    manager.send(f.CommitXid(3, *XID, False), f.Recover(4))
    assert manager.received() == [f.Confirm(3, ""), f.Recovered(4, [])]
    assert store.queue_depths() == {"out": 1}
    assert [e["dest"] for e in engine.events.named(event_names.MESSAGE_ACCEPTED)] == [
        f"in@{ROUTER}", f"out@{ROUTER}"]
    assert len(engine.events.named(event_names.TRANSACTION_COMMITTED)) == 1


def test_a_session_that_goes_on_after_prepare_begins_the_next_transaction(
        factory, connection, engine):
    prepare_one(connection, engine)
    connection.send(f.Begin(6), f.Send(7, "out", {}, b"next", True), f.Commit(8))
    confirms = only(connection.received(), f.Confirm)
    assert [c.command_id for c in confirms] == [5, 7, 8]
    assert bodies(factory, "out") == [b"next"]


def reopened(tmp_path, clock, store):  # noqa: F811
    """
    The router after a restart: a new store, engine and listener on the
    store's file (what an HA backup that took over opens too).
    """
    store.close()
    again = SQLiteStore(store.path, "normal", InlineExecutor(), router=ROUTER, clock=clock,
                        duplicate_id_window_s=60)
    again.open()
    events = RecordingEvents()
    engine = MessageEngine(ROUTER, again, RouteTable(ROUTER, clock), events, clock)  # noqa: F811
    engine.events = events
    return again, engine, make_factory(engine, clock)


def test_a_prepared_transaction_outlives_the_router_and_its_messages_stay_locked(
        tmp_path, clock, factory, connection, engine, store):
    prepare_one(connection, engine)
    store, engine, factory = reopened(tmp_path, clock, store)
    try:
        assert bodies(factory, "in") == []  # not redelivered to anyone
        manager = session(factory)
        manager.send(f.Recover(1))
        assert manager.received() == [f.Recovered(1, [list(XID)])]
        manager.send(f.CommitXid(2, *XID, False))
        assert only(manager.received(), f.Confirm) == [f.Confirm(2, "")]
        assert bodies(factory, "out") == [b"result"]
        assert bodies(factory, "in") == []
        assert store.queue_depths() == {"out": 1}
        (consumed,) = engine.events.named(event_names.MESSAGE_CONSUMED)
        assert (consumed["queue"], consumed["redelivered"]) == ("in", True)
    finally:
        store.close()


def test_a_rollback_returns_the_acknowledged_messages_flagged_and_refuses_the_sends(
        factory, connection, engine, store):
    work = prepare_one(connection, engine)
    connection.received()
    connection.send(f.Credit(6, 1, 1), f.RollbackXid(7, *XID))
    frames = connection.received()
    assert only(frames, f.Error) == [
        f.Error(4, f.ROLLED_BACK, "the prepared transaction was rolled back")]
    assert only(frames, f.Confirm) == [f.Confirm(7, "")]
    (again,) = deliveries(frames)
    assert (again.msg_id, again.redelivered) == (work.msg_id, True)
    assert store.queue_depths() == {"in": 1}
    assert [e["dest"] for e in engine.events.named(event_names.MESSAGE_ACCEPTED)] == [
        f"in@{ROUTER}"]
    (rolled_back,) = engine.events.named(event_names.TRANSACTION_ROLLED_BACK)
    assert rolled_back["acks"] == 1


def test_a_rollback_after_a_restart_puts_them_back_in_their_queue_s_order(
        tmp_path, clock, factory, connection, engine, store):
    for n in range(1, 4):
        engine.submit("in", b"m%d" % n, {}, True)
    got = delivered(connection, "in")
    connection.send(f.Begin(2), f.Ack(3, [got[1].delivery_id]), f.Prepare(4, *XID))
    store, engine, factory = reopened(tmp_path, clock, store)
    try:
        consumer = session(factory)
        assert [d.body for d in delivered(consumer, "in")] == [b"m1", b"m3"]
        manager = session(factory)
        manager.send(f.RollbackXid(1, *XID))
        assert manager.received() == [f.Confirm(1, "")]
        # The consumer read past it: it comes first, flagged.
        (again,) = deliveries(consumer.received())
        assert (again.body, again.redelivered) == (b"m2", True)
        assert bodies(factory, "in") == []
        consumer.send(f.Close(2))
        assert bodies(factory, "in") == [b"m1", b"m2", b"m3"]
    finally:
        store.close()


def test_an_unknown_xid_is_said_and_a_rollback_of_a_committed_one_is_a_heuristic_commit(
        connection, engine, observe_errors):
    connection.send(f.CommitXid(1, *XID, False), f.RollbackXid(2, *XID))
    assert [(e.command_id, e.code) for e in only(connection.received(), f.Error)] == [
        (1, f.UNKNOWN_XID), (2, f.UNKNOWN_XID)]
    connection.send(f.Begin(3), f.Send(4, "out", {}, b"x", True), f.CommitXid(5, *XID, True))
    assert [c.command_id for c in only(connection.received(), f.Confirm)] == [4, 5]
    connection.send(f.RollbackXid(6, *XID))
    (refused,) = only(connection.received(), f.Error)
    assert refused.code == f.HEURISTIC_COMMIT
    (heuristic,) = engine.events.named(event_names.TRANSACTION_HEURISTIC)
    assert (heuristic["outcome"], heuristic["reason"]) == ("committed", f.HEURISTIC_COMMIT)
    assert len(observe_errors.take(lambda e: "heuristic" in e.get("log_format", ""))) == 1


def test_a_one_phase_commit_records_its_xid_so_a_retried_commit_completes_once(
        factory, connection, engine, store):
    connection.send(f.Begin(1), f.Send(2, "out", {}, b"x", True), f.CommitXid(3, *XID, True))
    assert [c.command_id for c in only(connection.received(), f.Confirm)] == [2, 3]
    (committed,) = engine.events.named(event_names.TRANSACTION_COMMITTED)
    assert committed["one_phase"] is True
    retry = session(factory)
    retry.send(f.CommitXid(1, *XID, False))
    assert retry.received() == [f.Confirm(1, "")]
    assert store.queue_depths() == {"out": 1}


def test_an_xid_is_prepared_or_committed_once(factory, connection, engine, store):
    prepare_one(connection, engine)
    connection.received()
    other = session(factory)
    other.send(f.Begin(1), f.Send(2, "out", {}, b"y", True), f.Prepare(3, *XID))
    assert {e.command_id: e.code for e in only(other.received(), f.Error)} == {
        2: f.ROLLED_BACK, 3: f.DUPLICATE_XID}
    other.send(f.Begin(4), f.Send(5, "out", {}, b"z", True), f.CommitXid(6, *XID, True))
    assert {e.command_id: e.code for e in only(other.received(), f.Error)} == {
        5: f.ROLLED_BACK, 6: f.DUPLICATE_XID}
    assert engine.queues.depths() == {}


def test_a_prepare_checks_the_sends_as_a_commit_would(factory, connection, engine, store):
    engine.submit("in", b"work", {}, True)
    (work,) = delivered(connection, "in")
    connection.send(f.Begin(2), f.Ack(3, [work.delivery_id]),
                    f.Send(4, "out@nowhere", {}, b"x", True), f.Prepare(5, *XID))
    frames = connection.received()
    assert {e.command_id: e.code for e in only(frames, f.Error)} == {
        4: f.ROLLED_BACK, 5: "unknown-router"}
    # Rolled back: the message it acknowledged comes again, flagged.
    (again,) = deliveries(frames)
    assert (again.msg_id, again.redelivered) == (work.msg_id, True)
    connection.send(f.Recover(6))
    assert connection.received() == [f.Recovered(6, [])]
    assert store.queue_depths() == {"in": 1}


def test_a_transaction_that_can_only_roll_back_is_not_prepared(connection, engine,
                                                                monkeypatch):
    monkeypatch.setattr(transaction_module, "MAX_TRANSACTION_SENDS", 1)
    connection.send(f.Begin(1), f.Send(2, "out", {}, b"x", True),
                    f.Send(3, "out", {}, b"y", True), f.Prepare(4, *XID), f.Recover(5))
    frames = connection.received()
    assert [(e.command_id, e.code) for e in only(frames, f.Error)] == [
        (3, f.TRANSACTION_TOO_LARGE), (2, f.ROLLED_BACK), (4, f.ROLLED_BACK)]
    assert frames[-1] == f.Recovered(5, [])


def test_a_commit_that_finds_a_locked_message_gone_says_heuristic_mixed(
        factory, connection, engine, store, observe_errors):
    prepare_one(connection, engine)
    connection.received()
    with sqlite3.connect(store.path) as db:
        db.execute("DELETE FROM messages WHERE state = 'prepared'")
    connection.send(f.CommitXid(6, *XID, False))
    frames = connection.received()
    assert [c.command_id for c in only(frames, f.Confirm)] == [4]  # the send was committed
    (refused,) = only(frames, f.Error)
    assert (refused.command_id, refused.code) == (6, f.HEURISTIC_MIXED)
    (heuristic,) = engine.events.named(event_names.TRANSACTION_HEURISTIC)
    assert (heuristic["outcome"], heuristic["missing"]) == ("committed", 1)
    assert observe_errors.take(lambda e: "heuristic" in e.get("log_format", ""))
    assert bodies(factory, "out") == [b"result"]


def test_an_expired_session_does_not_roll_back_what_it_prepared(factory, connection, engine,
                                                                clock, store):
    prepare_one(connection, engine)
    connection.lose()
    clock.advance(SETTINGS.keep_alive_ms / 1000)
    assert bodies(factory, "in") == []
    manager = session(factory)
    manager.send(f.Recover(1))
    assert manager.received() == [f.Recovered(1, [list(XID)])]


def test_a_prepare_durable_after_its_session_ended_leaves_nobody_waiting(
        connection, engine, clock, monkeypatch):
    held = Deferred()
    forgotten = []
    monkeypatch.setattr(engine.prepared, "prepare", lambda *args: held)
    monkeypatch.setattr(engine.prepared, "forget_owner", forgotten.append)
    connection.send(f.Begin(1), f.Send(2, "out", {}, b"x", True), f.Prepare(3, *XID))
    connection.lose()
    clock.advance(SETTINGS.keep_alive_ms / 1000)  # the session expires
    held.callback(None)
    assert forgotten == [XID]


def test_acks_of_non_persistent_deliveries_wait_in_memory_for_the_decision(
        factory, connection, engine):
    engine.submit("in", b"fast", {}, False)
    (first,) = delivered(connection, "in", credit=1)
    connection.send(f.Begin(2), f.Ack(3, [first.delivery_id]), f.Prepare(4, *XID),
                    f.Credit(5, 1, 1))
    assert deliveries(connection.received()) == []
    connection.send(f.RollbackXid(6, *XID))
    (again,) = deliveries(connection.received())
    assert (again.body, again.redelivered) == (b"fast", True)
    connection.send(f.Begin(7), f.Ack(8, [again.delivery_id]), f.Prepare(9, *OTHER_XID),
                    f.CommitXid(10, *OTHER_XID, False))
    assert engine.queues.depths() == {}
    assert len(engine.events.named(event_names.MESSAGE_CONSUMED)) == 1


@pytest.mark.parametrize("frames, detail", [
    ([f.Prepare(1, *XID)], "Prepare outside a transaction"),
    ([f.CommitXid(1, *XID, True)], "CommitXid outside a transaction"),
])
def test_an_end_outside_a_transaction_is_a_bad_command(connection, frames, detail):
    connection.send(*frames)
    assert only(connection.received(), f.Error) == [f.Error(0, f.BAD_COMMAND, detail)]


def test_a_version_6_connection_cannot_speak_two_phase_commit(factory):  # noqa: F811
    connection = Connection(factory)
    connection.send(f.Open([6], "tm", "", 60000))
    connection.received()
    connection.send(f.Recover(1))
    assert connection.received() == [
        f.Error(0, f.BAD_COMMAND, "Recover needs protocol version 7; this connection speaks 6")]
