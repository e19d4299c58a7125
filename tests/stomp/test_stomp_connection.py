"""
Tests for the router's side of STOMP connections
(L{meshroute.stomp.connection}, L{meshroute.stomp.listener}), without
sockets: each connection over a C{StringTransport}, every timer on a
C{task.Clock}, the real SQLite store run inline under the fake engine.
"""

import pytest

from meshroute import events as event_names
from meshroute.sessions.limits import ClientLimits
from meshroute.sessions.native_listener import ClientFactory
from meshroute.stomp.listener import StompFactory
from meshroute.security.credentials import derive
from meshroute.security.policy import Permission, Security, SecurityPolicy
from meshroute.wire import client_frames as f

from support.fake_router import ROUTER
from support.router_connection import Connection
from support.stomp_ends import (  # noqa: F401 (auto_engine is a fixture)
    StompEnd, auto_engine, commands, make_factory, put, subscribe)


def test_connect_opens_a_stomp_session(engine, clock):
    factory = make_factory(engine, clock)
    client = StompEnd(factory)
    connected = client.connect(("client-id", "app-1"))
    assert connected.header("version") == "1.2"
    assert connected.header("server").startswith("meshroute/")
    (described,) = factory.sessions.describe()
    assert described["session_id"] == connected.header("session")
    assert described["protocol"] == "stomp" and described["client_id"] == "app-1"
    (opened,) = engine.events.named(event_names.SESSION_OPENED)
    assert opened["protocol"] == "stomp"


def test_the_best_common_version_is_chosen(engine, clock):
    client = StompEnd(make_factory(engine, clock))
    assert client.connect(version="1.0,1.1").header("version") == "1.1"


def test_a_send_is_receipted_once_accepted(engine, clock):
    client = StompEnd(make_factory(engine, clock))
    client.connect()
    client.frame("SEND", ("destination", "/queue/orders@router-c"), ("receipt", "r1"),
                 ("content-type", "application/json"), ("x-trace", "t-1"),
                 ("persistent", "true"), body=b'{"n": 1}')
    assert client.received() == []
    (submitted,) = engine.submitted
    assert submitted.address == "orders@router-c" and submitted.persistent
    assert submitted.headers == {"content-type": "application/json", "x-trace": "t-1"}
    assert submitted.body == b'{"n": 1}'
    clock.advance(0)
    assert client.received() == []
    submitted.deferred.callback("router-a:1")
    (receipt,) = client.received()
    assert receipt.command == "RECEIPT" and receipt.header("receipt-id") == "r1"


def test_persistent_false_and_duplicate_id_reach_the_engine(engine, clock):
    client = StompEnd(make_factory(engine, clock))
    client.connect()
    client.frame("SEND", ("destination", "/queue/q"), ("persistent", "false"),
                 ("duplicate-id", "d-1"), body=b"x")
    (submitted,) = engine.submitted
    assert not submitted.persistent and submitted.duplicate_id == "d-1"
    assert submitted.headers == {}


def test_a_refused_send_is_an_error_with_its_receipt_id(auto_engine, clock, observe_errors):
    factory = make_factory(auto_engine, clock)
    client = StompEnd(factory)
    other = StompEnd(factory)
    other.connect()
    client.connect()
    client.frame("SEND", ("destination", "/queue/q@nowhere"), ("receipt", "r9"), body=b"x")
    (error,) = client.received()
    assert error.command == "ERROR" and error.header("receipt-id") == "r9"
    assert "nowhere" in error.header("message")
    assert client.closed
    other.frame("SEND", ("destination", "/queue/q"), ("receipt", "ok"), body=b"x")
    assert commands(other.received()) == ["RECEIPT"]


def test_a_destination_that_is_not_a_queue_or_a_topic_is_an_error(engine, clock):
    client = StompEnd(make_factory(engine, clock))
    client.connect()
    client.frame("SEND", ("destination", "/exchange/news"), ("receipt", "r1"), body=b"x")
    (error,) = client.received()
    assert error.command == "ERROR" and "/exchange/news" in error.header("message")
    assert error.header("receipt-id") == "r1"


def test_a_message_sent_over_stomp_is_received_with_its_headers(auto_engine, clock):
    client = StompEnd(make_factory(auto_engine, clock))
    client.connect()
    body = b"\x00binary\x00body\n"
    client.frame("SEND", ("destination", "/queue/q"), ("content-type", "application/octet"),
                 ("a\\cb", "c\\nd\\\\"), ("content-length", str(len(body))), body=body)
    subscribe(client, "q")
    frames = client.received()
    assert commands(frames) == ["RECEIPT", "MESSAGE"]
    message = frames[1]
    assert message.body == body
    assert message.header("subscription") == "s1"
    assert message.header("destination") == "/queue/q"
    assert message.header("content-type") == "application/octet"
    assert message.header("a:b") == "c\nd\\"
    assert message.header("redelivered") is None
    assert message.header("ack") is None  # auto


def test_auto_ack_acknowledges_and_renews_credit(auto_engine, clock):
    client = StompEnd(make_factory(auto_engine, clock))
    client.connect()
    put(auto_engine, "q", *(b"m%d" % i for i in range(5)))
    subscribe(client, "q", prefetch_count="2")
    frames = client.received()
    assert commands(frames) == ["RECEIPT", "MESSAGE", "MESSAGE"]
    clock.advance(0)
    frames = client.received()
    assert [m.body for m in frames] == [b"m2", b"m3", b"m4"]
    assert len(auto_engine.events.named(event_names.MESSAGE_CONSUMED)) == 5


def test_client_ack_is_cumulative_and_client_individual_is_not(auto_engine, clock):
    client = StompEnd(make_factory(auto_engine, clock))
    client.connect()
    put(auto_engine, "a", b"a1", b"a2", b"a3")
    put(auto_engine, "b", b"b1", b"b2", b"b3")
    subscribe(client, "a", ack="client", sub="sa")
    subscribe(client, "b", ack="client-individual", sub="sb")
    frames = [m for m in client.received() if m.command == "MESSAGE"]
    a = [m for m in frames if m.header("subscription") == "sa"]
    b = [m for m in frames if m.header("subscription") == "sb"]
    assert [m.body for m in a] == [b"a1", b"a2", b"a3"]
    client.frame("ACK", ("id", a[1].header("ack")), ("receipt", "ra"))
    client.frame("ACK", ("id", b[1].header("ack")), ("receipt", "rb"))
    clock.advance(0)
    assert [r.header("receipt-id") for r in client.received()] == ["ra", "rb"]
    consumed = {e["msg_id"] for e in auto_engine.events.named(event_names.MESSAGE_CONSUMED)}
    assert consumed == {a[0].header("message-id"), a[1].header("message-id"),
                        b[1].header("message-id")}


def test_nack_gives_the_message_back_flagged_redelivered(auto_engine, clock):
    client = StompEnd(make_factory(auto_engine, clock))
    client.connect()
    put(auto_engine, "q", b"m1")
    subscribe(client, "q", ack="client-individual")
    (_, first) = client.received()
    client.frame("NACK", ("id", first.header("ack")), ("receipt", "n1"))
    frames = client.received()
    assert commands(frames) == ["MESSAGE", "RECEIPT"]
    again = frames[0]
    assert again.header("message-id") == first.header("message-id")
    assert again.header("redelivered") == "true"
    assert again.header("ack") != first.header("ack")


def test_1_1_acknowledges_by_message_id(auto_engine, clock):
    client = StompEnd(make_factory(auto_engine, clock))
    client.connect(version="1.1")
    put(auto_engine, "q", b"m1", b"m2")
    subscribe(client, "q", ack="client-individual")
    _, m1, m2 = client.received()
    client.frame("ACK", ("subscription", "s1"), ("message-id", m2.header("message-id")),
                 ("receipt", "r"))
    clock.advance(0)
    assert commands(client.received()) == ["RECEIPT"]
    (consumed,) = auto_engine.events.named(event_names.MESSAGE_CONSUMED)
    assert consumed["msg_id"] == m2.header("message-id")


def test_unsubscribe_gives_unacknowledged_messages_back(auto_engine, clock):
    client = StompEnd(make_factory(auto_engine, clock))
    client.connect()
    put(auto_engine, "q", b"m1")
    subscribe(client, "q", ack="client")
    assert commands(client.received()) == ["RECEIPT", "MESSAGE"]
    client.frame("UNSUBSCRIBE", ("id", "s1"), ("receipt", "u"))
    assert commands(client.received()) == ["RECEIPT"]
    subscribe(client, "q", ack="client", sub="s2")
    frames = client.received()
    assert frames[1].header("redelivered") == "true"
    assert frames[1].header("subscription") == "s2"


def test_a_transaction_commits_its_sends_and_acks_together(auto_engine, clock):
    client = StompEnd(make_factory(auto_engine, clock))
    client.connect()
    put(auto_engine, "in", b"m1")
    subscribe(client, "in", ack="client")
    _, message = client.received()
    client.frame("BEGIN", ("transaction", "t1"), ("receipt", "b"))
    client.frame("SEND", ("destination", "/queue/out"), ("transaction", "t1"),
                 ("receipt", "s"), body=b"x")
    client.frame("ACK", ("id", message.header("ack")), ("transaction", "t1"))
    clock.advance(0)
    assert [r.header("receipt-id") for r in client.received()] == ["b", "s"]
    assert auto_engine.events.named(event_names.MESSAGE_CONSUMED) == []
    client.frame("COMMIT", ("transaction", "t1"), ("receipt", "c"))
    clock.advance(0)
    assert [r.header("receipt-id") for r in client.received()] == ["c"]
    assert len(auto_engine.events.named(event_names.MESSAGE_CONSUMED)) == 1
    subscribe(client, "out", sub="s2")
    assert [m.body for m in client.received() if m.command == "MESSAGE"] == [b"x"]


def test_an_aborted_transaction_sends_nothing_and_redelivers(auto_engine, clock):
    client = StompEnd(make_factory(auto_engine, clock))
    client.connect()
    put(auto_engine, "in", b"m1")
    subscribe(client, "in", ack="client")
    _, message = client.received()
    client.frame("BEGIN", ("transaction", "t1"))
    client.frame("SEND", ("destination", "/queue/out"), ("transaction", "t1"), body=b"x")
    client.frame("ACK", ("id", message.header("ack")), ("transaction", "t1"))
    client.frame("ABORT", ("transaction", "t1"), ("receipt", "a"))
    clock.advance(0)
    frames = client.received()
    assert commands(frames) == ["MESSAGE", "RECEIPT"] or commands(frames) == ["RECEIPT",
                                                                              "MESSAGE"]
    (again,) = [m for m in frames if m.command == "MESSAGE"]
    assert again.header("redelivered") == "true"
    assert not client.closed
    subscribe(client, "out", sub="s2")
    assert [m for m in client.received() if m.command == "MESSAGE"] == []


def test_expires_becomes_the_messages_expiry(auto_engine, clock):
    client = StompEnd(make_factory(auto_engine, clock))
    client.connect()
    clock.advance(10)
    client.frame("SEND", ("destination", "/queue/q"), ("expires", "70000"), body=b"later")
    client.frame("SEND", ("destination", "/queue/q"), ("expires", "0"), body=b"never")
    subscribe(client, "q")
    messages = [m for m in client.received() if m.command == "MESSAGE"]
    assert [(m.body, m.header("expires")) for m in messages] == [(b"later", "70000"),
                                                                  (b"never", None)]


def test_a_message_whose_expires_has_passed_is_not_delivered(auto_engine, clock):
    client = StompEnd(make_factory(auto_engine, clock))
    client.connect()
    clock.advance(10)
    client.frame("SEND", ("destination", "/queue/q"), ("expires", "9000"), ("receipt", "r"),
                 body=b"stale")
    assert commands(client.received()) == ["RECEIPT"]
    clock.advance(1)
    subscribe(client, "q")
    assert commands(client.received()) == ["RECEIPT"]
    (expired,) = auto_engine.events.named(event_names.MESSAGE_EXPIRED)
    assert expired["dest"] == "q@router-a"


def test_a_second_begin_is_an_error(engine, clock):
    client = StompEnd(make_factory(engine, clock))
    client.connect()
    client.frame("BEGIN", ("transaction", "t1"))
    client.frame("BEGIN", ("transaction", "t2"))
    (error,) = client.received()
    assert error.command == "ERROR" and "one transaction at a time" in error.header("message")


def test_a_send_outside_the_open_transaction_is_an_error(engine, clock):
    client = StompEnd(make_factory(engine, clock))
    client.connect()
    client.frame("BEGIN", ("transaction", "t1"))
    client.frame("SEND", ("destination", "/queue/q"), body=b"x")
    (error,) = client.received()
    assert error.command == "ERROR" and "t1" in error.header("message")


def test_disconnect_is_receipted_once_pending_sends_are_done(engine, clock):
    factory = make_factory(engine, clock)
    client = StompEnd(factory)
    client.connect()
    client.frame("SEND", ("destination", "/queue/q"), body=b"x")
    client.frame("DISCONNECT", ("receipt", "bye"))
    assert client.received() == [] and not client.closed
    engine.submitted[0].deferred.callback("router-a:1")
    (receipt,) = client.received()
    assert receipt.header("receipt-id") == "bye"
    assert client.closed
    (closed,) = engine.events.named(event_names.SESSION_CLOSED)
    assert closed["reason"] == "client"
    assert factory.sessions.describe() == []


def test_a_lost_connection_ends_the_session_and_requeues(auto_engine, clock):
    factory = make_factory(auto_engine, clock)
    client = StompEnd(factory)
    client.connect()
    put(auto_engine, "q", b"m1")
    subscribe(client, "q", ack="client")
    client.received()
    client.lose()
    assert factory.sessions.describe() == []
    (expired,) = auto_engine.events.named(event_names.SESSION_EXPIRED)
    assert expired["requeued"] == 1 and expired["resumable"] is False
    other = StompEnd(factory)
    other.connect()
    subscribe(other, "q")
    (_, again) = other.received()
    assert again.header("redelivered") == "true"


def test_a_native_client_cannot_take_a_stomp_session(engine, clock):
    registry_owner = ClientFactory(engine, clock)
    factory = make_factory(engine, clock, sessions=registry_owner.sessions)
    client = StompEnd(factory)
    session_id = client.connect().header("session")
    native = Connection(registry_owner)
    native.send(f.Open([1], "n", session_id, 60000))
    (opened,) = native.received()
    assert opened.session_id != session_id and not opened.reattached
    assert not client.closed
    assert {s["protocol"] for s in registry_owner.describe()} == {"stomp", "native"}


# -- heart-beats and the TTL ------------------------------------------------------


def test_heart_beats_are_negotiated_and_sent(engine, clock):
    client = StompEnd(make_factory(engine, clock, heartbeat_ms=(1000, 2000)))
    connected = client.connect(("heart-beat", "500,3000"))
    # The router sends every max(1000, 3000) ms, expects every max(2000, 500).
    assert connected.header("heart-beat") == "3000,2000"
    (described,) = client.protocol.factory.sessions.describe()
    assert described["ttl_ms"] == 4000
    clock.advance(3)
    client.send(b"\n")
    clock.advance(3)
    client.send(b"\n")
    client.received()
    assert client.heartbeats == 2 and not client.closed


def test_a_silent_client_is_closed_after_twice_its_heart_beat(engine, clock):
    client = StompEnd(make_factory(engine, clock, heartbeat_ms=(0, 1000)))
    assert client.connect(("heart-beat", "1000,0")).header("heart-beat") == "0,1000"
    clock.advance(1.5)
    client.send(b"\n")
    clock.advance(1.5)
    assert not client.transport.disconnected
    clock.advance(0.5)
    assert client.transport.disconnected
    (disconnected,) = engine.events.named(event_names.SESSION_DISCONNECTED)
    assert disconnected["reason"] == "ttl"


def test_no_heart_beats_means_no_ttl(engine, clock):
    client = StompEnd(make_factory(engine, clock))
    assert client.connect(("heart-beat", "0,0")).header("heart-beat") == "0,0"
    clock.advance(3600)
    assert not client.closed
    assert client.heartbeats == 0


def test_the_override_replaces_the_heart_beat_ttl(engine, clock):
    client = StompEnd(make_factory(engine, clock, settings={"connection_ttl_override": 700}))
    client.connect(("heart-beat", "0,0"))
    clock.advance(1)
    assert client.transport.disconnected


def test_a_connection_without_connect_is_closed_after_stage_valid_timeout(engine, clock):
    client = StompEnd(make_factory(
        engine, clock, settings={"limits": ClientLimits(stage_valid_timeout_ms=1000)}))
    clock.advance(1)
    (error,) = client.received()
    assert error.command == "ERROR" and "stage-valid-timeout" in error.header("message")


# -- bad input ----------------------------------------------------------------------


def test_a_malformed_frame_closes_only_its_connection(auto_engine, clock):
    factory = make_factory(auto_engine, clock)
    bad, good = StompEnd(factory), StompEnd(factory)
    bad.connect()
    good.connect()
    bad.send(b"FROB\n\n\x00")
    (error,) = bad.received()
    assert error.command == "ERROR" and "FROB" in error.header("message")
    assert bad.closed
    good.frame("SEND", ("destination", "/queue/q"), ("receipt", "r"), body=b"x")
    assert commands(good.received()) == ["RECEIPT"]


def test_a_header_flood_closes_the_connection(engine, clock):
    factory = make_factory(engine, clock,
                           settings={"limits": ClientLimits(max_headers=8)})
    client = StompEnd(factory)
    client.connect()
    client.frame("SEND", ("destination", "/queue/q"),
                 *((f"h{i}", "v") for i in range(20)), body=b"x")
    (error,) = client.received()
    assert error.command == "ERROR" and client.closed
    assert engine.submitted == []


def test_an_oversized_frame_closes_the_connection(engine, clock):
    client = StompEnd(make_factory(
        engine, clock, settings={"limits": ClientLimits(max_frame_size=1024)}))
    client.connect()
    client.send(b"SEND\ndestination:/queue/q\n\n" + b"x" * 2000)
    (error,) = client.received()
    assert error.command == "ERROR" and client.closed


def test_a_frame_before_connect_is_an_error(engine, clock):
    client = StompEnd(make_factory(engine, clock))
    client.frame("SEND", ("destination", "/queue/q"), body=b"x")
    (error,) = client.received()
    assert error.command == "ERROR" and "before CONNECT" in error.header("message")


def test_max_connections_refuses_one_more(engine, clock):
    factory = make_factory(engine, clock, settings={"limits": ClientLimits(max_connections=1)})
    StompEnd(factory).connect()
    second = StompEnd(factory)
    (error,) = second.received()
    assert error.command == "ERROR" and "max-connections" in error.header("message")


def test_an_inactive_instance_refuses_connect(engine, clock):
    from meshroute.sessions.ha_view import HAView

    client = StompEnd(make_factory(engine, clock,
                                   ha_view=lambda: HAView(active=False, epoch=1, endpoints=())))
    client.frame("CONNECT", ("accept-version", "1.2"))
    (error,) = client.received()
    assert error.command == "ERROR" and error.header("message").startswith("not active")


# -- security -----------------------------------------------------------------------


def secured(engine, clock) -> StompFactory:
    users = {"orders-app": derive("orders-pw", iterations=4096)}
    permissions = (Permission(("orders-app",), send=("orders",), consume=("orders",)),)
    return make_factory(engine, clock, security=Security(SecurityPolicy(ROUTER, users,
                                                                        permissions)),
                        secret=b"s" * 32)


@pytest.mark.parametrize("login", [(), (("login", "orders-app"), ("passcode", "wrong")),
                                   (("login", "nobody"), ("passcode", "orders-pw"))])
def test_a_router_with_users_refuses_a_wrong_or_missing_login(engine, clock, login):
    client = StompEnd(secured(engine, clock))
    client.frame("CONNECT", ("accept-version", "1.2"), *login)
    (error,) = client.received()
    assert error.command == "ERROR" and error.header("message") == "authentication failed"
    assert client.closed
    (denied,) = engine.events.named(event_names.SECURITY_DENIED)
    assert denied["action"] == "connect"


def test_a_user_sends_and_consumes_as_its_permissions_allow(auto_engine, clock):
    factory = secured(auto_engine, clock)
    client = StompEnd(factory)
    client.connect(("login", "orders-app"), ("passcode", "orders-pw"))
    (described,) = factory.sessions.describe()
    assert described["user"] == "orders-app"
    client.frame("SEND", ("destination", "/queue/orders"), ("receipt", "ok"), body=b"x")
    assert commands(client.received()) == ["RECEIPT"]
    client.frame("SEND", ("destination", "/queue/secrets"), ("receipt", "no"), body=b"x")
    (error,) = client.received()
    assert error.command == "ERROR" and error.header("receipt-id") == "no"
    assert "may not send" in error.header("message")
    (denied,) = auto_engine.events.named(event_names.SECURITY_DENIED)
    assert denied["action"] == "send" and denied["user"] == "orders-app"


def test_a_reload_that_removes_the_user_closes_its_connection(auto_engine, clock):
    factory = secured(auto_engine, clock)
    client = StompEnd(factory)
    client.connect(("login", "orders-app"), ("passcode", "orders-pw"))
    factory.security.replace(SecurityPolicy(ROUTER, {}, ()))
    (error,) = client.received()
    assert error.command == "ERROR" and "removed" in error.header("message")
    assert client.closed


def test_a_publisher_is_not_read_while_the_router_holds_topic_publishers(engine, clock):
    # The fan-out is behind (meshroute.topics.backlog): a SEND to a topic
    # stops the reading of its connection until it caught up; to a queue,
    # not.
    client = StompEnd(make_factory(engine, clock))
    client.connect()
    engine.topic_backlog.measured(engine.topic_backlog.hold_at)
    client.frame("SEND", ("destination", "/queue/q"), body=b"q")
    assert client.transport.producerState == "producing"
    client.frame("SEND", ("destination", "/topic/prices.gbp"), body=b"t")
    assert client.transport.producerState == "paused"
    engine.topic_backlog.measured(0)
    assert client.transport.producerState == "producing"
