"""
Tests for L{meshroute.router.arrival_claims}: an arrival for a waiting
consumer claimed as it is received and handed over from its receive,
with no read, while its queue is caught up; on the real SQLite store run
inline, the receive's answer held back as a commit in flight holds it.

Each test checks that the claim was made (so that it fails with claims
turned off), and what must hold around it: order, credit, one delivery,
the redelivered flag through a crash, a consumer leaving before the
commit, and an entry the router did not know of.
"""

from dataclasses import replace

import pytest
from twisted.internet.defer import Deferred
from twisted.internet.task import Clock

from meshroute.events import read_events
from meshroute.messages import EXPIRED_QUEUE, EXPIRES_HEADER
from meshroute.router.queues import QueueManager
from meshroute.store import InlineExecutor, SQLiteStore

from router.test_queues import Consumer, CountingStore, message, reopened
from support.fake_router import ROUTER, RecordingEvents
from support.mesh_testing import Consumer as MeshConsumer
from support.mesh_testing import assert_confirmed, line, mesh, send  # noqa: F401 (mesh: a fixture)


class Reads(CountingStore):
    """
    Counts the reads (C{fetch}) and marks (C{mark_redelivered}) the queue
    manager makes.
    """

    def __init__(self, store) -> None:
        super().__init__(store)
        self.marks: list = []

    def mark_redelivered(self, entry_ids):
        self.marks.append(list(entry_ids))
        return self._store.mark_redelivered(entry_ids)


class Link:
    """
    Receives messages for this router's queues as
    L{meshroute.router.arrivals.Arrivals} does (claim, receive, notify the
    others), each receive's answer held until L{commit}.
    """

    def __init__(self, store, manager) -> None:
        self._store = store
        self._manager = manager
        self._seq = 0
        self.held: list = []

    def arrive(self, *messages) -> list:
        """
        Receive C{messages} (of one queue) in one store call; their claim
        (or None).
        """
        queue = messages[0].dest_queue
        claim = self._manager.claim(queue, messages)
        claimed = len(claim.checks) if claim else 0
        checks = (claim.checks if claim else []) + [None] * (len(messages) - claimed)
        items = []
        for m in messages:
            self._seq += 1
            items.append((self._seq, m, True))
        answered = []
        self._store.receive_many("router-x", items[0][0] - 1, items, checks).addCallback(
            answered.extend)
        d = Deferred()
        if claim:
            d.addCallback(lambda outcomes: claim.answered(outcomes[:claimed]))
        self.held.append((d, answered))
        if claimed < len(messages):
            self._manager.notify(queue)
        return claim

    def commit(self, index: int = 0) -> None:
        d, answered = self.held.pop(index)
        d.callback(answered)


@pytest.fixture
def store(tmp_path):
    store = SQLiteStore(str(tmp_path / "store.sqlite"), sync="normal",
                        executor=InlineExecutor(), router=ROUTER)
    store.open()
    yield store
    store.close()


@pytest.fixture
def reads(store):
    return Reads(store)


@pytest.fixture
def manager(reads):
    return QueueManager(reads, RecordingEvents(), Clock())


@pytest.fixture
def link(store, manager):
    return Link(store, manager)


def flags(store, queue="q") -> list:
    rows = []
    store.fetch(queue, 0, 100).addCallback(rows.extend)
    return [(m.msg_id, redelivered) for _, m, redelivered in rows]


def test_an_arrival_for_a_waiting_consumer_is_handed_over_with_no_read(store, reads, manager,
                                                                      link):
    """
    The queue is caught up and its consumer has credit: the arrival is
    claimed, and delivered once its receive commits, with no read and no
    mark; the store has it flagged, as the read would have.
    """
    consumer = Consumer(manager, credit=5)
    assert len(reads.fetches) == 1  # The subscription's first read: the queue is empty.
    m = message()
    assert link.arrive(m) is not None
    assert consumer.deliveries == []  # Not before its receive commits.
    link.commit()
    assert [d.message for d in consumer.deliveries] == [m]
    assert not consumer.deliveries[0].redelivered
    assert consumer.deliveries[0].entry_id is not None
    assert len(reads.fetches) == 1 and reads.marks == []
    assert flags(store) == [(m.msg_id, True)]
    consumer.ack_all()
    assert flags(store) == []


def test_claims_in_a_row_keep_their_order(reads, manager, link):
    """
    Arrivals claimed while those before them still commit, one by one
    and several to a call, are delivered in link order, each once.
    """
    consumer = Consumer(manager, credit=10)
    sent = [message() for _ in range(5)]
    assert link.arrive(sent[0]) is not None
    assert len(link.arrive(sent[1], sent[2]).checks) == 2
    assert link.arrive(sent[3]) is not None
    link.commit()
    link.commit()
    assert consumer.bodies == [m.body for m in sent[:3]]
    assert link.arrive(sent[4]) is not None
    link.commit()
    link.commit()
    assert consumer.bodies == [m.body for m in sent]
    assert len(reads.fetches) == 1 and reads.marks == []


def test_claims_take_no_more_than_the_credit(store, reads, manager, link):
    """
    Credit for two: the first two arrivals are claimed; the third is
    received as before and read, beside the claims in flight; the
    claimed ones are not read twice, and the third waits for credit.
    """
    consumer = Consumer(manager, credit=2)
    sent = [message() for _ in range(3)]
    assert link.arrive(sent[0]) is not None
    claim = link.arrive(sent[1], sent[2])
    assert len(claim.checks) == 1
    assert len(reads.fetches) == 2  # The third's read (its rows wait for the claims).
    link.commit()
    link.commit()
    assert consumer.bodies == [m.body for m in sent[:2]]
    consumer.subscription.add_credit(5)
    assert consumer.bodies == [m.body for m in sent]
    assert flags(store) == [(m.msg_id, True) for m in sent]


def test_behind_unread_entries_or_without_credit_nothing_is_claimed(store, reads, manager,
                                                                   link):
    """
    Entries wait unread (the queue is behind), or the consumer has no
    credit: arrivals are received as before, for the reads; then, caught
    up again, the next is claimed.
    """
    consumer = Consumer(manager, credit=0)
    assert link.arrive(message()) is None
    link.commit()
    consumer.subscription.add_credit(3)
    assert len(consumer.deliveries) == 1
    assert link.arrive(message()) is not None


def test_an_unknown_entry_before_a_claim_is_delivered_first(store, reads, manager, link):
    """
    An entry the router was not told of yet (a path that notifies after
    its commit) lies before the arrival: the store declines the claim,
    the arrival is stored as any other and the queue notified, and the
    read delivers both, in their order.
    """
    consumer = Consumer(manager, credit=5)
    unknown = message()
    store.accept(unknown)  # No notify yet.
    m = message()
    assert link.arrive(m) is not None
    link.commit()
    assert consumer.bodies == [unknown.body, m.body]
    assert not any(d.redelivered for d in consumer.deliveries)
    assert len(reads.fetches) == 2


def test_a_claimed_delivery_is_flagged_redelivered_after_a_crash(tmp_path, manager, link):
    """
    Delivered from its receive and not acknowledged when the router
    dies: it comes back flagged redelivered; one never claimed nor
    delivered does not.
    """
    consumer = Consumer(manager, credit=1)
    m, n = message(), message()
    assert link.arrive(m) is not None
    link.commit()
    assert link.arrive(n) is None
    link.commit()
    assert [d.message for d in consumer.deliveries] == [m]
    after_crash = reopened(tmp_path)
    try:
        again = Consumer(QueueManager(after_crash, RecordingEvents(), Clock()))
        assert [(d.message.msg_id, d.redelivered) for d in again.deliveries] == [
            (m.msg_id, True), (n.msg_id, False)]
    finally:
        after_crash.close()


def test_a_consumer_leaving_before_the_commit(store, reads, manager, link):
    """
    The consumer leaves between the claim and its commit (the queue's
    memory is released): the claimed entry is not lost, and the next
    consumer reads it from the store, once, flagged (it may have been
    delivered, as far as the store knows).
    """
    first = Consumer(manager, credit=5)
    m = message()
    assert link.arrive(m) is not None
    first.subscription.cancel()
    link.commit()
    assert first.deliveries == []
    second = Consumer(manager, credit=5)
    assert [(d.message.msg_id, d.redelivered) for d in second.deliveries] == [(m.msg_id, True)]


def test_a_consumer_leaving_and_coming_back_before_the_commit(store, reads, manager, link):
    """
    The consumer leaves and another subscribes while the claim commits:
    the new one's read takes the entry (after the receive, in the
    store's order); the claim's answer, from before, is dropped; one
    delivery.  Another arrival claimed behind it is delivered after it.
    """
    first = Consumer(manager, credit=5)
    m = message()
    assert link.arrive(m) is not None
    first.subscription.cancel()
    second = Consumer(manager, credit=5)
    link.commit()
    assert [d.message.msg_id for d in second.deliveries] == [m.msg_id]
    n = message()
    assert link.arrive(n) is not None
    link.commit()
    assert [d.message.msg_id for d in second.deliveries] == [m.msg_id, n.msg_id]
    assert first.deliveries == []


def test_a_holding_consumer_claims_nothing(manager, link):
    """
    A consumer holding persistent entries (a disconnected session whose
    own queue is full) has no credit for a claim.
    """
    consumer = Consumer(manager, credit=5)
    consumer.subscription.hold_persistent(True)
    assert link.arrive(message()) is None
    link.commit()
    assert consumer.deliveries == []
    consumer.subscription.hold_persistent(False)
    assert len(consumer.deliveries) == 1
    assert link.arrive(message()) is not None


def test_arrivals_over_a_link_reach_a_waiting_consumer_with_no_read(mesh):
    """
    Whole routers in memory (L{meshroute.router.arrivals.Arrivals} on a
    real link): transfers arriving one at a time and in batches for a
    consumer with credit are handed over from their receives, in order,
    each once; the destination's queue is read only when its consumer
    subscribes.
    """
    line(mesh)
    destination = mesh.routers["router-c"]
    fetches = []
    fetch = destination.store.fetch
    destination.store.fetch = lambda *args: fetches.append(args) or fetch(*args)
    consumer = MeshConsumer(destination, "orders")
    mesh.run(0.1)
    subscribed = len(fetches)
    sent = []
    for i in range(20):
        sent += send(mesh, "router-a", "orders@router-c", 1, start=i)
        mesh.run(0.01)
    sent += send(mesh, "router-a", "orders@router-c", 30, start=20)
    mesh.run(1)
    assert_confirmed(sent)
    assert consumer.bodies == [b"%d" % i for i in range(50)]
    assert consumer.redelivered == 0
    assert len(fetches) == subscribed
    # Each is recorded enqueued before it is consumed.
    destination.events.flush()
    seen = [(e["event"], e["msg_id"]) for e in read_events(destination.events.data_dir)
            if e["event"] in ("message.enqueued", "message.consumed")]
    assert len(seen) == 100
    for msg_id in {msg_id for _, msg_id in seen}:
        assert seen.index(("message.enqueued", msg_id)) < seen.index(("message.consumed", msg_id))


def test_a_claimed_arrival_expired_before_its_hand_over_goes_aside(store, manager, link):
    """
    Its time to live ran out while its receive committed: the dispatch
    sets it aside in C{$expired}, as it does an entry read from the store.
    """
    consumer = Consumer(manager, credit=5)
    m = replace(message(), headers={EXPIRES_HEADER: "5"})
    assert link.arrive(m) is not None
    manager.clock.advance(1)
    link.commit()
    assert consumer.deliveries == []
    assert flags(store) == []
    assert [msg_id for msg_id, _ in flags(store, EXPIRED_QUEUE)] == [m.msg_id]


def test_a_claimed_delivery_rolled_back_in_a_transaction_comes_back_redelivered(manager, link):
    """
    Acknowledged in a client transaction that rolls back: back at the
    front of its queue, flagged redelivered, as a delivery read from the
    store.
    """
    consumer = Consumer(manager, credit=1)
    m = message()
    assert link.arrive(m) is not None
    link.commit()
    acks = manager.transaction()
    acks.add(consumer.subscription, [consumer.deliveries[0].delivery_id])
    acks.rolled_back()
    consumer.subscription.add_credit(1)
    assert [(d.message.msg_id, d.redelivered) for d in consumer.deliveries] == [
        (m.msg_id, False), (m.msg_id, True)]
