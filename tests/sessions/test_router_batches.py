"""
Tests for the router's side of client protocol version 4
(docs/client-protocol.md, "Batches"): SendBatch carried out with one
store call and answered with Confirmed ranges, DeliverBatch per
subscription per turn, AckThrough, replay of a batch after a resume, a
batch inside a transaction, and older versions getting the per-message
frames.  The real engine and SQLite store run inline on a C{task.Clock}.
"""

import pytest
from twisted.internet.testing import StringTransport

from meshroute import events as event_names
from meshroute.sessions import deliveries as deliveries_module
from meshroute.wire import client_frames as f
from meshroute.router.admission import BacklogFull

from support.router_connection import Connection, deliveries, only
from support.router_engine import engine, store  # noqa: F401 (fixtures)
from support.served_sessions import factory, make_factory  # noqa: F401 (a fixture)


def open_with(connection: Connection, versions: list, session_id: str = "",
              answered_up_to: int = 0, delivered_up_to: int = 0) -> f.Opened:
    connection.send(f.Open(versions, "c", session_id, 60000, answered_up_to, delivered_up_to))
    frames = connection.received()
    assert isinstance(frames[0], f.Opened), frames
    connection.after_open = frames[1:]
    return frames[0]


@pytest.fixture
def connection(factory):
    connection = Connection(factory)
    assert open_with(connection, [1, 2, 3, 4]).version == 4
    return connection


def batch(first: int, *bodies: bytes, address: str = "q", persistent: bool = True,
          duplicate_ids=None) -> f.SendBatch:
    ids = duplicate_ids or [""] * len(bodies)
    return f.SendBatch(first, [[address, {}, body, persistent, dup]
                               for body, dup in zip(bodies, ids)])


def consumer(factory, versions: list, credit: int = 100, queue: str = "q") -> Connection:
    connection = Connection(factory)
    open_with(connection, versions)
    connection.send(f.Subscribe(1, 1, queue, credit))
    return connection


def test_a_send_batch_is_one_store_transaction_answered_by_one_confirmed(connection, store,
                                                                        engine):
    before = store.executor.commits
    connection.send(batch(1, b"a", b"b", b"c"))
    assert store.executor.commits == before + 1
    (confirmed,) = only(connection.received(), f.Confirmed)
    assert confirmed.first_command_id == 1 and len(confirmed.msg_ids) == 3
    assert store.queue_depths() == {"q": 3}
    # The same events as three Sends.
    accepted = engine.events.named(event_names.MESSAGE_ACCEPTED)
    assert [e["msg_id"] for e in accepted] == confirmed.msg_ids


def test_a_refused_send_splits_the_confirmed_ranges(connection, store):
    connection.send(f.SendBatch(1, [["q", {}, b"a", True, ""], ["q@nowhere", {}, b"b", True, ""],
                                    ["!", {}, b"c", True, ""], ["q", {}, b"d", True, ""]]))
    frames = [fr for fr in connection.received() if not isinstance(fr, f.Processed)]
    assert [type(fr) for fr in frames] == [f.Confirmed, f.Error, f.Error, f.Confirmed]
    assert frames[0].first_command_id == 1 and len(frames[0].msg_ids) == 1
    assert (frames[1].command_id, frames[1].code) == (2, f.UNKNOWN_ROUTER)
    assert (frames[2].command_id, frames[2].code) == (3, f.BAD_ADDRESS)
    assert frames[3].first_command_id == 4
    assert store.queue_depths() == {"q": 2}


def test_the_commands_of_a_batch_count_one_per_message(connection, clock):
    # The Ack (of nothing) has no answer of its own: Processed covers it.
    connection.send(batch(1, b"a", b"b"), f.Send(3, "q", {}, b"c", True), f.Ack(4, []))
    clock.advance(0)
    frames = connection.received()
    assert f.Processed(4) in frames
    assert only(frames, f.Confirm)[0].command_id == 3


def test_non_persistent_batches_are_enqueued_in_order(connection, factory, clock):
    waiting = consumer(factory, [1])
    connection.send(batch(1, b"1", b"2", b"3", persistent=False))
    assert [d.body for d in deliveries(waiting.received())] == [b"1", b"2", b"3"]


def test_duplicate_ids_in_a_batch(connection, store, engine):
    connection.send(batch(1, b"a", b"b", duplicate_ids=["x", "x"]))
    (confirmed,) = only(connection.received(), f.Confirmed)
    assert confirmed.msg_ids[0] == confirmed.msg_ids[1]
    assert store.queue_depths() == {"q": 1}
    connection.send(batch(3, b"c", duplicate_ids=["x"]))
    (again,) = only(connection.received(), f.Confirmed)
    assert again.msg_ids == confirmed.msg_ids[:1]
    assert store.queue_depths() == {"q": 1}


def test_a_refused_send_with_a_duplicate_id_in_a_batch(connection, store):
    # Its refusal waits for the store's look-up of the id (the retry of an
    # accepted send is answered with the first message's id), which an
    # inline store answers at once: every send of the batch is answered.
    connection.send(batch(1, b"a", duplicate_ids=["y"]))
    (first,) = only(connection.received(), f.Confirmed)
    connection.send(f.SendBatch(2, [["q@nowhere", {}, b"b", True, "x"],
                                    ["q@nowhere", {}, b"a", True, "y"],
                                    ["q", {}, b"c", True, "z"]]))
    frames = [fr for fr in connection.received() if not isinstance(fr, f.Processed)]
    assert [type(fr) for fr in frames] == [f.Error, f.Confirmed]
    assert (frames[0].command_id, frames[0].code) == (2, f.UNKNOWN_ROUTER)
    assert frames[1].first_command_id == 3
    assert frames[1].msg_ids[0] == first.msg_ids[0]
    assert store.queue_depths() == {"q": 2}


def test_a_refused_send_repeating_a_duplicate_id_of_its_batch(store, engine):
    # The backlog for "far" is full after the batch's first message, so the
    # second send is refused, but it repeats the first's duplicate id: as
    # with two Sends, its answer is the first message's id.
    engine.admission.max_backlog = 1
    engine.routes.remember({"far"})
    outcomes = []
    engine.submit_many([["q@far", {}, b"a", True, "x"], ["q@far", {}, b"a", True, "x"],
                        ["q@far", {}, b"b", True, "y"]]).addCallback(outcomes.extend)
    first, again, refused = outcomes
    assert type(first) is str and again == first
    assert refused.check(BacklogFull)
    assert store.backlog_depths() == {"far": 1}


@pytest.mark.parametrize("frame", [batch(1, b"a"), f.AckThrough(1, 1, 1)],
                         ids=["SendBatch", "AckThrough"])
def test_a_version_3_connection_may_not_send_batch_frames(factory, frame):
    connection = Connection(factory)
    assert open_with(connection, [1, 2, 3]).version == 3
    connection.send(frame)
    (error,) = connection.received()
    assert (error.command_id, error.code) == (0, f.BAD_COMMAND)
    assert connection.closed


def test_a_batch_out_of_sequence_is_a_bad_command(connection):
    connection.send(batch(2, b"a"))
    (error,) = connection.received()
    assert (error.command_id, error.code) == (0, f.BAD_COMMAND)


def test_a_replayed_batch_is_carried_out_once(factory, connection, store, clock):
    connection.send(batch(1, b"a", b"b"))
    (confirmed,) = only(connection.received(), f.Confirmed)
    session_id = factory.describe()[0]["session_id"]
    connection.lose()
    again = Connection(factory)
    opened = open_with(again, [4], session_id)
    assert opened.reattached and opened.last_command_id == 2
    assert again.after_open == [confirmed]
    # The client replays the batch and one more message with it: only the
    # new one is carried out, the held answer comes once more.
    again.send(batch(1, b"a", b"b", b"c"))
    frames = only(again.received(), f.Confirmed)
    assert frames[0] == confirmed
    assert frames[1].first_command_id == 3
    assert store.queue_depths() == {"q": 3}


def test_a_batch_in_a_transaction_is_held_until_the_commit(connection, store):
    connection.send(f.Begin(1), batch(2, b"a", b"b"))
    assert only(connection.received(), f.Confirm) == []
    assert store.queue_depths() == {}
    connection.send(f.Commit(4))
    confirms = only(connection.received(), f.Confirm)
    assert [c.command_id for c in confirms] == [2, 3, 4]
    assert store.queue_depths() == {"q": 2}


def test_a_version_4_consumer_gets_one_deliver_batch_per_turn(factory, connection, clock):
    waiting = consumer(factory, [4])
    waiting.received()
    connection.send(batch(1, b"a", b"b", b"c"))
    assert deliveries(waiting.received()) == []
    clock.advance(0)
    (delivered,) = only(waiting.received(), f.DeliverBatch)
    assert delivered.subscription == 1
    assert [d[4] for d in delivered.deliveries] == [b"a", b"b", b"c"]
    assert [d[0] for d in delivered.deliveries] == [1, 2, 3]


class NotedFlushes(StringTransport):
    """
    A transport that notes what it held each time it was flushed
    (L{meshroute.wire.transport.flush_now} calls C{doWrite}).
    """

    connected = True
    producerPaused = False

    def __init__(self) -> None:
        super().__init__()
        self.flushes: list[bytes] = []

    def doWrite(self) -> None:
        self.flushes.append(self.value())


@pytest.mark.parametrize("answer_pending", [False, True])
def test_a_turns_deliveries_are_handed_to_the_kernel_once_written(factory, connection, clock,
                                                                   answer_pending):
    """
    Whether the deliveries are written at the end of their turn or before
    another frame of that turn's end (the answer to the Subscribe, when
    its turn has not ended yet), the end of the turn flushes them.
    """
    transport = NotedFlushes()
    waiting = Connection(factory, transport)
    open_with(waiting, [4])
    waiting.send(f.Subscribe(1, 1, "q", 100))
    if not answer_pending:
        clock.advance(0)
    waiting.received()
    connection.send(batch(1, b"a", b"b"))
    assert transport.flushes == []
    clock.advance(0)
    [held] = transport.flushes
    assert held == transport.value()
    (delivered,) = only(waiting.received(), f.DeliverBatch)
    assert [d[4] for d in delivered.deliveries] == [b"a", b"b"]


def test_older_consumers_get_deliver_frames(factory, connection, clock):
    waiting = consumer(factory, [1, 2, 3])
    connection.send(batch(1, b"a", b"b"))
    assert [d.body for d in deliveries(waiting.received())] == [b"a", b"b"]


def test_a_turn_s_deliveries_are_written_before_any_later_frame(factory, connection, clock):
    waiting = consumer(factory, [4])
    waiting.received()
    connection.send(batch(1, b"a"))
    waiting.send(f.Subscribe(2, 2, "other", 1))
    frames = waiting.received()
    assert [type(fr) for fr in frames] == [f.DeliverBatch, f.Confirm]


def test_ack_through_acknowledges_every_delivery_up_to_it(factory, connection, store, clock):
    waiting = consumer(factory, [4])
    waiting.send(f.Subscribe(2, 2, "other", 10))
    connection.send(batch(1, b"a", b"b", b"c", b"d"), batch(5, b"o", address="other"))
    clock.advance(0)
    clock.advance(0)
    by_subscription = {fr.subscription: fr.deliveries
                       for fr in only(waiting.received(), f.DeliverBatch)}
    third = by_subscription[1][2][0]
    waiting.send(f.AckThrough(3, 1, third))
    assert store.queue_depths() == {"q": 1, "other": 1}
    # Again: nothing more.  Through a later id: only this subscription's.
    waiting.send(f.AckThrough(4, 1, third))
    assert store.queue_depths() == {"q": 1, "other": 1}
    waiting.send(f.AckThrough(5, 1, by_subscription[2][0][0]))
    assert store.queue_depths() == {"other": 1}


def test_deliveries_of_a_lost_turn_are_resent_on_resume(factory, connection, clock):
    waiting = consumer(factory, [4])
    waiting.received()
    session_id = factory.describe()[1]["session_id"]
    connection.send(batch(1, b"a", b"b"))
    waiting.lose()
    clock.advance(0)
    again = Connection(factory)
    open_with(again, [4], session_id, answered_up_to=1)
    assert [d.body for d in deliveries(again.after_open)] == [b"a", b"b"]


def test_a_written_batch_leaves_its_last_deliveries_for_a_resume(engine, clock):
    """
    Of a DeliverBatch larger than the recovery buffer, its last
    deliveries are kept: a resume re-sends those the client did not get,
    and the older ones go back to the queue, as for single deliveries.
    """
    factory = make_factory(engine, clock, recovery_buffer_size=2)
    sender = Connection(factory)
    open_with(sender, [4])
    waiting = consumer(factory, [4], credit=5)
    waiting.received()
    session_id = factory.describe()[1]["session_id"]
    sender.send(batch(1, b"1", b"2", b"3", b"4", b"5"))
    clock.advance(0)
    (written,) = only(waiting.received(), f.DeliverBatch)
    assert [d[4] for d in written.deliveries] == [b"1", b"2", b"3", b"4", b"5"]
    waiting.lose()
    again = Connection(factory)
    open_with(again, [4], session_id, answered_up_to=1, delivered_up_to=1)
    assert [(d.delivery_id, d.body, d.redelivered) for d in deliveries(again.after_open)] == [
        (4, b"4", False), (5, b"5", False)]
    clock.advance(0)
    (requeued,) = only(again.received(), f.DeliverBatch)
    assert [(d[0], d[4], d[5]) for d in requeued.deliveries] == [(6, b"2", True), (7, b"3", True)]


def test_a_delivery_too_large_for_a_batch_travels_alone_and_is_kept_for_a_resume(
        factory, connection, clock, monkeypatch):
    monkeypatch.setattr(deliveries_module, "DELIVER_BATCH_MAX_BYTES", 10)
    waiting = consumer(factory, [4])
    waiting.received()
    session_id = factory.describe()[1]["session_id"]
    connection.send(batch(1, b"a", b"x" * 20, b"b"))
    clock.advance(0)
    frames = [fr for fr in waiting.received() if type(fr) in (f.Deliver, f.DeliverBatch)]
    assert [type(fr) for fr in frames] == [f.DeliverBatch, f.Deliver, f.DeliverBatch]
    waiting.lose()
    again = Connection(factory)
    open_with(again, [4], session_id, answered_up_to=1)
    assert [d.body for d in deliveries(again.after_open)] == [b"a", b"x" * 20, b"b"]
