"""
Tests for what one client may take of a router (L{meshroute.sessions.limits}
and where the client listener applies it): connections, sessions,
subscriptions, unacknowledged deliveries, headers and the time to open.
Each limit costs the client that reached it (a refused command or its
connection, with C{limit-reached} naming the key) and nobody else.

Deterministic: a C{task.Clock}, connections over C{StringTransport}s and
the real SQLite store run inline.
"""

from dataclasses import replace

import pytest

from meshroute.wire import client_frames as f
from meshroute.sessions.limits import ClientLimits, client_limits
from meshroute.sessions.native_listener import ClientFactory
from meshroute.sessions.settings import SessionSettings
from meshroute.config import load_config
from meshroute.wire.codec import encode

from support.router_connection import Connection

SETTINGS = SessionSettings(connection_ttl_check_interval_ms=1000, keep_alive_ms=5000)


def listener(engine, clock, **limits) -> ClientFactory:
    return ClientFactory(engine, clock, settings=replace(SETTINGS, limits=ClientLimits(**limits)))


def connection_error(connection: Connection) -> f.Error:
    """
    The connection-level Error the router sent last, having closed.
    """
    frames = connection.received()
    assert connection.closed, frames
    error = frames[-1]
    assert isinstance(error, f.Error) and error.command_id == 0, frames
    return error


# -- the pure judgements ----------------------------------------------------------------


def test_each_bound_allows_up_to_its_value_and_names_its_key_beyond():
    limits = ClientLimits(max_connections=2, max_sessions=3, max_subscriptions=1,
                          max_unacknowledged=10, max_headers=2, max_header_size=6)
    assert limits.connection_refusal(1) is None
    assert "max-connections is 2" in limits.connection_refusal(2)
    assert limits.session_refusal(2) is None
    assert "max-sessions is 3" in limits.session_refusal(3)
    assert limits.subscription_refusal(0) is None
    assert "max-subscriptions is 1" in limits.subscription_refusal(1)
    assert limits.credit_refusal(4, 3, 3) is None
    assert "max-unacknowledged (10)" in limits.credit_refusal(4, 3, 4)
    assert limits.headers_problem(f.Send(1, "q", {"a": "b", "cd": "e"}, b"", True)) is None
    assert "max-headers is 2" in limits.headers_problem(
        f.Send(1, "q", {"a": "", "b": "", "c": ""}, b"", True))
    assert "max-header-size is 6" in limits.headers_problem(
        f.Send(1, "q", {"abc": "defg"}, b"", True))
    batch = f.SendBatch(1, [["q", {}, b"", True, ""], ["q", {"abcdef": "g"}, b"", True, ""]])
    assert "max-header-size" in limits.headers_problem(batch)
    assert limits.headers_problem(f.Ping(1)) is None


def test_the_configuration_keys_set_the_limits(tmp_path):
    path = tmp_path / "router.toml"
    path.write_text(
        f'[router]\nname = "a"\ndata-dir = "{tmp_path}"\n'
        '[clients.listener]\nendpoint = "tcp:0:interface=127.0.0.1"\n'
        'max-connections = 3\nmax-sessions = 4\nmax-subscriptions = 5\n'
        'max-unacknowledged = 6\nmax-headers = 7\nmax-header-size = 8\n'
        'stage-valid-timeout = "2s"\nmax-frame-size = 65536\n')
    config = load_config(path)
    assert client_limits(config.clients) == ClientLimits(3, 4, 5, 6, 7, 8, 2000, 65536)
    assert config.clients.max_frame_size == 65536


def test_the_defaults_are_the_documented_ones(tmp_path):
    path = tmp_path / "router.toml"
    path.write_text(f'[router]\nname = "a"\ndata-dir = "{tmp_path}"\n'
                    '[clients.listener]\nendpoint = "tcp:0:interface=127.0.0.1"\n')
    config = load_config(path)
    assert client_limits(config.clients) == ClientLimits(
        max_connections=1024, max_sessions=4096, max_subscriptions=256,
        max_unacknowledged=10_000, max_headers=64, max_header_size=65536,
        stage_valid_timeout_ms=15_000)
    assert config.clients.max_frame_size == f.MAX_FRAME_SIZE


# -- connections ---------------------------------------------------------------------


def test_a_connection_beyond_max_connections_is_refused_and_the_others_served(engine, clock):
    factory = listener(engine, clock, max_connections=2)
    first, second = Connection(factory), Connection(factory)
    third = Connection(factory)
    error = connection_error(third)
    assert error.code == f.LIMIT_REACHED and "max-connections is 2" in error.detail
    assert not (first.closed or second.closed)
    first.open()
    second.open()
    third.lose()
    first.lose()
    fourth = Connection(factory)
    assert fourth.open().session_id


# -- the time to open ----------------------------------------------------------------


def test_a_connection_that_says_nothing_is_closed_after_stage_valid_timeout(engine, clock):
    factory = listener(engine, clock, stage_valid_timeout_ms=3000)
    silent, opened = Connection(factory), Connection(factory)
    opened.open(ttl_ms=-1)
    clock.advance(2.999)
    assert not silent.closed
    clock.advance(0.001)
    error = connection_error(silent)
    assert error.code == f.LIMIT_REACHED and "stage-valid-timeout (3000 ms)" in error.detail
    clock.advance(60)
    assert not opened.closed


def test_a_trickled_open_is_closed_after_stage_valid_timeout(engine, clock):
    factory = listener(engine, clock, stage_valid_timeout_ms=2000)
    connection = Connection(factory)
    data = encode(f.Open([1], "c" * 40, "", 60000))  # 4 s at 10 bytes a second
    for byte in data[:-1]:
        connection.protocol.dataReceived(bytes([byte]))
        clock.advance(0.1)
    assert connection.closed
    assert connection_error(connection).code == f.LIMIT_REACHED


# -- sessions ------------------------------------------------------------------------


def test_a_new_session_beyond_max_sessions_is_refused_but_resuming_is_not(engine, clock):
    factory = listener(engine, clock, max_sessions=1)
    first = Connection(factory)
    opened = first.open()
    first.lose()  # disconnected: still held, awaiting a resume
    second = Connection(factory)
    second.send(f.Open([1], "c", "", 60000))
    error = connection_error(second)
    assert error.code == f.LIMIT_REACHED and "max-sessions is 1" in error.detail
    third = Connection(factory)
    assert third.open(opened.session_id).reattached


# -- subscriptions and unacknowledged deliveries ------------------------------------------


def test_a_subscription_beyond_max_subscriptions_is_refused_and_the_session_goes_on(
        engine, clock):
    factory = listener(engine, clock, max_subscriptions=2)
    connection = Connection(factory)
    connection.open()
    connection.send(f.Subscribe(1, 1, "a", 1), f.Subscribe(2, 2, "b", 1),
                    f.Subscribe(3, 3, "c", 1), f.Unsubscribe(4, 1), f.Subscribe(5, 4, "c", 1))
    answers = connection.received()
    assert [type(a).__name__ for a in answers] == ["Confirm", "Confirm", "Error", "Confirm",
                                                   "Confirm"]
    assert answers[2].code == f.LIMIT_REACHED and "max-subscriptions is 2" in answers[2].detail
    assert not connection.closed


def test_credit_and_unacknowledged_deliveries_together_stay_within_the_bound(engine, clock):
    factory = listener(engine, clock, max_unacknowledged=5)
    engine.enqueue("q", *[b"%d" % i for i in range(10)])
    connection = Connection(factory)
    connection.open()
    connection.send(f.Subscribe(1, 1, "q", 6))
    (refused,) = connection.received()
    assert refused.code == f.LIMIT_REACHED and "max-unacknowledged (5)" in refused.detail
    connection.send(f.Subscribe(2, 1, "q", 3))
    frames = connection.received()
    delivered = [frame.delivery_id for frame in frames if isinstance(frame, f.Deliver)]
    assert len(delivered) == 3
    connection.send(f.Credit(3, 1, 3))  # 3 unacknowledged + 3 > 5
    (refused,) = connection.received()
    assert refused.code == f.LIMIT_REACHED
    connection.send(f.Credit(4, 1, 2))
    assert len([x for x in connection.received() if isinstance(x, f.Deliver)]) == 2
    connection.send(f.Ack(5, delivered), f.Credit(6, 1, 3))
    assert len([x for x in connection.received() if isinstance(x, f.Deliver)]) == 3
    assert not connection.closed


# -- headers -------------------------------------------------------------------------


@pytest.mark.parametrize("headers, key", [
    ({f"h{i}": "" for i in range(5)}, "max-headers is 4"),
    ({"h": "x" * 100}, "max-header-size is 64"),
])
def test_a_message_beyond_the_header_bounds_closes_its_connection(engine, clock, headers, key):
    factory = listener(engine, clock, max_headers=4, max_header_size=64)
    bystander, connection = Connection(factory), Connection(factory)
    bystander.open()
    connection.open()
    connection.send(f.Send(1, "q", headers, b"body", True))
    error = connection_error(connection)
    assert error.code == f.LIMIT_REACHED and key in error.detail
    assert engine.submitted == []
    bystander.send(f.Send(1, "q", {"h": "v"}, b"body", True))
    assert len(engine.submitted) == 1 and not bystander.closed


# -- a client that does not read --------------------------------------------------------


def test_a_client_that_does_not_read_is_not_read_until_it_does(engine, clock):
    """
    When the transport's buffer fills (the client does not read its
    Pongs, answers or deliveries), the router stops reading that client,
    whatever else holds reading (sends in progress), and reads again once
    both are gone.
    """
    factory = listener(engine, clock)
    connection = Connection(factory)
    connection.open()
    transport, core = connection.transport, connection.protocol.core
    assert transport.producer is connection.protocol
    transport.producer.pauseProducing()  # the buffer is full
    assert transport.producerState == "paused"
    core.pause()  # and too many sends are in progress
    transport.producer.resumeProducing()  # drained
    assert transport.producerState == "paused"
    core.resume()
    assert transport.producerState == "producing"


def test_a_connection_closed_while_its_client_does_not_read_still_closes(engine, clock):
    factory = listener(engine, clock)
    connection = Connection(factory)
    connection.open()
    connection.transport.producer.pauseProducing()
    connection.send(f.Ping(1), f.Open([1], "again", "", 60000))  # a second Open
    assert connection.closed and connection.transport.producer is None
    assert connection_error(connection).code == f.BAD_COMMAND
