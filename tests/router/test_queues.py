"""
Tests for L{meshroute.router.queues.QueueManager}: local queues and consumers,
on the real SQLite store run inline (deterministic, no threads).

FIFO per queue, round-robin between consumers, credit, acknowledgement
deletes, a cancelled consumer's deliveries come back first and flagged
redelivered, a queue much larger than the read-ahead buffer is paged
through without being loaded, and non-persistent entries live in memory.
"""

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from twisted.internet.defer import Deferred, fail
from twisted.internet.task import Clock

from meshroute import events
from meshroute.messages import Message
from meshroute.router.delivery_marking import MARK_RETRY_S
from meshroute.router.queues import QueueManager
from meshroute.router.read_ahead import CAUGHT_UP_READS
from meshroute.store import InlineExecutor, SQLiteStore

from support.fake_router import ROUTER, RecordingEvents

class CountingStore:
    """
    Wraps a store and counts the calls the queue manager makes, to show
    how it pages.
    """

    def __init__(self, store) -> None:
        self._store = store
        self.fetches: list[tuple[str, int, int]] = []

    def fetch(self, queue, after_entry, limit, mark=0):
        self.fetches.append((queue, after_entry, limit))
        return self._store.fetch(queue, after_entry, limit, mark)

    def __getattr__(self, name):
        return getattr(self._store, name)


@pytest.fixture
def store(tmp_path):
    store = SQLiteStore(
        str(tmp_path / "store.sqlite"), sync="normal", executor=InlineExecutor(), router=ROUTER
    )
    store.open()
    yield store
    store.close()


@pytest.fixture
def log():
    return RecordingEvents()


@pytest.fixture
def manager(store, log):
    return QueueManager(CountingStore(store), log, Clock())


_counter = iter(range(1, 1_000_000))


def message(queue: str = "q", body: bytes | None = None, persistent: bool = True) -> Message:
    n = next(_counter)
    return Message(
        msg_id=f"{ROUTER}:test:{n}", origin=ROUTER, dest_router=ROUTER, dest_queue=queue,
        body=body if body is not None else f"m{n}".encode(), persistent=persistent,
        accepted_at=1000.0 + n,
    )


def enqueue(store, manager, queue: str, count: int) -> list[Message]:
    """
    Accept C{count} persistent messages into C{queue} as the engine does:
    store, then notify.
    """
    messages = []
    for _ in range(count):
        m = message(queue)
        store.accept(m)
        manager.notify(queue)
        messages.append(m)
    return messages


class Consumer:
    """
    A recording consumer.
    """

    def __init__(self, manager, queue="q", credit=10) -> None:
        self.deliveries = []
        self.subscription = manager.subscribe(queue, self.deliveries.append, credit)

    @property
    def bodies(self) -> list[bytes]:
        return [d.message.body for d in self.deliveries]

    def ack_all(self):
        return self.subscription.ack([d.delivery_id for d in self.deliveries])


def test_fifo(store, manager):
    sent = enqueue(store, manager, "q", 5)
    consumer = Consumer(manager)
    assert consumer.bodies == [m.body for m in sent]
    assert all(not d.redelivered for d in consumer.deliveries)
    more = enqueue(store, manager, "q", 3)
    assert consumer.bodies == [m.body for m in sent + more]


def test_deliveries_describe_their_message(store, manager):
    (sent,) = enqueue(store, manager, "orders", 1)
    consumer = Consumer(manager, "orders")
    (delivery,) = consumer.deliveries
    assert delivery.queue == "orders"
    assert delivery.message.msg_id == sent.msg_id
    assert delivery.entry_id is not None
    assert delivery.redelivered is False


def test_queues_are_separate(store, manager):
    enqueue(store, manager, "a", 2)
    enqueue(store, manager, "b", 3)
    a, b = Consumer(manager, "a"), Consumer(manager, "b")
    assert len(a.deliveries) == 2 and len(b.deliveries) == 3


def test_round_robin(store, manager):
    first, second, third = (Consumer(manager, credit=100) for _ in range(3))
    sent = enqueue(store, manager, "q", 9)
    assert first.bodies == [m.body for m in sent[0::3]]
    assert second.bodies == [m.body for m in sent[1::3]]
    assert third.bodies == [m.body for m in sent[2::3]]


def test_round_robin_skips_consumers_without_credit(store, manager):
    generous = Consumer(manager, credit=100)
    stingy = Consumer(manager, credit=1)
    enqueue(store, manager, "q", 6)
    assert len(stingy.deliveries) == 1
    assert len(generous.deliveries) == 5


def test_credit_bounds_deliveries(store, manager):
    sent = enqueue(store, manager, "q", 10)
    consumer = Consumer(manager, credit=3)
    assert consumer.bodies == [m.body for m in sent[:3]]
    assert consumer.subscription.credit == 0
    # Acknowledging gives no credit back: only add_credit does.
    consumer.ack_all()
    assert len(consumer.deliveries) == 3
    consumer.subscription.add_credit(4)
    assert consumer.bodies == [m.body for m in sent[:7]]
    consumer.subscription.add_credit(100)
    assert consumer.bodies == [m.body for m in sent]
    assert consumer.subscription.credit == 97


def test_zero_credit_receives_nothing(store, manager):
    enqueue(store, manager, "q", 2)
    consumer = Consumer(manager, credit=0)
    assert consumer.deliveries == []
    with pytest.raises(ValueError):
        consumer.subscription.add_credit(-1)
    with pytest.raises(ValueError):
        manager.subscribe("q", lambda d: None, -1)


def test_ack_deletes_and_emits_consumed(store, manager, log):
    sent = enqueue(store, manager, "q", 3)
    consumer = Consumer(manager)
    assert manager.depths() == {"q": 3}
    done = []
    consumer.subscription.ack([d.delivery_id for d in consumer.deliveries[:2]]).addCallback(
        done.append
    )
    assert done == [None]
    assert manager.depths() == {"q": 1}
    consumed = log.named(events.MESSAGE_CONSUMED)
    assert [c["msg_id"] for c in consumed] == [m.msg_id for m in sent[:2]]
    assert consumed[0] == {
        "msg_id": sent[0].msg_id, "queue": "q", "origin": ROUTER,
        "accepted_at": sent[0].accepted_at, "persistent": True, "redelivered": False,
    }
    # Twice, or unknown ids: nothing happens.
    consumer.subscription.ack([consumer.deliveries[0].delivery_id, 999_999])
    assert len(log.named(events.MESSAGE_CONSUMED)) == 2
    assert consumer.subscription.unacknowledged == 1


def test_acked_messages_are_gone_for_the_next_consumer(store, manager):
    enqueue(store, manager, "q", 4)
    consumer = Consumer(manager)
    consumer.ack_all()
    consumer.subscription.cancel()
    later = Consumer(manager)
    assert later.deliveries == []
    assert manager.depths() == {}


def test_cancel_returns_unacked_to_the_front(store, manager, log):
    sent = enqueue(store, manager, "q", 6)
    first = Consumer(manager, credit=3)
    # Acknowledge the second only: the first and third go back.
    first.subscription.ack([first.deliveries[1].delivery_id])
    first.subscription.cancel()
    second = Consumer(manager, credit=100)
    assert second.bodies == [sent[0].body, sent[2].body] + [m.body for m in sent[3:]]
    assert [d.redelivered for d in second.deliveries] == [True, True, False, False, False]
    second.ack_all()
    assert [c["redelivered"] for c in log.named(events.MESSAGE_CONSUMED)] == [
        False, True, True, False, False, False,
    ]


def test_cancel_hands_returned_entries_to_the_remaining_consumers(store, manager):
    sent = enqueue(store, manager, "q", 4)
    first = Consumer(manager, credit=2)
    second = Consumer(manager, credit=0)
    assert first.bodies == [sent[0].body, sent[1].body]
    second.subscription.add_credit(10)
    assert second.bodies == [sent[2].body, sent[3].body]
    first.subscription.cancel()
    assert second.bodies == [m.body for m in sent[2:]] + [sent[0].body, sent[1].body]
    assert [d.redelivered for d in second.deliveries] == [False, False, True, True]


def test_redelivered_flag_is_durable(tmp_path, store, manager, log):
    enqueue(store, manager, "q", 2)
    consumer = Consumer(manager)
    consumer.subscription.cancel()
    # A router restarted: a new manager reads the flag from the store.
    fresh = QueueManager(store, log, Clock())
    again = Consumer(fresh)
    assert [d.redelivered for d in again.deliveries] == [True, True]


def reopened(tmp_path, name: str = "store.sqlite") -> SQLiteStore:
    """
    The store file of the C{store} fixture opened again, as by a router
    restarted after a crash (nothing was cancelled or closed in order).
    """
    again = SQLiteStore(str(tmp_path / name), sync="normal", executor=InlineExecutor(),
                        router=ROUTER)
    again.open()
    return again


def test_a_delivery_is_flagged_redelivered_after_a_crash(tmp_path, store, manager, log):
    """
    Issue 8, scenario 10: a message delivered and not acknowledged when the
    router dies comes back flagged redelivered; one never delivered does
    not.
    """
    enqueue(store, manager, "q", 2)
    consumer = Consumer(manager, credit=1)
    assert [d.redelivered for d in consumer.deliveries] == [False]
    after_crash = reopened(tmp_path)
    try:
        again = Consumer(QueueManager(after_crash, log, Clock()))
        assert [d.redelivered for d in again.deliveries] == [True, False]
    finally:
        after_crash.close()


class MarkingStore(CountingStore):
    """
    A store that records the C{mark_redelivered} calls and answers them
    only when the test says (or fails them).
    """

    def __init__(self, store) -> None:
        super().__init__(store)
        self.marks: list[tuple[list, Deferred]] = []

    def mark_redelivered(self, entry_ids):
        d = Deferred()
        self.marks.append((list(entry_ids), d))
        return d

    def release(self) -> None:
        marks, self.marks = self.marks, []
        for entry_ids, d in marks:
            d.callback(self._store.mark_redelivered(entry_ids).result)


def test_deliveries_are_sent_once_marked_in_one_store_call_per_batch(store, log):
    marking = MarkingStore(store)
    manager = QueueManager(marking, log, Clock())
    sent = enqueue(store, manager, "q", 5)
    transient = message(persistent=False)
    manager.put_transient("q", transient)
    # Read ahead without credit: nothing flagged by the read.
    consumer = Consumer(manager, credit=0)
    consumer.subscription.add_credit(3)
    # The non-persistent message waits with the persistent ones of its batch.
    assert consumer.deliveries == []
    assert [len(ids) for ids, _ in marking.marks] == [2]
    consumer.subscription.add_credit(3)
    # A second batch waits behind the first.
    assert [len(ids) for ids, _ in marking.marks] == [2, 3]
    marking.release()
    assert consumer.bodies == [transient.body] + [m.body for m in sent]
    assert [d.redelivered for d in consumer.deliveries] == [False] * 6
    assert [e[2] for e in store.fetch("q", 0, 10).result] == [True] * 5


def test_a_delivery_cancelled_before_it_was_handed_over_goes_back(store, log):
    """
    A consumer cancelled while its batch waits for the store never gets
    it; the next consumer does, flagged redelivered as after any cancel
    (the router cannot tell it from a delivery lost on the wire).
    """
    marking = MarkingStore(store)
    manager = QueueManager(marking, log, Clock())
    sent = enqueue(store, manager, "q", 2)
    first = Consumer(manager, credit=0)
    first.subscription.add_credit(2)
    first.subscription.cancel()
    marking.release()
    assert first.deliveries == []
    second = Consumer(manager)
    assert marking.marks == []
    assert [(d.message.body, d.redelivered) for d in second.deliveries] == [
        (m.body, True) for m in sent]


def test_a_failed_mark_sends_nothing_and_tries_again_later(store, log, observe_errors):
    marking = MarkingStore(store)
    clock = Clock()
    manager = QueueManager(marking, log, clock)
    sent = enqueue(store, manager, "q", 2)
    consumer = Consumer(manager, credit=0)
    consumer.subscription.add_credit(2)
    ((_, d),) = marking.marks
    marking.marks.clear()
    d.errback(RuntimeError("disk I/O error"))
    assert len(observe_errors.take(lambda e: e.get("log_failure") is not None)) == 1
    assert consumer.deliveries == []
    assert consumer.subscription.credit == 2
    clock.advance(MARK_RETRY_S)
    marking.release()
    assert [(d.message.body, d.redelivered) for d in consumer.deliveries] == [
        (m.body, False) for m in sent]


def test_entries_read_for_waiting_credit_are_flagged_by_the_read(store, log):
    """
    Entries a consumer's credit awaits are flagged by the read that finds
    them (no mark call, no commit of their own), only as many as that
    credit: the rest get a mark call when they are delivered.
    """
    marking = MarkingStore(store)
    manager = QueueManager(marking, log, Clock())
    consumer = Consumer(manager, credit=2)
    sent = enqueue(store, manager, "q", 1)
    assert consumer.bodies == [sent[0].body]
    sent += enqueue(store, manager, "q", 4)
    assert marking.marks == []
    assert consumer.bodies == [m.body for m in sent[:2]]
    assert [e[2] for e in store.fetch("q", 0, 10).result] == [True, True, False, False, False]
    consumer.subscription.add_credit(3)
    assert [len(ids) for ids, _ in marking.marks] == [3]
    marking.release()
    assert consumer.bodies == [m.body for m in sent]
    assert [d.redelivered for d in consumer.deliveries] == [False] * 5
    assert [e[2] for e in store.fetch("q", 0, 10).result] == [True] * 5


class FailingConsumeStore(CountingStore):
    """
    A store whose next C{consume} fails (a disk I/O error) without
    deleting anything.
    """

    fail_next = False

    def consume(self, entry_ids):
        if self.fail_next:
            self.fail_next = False
            return fail(RuntimeError("disk I/O error"))
        return self._store.consume(entry_ids)


def test_a_failed_acknowledgement_gives_the_message_back(store, log):
    """
    Issue 8, "also check": a consume the store fails must not leave the
    message in flight until every consumer leaves: it is delivered again,
    flagged redelivered, to the consumers still there.
    """
    failing = FailingConsumeStore(store)
    manager = QueueManager(failing, log, Clock())
    sent = enqueue(store, manager, "q", 2)
    consumer = Consumer(manager, credit=1)
    other = Consumer(manager, credit=0)
    failing.fail_next = True
    acked = []
    consumer.ack_all().addErrback(acked.append)
    assert len(acked) == 1
    other.subscription.add_credit(2)
    assert [(d.message.body, d.redelivered) for d in other.deliveries] == [
        (sent[0].body, True), (sent[1].body, False)]
    other.ack_all()
    assert manager.depths() == {}
    assert [c["msg_id"] for c in log.named(events.MESSAGE_CONSUMED)] == [
        sent[0].msg_id, sent[1].msg_id]


def test_returned_entries_keep_queue_order_after_several_cancels(store, manager):
    sent = enqueue(store, manager, "q", 4)
    a = Consumer(manager, credit=3)
    b = Consumer(manager, credit=1)
    # a has 0..2, b has 3.  a goes: 0..2 come back and go to b's credit.
    assert b.bodies == [sent[3].body]
    b.subscription.add_credit(1)
    a.subscription.cancel()
    assert b.bodies == [sent[3].body, sent[0].body]
    # b goes too: its entries 3 and 0 come back in queue order, before 1, 2.
    b.subscription.cancel()
    c = Consumer(manager, credit=10)
    assert c.bodies == [m.body for m in sent]
    assert all(d.redelivered for d in c.deliveries)


def test_paging_through_a_queue_larger_than_the_read_ahead(store, log):
    counting = CountingStore(store)
    manager = QueueManager(counting, log, Clock(), read_ahead=8)
    sent = enqueue(store, manager, "big", 50)
    assert counting.fetches == []  # No consumer, no reading.
    consumer = Consumer(manager, "big", credit=0)
    # The buffer fills up to its bound and no further.
    assert counting.fetches == [("big", 0, 8)]
    consumer.subscription.add_credit(50)
    assert consumer.bodies == [m.body for m in sent]
    assert all(limit <= 8 for _, _, limit in counting.fetches)
    afters = [after for _, after, _ in counting.fetches]
    assert afters == sorted(afters)
    assert len(counting.fetches) >= 50 // 8


def test_read_ahead_holds_at_most_its_bound(store, log):
    manager = QueueManager(CountingStore(store), log, Clock(), read_ahead=8)
    enqueue(store, manager, "big", 40)
    Consumer(manager, "big", credit=3)
    state = manager._queues["big"]
    assert len(state.buffer) <= 8


def test_notify_during_a_fetch_is_not_lost(store, log):
    """
    A notify that arrives while a fetch is in flight makes the manager
    read again, even if that fetch came back short.
    """
    from twisted.internet.defer import Deferred

    class SlowFetch(CountingStore):
        def __init__(self, store):
            super().__init__(store)
            self.pending: list[tuple[Deferred, list]] = []

        def fetch(self, queue, after_entry, limit, mark=0):
            self.fetches.append((queue, after_entry, limit))
            rows = []
            self._store.fetch(queue, after_entry, limit, mark).addCallback(rows.extend)
            d = Deferred()
            self.pending.append((d, rows))
            return d

    slow = SlowFetch(store)
    manager = QueueManager(slow, log, Clock())
    consumer = Consumer(manager)
    assert len(slow.pending) == 1
    enqueue(store, manager, "q", 1)  # Arrives after the fetch read the store.
    d, rows = slow.pending.pop()
    d.callback(rows)
    assert len(slow.pending) == 1  # Read again.
    d, rows = slow.pending.pop()
    d.callback(rows)
    assert len(consumer.deliveries) == 1


class HeldFetches(CountingStore):
    """
    Runs each fetch on the store at once (so the store sees the reads in
    the order they were made, as an executor runs them) and holds its
    result until the test releases it.
    """

    def __init__(self, store):
        super().__init__(store)
        self.held: list = []

    def fetch(self, queue, after_entry, limit, mark=0):
        from twisted.internet.defer import Deferred

        self.fetches.append((queue, after_entry, limit))
        rows = []
        self._store.fetch(queue, after_entry, limit, mark).addCallback(rows.extend)
        d = Deferred()
        self.held.append((d, rows))
        return d

    def release(self, index: int) -> None:
        d, rows = self.held.pop(index)
        d.callback(rows)


def test_an_arrival_is_read_beside_the_read_in_flight(store, log):
    """
    An entry notified while a read is in flight is read at once by a
    second read (which joins the arrival's transaction in a real store),
    not after the first ends; a third waits.  However the two end, each
    entry is delivered once, in order, flagged by the read that
    delivered it, and the buffer keeps its bound.
    """
    held = HeldFetches(store)
    manager = QueueManager(held, log, Clock(), read_ahead=4)
    first = enqueue(store, manager, "q", 1)
    consumer = Consumer(manager, credit=10)
    assert len(held.held) == 1
    second = enqueue(store, manager, "q", 1)
    assert len(held.held) == 2
    assert held.fetches[0][1] == held.fetches[1][1] == 0
    third = enqueue(store, manager, "q", 2)
    assert len(held.held) == 2
    held.release(1)  # The second read ends first: its rows wait for the first's.
    assert consumer.deliveries == []
    held.release(0)
    assert consumer.bodies == [m.body for m in first + second]
    assert len(held.held) == 1  # The third entry's read.
    held.release(0)
    assert consumer.bodies == [m.body for m in first + second + third]
    assert not any(d.redelivered for d in consumer.deliveries)
    state = manager._queues["q"]
    assert len(state.buffer) <= 4
    # Every delivered entry is flagged in the store: none needed a mark of its own.
    rows = []
    store.fetch("q", 0, 10).addCallback(rows.extend)
    assert [flag for _, _, flag in rows] == [True] * 4


def test_a_failed_read_beside_another_loses_nothing(store, log, observe_errors):
    """
    The first of two reads fails: the second, which began where the first
    did, still delivers everything.
    """
    from twisted.internet.defer import Deferred

    class FirstFails(HeldFetches):
        def fetch(self, queue, after_entry, limit, mark=0):
            if not self.fetches:
                self.fetches.append((queue, after_entry, limit))
                d = Deferred()
                self.held.append((d, None))
                return d
            return super().fetch(queue, after_entry, limit, mark)

    held = FirstFails(store)
    manager = QueueManager(held, log, Clock())
    sent = enqueue(store, manager, "q", 1)
    consumer = Consumer(manager)
    sent += enqueue(store, manager, "q", 1)
    assert len(held.held) == 2
    held.release(1)
    d, _ = held.held.pop(0)
    d.errback(RuntimeError("disk on fire"))
    assert consumer.bodies == [m.body for m in sent]
    [logged] = observe_errors.take(lambda e: e.get("log_failure") is not None)
    assert logged["log_failure"].check(RuntimeError)


def test_a_caught_up_queue_reads_a_third_arrival_beside_two_reads_in_flight(store, log):
    """
    Once a read found the end of the queue, an arrival starts a read of its
    own beside two in flight (at a paced rate, one commits and one waits
    with the arrival before: the third joins its own arrival's
    transaction instead of taking a commit after it), and the next waits
    for one of them to end (L{CAUGHT_UP_READS}).  However they end, each
    entry is delivered once, in order, flagged by the read that delivered
    it, and the buffer keeps its bound.
    """
    held = HeldFetches(store)
    manager = QueueManager(held, log, Clock(), read_ahead=8)
    consumer = Consumer(manager, credit=20)
    held.release(0)  # The queue is empty: caught up.
    sent = []
    for count in range(1, CAUGHT_UP_READS + 1):
        sent += enqueue(store, manager, "q", 1)
        assert len(held.held) == count
    assert {after for _, after, _ in held.fetches[1:]} == {0}
    sent += enqueue(store, manager, "q", 1)
    assert len(held.held) == CAUGHT_UP_READS
    held.release(2)
    held.release(1)
    assert consumer.deliveries == []
    held.release(0)
    assert consumer.bodies == [m.body for m in sent[:3]]
    assert len(manager._queues["q"].buffer) <= 8
    assert [after for _, after, _ in held.fetches[4:]] == [3]  # The fourth's read.
    held.release(0)
    assert consumer.bodies == [m.body for m in sent]
    assert not any(d.redelivered for d in consumer.deliveries)
    assert held.held == []
    rows = []
    store.fetch("q", 0, 10).addCallback(rows.extend)
    assert [flag for _, _, flag in rows] == [True] * 4


def test_behind_a_backlog_two_reads_stay_the_most(store, log):
    """
    While the latest read that ended returned a full page, a read beside
    another would return the same page again: an arrival then starts a
    second read, not a third, until a read finds the end of the queue.
    """
    held = HeldFetches(store)
    manager = QueueManager(held, log, Clock(), read_ahead=2)
    sent = enqueue(store, manager, "q", 3)
    consumer = Consumer(manager, credit=10)
    held.release(0)  # A full page: the queue goes on.
    assert consumer.bodies == [m.body for m in sent[:2]]
    assert len(held.held) == 1
    sent += enqueue(store, manager, "q", 1)
    assert len(held.held) == 2
    sent += enqueue(store, manager, "q", 1)
    assert len(held.held) == 2
    held.release(0)  # The end of the queue, as it was: caught up.
    assert len(held.held) == 2  # The last arrival's read starts now.
    while held.held:
        held.release(0)
    assert consumer.bodies == [m.body for m in sent]
    assert not any(d.redelivered for d in consumer.deliveries)


def test_queue_without_consumers_holds_nothing_in_memory(store, manager):
    enqueue(store, manager, "q", 5)
    consumer = Consumer(manager, credit=2)
    consumer.subscription.cancel()
    assert "q" not in manager._queues
    assert manager.depths() == {"q": 5}
    again = Consumer(manager)
    assert len(again.deliveries) == 5


def test_transient(manager, log):
    first = message(persistent=False)
    manager.put_transient("q", first)
    assert manager.depths() == {"q": 1}
    consumer = Consumer(manager)
    (delivery,) = consumer.deliveries
    assert delivery.entry_id is None and delivery.message is first
    second = message(persistent=False)
    manager.put_transient("q", second)
    assert consumer.bodies == [first.body, second.body]
    done = []
    consumer.ack_all().addCallback(done.append)
    assert done == [None]
    assert manager.depths() == {}
    assert [c["persistent"] for c in log.named(events.MESSAGE_CONSUMED)] == [False, False]


def test_transient_returns_to_the_front_on_cancel(manager):
    sent = [message(persistent=False) for _ in range(3)]
    for m in sent:
        manager.put_transient("q", m)
    first = Consumer(manager, credit=2)
    first.subscription.cancel()
    assert manager.depths() == {"q": 3}
    second = Consumer(manager)
    assert second.bodies == [m.body for m in sent]
    assert [d.redelivered for d in second.deliveries] == [True, True, False]


def test_transient_and_persistent_alternate(store, manager):
    persistent = enqueue(store, manager, "q", 3)
    transient = [message(persistent=False) for _ in range(3)]
    for m in transient:
        manager.put_transient("q", m)
    consumer = Consumer(manager)
    got = consumer.bodies
    assert [b for b in got if b in {m.body for m in persistent}] == [m.body for m in persistent]
    assert [b for b in got if b in {m.body for m in transient}] == [m.body for m in transient]
    assert got[:2] in ([persistent[0].body, transient[0].body],
                       [transient[0].body, persistent[0].body])


def test_transient_bound_drops_the_oldest(store, log):
    manager = QueueManager(store, log, Clock(), max_transient=2)
    sent = [message(persistent=False) for _ in range(3)]
    for m in sent:
        manager.put_transient("q", m)
    assert manager.depths() == {"q": 2}
    (dropped,) = log.named(events.MESSAGE_DROPPED)
    assert dropped["msg_id"] == sent[0].msg_id and dropped["reason"] == "max-depth"
    consumer = Consumer(manager)
    assert consumer.bodies == [sent[1].body, sent[2].body]


def test_a_batch_drops_what_single_puts_would_and_keeps_its_order(store, log):
    """
    A batch of non-persistent messages larger than the queue's bound loses
    nothing while a consumer has credit for what overflows: the consumer
    is given its share before the bound is reached.  Past that, the
    oldest go, as with single puts.
    """
    manager = QueueManager(store, log, Clock(), max_transient=2)
    consumer = Consumer(manager, credit=3)
    sent = [message(persistent=False) for _ in range(7)]
    manager.put_transient_many("q", sent)
    # 3 delivered, 2 wait at the bound, so the 2 oldest waiting were dropped.
    assert consumer.bodies == [m.body for m in sent[:3]]
    assert [d["msg_id"] for d in log.named(events.MESSAGE_DROPPED)] == [
        sent[3].msg_id, sent[4].msg_id]
    assert manager.depths() == {"q": 5}  # 3 unacknowledged, 2 waiting
    single = QueueManager(store, RecordingEvents(), Clock(), max_transient=2)
    alone = Consumer(single, credit=3)
    for m in sent:
        single.put_transient("q", m)
    assert alone.bodies == consumer.bodies and single.depths() == manager.depths()


def test_transient_total_bound_across_queues(store, log):
    """
    Non-persistent messages waiting in all queues together are bounded:
    past it the oldest of the message's own queue goes, or the message
    itself when its queue has none waiting.
    """
    manager = QueueManager(store, log, Clock(), max_transient=10, max_transient_total=3)
    sent = [message(f"q{n}", persistent=False) for n in range(5)]
    for n, m in enumerate(sent):
        manager.put_transient(f"q{n}", m)
    assert sum(manager.depths().values()) == 3
    dropped = log.named(events.MESSAGE_DROPPED)
    assert [d["msg_id"] for d in dropped] == [sent[3].msg_id, sent[4].msg_id]
    assert {d["reason"] for d in dropped} == {"max-total-depth"}
    again = message("q0", persistent=False)
    manager.put_transient("q0", again)
    assert log.named(events.MESSAGE_DROPPED)[-1]["msg_id"] == sent[0].msg_id
    consumer = Consumer(manager, "q0")
    assert consumer.bodies == [again.body]
    manager.put_transient("q3", sent[3])
    assert manager.depths() == {"q0": 1, "q1": 1, "q2": 1, "q3": 1}


def test_depths_and_consumer_counts(store, manager):
    enqueue(store, manager, "a", 2)
    manager.put_transient("b", message("b", persistent=False))
    Consumer(manager, "a", credit=1)
    Consumer(manager, "a", credit=0)
    Consumer(manager, "c", credit=5)
    assert manager.depths() == {"a": 2, "b": 1}
    assert manager.consumer_counts() == {"a": 2, "c": 1}
    assert manager.unacknowledged_counts() == {"a": 1, "c": 0}
    rates = {"in_rate": 0.0, "out_rate": 0.0}
    assert manager.describe() == [
        {"name": "a", "depth": 2, "consumers": 2, "unacknowledged": 1, **rates},
        {"name": "b", "depth": 1, "consumers": 0, "unacknowledged": 0, **rates},
        {"name": "c", "depth": 0, "consumers": 1, "unacknowledged": 0, **rates},
    ]


def test_rates_count_what_is_enqueued_and_consumed(store, log):
    """
    The engine counts what it enqueues (L{QueueRates.entered}); the
    manager counts what is acknowledged.  A drained queue stays listed
    while it had traffic within the window.
    """
    clock = Clock()
    manager = QueueManager(CountingStore(store), log, clock)
    manager.rates.start()
    for m in [message("q", persistent=False) for _ in range(20)]:
        manager.rates.entered("q")
        manager.put_transient("q", m)
    consumer = Consumer(manager, "q", credit=20)
    clock.advance(1)
    consumer.subscription.ack([d.delivery_id for d in consumer.deliveries[:10]])
    clock.advance(1)
    [row] = manager.describe()
    assert (row["name"], row["depth"], row["unacknowledged"]) == ("q", 10, 10)
    assert (row["in_rate"], row["out_rate"]) == (10.0, 5.0)
    consumer.subscription.ack([d.delivery_id for d in consumer.deliveries[10:]])
    consumer.subscription.cancel()
    assert [q["name"] for q in manager.describe()] == ["q"]
    manager.rates.stop()


def test_consumer_acting_inside_deliver(store, manager):
    """
    A consumer that acknowledges and grants credit from inside its
    callback (as a synchronous client would) gets everything, in order.
    """
    sent = enqueue(store, manager, "q", 20)
    got = []

    def deliver(delivery):
        got.append(delivery.message.body)
        subscription.ack([delivery.delivery_id])
        subscription.add_credit(1)

    subscription = manager.subscribe("q", deliver, 0)
    subscription.add_credit(1)
    assert got == [m.body for m in sent]
    assert manager.depths() == {}


def test_consumer_that_raises_keeps_its_delivery(store, manager, observe_errors):
    enqueue(store, manager, "q", 1)

    def deliver(delivery):
        raise RuntimeError("boom")

    subscription = manager.subscribe("q", deliver, 5)
    assert subscription.unacknowledged == 1
    assert len(observe_errors.take(lambda e: e.get("log_failure") is not None)) == 1
    subscription.cancel()
    consumer = Consumer(manager)
    assert [d.redelivered for d in consumer.deliveries] == [True]


def test_delivery_ids_are_unique_across_queues(store, manager):
    enqueue(store, manager, "a", 3)
    enqueue(store, manager, "b", 3)
    a, b = Consumer(manager, "a"), Consumer(manager, "b")
    ids = [d.delivery_id for d in a.deliveries + b.deliveries]
    assert len(set(ids)) == 6


# -- a model check -------------------------------------------------------------


class LaggyStore(CountingStore):
    """
    A store whose answers to fetch, consume and mark_redelivered arrive
    only when the test says, so reads, deletions and marks are in flight
    while consumers come and go.  The work itself is done at once and in order, as the store
    promises.
    """

    def __init__(self, store) -> None:
        super().__init__(store)
        self.held: list = []

    def _later(self, d):
        from twisted.internet.defer import Deferred

        results = []
        d.addBoth(results.append)
        later = Deferred()
        self.held.append((later, results[0]))
        return later

    def fetch(self, queue, after_entry, limit, mark=0):
        self.fetches.append((queue, after_entry, limit))
        return self._later(self._store.fetch(queue, after_entry, limit, mark))

    def consume(self, entry_ids):
        return self._later(self._store.consume(entry_ids))

    def mark_redelivered(self, entry_ids):
        return self._later(self._store.mark_redelivered(entry_ids))

    def release_one(self, index: int) -> None:
        if self.held:
            later, result = self.held.pop(index % len(self.held))
            later.callback(result)

    def release_all(self) -> None:
        while self.held:
            self.release_one(0)


operations = st.lists(
    st.one_of(
        st.tuples(st.just("enqueue"), st.integers(1, 5)),
        st.tuples(st.just("transient"), st.integers(1, 3)),
        st.tuples(st.just("subscribe"), st.integers(0, 4)),
        st.tuples(st.just("credit"), st.integers(0, 9), st.integers(1, 5)),
        st.tuples(st.just("ack"), st.integers(0, 9), st.integers(1, 5)),
        st.tuples(st.just("cancel"), st.integers(0, 9)),
        st.tuples(st.just("release"), st.integers(0, 9)),
    ),
    max_size=40,
)


@settings(max_examples=300, deadline=None)
@given(operations)
# A read in flight when the last consumer leaves.
@example([("enqueue", 5), ("subscribe", 0), ("release", 0), ("credit", 0, 2),
          ("cancel", 0), ("release", 0)])
def test_every_message_is_consumed_once_whatever_consumers_do(tmp_path_factory, ops):
    """
    Whatever consumers, credit, acknowledgements, cancels and slow store
    calls do, every message is acknowledged exactly once in the end,
    nothing else is, and no consumer ever holds more deliveries than the
    credit it was given.
    """
    path = tmp_path_factory.mktemp("model") / "store.sqlite"
    real = SQLiteStore(str(path), sync="normal", executor=InlineExecutor(),
                       router=ROUTER)
    real.open()
    try:
        store = LaggyStore(real)
        log = RecordingEvents()
        manager = QueueManager(store, log, Clock(), read_ahead=4)
        sent: list[bytes] = []
        consumers: list[tuple[Consumer, list]] = []  # (consumer, granted)
        for op in ops:
            kind = op[0]
            if kind == "enqueue":
                sent.extend(m.body for m in enqueue(real, manager, "q", op[1]))
            elif kind == "transient":
                for _ in range(op[1]):
                    m = message(persistent=False)
                    manager.put_transient("q", m)
                    sent.append(m.body)
            elif kind == "subscribe":
                consumers.append((Consumer(manager, credit=op[1]), [op[1]]))
            elif consumers:
                consumer, granted = consumers[op[1] % len(consumers)]
                subscription = consumer.subscription
                if kind == "credit":
                    subscription.add_credit(op[2])
                    granted[0] += op[2]
                elif kind == "ack":
                    held = [d.delivery_id for d in consumer.deliveries][-op[2]:]
                    subscription.ack(held)
                elif kind == "cancel":
                    subscription.cancel()
            if kind == "release":
                store.release_one(op[1])
            for consumer, granted in consumers:
                assert len(consumer.deliveries) <= granted[0]
        # Everyone leaves; one consumer takes and acknowledges the rest.
        store.release_all()
        for consumer, _ in consumers:
            consumer.subscription.cancel()
        store.release_all()
        final = []

        def take(delivery):
            final.append(delivery.message.body)
            sub.ack([delivery.delivery_id])
            store.release_all()

        sub = manager.subscribe("q", take, 0)
        sub.add_credit(10_000)
        store.release_all()
        consumed = [c["msg_id"] for c in log.named(events.MESSAGE_CONSUMED)]
        assert len(consumed) == len(set(consumed)) == len(sent)
        assert manager.depths() == {}
        assert real.queue_depths() == {}
    finally:
        real.close()


# -- what disconnected client sessions need: holding, giving back, dropping ----


def test_a_holding_consumer_takes_no_persistent_entries(store, manager):
    persistent = enqueue(store, manager, "q", 2)
    holding = Consumer(manager, credit=0)
    holding.subscription.hold_persistent(True)
    holding.subscription.add_credit(10)
    assert holding.bodies == []
    transient = message(persistent=False)
    manager.put_transient("q", transient)
    assert holding.bodies == [transient.body]
    # Another consumer gets the persistent ones meanwhile...
    other = Consumer(manager, credit=1)
    assert other.bodies == [persistent[0].body]
    # ...and the holding one the rest once it stops holding.
    holding.subscription.hold_persistent(False)
    assert holding.bodies == [transient.body, persistent[1].body]


def test_give_back_requeues_flagged_and_returns_the_credit(store, manager):
    sent = enqueue(store, manager, "q", 3)
    consumer = Consumer(manager, credit=3)
    first, second, third = consumer.deliveries
    consumer.subscription.ack([first.delivery_id])
    assert consumer.subscription.credit == 0
    consumer.subscription.give_back([second.delivery_id, third.delivery_id, 999])
    # The credit came back, so they come straight back to it, flagged.
    assert [(d.message.body, d.redelivered) for d in consumer.deliveries[3:]] == [
        (sent[1].body, True), (sent[2].body, True)]
    assert consumer.subscription.unacknowledged == 2
    assert [e[2] for e in store.fetch("q", 0, 10).result] == [True, True]


def test_drop_gives_up_a_non_persistent_delivery_and_returns_its_credit(store, manager, log):
    enqueue(store, manager, "q", 1)
    transient = message(persistent=False)
    manager.put_transient("q", transient)
    consumer = Consumer(manager, credit=2)
    persistent, dropped = sorted(consumer.deliveries, key=lambda d: d.entry_id is None)
    consumer.subscription.drop(persistent.delivery_id)  # never dropped
    consumer.subscription.drop(dropped.delivery_id, session_id="s")
    (event,) = log.named(events.MESSAGE_DROPPED)
    assert (event["msg_id"], event["reason"], event["queue"], event["session_id"]) == (
        transient.msg_id, "max-depth", "q", "s")
    assert consumer.subscription.credit == 1
    assert consumer.subscription.unacknowledged == 1
    assert manager.depths() == {"q": 1}
