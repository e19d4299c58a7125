"""
Tests for message expiry (docs/client-protocol.md, "Message expiry"):
the expiry header, the store's moves to $expired and its sweep, the
queue manager's check at hand-over, the engine's checks on arrival and
before forwarding, the expiry sweep's timer, a session's held deliveries,
the Send's time to live through a real session, and the notice to the
sender.

Deterministic: a C{task.Clock} (its time is the wall clock expiries are
compared with), the real SQLite store run inline, connections driven
frame by frame.
"""

import pytest
from twisted.internet import defer
from hypothesis import given
from hypothesis import strategies as st

from meshroute import events as event_names
from meshroute.router.engine import MessageEngine
from meshroute.expiry import SWEEP_INTERVAL_S, ExpirySweep, expires_at, expiring_sends
from meshroute.messages import (
    EXPIRED_QUEUE,
    EXPIRES_HEADER,
    NOTIFY_EXPIRY_HEADER,
    Message,
    expires_ms,
    expiry_headers,
)
from meshroute.router.queues import QueueManager
from meshroute.routing.table import RouteTable
from meshroute.sessions.native_listener import ClientFactory
from meshroute.sessions.settings import SessionSettings
from meshroute.store import ExecutorStopped, InlineExecutor, SQLiteStore
from meshroute.wire import client_frames as f

from support.client_testing import failure_of, kept_clients, result_of  # noqa: F401
from support.fake_router import ROUTER, Harness, RecordingEvents
from support.router_connection import Connection

#: Where the tests' clock starts: a wall-clock time, in seconds.
NOW = 1_700_000_000.0
NOW_MS = int(NOW * 1000)


@pytest.fixture
def clock(clock):
    clock.advance(NOW)
    return clock


def open_store(path, clock) -> SQLiteStore:
    store = SQLiteStore(str(path), "normal", InlineExecutor(), router=ROUTER, clock=clock)
    store.open()
    return store


@pytest.fixture
def store(tmp_path, clock):
    store = open_store(tmp_path / "store.sqlite", clock)
    yield store
    store.close()


@pytest.fixture
def events():
    return RecordingEvents()


@pytest.fixture
def engine(store, events, clock):
    return MessageEngine(ROUTER, store, RouteTable(ROUTER, clock), events, clock)


_numbers = iter(range(1, 1_000_000))


def message(expiry_ms: int = 0, queue: str = "q", persistent: bool = True,
            dest_router: str = ROUTER, notify: str = "") -> Message:
    n = next(_numbers)
    return Message(f"{ROUTER}:t:{n}", ROUTER, dest_router, queue, b"body %d" % n,
                   expiry_headers({"k": "v"}, expiry_ms, notify), persistent=persistent,
                   accepted_at=NOW)


def outcome(d):
    got = []
    d.addBoth(got.append)
    (result,) = got
    if hasattr(result, "raiseException"):
        result.raiseException()
    return result


def expired_events(events) -> list[tuple]:
    return [(e["msg_id"], e["where"], e["dest"]) for e in events.named(event_names.MESSAGE_EXPIRED)]


class Consumer:
    def __init__(self, queues, queue: str = "q", credit: int = 100) -> None:
        self.deliveries = []
        self.subscription = queues.subscribe(queue, self.deliveries.append, credit)

    @property
    def ids(self) -> list[str]:
        return [d.message.msg_id for d in self.deliveries]


# -- the header --------------------------------------------------------------------


def test_a_message_without_a_time_to_live_keeps_its_headers_object():
    headers = {"k": "v"}
    assert expiry_headers(headers, 0, "session") is headers
    assert message().expires_ms == 0
    assert not message().expired(2**62)


def test_the_expiry_header_and_the_notify_header():
    m = message(NOW_MS + 5, notify="s-1")
    assert m.headers == {"k": "v", EXPIRES_HEADER: str(NOW_MS + 5), NOTIFY_EXPIRY_HEADER: "s-1"}
    assert not m.expired(NOW_MS + 4)
    assert m.expired(NOW_MS + 5)


def test_a_message_in_a_system_queue_does_not_expire_again():
    assert not message(NOW_MS, queue=EXPIRED_QUEUE).expired(NOW_MS + 1)
    assert not message(NOW_MS, queue="$dead-letter").expired(NOW_MS + 1)


@given(st.text(max_size=30))
def test_any_header_value_reads_as_an_expiry_or_none(value):
    expiry = expires_ms({EXPIRES_HEADER: value})
    assert type(expiry) is int and expiry >= 0


def test_a_time_to_live_becomes_an_expiry_at_acceptance(clock):
    assert expires_at(clock, 0) == 0
    assert expires_at(clock, 1500) == NOW_MS + 1500
    plain = [["q", {}, b"a", True, ""]]
    assert expiring_sends(plain, clock, "s") is plain
    mixed = [["q", {}, b"a", True, ""], ["q", {}, b"b", False, "", 200, True],
             ["q", {}, b"c", True, "d", 0, False]]
    assert expiring_sends(mixed, clock, "s") == [
        ["q", {}, b"a", True, ""], ("q", {}, b"b", False, "", NOW_MS + 200, True, "s"),
        ("q", {}, b"c", True, "d", 0, False, "s")]


# -- the store -----------------------------------------------------------------------


def test_the_sweep_moves_expired_entries_to_expired(store):
    due, later, never = message(NOW_MS - 1), message(NOW_MS + 1000), message()
    for m in (due, later, never):
        outcome(store.accept(m))
    (moved,) = outcome(store.sweep_expired(NOW_MS, [], 100))
    assert moved == due
    assert store.queue_depths() == {"q": 2, EXPIRED_QUEUE: 1}
    ((_, aside, redelivered),) = outcome(store.fetch(EXPIRED_QUEUE, 0, 10))
    assert (aside.msg_id, aside.body, redelivered) == (due.msg_id, due.body, False)
    assert aside.headers == {**due.headers, "x-original-address": f"q@{ROUTER}"}
    # Set aside, it expires no more.
    assert outcome(store.sweep_expired(NOW_MS + 10**9, ["q"], 100)) == []


def test_the_sweep_is_bounded_soonest_first_and_leaves_busy_queues(store):
    messages = [message(NOW_MS - n, queue="a" if n % 2 else "b") for n in range(1, 7)]
    for m in messages:
        outcome(store.accept(m))
    first = outcome(store.sweep_expired(NOW_MS, ["b"], 2))
    assert [m.msg_id for m in first] == [messages[4].msg_id, messages[2].msg_id]
    rest = outcome(store.sweep_expired(NOW_MS, ["b"], 100))
    assert [m.msg_id for m in rest] == [messages[0].msg_id]
    assert store.queue_depths() == {"b": 3, EXPIRED_QUEUE: 3}


def test_the_sweep_takes_expired_messages_from_the_backlog(store):
    waiting = message(NOW_MS - 1, dest_router="router-z")
    outcome(store.accept(waiting))
    assert store.backlog_depths() == {"router-z": 1}
    (moved,) = outcome(store.sweep_expired(NOW_MS, [], 10))
    assert moved.dest_router == "router-z"
    assert store.backlog_depths() == {}
    assert store.queue_depths() == {EXPIRED_QUEUE: 1}


def test_expire_moves_held_messages_and_leaves_those_gone(store):
    held, gone = message(NOW_MS), message(NOW_MS)
    outcome(store.accept(held))
    assert outcome(store.expire([held, gone])) == [held]
    assert store.queue_depths() == {EXPIRED_QUEUE: 1}
    # Already set aside: nothing moves again.
    assert outcome(store.expire([held])) == []


def test_an_expiry_survives_a_restart(tmp_path, clock):
    path = tmp_path / "restart.sqlite"
    store = open_store(path, clock)
    due = message(NOW_MS + 500)
    outcome(store.accept(due))
    outcome(store.close())
    store = open_store(path, clock)
    try:
        assert outcome(store.sweep_expired(NOW_MS, [], 10)) == []
        assert outcome(store.sweep_expired(NOW_MS + 500, [], 10)) == [due]
    finally:
        store.close()


# -- hand-over ---------------------------------------------------------------------


def test_an_expired_message_is_never_handed_to_a_consumer(store, events, clock):
    queues = QueueManager(store, events, clock)
    fresh, stale, transient = message(NOW_MS + 10), message(NOW_MS + 1), message(
        NOW_MS + 1, persistent=False)
    for m in (stale, fresh):
        outcome(store.accept(m))
    queues.put_transient("q", transient)
    clock.advance(0.005)
    consumer = Consumer(queues)
    assert consumer.ids == [fresh.msg_id]
    assert sorted(expired_events(events)) == sorted([
        (stale.msg_id, "queue", f"q@{ROUTER}"), (transient.msg_id, "queue", f"q@{ROUTER}")])
    drained = Consumer(queues, EXPIRED_QUEUE)
    assert sorted(drained.ids) == sorted([stale.msg_id, transient.msg_id])
    assert {d.message.headers["x-original-address"] for d in drained.deliveries} == {
        f"q@{ROUTER}"}
    assert store.queue_depths() == {"q": 1, EXPIRED_QUEUE: 1}


def test_a_held_delivery_that_expired_goes_to_expired_with_its_credit(store, events, clock):
    queues = QueueManager(store, events, clock)
    held = message(NOW_MS + 100)
    outcome(store.accept(held))
    consumer = Consumer(queues, credit=1)
    (delivery,) = consumer.deliveries
    clock.advance(0.1)
    consumer.subscription.expire([delivery.delivery_id])
    assert consumer.subscription.credit == 1
    assert expired_events(events) == [(held.msg_id, "session", f"q@{ROUTER}")]
    assert store.queue_depths() == {EXPIRED_QUEUE: 1}


# -- the sweep's timer ---------------------------------------------------------------


def test_the_sweep_runs_on_its_timer_and_drains_a_large_batch_in_steps(store, events, clock):
    queues = QueueManager(store, events, clock)
    moved, calls = [], []

    class CountingStore:
        def sweep_expired(self, now_ms, busy, limit):
            calls.append(limit)
            return store.sweep_expired(now_ms, busy, limit)

    sweep = ExpirySweep(clock, CountingStore(), queues, moved.append, batch=3)
    for _ in range(7):
        outcome(store.accept(message(NOW_MS + 1500)))
    queues.put_transient("t", message(NOW_MS + 1500, queue="t", persistent=False))
    sweep.start()
    clock.advance(SWEEP_INTERVAL_S)
    assert moved == [] and queues.depths() == {"q": 7, "t": 1}
    assert calls == [3]
    clock.advance(SWEEP_INTERVAL_S)
    # Three store calls of at most three: a full batch is followed by the
    # next one at once (the next turn), not after the interval.
    assert calls == [3] * 4
    assert len(moved) == 7
    assert queues.depths() == {EXPIRED_QUEUE: 8}
    assert len(events.named(event_names.MESSAGE_EXPIRED)) == 1  # the transient one
    sweep.stop()
    assert clock.getDelayedCalls() == []


def test_a_sweep_the_closed_store_refuses_is_no_failure_and_ends_the_sweeps(
        store, events, clock, observe_errors):
    """
    The store's executor stops on the reactor's shutdown while the router
    still closes its links: a sweep it refuses then is logged as not done
    (no critical failure) and no other is scheduled; any other failure
    is logged and the sweeps go on.
    """
    queues = QueueManager(store, events, clock)

    class Refusing:
        def __init__(self, error):
            self.error = error

        def sweep_expired(self, now_ms, busy, limit):
            return defer.fail(self.error)

    sweep = ExpirySweep(clock, Refusing(ExecutorStopped("the store is closed")), queues,
                        lambda message: None, store_stopped=(ExecutorStopped,))
    sweep.start()
    clock.advance(SWEEP_INTERVAL_S)
    assert observe_errors.errors == [] and clock.getDelayedCalls() == []
    sweep = ExpirySweep(clock, Refusing(OSError("disk I/O error")), queues,
                        lambda message: None, store_stopped=(ExecutorStopped,))
    sweep.start()
    clock.advance(SWEEP_INTERVAL_S)
    assert len(observe_errors.errors) == 1 and len(clock.getDelayedCalls()) == 1
    observe_errors.errors.clear()
    sweep.stop()


# -- the engine ----------------------------------------------------------------------


def test_a_send_with_an_expiry_expires_in_its_queue(engine, events, clock):
    msg_id = outcome(engine.submit("q", b"x", {}, True, expires_ms=NOW_MS + 200))
    engine.expiry_sweep.start()
    clock.advance(0.1)
    clock.advance(SWEEP_INTERVAL_S)
    assert expired_events(events) == [(msg_id, "queue", f"q@{ROUTER}")]
    (event,) = events.named(event_names.MESSAGE_EXPIRED)
    assert (event["expires_ms"], event["persistent"]) == (NOW_MS + 200, True)
    assert Consumer(engine.queues).ids == []
    engine.stop()


def test_a_batch_and_a_transaction_carry_expiries(engine, clock):
    ids = outcome(engine.submit_many([
        ("q", {}, b"a", True, "", NOW_MS + 1, False),
        ("q", {}, b"b", True, ""),
        ("q", {}, b"c", False, "", NOW_MS + 1, True, "s-1"),
    ]))
    committed = outcome(engine.commit([("q", b"d", {}, True, "", NOW_MS + 1, False, "s-1")], []))
    clock.advance(0.002)
    consumer = Consumer(engine.queues)
    assert consumer.ids == [ids[1]]
    drained = Consumer(engine.queues, EXPIRED_QUEUE)
    assert sorted(drained.ids) == sorted([ids[0], ids[2], *committed])
    assert {m.message.headers.get(NOTIFY_EXPIRY_HEADER) for m in drained.deliveries} == {
        None, "s-1"}


def test_a_message_that_arrives_expired_is_set_aside_not_forwarded(engine, store, events, clock):
    onward = message(NOW_MS - 1, dest_router="router-z")
    local = message(NOW_MS - 1)
    assert outcome(engine.arrived("router-p", 1, 0, onward)) == ()
    outcome(engine.arrived_many("router-p", 1, [(2, local)]))
    engine.arrived_transient(message(NOW_MS - 1, dest_router="router-z", persistent=False))
    assert store.backlog_depths() == {}
    assert engine.queues.depths() == {EXPIRED_QUEUE: 3}
    assert [where for _, where, _ in expired_events(events)] == ["transit"] * 3
    assert events.named(event_names.MESSAGE_ENQUEUED) == []


# -- sessions ------------------------------------------------------------------------


def delivered_ids(connection, clock) -> list[str]:
    """
    The message ids delivered to C{connection} (in Deliver frames, and in
    the DeliverBatch frames written at the end of the turn).
    """
    clock.advance(0)
    ids = []
    for frame in connection.received():
        if isinstance(frame, f.Deliver):
            ids.append(frame.msg_id)
        elif isinstance(frame, f.DeliverBatch):
            ids.extend(item[1] for item in frame.deliveries)
    return ids


def open_v6(connection, session_id="", answered_up_to=0):
    connection.send(f.Open([6], "c", session_id, 60000, answered_up_to, 0))
    frames = connection.received()
    assert isinstance(frames[0], f.Opened), frames
    connection.after_open = frames[1:]
    return frames[0]


def test_a_sends_ttl_becomes_its_expiry_and_its_sender_is_told(engine, clock):
    factory = ClientFactory(engine, clock)
    sender = Connection(factory)
    opened = open_v6(sender)
    sender.send(f.Send(1, "q", {}, b"x", True, "", 1500, True),
                f.SendBatch(2, [["q", {}, b"y", True, "", 1500, False], ["q", {}, b"z", True, ""]]))
    answers = sender.received()
    (confirm,) = [a for a in answers if isinstance(a, f.Confirm)]
    (confirmed,) = [a for a in answers if isinstance(a, f.Confirmed)]
    clock.advance(1.5)
    consumer = Connection(factory)
    open_v6(consumer)
    consumer.send(f.Subscribe(1, 1, "q", 10))
    assert delivered_ids(consumer, clock) == [confirmed.msg_ids[1]]
    assert [n for n in sender.received() if isinstance(n, f.Expired)] == [
        f.Expired(confirm.msg_id, f"q@{ROUTER}", ROUTER)]
    assert opened.version == 6


def test_deliveries_held_while_disconnected_expire_instead_of_being_sent(engine, events, clock):
    factory = ClientFactory(engine, clock, settings=SessionSettings(keep_alive_ms=60000))
    connection = Connection(factory)
    opened = open_v6(connection)
    connection.send(f.Subscribe(1, 1, "q", 10))
    connection.received()
    connection.lose()
    short = outcome(engine.submit("q", b"short", {}, True, expires_ms=NOW_MS + 100))
    long = outcome(engine.submit("q", b"long", {}, True, expires_ms=NOW_MS + 10_000))
    clock.advance(1)
    again = Connection(factory)
    open_v6(again, opened.session_id, answered_up_to=1)
    assert [d.msg_id for d in again.after_open if isinstance(d, f.Deliver)] == [long]
    assert [(e["msg_id"], e["where"]) for e in events.named(
        event_names.MESSAGE_EXPIRED)] == [(short, "session")]
    assert engine.queues.depths() == {"q": 1, EXPIRED_QUEUE: 1}


def test_a_notice_waits_for_a_disconnected_session_and_an_old_client_gets_none(engine, clock):
    factory = ClientFactory(engine, clock, settings=SessionSettings(max_depth=2))
    sender = Connection(factory)
    opened = open_v6(sender)
    sender.received()
    sender.lose()
    tell = engine.expiry_notices[0]
    core = factory.sessions.sessions[opened.session_id]
    # Messages name the session by a notice id of its own, not by its id
    # (which their consumers would see).
    assert core.notice_id not in ("", opened.session_id)
    assert tell(opened.session_id, "m-0", "q@x", "x") is False
    for n in range(3):
        tell(core.notice_id, f"m-{n}", "q@x", "x")
    again = Connection(factory)
    open_v6(again, opened.session_id)
    assert [n.msg_id for n in again.after_open if isinstance(n, f.Expired)] == ["m-1", "m-2"]
    old = Connection(factory)
    old_opened = old.open()
    old_core = factory.sessions.sessions[old_opened.session_id]
    assert tell(old_core.notice_id, "m-9", "q@x", "x") is True
    assert old.received() == []


# -- the client API --------------------------------------------------------------------


def test_the_client_sends_a_ttl_and_hears_of_the_expiry(engine, events, clock):
    harness = Harness(engine, clock)
    client = harness.connect()
    heard = []
    client.add_expiry_listener(lambda *notice: heard.append(notice))
    told = client.send("q", b"a", ttl=0.5, notify_expiry=True)
    quiet = client.send_many("q", [b"b", b"c"], ttl=0.5)
    lasting = client.producer().send("q", b"d")
    harness.flush()
    told, quiet, lasting = result_of(told), result_of(quiet), result_of(lasting)
    engine.expiry_sweep.start()
    clock.advance(0.5)
    clock.advance(SWEEP_INTERVAL_S)
    harness.flush()
    assert heard == [(told, f"q@{ROUTER}", ROUTER)]
    assert sorted(m["msg_id"] for m in events.named(event_names.MESSAGE_EXPIRED)) == \
        sorted([told, *quiet])
    assert engine.queues.depths() == {"q": 1, EXPIRED_QUEUE: 3}
    engine.stop()


def test_the_client_refuses_a_ttl_for_an_older_router(engine, clock, monkeypatch):
    from meshroute.client import SendError

    monkeypatch.setattr(f, "SUPPORTED_VERSIONS", (1, 2, 3, 4, 5))
    harness = Harness(engine, clock)
    client = harness.connect()
    refused = failure_of(client.send("q", b"a", ttl=1))
    assert isinstance(refused, SendError) and refused.code == "unsupported"
    assert "version 6" in str(refused)
    with pytest.raises(ValueError):
        client.send("q", b"a", ttl=0)
    assert engine.queues.depths() == {}


# -- the frames ------------------------------------------------------------------------

_scalars = st.one_of(st.integers(-5, 5), st.booleans(), st.text(max_size=3), st.binary(max_size=3),
                     st.dictionaries(st.text(max_size=2), st.text(max_size=2), max_size=1))


@given(st.lists(st.lists(_scalars, min_size=4, max_size=8), min_size=1, max_size=3),
       st.lists(_scalars, min_size=5, max_size=8))
def test_version_6_send_fields_decode_to_frames_or_wire_error(items, send_fields):
    """
    Any SendBatch items and Send fields: a frame whose every message is
    well-typed (a time to live at least 0), or a WireError.
    """
    from meshroute.errors import WireError
    from meshroute.wire.codec import FrameDecoder, encode_items

    for body in ([f.SendBatch.TYPE, 1, items], [f.Send.TYPE, 1, *send_fields]):
        try:
            (frame,) = FrameDecoder(frames=f.FROM_CLIENT).feed(encode_items(body))
        except WireError:
            continue
        if isinstance(frame, f.SendBatch):
            for item in frame.messages:
                assert len(item) in (5, 7)
                assert len(item) == 5 or (type(item[5]) is int and item[5] >= 0
                                          and type(item[6]) is bool)
        else:
            assert type(frame.ttl_ms) is int and frame.ttl_ms >= 0
            assert type(frame.notify_expiry) is bool


def test_a_send_without_a_ttl_is_the_version_1_send_on_the_wire():
    from meshroute.wire.codec import encode

    assert encode(f.Send(1, "q", {}, b"x", True, "")) == encode(f.Send(1, "q", {}, b"x", True))
    assert len(encode(f.Send(1, "q", {}, b"x", True, "", 5))) > len(
        encode(f.Send(1, "q", {}, b"x", True, "")))
