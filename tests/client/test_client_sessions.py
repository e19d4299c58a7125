"""
Tests for the client's side of sessions that survive failures
(docs/client-protocol.md, "Sessions that survive failures"), against a
router the tests script frame by frame (L{scripted_router}) and a
C{task.Clock}: pings and the failure check, the reconnection schedule,
reattachment with replay, the confirmation window, C{Received}, recreation
with unblocked calls, failure listeners and forgotten clients.
"""

import gc

import pytest

from meshroute.cli import receive_command, send_command
from meshroute.client import (
    DISCONNECT,
    FAILOVER,
    ClientOptions,
    SendError,
    SessionError,
    SubscribeError,
    UnblockedError,
    connect_endpoint,
)
from meshroute.client import session_machine
from meshroute.client.core import ClientCore
from meshroute.client.command_stream import RECEIVED_DELAY_S, RECEIVED_EVERY
from meshroute.link.rotation import EndpointRotation
from meshroute.wire import client_frames as f
from meshroute.wire.codec import encode

from support.client_testing import failure_of, kept_clients, result_of  # noqa: F401
from support.client_testing import parse_command as parse
from support.fake_router import OTHER_SESSION, SESSION
from support.scripted_sessions import Session, endpoint  # noqa: F401 (a fixture)

def start(clock, endpoint, **options) -> Session:
    return Session(clock, endpoint, **options)


def send_size(command_id: int, body: bytes, duplicate_id: str = "") -> int:
    return len(encode(f.Send(command_id, "q", {}, body, True, duplicate_id)))


# -- options --------------------------------------------------------------------


def test_default_options_are_artemis_defaults():
    options = ClientOptions()
    assert (options.ttl_ms, options.client_failure_check_period_ms,
            options.confirmation_window_size, options.retry_interval_ms,
            options.retry_interval_multiplier, options.max_retry_interval_ms,
            options.reconnect_attempts, options.initial_connect_attempts) == (
        60000, 30000, -1, 2000, 1.0, 2000, 0, 1)


@pytest.mark.parametrize("changes, message", [
    ({"ttl_ms": 0}, "ttl_ms must be -1 or at least 1"),
    ({"ttl_ms": -2}, "ttl_ms"),
    ({"client_failure_check_period_ms": 0}, "client_failure_check_period_ms"),
    ({"confirmation_window_size": -5}, "confirmation_window_size"),
    ({"reconnect_attempts": -2}, "reconnect_attempts"),
    ({"initial_connect_attempts": 0}, "initial_connect_attempts"),
    ({"retry_interval_multiplier": 0}, "positive"),
    ({"retry_interval_ms": 3000}, "max_retry_interval_ms"),
    ({"ack_delay_ms": -1}, "ack_delay_ms"),
])
def test_impossible_options(changes, message):
    with pytest.raises(ValueError, match=message):
        ClientOptions(**changes)


def test_option_types():
    with pytest.raises(TypeError):
        ClientOptions(ttl_ms="60s")
    with pytest.raises(TypeError):
        ClientOptions(retry_interval_multiplier=True)


def test_overrides_beside_an_options_object(clock, endpoint):
    d = connect_endpoint(clock, endpoint, ClientOptions(ttl_ms=9000), client_id="x")
    router = endpoint.accept()
    open_ = router.open()
    assert (open_.client_id, open_.ttl_ms, open_.session_id) == ("x", 9000, "")
    client = result_of(d)
    assert client.options.ttl_ms == 9000
    client.close()


# -- pings and the failure check --------------------------------------------------


def test_pings_at_a_third_of_the_ttl_when_nothing_else_is_sent(clock, endpoint):
    s = start(clock, endpoint, ttl_ms=60000, client_failure_check_period_ms=-1)
    clock.advance(19.5)
    assert s.router.frames() == []
    clock.advance(0.5)
    (ping,) = s.router.frames()
    assert type(ping) is f.Ping
    s.router.send(f.Pong(ping.n))
    clock.advance(10)
    s.client.send("q", b"x")
    s.router.frames()
    # The send counts: the next ping is a third of the TTL after it.
    clock.advance(19.5)
    assert s.router.frames() == []
    clock.advance(0.5)
    assert [type(x) for x in s.router.frames()] == [f.Ping]
    clock.advance(20)
    assert [type(x) for x in s.router.frames()] == [f.Ping]


def test_pings_follow_the_ttl_in_force(clock, endpoint):
    """
    The router's connection-ttl-override (Opened.ttl_ms) is what counts.
    """
    endpoint_ = endpoint
    d = connect_endpoint(clock, endpoint_, client_id="c", ttl_ms=60000,
                         client_failure_check_period_ms=-1)
    router = endpoint_.accept()
    router.open(ttl_ms=3000)
    client = result_of(d)
    assert client.ttl_ms == 3000
    clock.advance(1)
    assert [type(x) for x in router.frames()] == [f.Ping]
    client.close()


def test_no_pings_and_no_check_when_both_are_never(clock, endpoint):
    s = start(clock, endpoint, ttl_ms=-1, client_failure_check_period_ms=-1)
    for _ in range(100):
        clock.advance(3600)
    assert s.router.frames() == []
    assert not s.router.aborted
    assert clock.getDelayedCalls() == []


def test_probe_when_nothing_was_received_for_two_thirds_of_the_check(clock, endpoint):
    s = start(clock, endpoint, ttl_ms=-1, client_failure_check_period_ms=30000)
    clock.advance(19.5)
    assert s.router.frames() == []
    clock.advance(0.5)
    (ping,) = s.router.frames()
    assert type(ping) is f.Ping
    # Once per silence.
    clock.advance(5)
    assert s.router.frames() == []
    s.router.send(f.Pong(ping.n))
    clock.advance(19.5)
    assert s.router.frames() == []
    clock.advance(0.5)
    assert [type(x) for x in s.router.frames()] == [f.Ping]


def test_default_idle_cadence_is_one_ping_per_third_of_the_ttl(clock, endpoint):
    s = start(clock, endpoint)
    for n in range(5):
        clock.advance(20)
        (ping,) = s.router.frames()
        assert type(ping) is f.Ping
        s.router.send(f.Pong(ping.n))
    assert s.events == [] and not s.router.aborted


def test_the_client_answers_pings(clock, endpoint):
    s = start(clock, endpoint)
    s.router.send(f.Ping(7))
    assert s.router.frames() == [f.Pong(7)]


def test_ping_measures_a_round_trip(clock, endpoint):
    s = start(clock, endpoint)
    d = s.client.ping()
    (ping,) = s.router.frames()
    clock.advance(0.25)
    s.router.send(f.Pong(ping.n))
    assert result_of(d) == 0.25


def test_failure_check_fires_exactly_at_the_period(clock, endpoint):
    s = start(clock, endpoint, ttl_ms=-1, client_failure_check_period_ms=30000)
    pending = s.client.send("q", b"x")
    clock.advance(10)
    s.router.send(f.Ping(1))  # Anything counts as received.
    clock.advance(29.5)
    assert not s.router.aborted and s.events == []
    clock.advance(0.5)
    assert s.router.aborted
    assert s.events == [DISCONNECT]
    assert isinstance(failure_of(pending), UnblockedError)
    error = failure_of(s.client.when_closed())
    assert error.code == "connection-lost" and "nothing received for 30 s" in error.detail


def test_failure_check_never(clock, endpoint):
    s = start(clock, endpoint, ttl_ms=60000, client_failure_check_period_ms=-1)
    clock.advance(3600)
    assert not s.router.aborted


# -- reconnecting ---------------------------------------------------------------


def test_retry_delays_grow_by_the_multiplier_up_to_the_maximum(clock, endpoint):
    s = start(clock, endpoint, reconnect_attempts=5, retry_interval_ms=2000,
              retry_interval_multiplier=2.0, max_retry_interval_ms=10000)
    s.router.lose()
    waits = []
    for _ in range(5):
        attempts = len(endpoint.attempts)
        waited = 0.0
        while len(endpoint.attempts) == attempts:
            clock.advance(0.5)
            waited += 0.5
        waits.append(waited)
        endpoint.refuse()
    assert waits == [2.0, 4.0, 8.0, 10.0, 10.0]
    assert s.events == [DISCONNECT]
    clock.advance(3600)
    assert len(endpoint.attempts) == 6


def test_attempts_exhausted_disconnect_and_unblock_every_pending_call(clock, endpoint):
    s = start(clock, endpoint, reconnect_attempts=2, confirmation_window_size=10_000)
    sent = s.client.send("q", b"in flight")
    subscribed = s.client.subscribe("q", lambda m: None)
    pinged = s.client.ping()
    s.router.lose()
    queued = s.client.send("q", b"while down")
    clock.advance(2)
    endpoint.refuse()
    assert s.events == [] and not queued.called
    clock.advance(2)
    endpoint.refuse()
    assert s.events == [DISCONNECT]
    for d in (sent, subscribed, queued):
        error = failure_of(d)
        assert isinstance(error, UnblockedError) and error.code == "unblocked"
    assert isinstance(failure_of(pinged), UnblockedError)
    assert isinstance(failure_of(s.client.when_closed()), SessionError)
    later = failure_of(s.client.send("q", b"after"))
    assert isinstance(later, SessionError) and not isinstance(later, UnblockedError)
    assert failure_of(s.client.ping()).code == "connection-lost"
    assert result_of(s.client.close()) is None
    assert clock.getDelayedCalls() == []


def test_no_reconnect_attempts_means_disconnect_at_once(clock, endpoint):
    s = start(clock, endpoint)
    pending = s.client.send("q", b"x")
    s.router.lose()
    assert s.events == [DISCONNECT]
    assert len(endpoint.attempts) == 1
    assert isinstance(failure_of(pending), UnblockedError)


def test_reconnect_forever(clock, endpoint):
    s = start(clock, endpoint, reconnect_attempts=-1)
    s.router.lose()
    for _ in range(200):
        clock.advance(2)
        endpoint.refuse()
    assert s.events == [] and len(endpoint.attempts) == 201
    s.reconnect()
    s.router.send(f.Opened(1, SESSION, "router-a", 60000, False, 0))
    assert s.events == [FAILOVER]


def test_a_successful_reconnection_starts_the_count_over(clock, endpoint):
    s = start(clock, endpoint, reconnect_attempts=2, retry_interval_ms=1000,
              retry_interval_multiplier=2.0, max_retry_interval_ms=8000)
    s.router.lose()
    clock.advance(1)
    endpoint.refuse()
    s.reconnect(after=2)
    s.router.send(f.Opened(1, SESSION, "router-a", 60000, False, 0))
    s.router.lose()
    # Two attempts again, from the first delay.
    clock.advance(0.999)
    assert len(endpoint.attempts) == 3
    clock.advance(0.001)
    endpoint.refuse()
    clock.advance(2)
    endpoint.refuse()
    assert s.events == [FAILOVER, DISCONNECT]


def test_open_timeout_is_a_failed_attempt(clock, endpoint):
    s = start(clock, endpoint, reconnect_attempts=2, open_timeout_ms=5000)
    s.router.lose()
    s.reconnect()
    silent = s.router
    clock.advance(4.999)
    assert not silent.aborted
    clock.advance(0.001)
    assert silent.aborted
    s.reconnect()
    s.router.send(f.Opened(1, SESSION, "router-a", 60000, False, 0))
    assert s.events == [FAILOVER]


def test_a_late_connection_lost_of_a_failed_connection_is_ignored(clock, endpoint):
    s = start(clock, endpoint, reconnect_attempts=3, client_failure_check_period_ms=1000,
              ttl_ms=-1)
    old = s.router
    clock.advance(1)
    assert old.aborted
    s.reconnect()
    s.router.send(f.Opened(1, SESSION, "router-a", 60000, False, 0))
    old.lose()
    old.send(f.Ping(1))
    assert s.events == [FAILOVER]
    assert not s.router.aborted


def test_router_refusing_an_open_session_is_a_connection_failure(clock, endpoint):
    s = start(clock, endpoint)
    pending = s.client.send("q", b"x")
    s.router.send(f.Error(0, "bad-command", "out of sequence"))
    s.router.lose()
    assert s.events == [DISCONNECT]
    assert isinstance(failure_of(pending), UnblockedError)
    error = failure_of(s.client.when_closed())
    assert (error.code, error.detail) == ("bad-command", "out of sequence")


def test_refused_reopen_counts_as_a_failed_attempt(clock, endpoint):
    s = start(clock, endpoint, reconnect_attempts=2)
    s.router.lose()
    s.reconnect()
    s.router.send(f.Error(0, "unsupported-version", "no"))
    assert s.router.aborted
    s.reconnect()
    s.router.send(f.Opened(1, SESSION, "router-a", 60000, False, 0))
    assert s.events == [FAILOVER]


# -- the first connection -------------------------------------------------------


def test_initial_connect_attempts(clock, endpoint):
    d = connect_endpoint(clock, endpoint, client_id="c", initial_connect_attempts=3,
                         retry_interval_ms=1000)
    endpoint.refuse()
    clock.advance(0.999)
    assert len(endpoint.attempts) == 1
    clock.advance(0.001)
    endpoint.refuse()
    clock.advance(1)
    assert not d.called
    router = endpoint.accept()
    router.open()
    client = result_of(d)
    assert client.session_id == SESSION
    client.close()


def test_initial_connect_attempts_exhausted(clock, endpoint):
    d = connect_endpoint(clock, endpoint, client_id="c", initial_connect_attempts=2,
                         reconnect_attempts=5)
    endpoint.refuse()
    clock.advance(2)
    endpoint.refuse()
    error = failure_of(d)
    assert isinstance(error, SessionError) and error.code == "connection-lost"
    clock.advance(3600)
    assert len(endpoint.attempts) == 2


def test_initial_connect_attempts_forever(clock, endpoint):
    d = connect_endpoint(clock, endpoint, client_id="c", initial_connect_attempts=-1)
    for _ in range(50):
        endpoint.refuse()
        clock.advance(2)
    assert not d.called and len(endpoint.attempts) == 51
    d.cancel()
    assert isinstance(failure_of(d), SessionError)
    clock.advance(3600)
    assert len(endpoint.attempts) == 51


def test_a_refused_first_open_is_final(clock, endpoint):
    d = connect_endpoint(clock, endpoint, client_id="c", initial_connect_attempts=5)
    router = endpoint.accept()
    router.frames()
    router.send(f.Error(0, "unsupported-version", "this router speaks [2]"))
    error = failure_of(d)
    assert (error.code, error.detail) == ("unsupported-version", "this router speaks [2]")
    clock.advance(3600)
    assert len(endpoint.attempts) == 1


# -- reattachment ---------------------------------------------------------------


def test_reattach_replays_what_the_router_did_not_receive(clock, endpoint):
    s = start(clock, endpoint, confirmation_window_size=100_000, reconnect_attempts=1)
    sends = [s.client.send("q", b"%d" % n, duplicate_id=f"d{n}") for n in range(1, 6)]
    assert [x.command_id for x in s.router.frames()] == [1, 2, 3, 4, 5]
    s.router.send(f.Confirm(1, "m1"))
    assert result_of(sends[0]) == "m1"
    s.router.lose()
    assert not any(d.called for d in sends[1:])
    later = s.client.send("q", b"6")
    open_ = s.reconnect()
    assert (open_.session_id, open_.answered_up_to, open_.delivered_up_to) == (SESSION, 1, 0)
    # The router received 1 to 3 and completed 2 while disconnected.
    s.router.send(f.Opened(1, SESSION, "router-a", 60000, True, 3), f.Confirm(2, "m2"))
    written = s.router.of(f.Send)
    assert [(x.command_id, x.body, x.duplicate_id) for x in written] == [
        (4, b"4", "d4"), (5, b"5", "d5"), (6, b"6", "")]
    s.router.send(*[f.Confirm(n, f"m{n}") for n in (3, 4, 5, 6)])
    assert [result_of(d) for d in sends + [later]] == ["m1", "m2", "m3", "m4", "m5", "m6"]
    assert s.events == [FAILOVER]
    assert s.client.last_failover == "reattached"
    assert s.client.session_id == SESSION


def test_answers_received_twice_are_ignored(clock, endpoint):
    s = start(clock, endpoint, confirmation_window_size=100_000, reconnect_attempts=1)
    first, second = s.client.send("q", b"1"), s.client.send("q", b"2")
    s.router.send(f.Confirm(2, "m2"))
    s.router.lose()
    open_ = s.reconnect()
    assert open_.answered_up_to == 0
    s.router.send(f.Opened(1, SESSION, "router-a", 60000, True, 2),
                  f.Confirm(1, "m1"), f.Confirm(2, "m2"))
    assert (result_of(first), result_of(second)) == ("m1", "m2")
    assert s.router.of(f.Send) == []


def test_reattach_keeps_deliveries_and_their_acks(clock, endpoint):
    s = start(clock, endpoint, confirmation_window_size=100_000, reconnect_attempts=1)
    got = []
    sub = s.client.subscribe("q", got.append, prefetch=10)
    s.router.send(f.Confirm(1, ""))
    result_of(sub)
    s.router.send(*[f.Deliver(n, 1, f"m{n}", "router-a", {}, b"%d" % n, False)
                    for n in (1, 2, 3)])
    s.turn()
    s.router.frames()
    s.router.lose()
    got[0].ack()
    open_ = s.reconnect()
    assert (open_.answered_up_to, open_.delivered_up_to) == (1, 3)
    # The recovery buffer re-sends 3 (already here) and 4 (new).
    s.router.send(f.Opened(1, SESSION, "router-a", 60000, True, 1),
                  f.Deliver(3, 1, "m3", "router-a", {}, b"3", False),
                  f.Deliver(4, 1, "m4", "router-a", {}, b"4", False))
    assert [m.body for m in got] == [b"1", b"2", b"3", b"4"]
    s.turn()
    frames = s.router.frames()
    assert f.Ack(2, [1]) in frames and f.Credit(3, 1, 1) in frames
    clock.advance(RECEIVED_DELAY_S)
    s.turn()
    assert s.router.frames() == [f.Received(1, 4)]


def test_reattach_to_a_router_claiming_unsent_commands_is_a_protocol_error(
        clock, endpoint, observe_errors):
    s = start(clock, endpoint, confirmation_window_size=100_000, reconnect_attempts=2)
    s.client.send("q", b"1")
    s.router.lose()
    s.reconnect()
    s.router.send(f.Opened(1, SESSION, "router-a", 60000, True, 7))
    assert s.router.aborted
    assert s.events == []
    s.reconnect()
    s.router.send(f.Opened(1, SESSION, "router-a", 60000, True, 1))
    assert s.events == [FAILOVER]


# -- the confirmation window ------------------------------------------------------


def test_a_full_window_makes_commands_wait(clock, endpoint):
    size = send_size(1, b"x" * 100)
    s = start(clock, endpoint, confirmation_window_size=2 * size)
    sends = [s.client.send("q", b"x" * 100) for _ in range(4)]
    assert [x.command_id for x in s.router.of(f.Send)] == [1, 2]
    assert not any(d.called for d in sends)
    s.router.send(f.Confirm(2, "m2"))
    assert [x.command_id for x in s.router.of(f.Send)] == [3]
    s.router.send(f.Error(1, "backlog-full", "wait"))
    assert [x.command_id for x in s.router.of(f.Send)] == [4]
    s.router.send(f.Confirm(3, "m3"), f.Confirm(4, "m4"))
    assert isinstance(failure_of(sends[0]), SendError)
    assert [result_of(d) for d in sends[1:]] == ["m2", "m3", "m4"]


def test_processed_frees_acks_and_credit(clock, endpoint):
    s = start(clock, endpoint, confirmation_window_size=30)
    got = []
    s.client.subscribe("q", got.append, prefetch=5)
    s.router.frames()
    s.router.send(f.Confirm(1, ""))
    s.router.send(f.Deliver(1, 1, "m", "r", {}, b"", False))
    got[0].ack()
    s.turn()
    assert [type(x) for x in s.router.frames()] == [f.Ack, f.Credit]
    blocked = s.client.send("q", b"y" * 20)
    assert s.router.frames() == []
    # An answer to neither; Processed covers both.
    s.router.send(f.Processed(3))
    (send,) = s.router.of(f.Send)
    assert send.command_id == 4
    assert not blocked.called


def test_a_command_larger_than_the_window_goes_alone(clock, endpoint):
    s = start(clock, endpoint, confirmation_window_size=10)
    big, small = s.client.send("q", b"x" * 50), s.client.send("q", b"y")
    assert [x.command_id for x in s.router.of(f.Send)] == [1]
    s.router.send(f.Confirm(1, "m1"))
    assert [x.command_id for x in s.router.of(f.Send)] == [2]
    assert result_of(big) == "m1" and not small.called


def test_without_a_window_nothing_waits(clock, endpoint):
    s = start(clock, endpoint)
    for n in range(1000):
        s.client.send("q", b"%d" % n)
    assert len(s.router.of(f.Send)) == 1000


def test_processed_beyond_what_was_sent_is_a_protocol_error(clock, endpoint):
    s = start(clock, endpoint)
    pending = s.client.send("q", b"x")
    s.router.send(f.Processed(2))
    assert s.router.aborted
    assert isinstance(failure_of(pending), UnblockedError)


# -- acknowledgements that wait -------------------------------------------------


ACK_DELAY_S = ClientOptions.ack_delay_ms / 1000


def consuming(clock, endpoint, prefetch: int = 10, **options):
    """
    A session with a subscription (C{prefetch}) confirmed, and the
    deliveries it got, each to acknowledge; nothing written unread.
    """
    s = start(clock, endpoint, **options)
    got = []
    s.client.subscribe("q", got.append, prefetch=prefetch)
    s.turn()
    s.router.send(f.Confirm(1, ""))
    s.turn()
    s.router.frames()
    return s, got


def deliver(s, *delivery_ids: int) -> None:
    for delivery_id in delivery_ids:
        s.router.send(f.Deliver(delivery_id, 1, f"m{delivery_id}", "r", {}, b"", False))


def test_acknowledgements_wait_for_their_delay_when_nothing_else_is_written(clock, endpoint):
    s, got = consuming(clock, endpoint)
    deliver(s, 1)
    got[0].ack()
    s.turn()
    deliver(s, 2)
    got[1].ack()
    s.turn()
    clock.advance(ACK_DELAY_S - 0.001)
    assert s.router.frames() == []
    clock.advance(0.001)
    s.turn()
    frames = s.router.frames()
    assert frames[:2] == [f.Ack(2, [1, 2]), f.Credit(3, 1, 2)]
    clock.advance(ACK_DELAY_S)
    assert s.router.of(f.Ack) == []


def test_acknowledgements_go_with_any_other_frame_of_their_turn(clock, endpoint):
    s, got = consuming(clock, endpoint)
    deliver(s, 1)
    got[0].ack()
    s.client.send("q", b"x")
    s.turn()
    frames = s.router.frames()
    assert [type(x) for x in frames][:3] == [f.Send, f.Ack, f.Credit]
    assert frames[1] == f.Ack(3, [1])


def test_acknowledgements_go_at_once_when_half_the_prefetch_is_owed(clock, endpoint):
    s, got = consuming(clock, endpoint, prefetch=4)
    deliver(s, 1)
    got[0].ack()
    s.turn()
    assert s.router.frames() == []  # 1 of 4 owed
    deliver(s, 2)
    got[1].ack()
    s.turn()
    assert s.router.frames()[:2] == [f.Ack(2, [1, 2]), f.Credit(3, 1, 2)]


@pytest.mark.parametrize("options", [{"ack_delay_ms": 0}, {"transacted": True}])
def test_acknowledgements_that_never_wait(clock, endpoint, options):
    s, got = consuming(clock, endpoint, **options)
    deliver(s, 1)
    got[0].ack()
    s.turn()
    assert f.Ack in [type(x) for x in s.router.frames()]


def test_closing_writes_the_waiting_acknowledgements_first(clock, endpoint):
    s, got = consuming(clock, endpoint)
    deliver(s, 1)
    got[0].ack()
    s.turn()
    assert s.router.frames() == []
    s.client.close()
    s.turn()
    frames = s.router.frames()
    assert frames.index(f.Ack(2, [1])) < [type(x) for x in frames].index(f.Close)


# -- Received -------------------------------------------------------------------


def test_received_waits_for_its_delay_when_other_frames_go(clock, endpoint):
    s = start(clock, endpoint)
    got = []
    s.client.subscribe("q", got.append)
    s.turn()
    s.router.frames()
    s.router.send(f.Confirm(1, ""))
    s.turn()
    # It grew, but it waits.
    assert s.router.frames() == []
    s.router.send(f.Deliver(1, 1, "m", "r", {}, b"", False))
    got[0].ack()
    s.turn()
    # The acknowledgement waits for its delay too.
    assert s.router.frames() == []
    clock.advance(ClientOptions.ack_delay_ms / 1000)
    s.turn()
    # The acknowledgement goes; the report does not go with it.
    assert [type(x) for x in s.router.frames()] == [f.Ack, f.Credit]
    clock.advance(RECEIVED_DELAY_S - ClientOptions.ack_delay_ms / 1000)
    s.turn()
    assert s.router.frames() == [f.Received(1, 1)]
    s.turn()
    assert s.router.frames() == []


def test_received_unreported_for_its_delay_goes_alone(clock, endpoint):
    s = start(clock, endpoint)
    s.client.send("q", b"1")
    s.turn()
    s.router.frames()
    s.router.send(f.Confirm(1, "m1"))
    s.turn()
    clock.advance(RECEIVED_DELAY_S - 0.001)
    assert s.router.frames() == []
    clock.advance(0.001)
    s.turn()
    assert s.router.frames() == [f.Received(1, 0)]
    clock.advance(RECEIVED_DELAY_S)
    s.turn()
    assert s.router.frames() == []


def test_received_goes_at_once_when_much_is_unreported(clock, endpoint):
    s = start(clock, endpoint)
    for n in range(1, RECEIVED_EVERY + 1):
        s.client.send("q", b"%d" % n)
    s.turn()
    s.router.frames()
    s.router.send(*[f.Confirm(n, f"m{n}") for n in range(1, RECEIVED_EVERY)])
    s.turn()
    assert s.router.frames() == []
    s.router.send(f.Confirm(RECEIVED_EVERY, "last"))
    s.turn()
    assert s.router.frames() == [f.Received(RECEIVED_EVERY, 0)]
    # The wait for the first ones' report ended with it.
    clock.advance(RECEIVED_DELAY_S)
    s.turn()
    assert s.router.frames() == []


def test_acks_count_as_held_once_processed(clock, endpoint):
    s = start(clock, endpoint)
    got = []
    s.client.subscribe("q", got.append)
    s.router.send(f.Confirm(1, ""), f.Deliver(1, 1, "m", "r", {}, b"", False))
    got[0].ack()
    s.turn()
    clock.advance(RECEIVED_DELAY_S)
    s.turn()
    assert s.router.frames()[-1] == f.Received(1, 1)
    s.router.send(f.Processed(3))
    s.turn()
    clock.advance(RECEIVED_DELAY_S)
    s.turn()
    assert s.router.frames() == [f.Received(3, 1)]


# -- recreation -----------------------------------------------------------------


def test_without_a_window_a_failure_recreates_the_session(clock, endpoint):
    s = start(clock, endpoint, reconnect_attempts=1)
    got = []
    sub_d = s.client.subscribe("orders", got.append, prefetch=7)
    s.router.send(f.Confirm(1, ""))
    subscription = result_of(sub_d)
    s.router.send(f.Deliver(1, 1, "m1", "r", {}, b"one", False))
    in_flight = s.client.send("q", b"x")
    s.router.frames()
    s.router.lose()
    queued = s.client.send("q", b"queued while down")
    got[0].ack()  # Of the old session: dropped.
    open_ = s.reconnect()
    assert (open_.session_id, open_.answered_up_to, open_.delivered_up_to) == ("", 0, 0)
    s.router.send(f.Opened(1, OTHER_SESSION, "router-a", 60000, False, 0))
    error = failure_of(in_flight)
    assert isinstance(error, UnblockedError) and error.code == "unblocked"
    assert s.router.frames() == [
        f.Subscribe(1, subscription.number, "orders", 7),
        f.Send(2, "q", {}, b"queued while down", True, ""),
    ]
    assert s.events == [FAILOVER]
    assert s.client.last_failover == "recreated"
    assert s.client.session_id == OTHER_SESSION
    s.router.send(f.Confirm(1, ""), f.Confirm(2, "new"))
    assert result_of(queued) == "new"
    s.router.send(f.Deliver(1, 1, "m1", "r", {}, b"one", True))
    assert [(m.body, m.redelivered) for m in got] == [(b"one", False), (b"one", True)]
    got[1].ack()
    s.turn()
    assert f.Ack(3, [1]) in s.router.frames()


def test_an_expired_session_is_recreated(clock, endpoint):
    s = start(clock, endpoint, confirmation_window_size=100_000, reconnect_attempts=1)
    confirmed = s.client.subscribe("a", lambda m: None, prefetch=3, max_messages=5)
    s.router.send(f.Confirm(1, ""))
    result_of(confirmed)
    unconfirmed = s.client.subscribe("b", lambda m: None)
    cancelled = s.client.subscribe("c", lambda m: None)
    s.router.send(f.Confirm(3, ""))
    cancelling = result_of(cancelled).cancel()
    sent = s.client.send("q", b"x")
    s.router.frames()
    s.router.lose()
    open_ = s.reconnect()
    assert open_.session_id == SESSION
    s.router.send(f.Opened(1, OTHER_SESSION, "router-a", 60000, False, 0))
    assert s.router.frames() == [f.Subscribe(1, 1, "a", 3)]
    assert isinstance(failure_of(unconfirmed), UnblockedError)
    assert isinstance(failure_of(sent), UnblockedError)
    assert result_of(cancelling) is None
    assert s.events == [FAILOVER]


def test_two_quick_recreations_keep_every_subscription(clock, endpoint):
    """
    Issue 8, scenario 7: the session is lost again before the router
    confirmed the re-subscription of the first recreation; the second
    recreation subscribes again all the same, and the subscription still
    delivers.
    """
    s = start(clock, endpoint, reconnect_attempts=-1)
    got = []
    d = s.client.subscribe("a", got.append, prefetch=4)
    s.router.send(f.Confirm(1, ""))
    subscription = result_of(d)
    s.recreated(OTHER_SESSION)
    assert s.router.frames() == [f.Subscribe(1, 1, "a", 4)]
    s.recreated(SESSION)  # Before Confirm(1).
    assert s.router.frames() == [f.Subscribe(1, 1, "a", 4)]
    assert subscription.active
    s.router.send(f.Confirm(1, ""), f.Deliver(1, 1, "m", "r", {}, b"x", False))
    assert [m.body for m in got] == [b"x"]
    assert s.events == [FAILOVER, FAILOVER]


def test_a_resubscription_waiting_for_room_is_made_once(clock, endpoint):
    """
    A re-subscription still waiting for room in the confirmation window
    when the session is lost again is made once in the next session, and
    a subscription cancelled meanwhile is not made again.
    """
    s = start(clock, endpoint, reconnect_attempts=-1, confirmation_window_size=1)
    kept = s.client.subscribe("a", lambda m: None, prefetch=2)
    s.router.send(f.Confirm(1, ""))
    result_of(kept)
    dropped = s.client.subscribe("b", lambda m: None, prefetch=3)
    s.router.send(f.Confirm(2, ""))
    cancelled = result_of(dropped)
    s.recreated(OTHER_SESSION)
    # The window holds one command: Subscribe b waits behind Subscribe a.
    assert s.router.frames() == [f.Subscribe(1, 1, "a", 2)]
    cancelling = cancelled.cancel()
    s.recreated(SESSION)
    assert s.router.frames() == [f.Subscribe(1, 1, "a", 2)]
    assert result_of(cancelling) is None
    s.router.send(f.Confirm(1, ""))
    assert s.router.frames() == []


def test_a_refused_resubscription_ends_the_subscription_visibly(clock, endpoint):
    s = start(clock, endpoint, reconnect_attempts=1)
    got = []
    d = s.client.subscribe("a", got.append)
    s.router.send(f.Confirm(1, ""))
    subscription = result_of(d)
    ended = subscription.when_ended()
    assert not ended.called
    s.recreated(OTHER_SESSION)
    s.router.send(f.Error(1, "bad-address", "gone"))
    s.router.send(f.Deliver(1, 1, "m", "r", {}, b"", False))
    assert got == []
    error = failure_of(ended)
    assert isinstance(error, SubscribeError) and error.code == "bad-address"
    assert not subscription.active


def test_a_subscription_ends_with_its_cancel_or_its_session(clock, endpoint):
    s = start(clock, endpoint, reconnect_attempts=0)
    a = s.client.subscribe("a", lambda m: None)
    b = s.client.subscribe("b", lambda m: None)
    s.router.send(f.Confirm(1, ""), f.Confirm(2, ""))
    a, b = result_of(a), result_of(b)
    a.cancel()
    assert not a.when_ended().called
    s.router.send(f.Confirm(3, ""))
    assert result_of(a.when_ended()) is None
    ended = b.when_ended()
    s.router.lose()
    assert isinstance(failure_of(ended), SessionError)
    assert isinstance(failure_of(b.when_ended()), SessionError)


def test_unblocked_sends_can_be_retried_at_once(clock, endpoint):
    s = start(clock, endpoint, reconnect_attempts=1)
    retried = []

    def retry(failure):
        failure.trap(UnblockedError)
        retried.append(s.client.send("q", b"x", duplicate_id="dup-1"))

    s.client.send("q", b"x", duplicate_id="dup-1").addErrback(retry)
    s.router.lose()
    s.reconnect()
    s.router.send(f.Opened(1, OTHER_SESSION, "router-a", 60000, False, 0))
    assert s.router.of(f.Send) == [f.Send(1, "q", {}, b"x", True, "dup-1")]
    s.router.send(f.Confirm(1, "m1"))
    assert result_of(retried[0]) == "m1"


# -- failure listeners ------------------------------------------------------------


def test_failure_listeners(clock, endpoint, observe_errors):
    s = start(clock, endpoint, reconnect_attempts=1)
    other = []

    def broken(event):
        raise RuntimeError("listener bug")

    s.client.add_failure_listener(other.append)
    s.client.add_failure_listener(broken)
    s.router.lose()
    s.reconnect()
    s.router.send(f.Opened(1, SESSION, "router-a", 60000, False, 0))
    s.client.remove_failure_listener(other.append)
    s.router.lose()
    clock.advance(2)
    endpoint.refuse()
    assert s.events == [FAILOVER, DISCONNECT]
    assert other == [FAILOVER]
    assert len(observe_errors.take(lambda e: e.get("log_failure") is not None)) == 2


# -- closing ----------------------------------------------------------------------


def test_close_waits_for_waiting_commands_then_closes(clock, endpoint):
    size = send_size(1, b"x")
    s = start(clock, endpoint, confirmation_window_size=size)
    first, second = s.client.send("q", b"x"), s.client.send("q", b"x")
    closed = s.client.close()
    assert [type(x) for x in s.router.frames()] == [f.Send]
    s.router.send(f.Confirm(1, "m1"))
    assert [type(x) for x in s.router.frames()] == [f.Send]
    s.router.send(f.Confirm(2, "m2"))
    assert s.router.frames() == [f.Close(3)]
    assert isinstance(failure_of(s.client.send("q", b"late")), SessionError)
    s.router.send(f.Closed())
    assert s.router.transport.disconnecting
    s.router.lose()
    assert result_of(closed) is None
    assert (result_of(first), result_of(second)) == ("m1", "m2")
    assert clock.getDelayedCalls() == []


def test_close_while_reconnecting(clock, endpoint):
    s = start(clock, endpoint, reconnect_attempts=-1, confirmation_window_size=1000)
    pending = s.client.send("q", b"x")
    s.router.lose()
    closed = s.client.close()
    assert result_of(closed) is None
    assert isinstance(failure_of(pending), UnblockedError)
    clock.advance(3600)
    assert len(endpoint.attempts) == 1
    assert s.events == []


def test_close_during_a_connection_attempt(clock, endpoint):
    s = start(clock, endpoint, reconnect_attempts=-1)
    s.router.lose()
    clock.advance(2)
    assert len(endpoint.attempts) == 2
    closed = s.client.close()
    assert result_of(closed) is None
    # The attempt is cancelled.
    assert endpoint.attempts[-1].deferred.called
    clock.advance(3600)
    assert len(endpoint.attempts) == 2


def test_connection_lost_while_closing(clock, endpoint):
    s = start(clock, endpoint, reconnect_attempts=5)
    pending = s.client.send("q", b"x")
    closed = s.client.close()
    s.router.lose()
    assert result_of(closed) is None
    assert isinstance(failure_of(pending), UnblockedError)
    assert len(endpoint.attempts) == 1


# -- forgotten clients ------------------------------------------------------------


def _forgotten_client(clock, endpoint):
    d = connect_endpoint(clock, endpoint, client_id="careless")
    router = endpoint.accept()
    router.open()
    result_of(d)
    return router


def test_a_forgotten_client_warns_and_closes(clock, endpoint, kept_clients):
    from twisted.logger import LogLevel, globalLogPublisher

    warnings = []

    def observer(event):
        if event.get("log_level") == LogLevel.warn:
            warnings.append(event)

    globalLogPublisher.addObserver(observer)
    try:
        router = _forgotten_client(clock, endpoint)
        kept_clients.clear()
        gc.collect()
        assert router.frames() == []
        clock.advance(0)
    finally:
        globalLogPublisher.removeObserver(observer)
    (warning,) = [w for w in warnings if "garbage-collected" in w["log_format"]]
    assert warning["client_id"] == "careless"
    assert "test_client_sessions.py" in warning["created_at"]
    assert "_forgotten_client" in warning["created_at"]
    assert router.frames() == [f.Close(1)]
    assert router.transport.disconnecting
    assert clock.getDelayedCalls() == []


def test_a_closed_client_is_not_reported(clock, endpoint, kept_clients):
    from twisted.logger import globalLogPublisher

    events = []
    globalLogPublisher.addObserver(events.append)
    try:
        d = connect_endpoint(clock, endpoint, client_id="tidy")
        endpoint.accept().open()
        result_of(d).close()
        del d
        kept_clients.clear()
        gc.collect()
    finally:
        globalLogPublisher.removeObserver(events.append)
    assert not [e for e in events if "garbage-collected" in e.get("log_format", "")]


def test_a_used_client_is_not_forgotten(clock, endpoint, kept_clients):
    """
    A client its application still reaches (here through a callback) is
    not collected.
    """
    s = start(clock, endpoint)
    holder = [s.client]
    s.client.subscribe("q", lambda m: holder.append(holder[0]))
    del s.client
    kept_clients.clear()
    gc.collect()
    clock.advance(0)
    assert not s.router.aborted


def test_subscribe_refused(clock, endpoint):
    s = start(clock, endpoint)
    d = s.client.subscribe("bad/name", lambda m: None)
    s.router.send(f.Error(1, "bad-address", "no"))
    assert isinstance(failure_of(d), SubscribeError)


# -- the commands ---------------------------------------------------------------


def test_command_defaults_are_the_client_defaults():
    for argv in (["send", "--connect", "c", "--to", "q"], ["receive", "--connect", "c",
                                                           "--queue", "q"]):
        assert parse(argv).client_options() == ClientOptions()
    assert parse(["send", "--connect", "c", "--to", "q"]).duplicate_id(4) is None


def test_command_session_options():
    options = parse([
        "send", "--connect", "c", "--to", "q", "--ttl", "5s",
        "--client-failure-check-period", "-1", "--reconnect-attempts", "-1",
        "--retry-interval", "500ms", "--retry-interval-multiplier", "2",
        "--max-retry-interval", "8000", "--initial-connect-attempts", "3",
        "--confirmation-window-size", "65536", "--client-id", "batch",
        "--duplicate-id-prefix", "batch-7-",
    ])
    assert options.client_options() == ClientOptions(
        client_id="batch", ttl_ms=5000, client_failure_check_period_ms=-1,
        reconnect_attempts=-1, retry_interval_ms=500, retry_interval_multiplier=2.0,
        max_retry_interval_ms=8000, initial_connect_attempts=3,
        confirmation_window_size=65536)
    assert options.duplicate_id(3) == "batch-7-3"
    receive = parse(["receive", "--connect", "c", "--queue", "q", "--ttl", "-1",
                     "--reconnect-attempts", "4", "--confirmation-window-size", "0"])
    assert (receive.client_options().ttl_ms, receive.client_options().reconnect_attempts,
            receive.client_options().confirmation_window_size) == (-1, 4, 0)


def test_a_longer_retry_interval_raises_the_default_maximum():
    options = parse(["send", "--connect", "c", "--to", "q", "--retry-interval", "5s"])
    assert (options.client_options().retry_interval_ms,
            options.client_options().max_retry_interval_ms) == (5000, 5000)


@pytest.mark.parametrize("argv, message", [
    (["--ttl", "0"], "--ttl must be -1 or at least 1"),
    (["--ttl", "-2"], "--ttl must be -1 or at least 1"),
    (["--ttl", "soon"], "expected integer milliseconds"),
    (["--client-failure-check-period", "0"], "--client-failure-check-period"),
    (["--reconnect-attempts", "-2"], "--reconnect-attempts must be -1 or at least 0"),
    (["--reconnect-attempts", "x"], "must be an integer"),
    (["--initial-connect-attempts", "0"], "--initial-connect-attempts must be -1 or at least 1"),
    (["--confirmation-window-size", "-3"], "--confirmation-window-size"),
    (["--retry-interval", "-1"], "--retry-interval must be at least 0"),
    (["--retry-interval-multiplier", "0"], "positive"),
    (["--retry-interval", "3000", "--max-retry-interval", "1000"],
     "--max-retry-interval .1000. is less than --retry-interval .3000."),
])
def test_command_session_option_errors(argv, message):
    from twisted.python import usage

    for command in (["send", "--connect", "c", "--to", "q"],
                    ["receive", "--connect", "c", "--queue", "q"]):
        with pytest.raises(usage.UsageError, match=message):
            parse(command + argv)


def test_receive_has_no_duplicate_ids():
    from twisted.python import usage

    with pytest.raises(usage.UsageError):
        parse(["receive", "--connect", "c", "--queue", "q", "--duplicate-id-prefix", "x"])


def _run(command, clock, endpoint, argv):
    import io

    from twisted.internet.defer import ensureDeferred

    out, err = io.StringIO(), io.StringIO()

    def connect(reactor, endpoint_strings, options):
        # The client names the fake endpoint by its repr (a real connect
        # names it by the string given).
        return connect_endpoint(clock, endpoint, options)

    d = ensureDeferred(command(clock, parse(argv), out, err, connect=connect))
    return d, out, err


def _finish_close(router) -> None:
    assert type(router.frames()[-1]) is f.Close
    router.send(f.Closed())
    router.lose()


def test_send_retries_unblocked_sends_with_their_duplicate_ids(clock, endpoint):
    """
    The router restarted (session gone) while messages 2 and 3 were in
    flight: the command sends them again with the same duplicate ids, so
    the router (which keeps duplicate ids across restarts) enqueues each
    once, and the command succeeds.
    """
    d, out, err = _run(send_command.run_send, clock, endpoint, [
        "send", "--connect", "tcp:x:1", "--to", "q", "--count", "3",
        "--duplicate-id-prefix", "run-1-", "--reconnect-attempts", "5"])
    router = endpoint.accept()
    router.open()
    assert [x.duplicate_id for x in router.of(f.Send)] == ["run-1-1", "run-1-2", "run-1-3"]
    router.send(f.Confirm(1, "m1"))
    router.lose()
    clock.advance(2)
    endpoint.refuse()
    clock.advance(2)
    router = endpoint.accept()
    router.open(session_id=OTHER_SESSION)
    again = router.of(f.Send)
    assert [(x.command_id, x.body, x.duplicate_id) for x in again] == [
        (1, b"message 2", "run-1-2"), (2, b"message 3", "run-1-3")]
    router.send(f.Confirm(1, "m2"), f.Confirm(2, "m3"))
    _finish_close(router)
    assert result_of(d) == 0, err.getvalue()
    assert out.getvalue() == "3 messages to q accepted\n"
    assert err.getvalue() == (
        f"meshroute: the connection to {endpoint!r} failed; session recreated (FAILOVER)\n"
        "meshroute: sent 2 messages again after the session was recreated\n")


def test_send_without_duplicate_ids_does_not_guess(clock, endpoint):
    d, out, err = _run(send_command.run_send, clock, endpoint, [
        "send", "--connect", "tcp:x:1", "--to", "q", "--count", "2",
        "--reconnect-attempts", "1"])
    router = endpoint.accept()
    router.open()
    router.lose()
    clock.advance(2)
    router = endpoint.accept()
    router.open(session_id=OTHER_SESSION)
    _finish_close(router)
    assert result_of(d) == 1
    assert "message 1: unblocked: " in err.getvalue()
    assert "with --duplicate-id-prefix it is sent again safely" in err.getvalue()


def test_send_rides_out_a_cut_with_a_window(clock, endpoint):
    d, out, err = _run(send_command.run_send, clock, endpoint, [
        "send", "--connect", "tcp:x:1", "--to", "q", "--count", "3",
        "--reconnect-attempts", "1", "--confirmation-window-size", "100000"])
    router = endpoint.accept()
    router.open()
    router.frames()
    router.lose()
    clock.advance(2)
    router = endpoint.accept()
    router.open(reattached=True, last_command_id=2)
    assert [x.command_id for x in router.of(f.Send)] == [3]
    router.send(*[f.Confirm(n, f"m{n}") for n in (1, 2, 3)])
    _finish_close(router)
    assert result_of(d) == 0
    assert err.getvalue() == (
        f"meshroute: the connection to {endpoint!r} failed; session reattached (FAILOVER)\n")


def test_send_gives_up(clock, endpoint):
    d, out, err = _run(send_command.run_send, clock, endpoint, [
        "send", "--connect", "tcp:x:1", "--to", "q", "--duplicate-id-prefix", "p"])
    router = endpoint.accept()
    router.open()
    router.lose()
    assert result_of(d) == 1
    assert err.getvalue().startswith(
        f"meshroute: the connection to {endpoint!r} failed; gave up reconnecting (DISCONNECT)\n"
        "meshroute: send to q failed: message 1: unblocked: gave up reconnecting "
        "(connection-lost: ")


def test_receive_resubscribes_after_a_recreation(clock, endpoint):
    d, out, err = _run(receive_command.run_receive, clock, endpoint, [
        "receive", "--connect", "tcp:x:1", "--queue", "q", "--count", "2", "--prefetch", "5",
        "--reconnect-attempts", "1"])
    router = endpoint.accept()
    router.open()
    assert router.frames() == [f.Subscribe(1, 1, "q", 2)]
    router.send(f.Confirm(1, ""), f.Deliver(1, 1, "m1", "r", {}, b"one", False))
    router.lose()
    clock.advance(2)
    router = endpoint.accept()
    router.open(session_id=OTHER_SESSION)
    # One message is still wanted.
    assert router.frames() == [f.Subscribe(1, 1, "q", 1)]
    router.send(f.Confirm(1, ""), f.Deliver(1, 1, "m2", "r", {}, b"two", False))
    assert not d.called
    frames = router.frames()
    assert frames[-2:] == [f.Ack(2, [1]), f.Close(3)]
    router.send(f.Closed())
    router.lose()
    assert result_of(d) == 0
    assert out.getvalue() == "one\ntwo\n"


# -- the machine ----------------------------------------------------------------


def test_every_state_takes_every_call_of_the_application(clock, endpoint):
    """
    Whatever the state, the application's calls and the client's own
    timers have a transition: none of them can raise NoTransition.
    """
    core = ClientCore(clock, EndpointRotation([("scripted", endpoint)]), ClientOptions(), "c",
                      "here", lambda description: endpoint)
    table = session_machine.transitions(core)
    states = {state for state, _ in table}
    assert states == {session_machine.CONNECTING, session_machine.OPENING,
                      session_machine.WAITING_TO_RETRY, session_machine.CONNECTED,
                      session_machine.WAITING_TO_RECONNECT, session_machine.RECONNECTING,
                      session_machine.REOPENING, session_machine.CLOSING,
                      session_machine.CLOSED, session_machine.DISCONNECTED}
    for state in states:
        for name in ("submit", "close_requested", "forgotten", "ping_requested", "turn_ended"):
            assert (state, name) in table, (state, name)


def test_a_frame_out_of_stage_fails_the_connection(clock, endpoint):
    d = connect_endpoint(clock, endpoint, client_id="c")
    router = endpoint.accept()
    router.frames()
    router.send(f.Confirm(1, "too early"))
    assert router.aborted
    error = failure_of(d)
    assert error.code == f.PROTOCOL_ERROR and "Confirm" in error.detail


def test_cancelling_connect_while_opening(clock, endpoint):
    d = connect_endpoint(clock, endpoint, client_id="c", initial_connect_attempts=-1)
    router = endpoint.accept()
    d.cancel()
    assert isinstance(failure_of(d), SessionError)
    assert router.aborted
    assert clock.getDelayedCalls() == []


def test_receive_subscribes_again_when_unblocked(clock, endpoint):
    d, out, err = _run(receive_command.run_receive, clock, endpoint, [
        "receive", "--connect", "tcp:x:1", "--queue", "q", "--count", "1",
        "--reconnect-attempts", "1"])
    router = endpoint.accept()
    router.open()
    assert router.frames() == [f.Subscribe(1, 1, "q", 1)]
    router.lose()
    clock.advance(2)
    router = endpoint.accept()
    router.open(session_id=OTHER_SESSION)
    assert router.frames() == [f.Subscribe(1, 2, "q", 1)]
    router.send(f.Confirm(1, ""), f.Deliver(1, 2, "m", "r", {}, b"one", False))
    _finish_close(router)
    assert result_of(d) == 0
    assert out.getvalue() == "one\n"
