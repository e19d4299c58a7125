"""
Tests for L{meshroute.router.transaction_acks.TransactionAcks} and the
queue manager's side of a prepared transaction's decision
(L{QueueManager.consumed_entries}, L{QueueManager.returned_entries}), on
the real SQLite store run inline, with a read-ahead of two entries so
that a queue's reads are seen before and past a locked entry.
"""

import pytest

from meshroute import events
from meshroute.messages import Message
from meshroute.router.queues import QueueManager

from support.client_testing import result_of
from support.fake_router import ROUTER, RecordingEvents
from support.router_engine import store  # noqa: F401 (a fixture)

XID = (1, "g", "b")


@pytest.fixture
def log():
    return RecordingEvents()


@pytest.fixture
def manager(store, log, clock):  # noqa: F811
    return QueueManager(store, log, clock, read_ahead=2)


def put(store, manager, *bodies: bytes, persistent: bool = True) -> None:
    for n, body in enumerate(bodies):
        message = Message(f"{ROUTER}:{body.decode()}", ROUTER, ROUTER, "q", body,
                          persistent=persistent, accepted_at=1000.0 + n)
        if persistent:
            result_of(store.accept(message))
            manager.notify("q")
        else:
            manager.put_transient("q", message)


def consumer(manager, credit: int = 10):
    got = []
    return got, manager.subscribe("q", got.append, credit)


def lock(store, manager, *bodies: bytes) -> None:
    """
    Prepare a transaction that acknowledges the messages C{bodies} of
    queue q, as the router's prepared transactions do: a consumer takes
    them into the transaction, the store locks them, memory lets go.
    """
    got, subscription = consumer(manager)
    acks = manager.transaction()
    acks.add(subscription, [d.delivery_id for d in got if d.message.body in bodies])
    subscription.cancel()
    result_of(store.prepare(XID, None, "tm", [], acks.entry_ids()))
    acks.prepared()
    assert not acks.holding


def returned(store, manager) -> None:
    """
    Roll the transaction back, as the router does: the store puts its
    entries back, then the queue manager.
    """
    (_, prepared_id, _) = result_of(store.find_xid(XID))
    entries, missing = result_of(store.rollback_prepared(prepared_id))
    assert missing == 0
    manager.returned_entries(entries)


def test_a_prepared_transaction_s_persistent_deliveries_leave_memory(store, manager):  # noqa: F811
    put(store, manager, b"a", b"b")
    lock(store, manager, b"a")
    assert manager.busy() == []
    got, _ = consumer(manager)
    assert [d.message.body for d in got] == [b"b"]


def test_non_persistent_deliveries_stay_held_until_the_decision(store, manager, log):  # noqa: F811
    put(store, manager, b"fast", persistent=False)
    got, subscription = consumer(manager)
    acks = manager.transaction()
    acks.add(subscription, [got[0].delivery_id])
    acks.prepared()
    assert acks.holding
    assert manager.depths() == {"q": 1}
    acks.committed()
    assert manager.depths() == {}
    assert [e["msg_id"] for e in log.named(events.MESSAGE_CONSUMED)] == [f"{ROUTER}:fast"]


def test_an_entry_a_consumer_read_past_comes_back_first(store, manager):  # noqa: F811
    put(store, manager, b"a", b"b", b"c")
    lock(store, manager, b"b")
    got, subscription = consumer(manager, credit=1)
    assert [d.message.body for d in got] == [b"a"]  # the reads passed b
    returned(store, manager)
    subscription.add_credit(5)
    assert [(d.message.body, d.redelivered) for d in got] == [
        (b"a", True), (b"b", True), (b"c", True)]


def test_an_entry_the_reads_did_not_reach_is_read_in_its_place_once(store, manager):  # noqa: F811
    put(store, manager, b"a", b"b", b"c", b"d", b"e")
    lock(store, manager, b"d")
    got, subscription = consumer(manager, credit=1)
    assert manager._queues["q"].last_fetched < 4  # d's entry: not read yet
    returned(store, manager)
    subscription.add_credit(10)
    assert [d.message.body for d in got] == [b"a", b"b", b"c", b"d", b"e"]


def test_entries_of_a_queue_nobody_holds_are_read_from_the_start(store, manager):  # noqa: F811
    put(store, manager, b"a", b"b")
    lock(store, manager, b"a")
    returned(store, manager)
    got, _ = consumer(manager)
    assert [(d.message.body, d.redelivered) for d in got] == [(b"a", True), (b"b", True)]


def test_a_commit_s_entries_are_consumed(store, manager, log):  # noqa: F811
    put(store, manager, b"a")
    lock(store, manager, b"a")
    (_, prepared_id, _) = result_of(store.find_xid(XID))
    _, consumed, missing = result_of(store.commit_prepared(prepared_id, XID, None, []))
    manager.consumed_entries(consumed)
    assert missing == 0
    (event,) = log.named(events.MESSAGE_CONSUMED)
    assert (event["msg_id"], event["queue"], event["redelivered"]) == (f"{ROUTER}:a", "q", True)
