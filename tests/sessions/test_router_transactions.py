"""
Tests for the router's side of transactions (protocol version 2,
docs/client-protocol.md "Transactions"): Begin, Commit and Rollback over
a real session, the real message engine and the real SQLite store run
inline, on a C{task.Clock}; the store's one-call commit; and the rules
(version 2 only, no Begin inside a transaction, no Commit outside one).
"""

import pytest

from meshroute import events as event_names
from meshroute.messages import message_of
from meshroute.wire import client_frames as f
from meshroute.sessions import transaction as transaction_module
from meshroute.store import DuplicateMessage

from support.fake_router import ROUTER
from support.router_connection import Connection, deliveries, only
from support.router_engine import engine, store  # noqa: F401 (fixtures)
from support.served_sessions import SETTINGS, factory  # noqa: F401 (a fixture)


def open_v2(connection: Connection, session_id: str = "", answered_up_to: int = 0,
            delivered_up_to: int = 0) -> f.Opened:
    connection.send(f.Open([1, 2], "c", session_id, 60000, answered_up_to, delivered_up_to))
    frames = connection.received()
    assert isinstance(frames[0], f.Opened) and frames[0].version == 2, frames
    connection.after_open = frames[1:]
    return frames[0]


@pytest.fixture
def connection(factory):
    connection = Connection(factory)
    open_v2(connection)
    return connection


def consumer(factory, queue: str = "q", credit: int = 100) -> Connection:
    """
    A new session consuming from C{queue}.
    """
    connection = Connection(factory)
    open_v2(connection)
    connection.send(f.Subscribe(1, 1, queue, credit))
    return connection


def consume(factory, queue: str = "q") -> list[f.Deliver]:
    """
    What a new consumer of C{queue} gets now (it then leaves).
    """
    connection = consumer(factory, queue)
    got = deliveries(connection.received())
    connection.send(f.Close(2))
    return got


def test_a_commit_makes_every_send_of_the_transaction_visible_at_once(factory, connection,
                                                                     engine):
    connection.send(f.Begin(1), f.Send(2, "q", {}, b"a", True), f.Send(3, "q", {}, b"b", True))
    # Held: nothing answered, nothing enqueued, but carried out (Processed).
    assert only(connection.received(), f.Confirm) == []
    assert engine.queues.depths() == {}
    waiting = consumer(factory)
    assert deliveries(waiting.received()) == []
    connection.send(f.Commit(4))
    frames = connection.received()
    confirms = only(frames, f.Confirm)
    assert [c.command_id for c in confirms] == [2, 3, 4]
    assert confirms[0].msg_id and confirms[1].msg_id and confirms[2].msg_id == ""
    assert [d.body for d in deliveries(waiting.received())] == [b"a", b"b"]
    assert len(engine.events.named(event_names.MESSAGE_ACCEPTED)) == 2


def test_a_non_persistent_send_of_a_transaction_takes_the_fast_path_at_the_commit(
        factory, connection, engine, store):
    waiting = consumer(factory)
    connection.send(f.Begin(1), f.Send(2, "q", {}, b"fast", False),
                    f.Send(3, "q", {}, b"slow", True))
    assert deliveries(waiting.received()) == []
    connection.send(f.Commit(4))
    assert sorted(d.body for d in deliveries(waiting.received())) == [b"fast", b"slow"]
    assert store.queue_depths() == {"q": 1}


def test_held_sends_are_covered_by_processed(factory, connection, clock):
    connection.send(f.Begin(1), f.Send(2, "q", {}, b"a", True))
    clock.advance(0)
    assert f.Processed(2) in connection.received()


def test_the_commit_is_one_store_transaction(factory, connection, store):
    before = store.executor.commits
    connection.send(f.Begin(1), *[f.Send(n, "q", {}, b"x", True) for n in range(2, 12)],
                    f.Commit(12))
    assert store.executor.commits == before + 1
    assert store.queue_depths() == {"q": 10}


def test_a_rollback_sends_nothing(factory, connection, engine):
    connection.send(f.Begin(1), f.Send(2, "q", {}, b"a", True), f.Rollback(3))
    frames = connection.received()
    assert only(frames, f.Error) == [
        f.Error(2, f.ROLLED_BACK, "the client rolled the transaction back")]
    assert only(frames, f.Confirm) == [f.Confirm(3, "")]
    assert engine.queues.depths() == {}
    assert engine.events.named(event_names.MESSAGE_ACCEPTED) == []


def test_a_session_after_a_transaction_sends_at_once_again(factory, connection, engine):
    connection.send(f.Begin(1), f.Rollback(2), f.Send(3, "q", {}, b"a", True))
    assert [c.command_id for c in only(connection.received(), f.Confirm)] == [2, 3]
    assert engine.queues.depths() == {"q": 1}


def test_acks_of_a_committed_transaction_delete_the_messages(factory, connection, engine,
                                                             store):
    engine.submit("q", b"m1", {}, True)
    engine.submit("q", b"m2", {}, True)
    connection.send(f.Subscribe(1, 1, "q", 10))
    got = deliveries(connection.received())
    connection.send(f.Begin(2), f.Ack(3, [d.delivery_id for d in got]))
    assert store.queue_depths() == {"q": 2}
    connection.send(f.Send(4, "other", {}, b"out", True), f.Commit(5))
    assert store.queue_depths() == {"other": 1}
    assert len(engine.events.named(event_names.MESSAGE_CONSUMED)) == 2


def test_acks_of_a_rolled_back_transaction_are_redelivered_flagged(factory, connection,
                                                                   engine, store):
    engine.submit("q", b"m1", {}, True)
    connection.send(f.Subscribe(1, 1, "q", 1))
    (first,) = deliveries(connection.received())
    assert not first.redelivered
    connection.send(f.Begin(2), f.Ack(3, [first.delivery_id]), f.Credit(4, 1, 1))
    assert deliveries(connection.received()) == []
    connection.send(f.Rollback(5))
    (again,) = deliveries(connection.received())
    assert again.body == b"m1" and again.redelivered
    assert store.queue_depths() == {"q": 1}
    assert engine.events.named(event_names.MESSAGE_CONSUMED) == []


def test_an_unsubscribe_does_not_give_back_what_the_transaction_acknowledged(
        factory, connection, engine, store):
    engine.submit("q", b"m1", {}, True)
    connection.send(f.Subscribe(1, 1, "q", 1))
    (first,) = deliveries(connection.received())
    connection.send(f.Begin(2), f.Ack(3, [first.delivery_id]), f.Unsubscribe(4, 1))
    assert consume(factory) == []
    connection.send(f.Commit(5))
    assert store.queue_depths() == {}


def test_a_refused_send_rolls_the_whole_transaction_back(factory, connection, engine):
    connection.send(f.Begin(1), f.Send(2, "q", {}, b"a", True),
                    f.Send(3, "q@nowhere", {}, b"b", True), f.Commit(4))
    frames = connection.received()
    assert {e.command_id: e.code for e in only(frames, f.Error)} == {
        2: f.ROLLED_BACK, 3: f.ROLLED_BACK, 4: "unknown-router"}
    assert engine.queues.depths() == {}


def test_a_transaction_too_large_can_only_roll_back(factory, connection, engine, monkeypatch):
    monkeypatch.setattr(transaction_module, "MAX_TRANSACTION_SENDS", 2)
    connection.send(f.Begin(1), *[f.Send(n, "q", {}, b"x", True) for n in (2, 3, 4)])
    assert [(e.command_id, e.code) for e in only(connection.received(), f.Error)] == [
        (4, f.TRANSACTION_TOO_LARGE)]
    connection.send(f.Commit(5))
    assert [(e.command_id, e.code) for e in only(connection.received(), f.Error)] == [
        (2, f.ROLLED_BACK), (3, f.ROLLED_BACK), (5, f.ROLLED_BACK)]
    assert engine.queues.depths() == {}


def test_the_transaction_bound_counts_headers_too(factory, connection, engine, monkeypatch):
    """
    Empty bodies with large headers are held in memory as well: the bound
    counts every byte of a held Send, not only its body.
    """
    monkeypatch.setattr(transaction_module, "MAX_TRANSACTION_BYTES", 100)
    big = {"h": "x" * 60}
    connection.send(f.Begin(1), f.Send(2, "q", big, b"", True), f.Send(3, "q", big, b"", True))
    assert [(e.command_id, e.code) for e in only(connection.received(), f.Error)] == [
        (3, f.TRANSACTION_TOO_LARGE)]


def test_duplicate_ids_make_a_retried_transaction_apply_once(factory, connection, engine):
    connection.send(f.Begin(1), f.Send(2, "q", {}, b"a", True, "tx-1:1"),
                    f.Send(3, "q", {}, b"b", True, "tx-1:2"), f.Commit(4))
    first = [c.msg_id for c in only(connection.received(), f.Confirm)][:2]
    retry = Connection(factory)
    open_v2(retry)
    retry.send(f.Begin(1), f.Send(2, "q", {}, b"a", True, "tx-1:1"),
               f.Send(3, "q", {}, b"b", True, "tx-1:2"), f.Commit(4))
    assert [c.msg_id for c in only(retry.received(), f.Confirm)][:2] == first
    assert engine.queues.depths() == {"q": 2}


def test_a_retried_transaction_that_was_applied_is_not_refused_by_a_bound(
        factory, connection, engine, monkeypatch):
    """
    The retry of a committed transaction whose answer was lost gets the
    first messages' ids, even when its sends would be refused now (a
    bound reached meanwhile, a route forgotten after a restart): telling
    the client "rolled back" would say nothing was done when it was.
    """
    from meshroute.router.admission import BacklogFull

    connection.send(f.Begin(1), f.Send(2, "q", {}, b"a", True, "tx-1:1"),
                    f.Send(3, "q", {}, b"b", True, "tx-1:2"), f.Commit(4))
    first = [c.msg_id for c in only(connection.received(), f.Confirm)][:2]
    monkeypatch.setattr(engine.admission, "refusal",
                        lambda router, persistent: BacklogFull("the bound was reached"))
    retry = Connection(factory)
    open_v2(retry)
    retry.send(f.Begin(1), f.Send(2, "q", {}, b"a", True, "tx-1:1"),
               f.Send(3, "q", {}, b"b", True, "tx-1:2"), f.Commit(4))
    frames = retry.received()
    assert only(frames, f.Error) == []
    assert [c.msg_id for c in only(frames, f.Confirm)][:2] == first
    assert engine.queues.depths() == {"q": 2}
    # A send never accepted before is refused, and takes the others down.
    again = Connection(factory)
    open_v2(again)
    again.send(f.Begin(1), f.Send(2, "q", {}, b"a", True, "tx-1:1"),
               f.Send(3, "q", {}, b"c", True, "tx-2:1"), f.Commit(4))
    assert {e.command_id: e.code for e in only(again.received(), f.Error)} == {
        2: f.ROLLED_BACK, 3: f.ROLLED_BACK, 4: "backlog-full"}
    assert engine.queues.depths() == {"q": 2}


def test_close_rolls_back_an_open_transaction(factory, connection, engine):
    connection.send(f.Begin(1), f.Send(2, "q", {}, b"a", True), f.Close(3))
    frames = connection.received()
    assert frames[-1] == f.Closed()
    assert only(frames, f.Error) == [
        f.Error(2, f.ROLLED_BACK, "the session ended before the commit")]
    assert engine.queues.depths() == {}


def test_a_resumed_session_keeps_its_transaction_and_a_replayed_commit_applies_once(
        factory, connection, engine):
    opened_id = factory.sessions.describe()[0]["session_id"]
    connection.send(f.Begin(1), f.Send(2, "q", {}, b"a", True))
    connection.lose()
    again = Connection(factory)
    assert open_v2(again, opened_id).reattached
    again.send(f.Send(3, "q", {}, b"b", True), f.Commit(4))
    assert [c.command_id for c in only(again.received(), f.Confirm)] == [2, 3, 4]
    # The commit's answer was lost: the client resumes and replays it.
    again.lose()
    third = Connection(factory)
    opened = open_v2(third, opened_id, answered_up_to=1)
    assert opened.last_command_id == 4
    assert [c.command_id for c in only(third.after_open, f.Confirm)] == [2, 3, 4]
    third.send(f.Commit(4))
    assert only(third.received(), f.Confirm) == [f.Confirm(4, "")]
    assert engine.queues.depths() == {"q": 2}


def test_an_expired_session_rolls_its_transaction_back(factory, connection, engine, clock,
                                                       store):
    engine.submit("q", b"m1", {}, True)
    connection.send(f.Subscribe(1, 1, "q", 1))
    (first,) = deliveries(connection.received())
    connection.send(f.Begin(2), f.Ack(3, [first.delivery_id]),
                    f.Send(4, "q", {}, b"never", True))
    connection.lose()
    clock.advance(SETTINGS.keep_alive_ms / 1000)
    (again,) = consume(factory)
    assert again.body == b"m1" and again.redelivered
    assert store.queue_depths() == {"q": 1}


@pytest.mark.parametrize("frames, detail", [
    ([f.Begin(1), f.Begin(2)], "Begin inside a transaction"),
    ([f.Commit(1)], "Commit outside a transaction"),
    ([f.Rollback(1)], "Rollback outside a transaction"),
])
def test_transaction_commands_out_of_place_are_bad_commands(connection, frames, detail):
    connection.send(*frames)
    assert only(connection.received(), f.Error) == [f.Error(0, f.BAD_COMMAND, detail)]
    assert connection.closed


def test_a_version_1_connection_cannot_begin(factory):
    connection = Connection(factory)
    assert connection.open().session_id
    connection.send(f.Begin(1))
    assert connection.received() == [
        f.Error(0, f.BAD_COMMAND, "Begin needs protocol version 2; this connection speaks 1")]


def test_the_store_commit_is_all_or_nothing(store, engine):
    held = message_of("held-1", ROUTER, ROUTER, "q", b"held", {}, 0, True, 0.0)
    results = []
    store.accept(held)
    store.fetch("q", 0, 10).addCallback(results.append)
    ((entry, _, _),) = results.pop()
    fresh = message_of("fresh-1", ROUTER, ROUTER, "q", b"fresh", {}, 0, True, 0.0)
    # The second message repeats an id held here: nothing of the call is
    # done, not even the first message's duplicate id or the deletion.
    store.commit([(fresh, "dup-1"), (held, "")], [entry]).addBoth(results.append)
    assert isinstance(results.pop().value, DuplicateMessage)
    assert store.queue_depths() == {"q": 1}
    store.duplicate_of("dup-1").addCallback(results.append)
    assert results.pop() is None
    store.commit([(fresh, "dup-1")], [entry]).addBoth(results.append)
    assert results.pop() == [None]
    store.fetch("q", 0, 10).addCallback(results.append)
    assert [message.body for _, message, _ in results.pop()] == [b"fresh"]
    store.commit([(fresh, "dup-1")], []).addBoth(results.append)
    assert results.pop() == [fresh.msg_id]
    assert store.queue_depths() == {"q": 1}


def test_acks_of_non_persistent_deliveries_are_transactional_too(factory, connection, engine):
    engine.submit("q", b"fast", {}, False)
    connection.send(f.Subscribe(1, 1, "q", 1))
    (first,) = deliveries(connection.received())
    connection.send(f.Begin(2), f.Ack(3, [first.delivery_id]), f.Credit(4, 1, 1),
                    f.Rollback(5))
    (again,) = deliveries(connection.received())
    assert again.body == b"fast" and again.redelivered
    assert engine.queues.depths() == {"q": 1}
    connection.send(f.Begin(6), f.Ack(7, [again.delivery_id]), f.Commit(8))
    assert engine.queues.depths() == {}
    assert len(engine.events.named(event_names.MESSAGE_CONSUMED)) == 1
