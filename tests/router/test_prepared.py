"""
Tests for the router's prepared transactions
(L{meshroute.router.prepared.PreparedTransactions}) on the real engine
and an inline SQLite store: one operation per xid at a time, the user a
transaction belongs to, the session told its decision (or not, once it
ended), a time to live that runs from the commit, and the queue's memory
after a decision.
"""

from twisted.internet.defer import Deferred

from meshroute import events as event_names
from meshroute.messages import EXPIRES_HEADER
from meshroute.router.prepared import NotTheirs, UnknownXid

from support.client_testing import failure_of, result_of
from support.router_engine import engine, store  # noqa: F401 (fixtures)

XID = (1, "g-1", "b")
SEND = ("out", b"x", {}, True, "", 0, False, "")


def deliveries_of(engine, queue: str, credit: int = 10) -> list:  # noqa: F811
    got = []
    engine.queues.subscribe(queue, got.append, credit)
    return got


def prepared_with_one_ack(engine, xid=XID, user=None, decided=None):  # noqa: F811
    """
    Prepare C{xid} acknowledging the one message of queue C{in} (its
    consumer then leaves) and sending L{SEND}.

    @return: the Deferred of the prepare and the consumer.
    """
    engine.submit("in", b"work", {}, True)
    consumer = []
    subscription = engine.queues.subscribe("in", consumer.append, 10)
    acks = engine.queues.transaction()
    acks.add(subscription, [d.delivery_id for d in consumer if d.message.body == b"work"])
    subscription.cancel()
    told = decided if decided is not None else (lambda msg_ids: None)
    return engine.prepared.prepare(xid, user, "tm", [SEND], acks, told)


def test_operations_on_one_xid_run_one_after_the_other(engine, store, monkeypatch):  # noqa: F811
    result_of(prepared_with_one_ack(engine))
    held = Deferred()
    find_xid = store.find_xid
    calls = []

    def slow_find(xid):
        calls.append(xid)
        if len(calls) == 1:
            return held.addCallback(lambda _: find_xid(xid))
        return find_xid(xid)

    monkeypatch.setattr(store, "find_xid", slow_find)
    first = engine.prepared.commit(XID, None)
    second = engine.prepared.commit(XID, None)
    assert len(calls) == 1  # the second waits for the first
    held.callback(None)
    assert len(result_of(first)) == 1
    assert result_of(second) is None  # committed before: nothing again
    assert store.queue_depths() == {"out": 1}


def test_a_transaction_is_decided_by_the_user_that_prepared_it(engine):  # noqa: F811
    result_of(prepared_with_one_ack(engine, user="orders"))
    assert isinstance(failure_of(engine.prepared.commit(XID, "billing")), NotTheirs)
    assert result_of(engine.prepared.recover("billing")) == []
    assert result_of(engine.prepared.recover("orders")) == [list(XID)]
    assert result_of(engine.prepared.rollback(XID, "orders")) is None
    assert isinstance(failure_of(engine.prepared.rollback(XID, "orders")), UnknownXid)


def test_the_session_that_prepared_hears_the_decision_unless_it_ended(engine):  # noqa: F811
    told = []
    result_of(prepared_with_one_ack(engine, decided=told.append))
    msg_ids = result_of(engine.prepared.commit(XID, None))
    assert told == [msg_ids]
    other = (1, "g-2", "b")
    result_of(engine.prepared.prepare(other, None, "tm", [SEND], engine.queues.transaction(),
                                      told.append))
    engine.prepared.forget_owner(other)
    result_of(engine.prepared.rollback(other, None))
    assert told == [msg_ids]


def test_a_time_to_live_runs_from_the_commit(engine, clock):  # noqa: F811
    clock.advance(1000)
    sends = [("out", b"x", {}, True, "", 5000, False, "")]
    result_of(engine.prepared.prepare(XID, None, "tm", sends, engine.queues.transaction(),
                                      lambda msg_ids: None))
    clock.advance(60)
    result_of(engine.prepared.commit(XID, None))
    (delivery,) = deliveries_of(engine, "out")
    assert int(delivery.message.headers[EXPIRES_HEADER]) == 1060 * 1000 + 5000


def test_a_prepare_lets_go_of_the_queue_s_memory_and_a_rollback_gives_it_back(
        engine, store):  # noqa: F811
    result_of(prepared_with_one_ack(engine))
    assert engine.queues.busy() == []
    waiting = deliveries_of(engine, "in")
    assert waiting == []
    result_of(engine.prepared.rollback(XID, None))
    assert store.queue_depths() == {"in": 1}
    assert [d.redelivered for d in waiting] == [True]
    (event,) = engine.events.named(event_names.TRANSACTION_ROLLED_BACK)
    assert event["acks"] == 1


def test_a_rolled_back_entry_a_consumer_read_past_comes_before_the_others(
        engine, store):  # noqa: F811
    for n in range(3):
        engine.submit("in", b"before-%d" % n, {}, True)
    result_of(prepared_with_one_ack(engine))  # the fourth entry, locked
    engine.submit("in", b"after", {}, True)
    got = deliveries_of(engine, "in", credit=2)
    result_of(engine.prepared.rollback(XID, None))
    engine.queues._queues["in"].consumers[0].add_credit(10)
    assert [d.message.body for d in got] == [b"before-0", b"before-1", b"work", b"before-2",
                                              b"after"]
    assert [d.redelivered for d in got] == [True, True, True, True, False]
