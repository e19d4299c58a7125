"""
The client's failover against the router's real side of the contract
(L{meshroute.sessions.native_listener.ClientFactory} with a fake engine), through
in-memory connections the tests cut: reattachment with replay, recreation
after keep-alive, the router's TTL against the client's pings, duplicate
ids across a recreation.  Everything runs on a C{task.Clock}.
"""

import pytest
import pytest_twisted

from meshroute.client import DISCONNECT, FAILOVER, UnblockedError, connect_endpoint
from meshroute.sessions.native_listener import ClientFactory
from meshroute.sessions.settings import SessionSettings

from support.fake_router import CuttableEndpoint, FakeEngine
from support.client_testing import (  # noqa: F401 (a fixture)
    failure_of,
    kept_clients,
    meshroute_command,
    result_of,
)


@pytest.fixture
def engine(tmp_path, clock):
    engine = FakeEngine(str(tmp_path / "store.sqlite"), clock, auto=True)
    yield engine
    engine.close()


@pytest.fixture
def manual_engine(tmp_path, clock):
    engine = FakeEngine(str(tmp_path / "manual.sqlite"), clock)
    yield engine
    engine.close()


def listener(engine, clock, **settings):
    factory = ClientFactory(engine, clock, settings=SessionSettings(**settings))
    return factory, CuttableEndpoint(factory, clock)


def connect(clock, net, **options):
    options.setdefault("client_id", "app")
    d = connect_endpoint(clock, net, **options)
    for endpoint in net if isinstance(net, list) else [net]:
        clock.advance(0)  # the next endpoint of a round is tried in the next turn
        endpoint.flush()
    client = result_of(d)
    events = []
    client.add_failure_listener(events.append)
    return client, events


def test_a_cut_shorter_than_keep_alive_is_invisible(engine, clock):
    """
    Sends and receives across a cut: nothing lost, nothing doubled, no
    error, and the listeners heard FAILOVER.
    """
    factory, net = listener(engine, clock)
    producer, producer_events = connect(clock, net, client_id="producer",
                                        confirmation_window_size=1 << 20, reconnect_attempts=-1)
    consumer, consumer_events = connect(clock, net, client_id="consumer",
                                        confirmation_window_size=1 << 20, reconnect_attempts=-1)
    got = []

    def on_message(message):
        got.append(message.body)
        message.ack()

    consumer.subscribe("q", on_message, prefetch=10)
    net.flush()
    sends = []
    for n in range(300):
        sends.append(producer.send("q", b"%d" % n))
        if n % 50 == 25:
            # Bytes written in this turn are lost with the connection.
            net.cut()
            clock.advance(2)
        if n % 7 == 0:
            net.flush()
    net.flush()
    clock.advance(2)
    net.flush()
    assert all(d.called for d in sends)
    assert len({result_of(d) for d in sends}) == 300
    assert sorted(got, key=int) == [b"%d" % n for n in range(300)]
    assert len(got) == 300
    assert producer_events == consumer_events == [FAILOVER] * 6
    assert producer.last_failover == consumer.last_failover == "reattached"
    assert engine.queues.depths() == {}
    producer.close(), consumer.close()
    net.flush()


def test_commands_the_router_never_got_are_replayed_in_order(manual_engine, clock):
    factory, net = listener(manual_engine, clock)
    client, events = connect(clock, net, confirmation_window_size=1 << 20, reconnect_attempts=1)
    first = [client.send("q", b"%d" % n) for n in range(3)]
    net.flush()
    lost = [client.send("q", b"%d" % n) for n in range(3, 6)]
    net.cut()
    clock.advance(2)
    net.flush()
    assert events == [FAILOVER]
    assert [s.body for s in manual_engine.submitted] == [b"%d" % n for n in range(6)]
    for n, submitted in enumerate(manual_engine.submitted):
        submitted.deferred.callback(f"m{n}")
    net.flush()
    assert [result_of(d) for d in first + lost] == [f"m{n}" for n in range(6)]


def test_answers_made_while_disconnected_are_delivered_on_reattach(manual_engine, clock):
    factory, net = listener(manual_engine, clock)
    client, events = connect(clock, net, confirmation_window_size=1 << 20, reconnect_attempts=1)
    sends = [client.send("q", b"%d" % n) for n in range(4)]
    net.flush()
    net.cut()
    for n, submitted in enumerate(manual_engine.submitted):
        submitted.deferred.callback(f"m{n}")
    assert not any(d.called for d in sends)
    clock.advance(2)
    net.flush()
    assert [result_of(d) for d in sends] == ["m0", "m1", "m2", "m3"]
    assert len(manual_engine.submitted) == 4


def test_a_cut_longer_than_keep_alive_recreates_the_session(engine, clock):
    factory, net = listener(engine, clock, keep_alive_ms=5000)
    engine.enqueue("q", b"1", b"2", b"3")
    client, events = connect(clock, net, confirmation_window_size=1 << 20,
                             reconnect_attempts=-1, retry_interval_ms=2000)
    got = []
    client.subscribe("q", got.append, prefetch=2)
    net.flush()
    assert [(m.body, m.redelivered) for m in got] == [(b"1", False), (b"2", False)]
    got[0].ack()
    net.cut()
    net.refusing = True
    clock.advance(6)
    net.refusing = False
    clock.advance(2)
    net.flush()
    assert events == [FAILOVER]
    assert client.last_failover == "recreated"
    for message in got[:2]:
        message.ack()  # Acks of the old session: ignored.
    net.flush()
    # 1 was acknowledged while disconnected (never reached the router): it
    # comes back with 2, both flagged; then 3.
    assert [(m.body, m.redelivered) for m in got[2:]] == [(b"1", True), (b"2", True)]
    for message in got[2:]:
        message.ack()
    net.flush()
    assert [m.body for m in got[4:]] == [b"3"]
    got[4].ack()
    net.flush()
    assert engine.queues.depths() == {}


def test_duplicate_ids_make_retried_sends_safe(engine, clock):
    factory, net = listener(engine, clock, keep_alive_ms=1000)
    client, events = connect(clock, net, reconnect_attempts=-1)
    retried = []

    def retry(failure, n):
        failure.trap(UnblockedError)
        d = client.send("q", b"%d" % n, duplicate_id=f"d{n}")
        retried.append(d)
        return d

    sends = []
    for n in range(5):
        d = client.send("q", b"%d" % n, duplicate_id=f"d{n}")
        d.addErrback(retry, n)
        sends.append(d)
    # The router gets them all (written together at the end of the turn)
    # but the answers are lost: no window, so a new session and unblocked
    # sends, retried with their duplicate ids.
    clock.advance(0)
    pump = net.pumps[-1]
    pump.serverIO.bufferReceived(pump.clientIO.getOutBuffer())
    clock.advance(0)
    assert engine.store.queue_depths() == {"q": 5}
    net.cut()
    clock.advance(2)
    net.flush()
    assert events == [FAILOVER] and len(retried) == 5
    assert all(d.called for d in sends)
    assert engine.store.queue_depths() == {"q": 5}


def test_the_router_does_not_close_a_pinging_client(engine, clock):
    """
    The client pings at a third of its TTL, so the router's TTL check
    never finds it silent.
    """
    factory, net = listener(engine, clock, connection_ttl_check_interval_ms=1000)
    client, events = connect(clock, net, ttl_ms=6000, client_failure_check_period_ms=-1)
    for _ in range(60):
        clock.advance(1)
        net.flush()
    assert events == []
    (session,) = factory.describe()
    assert session["state"] == "open"


def test_a_silent_router_is_noticed(engine, clock):
    factory, net = listener(engine, clock)
    client, events = connect(clock, net, ttl_ms=-1, client_failure_check_period_ms=3000)
    pending = client.send("q@router-x", b"x")
    # The router hears but never answers (frozen): drop what it writes.
    for _ in range(3):
        net.pumps[-1].serverIO.stream = []
        clock.advance(1)
        net.pumps[-1].serverIO.stream = []
    assert events == [DISCONNECT]
    assert isinstance(failure_of(pending), UnblockedError)


# -- the commands as processes, over TCP, with the connections cut ---------------


async def _send_while_cutting(tmp_path, extra_args, cuts: int):
    """
    Run C{meshroute send --count 3000} against a client listener over
    TCP, and drop every client connection (from the router's side) each
    time another 500 messages arrived, C{cuts} times.

    @return: (status, out, err, engine's queue depths, distinct message
        bodies stored).
    """
    import sqlite3

    from twisted.internet import reactor
    from twisted.internet.endpoints import serverFromString
    from twisted.internet.task import deferLater

    engine = FakeEngine(str(tmp_path / "store.sqlite"), reactor, auto=True)
    factory = ClientFactory(engine, reactor)
    port = await serverFromString(reactor, "tcp:0:interface=127.0.0.1").listen(factory)
    endpoint = f"tcp:127.0.0.1:{port.getHost().port}"
    try:
        running = meshroute_command(
            "send", "--connect", endpoint, "--to", "orders", "--count", "3000",
            "--reconnect-attempts", "-1", "--retry-interval", "50", *extra_args)
        done = 0
        while not running.called and done < cuts:
            depth = engine.store.queue_depths().get("orders", 0)
            if depth >= 500 * (done + 1):
                for connection in list(factory.connections):
                    connection.transport.abortConnection()
                done += 1
            await deferLater(reactor, 0.005, lambda: None)
        out, err, status = await running
        depths = engine.store.queue_depths()
        with sqlite3.connect(str(tmp_path / "store.sqlite")) as db:
            bodies = [row[0] for row in db.execute("SELECT body FROM messages")]
        return status, out, err, depths, bodies, done
    finally:
        await port.stopListening()
        engine.close()


@pytest_twisted.ensureDeferred
async def test_send_command_reattaches_across_cuts(tmp_path):
    status, out, err, depths, bodies, cuts = await _send_while_cutting(
        tmp_path, ["--confirmation-window-size", "1000000"], cuts=3)
    assert status == 0, err
    assert out == b"3000 messages to orders accepted\n"
    assert cuts == 3
    # A cut may land on a connection still opening, or on the close.
    assert 1 <= err.count(b"session reattached (FAILOVER)") <= 3
    assert b"recreated" not in err
    assert depths == {"orders": 3000}
    assert len(set(bodies)) == len(bodies) == 3000


@pytest_twisted.ensureDeferred
async def test_send_command_retries_with_duplicate_ids_across_cuts(tmp_path):
    status, out, err, depths, bodies, cuts = await _send_while_cutting(
        tmp_path, ["--duplicate-id-prefix", "batch-"], cuts=3)
    assert status == 0, err
    assert cuts == 3
    assert 1 <= err.count(b"session recreated (FAILOVER)") <= 3
    assert depths == {"orders": 3000}
    assert len(set(bodies)) == len(bodies) == 3000


@pytest_twisted.ensureDeferred
async def test_receive_command_reattaches_across_cuts(tmp_path):
    import json

    from twisted.internet import reactor
    from twisted.internet.endpoints import serverFromString
    from twisted.internet.task import deferLater

    engine = FakeEngine(str(tmp_path / "store.sqlite"), reactor, auto=True)
    engine.enqueue("orders", *[b"%d" % n for n in range(3000)])
    factory = ClientFactory(engine, reactor)
    port = await serverFromString(reactor, "tcp:0:interface=127.0.0.1").listen(factory)
    endpoint = f"tcp:127.0.0.1:{port.getHost().port}"
    try:
        running = meshroute_command(
            "receive", "--connect", endpoint, "--queue", "orders", "--count", "3000", "--json",
            "--timeout", "60", "--reconnect-attempts", "-1", "--retry-interval", "50",
            "--confirmation-window-size", "1000000")
        cuts = 0
        while not running.called and cuts < 3:
            if engine.store.queue_depths().get("orders", 0) <= 2500 - 500 * cuts:
                for connection in list(factory.connections):
                    connection.transport.abortConnection()
                cuts += 1
            await deferLater(reactor, 0.005, lambda: None)
        out, err, status = await running
        assert status == 0, err
        bodies = [json.loads(line)["body"] for line in out.decode().splitlines()]
        assert sorted(bodies, key=int) == [str(n) for n in range(3000)]
        assert cuts == 3 and b"session reattached (FAILOVER)" in err
        assert b"recreated" not in err
        assert engine.store.queue_depths() == {}
    finally:
        await port.stopListening()
        engine.close()


# -- several endpoints ------------------------------------------------------------------


@pytest.fixture
def other_engine(tmp_path, clock):
    engine = FakeEngine(str(tmp_path / "other.sqlite"), clock, auto=True)
    yield engine
    engine.close()


def test_first_endpoint_refused_second_used(engine, other_engine, clock):
    """
    The first endpoint refuses: the second is tried at once, in the same
    round, and the client says which one it uses.
    """
    _, first = listener(engine, clock)
    _, second = listener(other_engine, clock)
    first.refusing = True
    client, events = connect(clock, [first, second])
    assert (first.attempts, second.attempts) == (1, 1)
    assert client.endpoint == repr(second)
    sent = client.send("q", b"x")
    second.flush()
    assert result_of(sent)
    assert other_engine.store.queue_depths() == {"q": 1}


@pytest.mark.parametrize("rounds", [1, 3])
def test_initial_connect_attempts_count_rounds(engine, other_engine, clock, rounds):
    """
    initial-connect-attempts counts rounds over the list (1, the default:
    each endpoint once), with retry-interval between rounds.
    """
    _, first = listener(engine, clock)
    _, second = listener(other_engine, clock)
    first.refusing = second.refusing = True
    d = connect_endpoint(clock, [first, second], client_id="app",
                         initial_connect_attempts=rounds, retry_interval_ms=2000)
    clock.advance(0)
    for n in range(1, rounds):
        assert not d.called and (first.attempts, second.attempts) == (n, n)
        clock.advance(2)
        clock.advance(0)
    assert (first.attempts, second.attempts) == (rounds, rounds)
    assert "refused" in str(failure_of(d))


def test_the_client_fails_over_to_the_other_router(engine, other_engine, clock):
    """
    The router in use goes away: after retry-interval the client tries the
    next endpoint, recreates its session there (calls in flight unblocked,
    subscriptions made again) and tells its listeners FAILOVER.
    """
    _, first = listener(engine, clock)
    _, second = listener(other_engine, clock)
    other_engine.enqueue("q", b"from the other")
    client, events = connect(clock, [first, second], confirmation_window_size=1 << 20,
                             reconnect_attempts=-1, retry_interval_ms=500)
    assert client.endpoint == repr(first)
    got = []
    client.subscribe("q", got.append)
    first.flush()
    in_flight = client.send("q", b"lost with the router")
    clock.advance(0)  # the end of the turn: written
    first.cut()
    first.refusing = True
    clock.advance(0.5)
    second.flush()
    assert events == [FAILOVER]
    assert client.last_failover == "recreated"
    assert client.endpoint == repr(second)
    assert isinstance(failure_of(in_flight), UnblockedError)
    sent = client.send("q", b"after")
    second.flush()
    assert result_of(sent)
    assert [m.body for m in got] == [b"from the other", b"after"]


def test_reconnect_attempts_count_rounds(engine, other_engine, clock):
    """
    reconnect-attempts = 2: two rounds after the failure (each starting
    after the endpoint that failed), retry-interval before each, then
    DISCONNECT.
    """
    _, first = listener(engine, clock)
    _, second = listener(other_engine, clock)
    client, events = connect(clock, [first, second], reconnect_attempts=2,
                             retry_interval_ms=1000)
    first.cut()
    first.refusing = second.refusing = True
    clock.advance(0.999)
    assert (first.attempts, second.attempts) == (1, 0)
    clock.advance(0.001)
    assert (first.attempts, second.attempts) == (2, 1)
    clock.advance(1)
    assert (first.attempts, second.attempts) == (3, 2)
    assert events == [DISCONNECT]
    clock.advance(10)
    assert (first.attempts, second.attempts) == (3, 2)


def test_no_reconnect_attempts_means_no_failover(engine, other_engine, clock):
    """
    reconnect-attempts = 0 (the default): a failed connection is the end,
    even with another endpoint (Artemis: no reconnection, no failover).
    """
    _, first = listener(engine, clock)
    _, second = listener(other_engine, clock)
    client, events = connect(clock, [first, second])
    first.cut()
    clock.advance(10)
    assert second.attempts == 0
    assert events == [DISCONNECT]


def test_one_router_closed_under_the_client_is_tried_again_at_once(engine, clock):
    """
    A plain router with one endpoint: its connection closes under the
    client (EOF or reset) after serving longer than retry-interval, and
    the first reconnection attempt, at the same endpoint, is made at once
    (Artemis reconnects at once on a closed connection too); an attempt
    that fails to connect keeps retry-interval before the next one.
    """
    _, net = listener(engine, clock)
    client, events = connect(clock, net, reconnect_attempts=-1, retry_interval_ms=1000)
    clock.advance(2)
    net.cut()
    net.refusing = True
    clock.advance(0)
    assert net.attempts == 2
    clock.advance(0.75)
    assert net.attempts == 2
    clock.advance(0.25)
    assert net.attempts == 3
    net.refusing = False
    clock.advance(1)
    net.flush()
    assert net.attempts == 4 and events == [FAILOVER]


def test_a_send_many_lost_in_flight_is_replayed_and_answered_once(engine, clock):
    """
    The SendBatch frames of a send_many are lost with the connection: the
    reattached session replays them, the router carries each message out
    once, and the one Deferred fires with every id.
    """
    factory, net = listener(engine, clock)
    client, events = connect(clock, net, confirmation_window_size=1 << 20, reconnect_attempts=1)
    d = client.producer(window=5000).send_many("q", [b"%d" % n for n in range(2500)])
    clock.advance(0)  # the turn ends: every SendBatch is written, and lost
    net.cut()
    clock.advance(2)
    net.flush()
    assert events == [FAILOVER] and client.last_failover == "reattached"
    ids = result_of(d)
    assert len(set(ids)) == 2500
    assert engine.queues.depths() == {"q": 2500}
