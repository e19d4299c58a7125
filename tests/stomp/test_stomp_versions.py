"""
Tests for the STOMP versions (L{meshroute.stomp.versions}): the one a
CONNECT settles, the version-negotiation ERROR, and what STOMP 1.0 means
for a connection, driven without sockets (L{support.stomp_ends}).
"""

import pytest

from meshroute import events as event_names
from meshroute.security.credentials import derive
from meshroute.security.policy import Permission, Security, SecurityPolicy
from meshroute.stomp.versions import V1_0, V1_1, V1_2, negotiated, offered, spoken

from support.fake_router import ROUTER
from support.stomp_ends import (  # noqa: F401 (auto_engine is a fixture)
    StompEnd, auto_engine, commands, make_factory, put, subscribe)


@pytest.mark.parametrize("accept_version, ceiling, version", [
    (None, None, V1_0),
    ("1.0", None, V1_0),
    ("1.0,1.1", None, V1_1),
    ("1.1, 1.2", None, V1_2),
    ("1.2,2.0", None, V1_2),
    ("1.0,1.1,1.2", "1.1", V1_1),
    ("2.0", None, None),
    ("1.2", "1.1", None),
    ("", None, None),
])
def test_the_best_version_both_speak_is_settled(accept_version, ceiling, version):
    assert negotiated(accept_version, ceiling) is version


def test_what_is_offered_and_spoken():
    assert offered(None) == {"1.0"}
    assert offered("1.1 ,1.2") == {"1.1", "1.2"}
    assert spoken() == ["1.0", "1.1", "1.2"]
    assert spoken("1.1") == ["1.0", "1.1"]


@pytest.mark.parametrize("connect, ceiling, versions", [
    ((("accept-version", "2.0,2.1"),), None, "1.0,1.1,1.2"),
    ((("accept-version", "1.2"),), "1.1", "1.0,1.1"),
])
def test_a_client_offering_no_version_spoken_gets_the_versions_in_an_error(
        engine, clock, connect, ceiling, versions):
    client = StompEnd(make_factory(engine, clock))
    if ceiling is not None:
        # As a WebSocket transport under its subprotocol.
        client.transport.protocol_version = ceiling
    client.frame("CONNECT", *connect, ("host", "/"))
    (error,) = client.received()
    assert error.command == "ERROR"
    assert error.header("version") == versions
    assert error.header("content-type") == "text/plain"
    spaced = versions.replace(",", " ")
    assert f"supported protocol versions are {spaced}" in error.header("message")
    assert error.body.decode().startswith("unsupported-version: supported protocol versions")
    assert client.closed
    assert engine.events.named(event_names.SESSION_OPENED) == []


@pytest.mark.parametrize("offer", [None, "1.0"])
def test_a_connect_without_accept_version_is_a_1_0_connection(engine, clock, offer):
    client = StompEnd(make_factory(engine, clock, heartbeat_ms=(1000, 1000)))
    connected = client.connect(("heart-beat", "1000,1000"), version=offer)
    assert connected.header("version") == "1.0"
    # No heart-beats in 1.0: none offered, none sent, none expected.
    assert connected.header("heart-beat") is None
    assert connected.header("session") and connected.header("server")
    (described,) = client.protocol.factory.sessions.describe()
    assert described["ttl_ms"] == -1
    clock.advance(3600)
    assert client.received() == [] and client.heartbeats == 0
    assert not client.closed


def test_1_0_subscribes_by_destination_and_acknowledges_by_message_id(auto_engine, clock):
    client = StompEnd(make_factory(auto_engine, clock))
    client.connect(version=None)
    put(auto_engine, "q", b"m1", b"m2", b"m3")
    client.frame("SUBSCRIBE", ("destination", " /queue/q"), ("ack", "client"),
                 ("receipt", "sub"))
    frames = client.received()
    assert commands(frames) == ["RECEIPT", "MESSAGE", "MESSAGE", "MESSAGE"]
    messages = frames[1:]
    assert {m.header("subscription") for m in messages} == {"/queue/q"}
    assert [m.body for m in messages] == [b"m1", b"m2", b"m3"]
    # client: cumulative, named by message-id (an id header is not read).
    client.frame("ACK", ("message-id", messages[1].header("message-id")),
                 ("id", messages[2].header("ack")), ("receipt", "acked"))
    clock.advance(0)
    assert [r.header("receipt-id") for r in client.received()] == ["acked"]
    consumed = [e["msg_id"] for e in auto_engine.events.named(event_names.MESSAGE_CONSUMED)]
    assert consumed == [m.header("message-id") for m in messages[:2]]
    # A second subscription to the same destination needs its own id.
    client.frame("SUBSCRIBE", ("destination", "/queue/q"))
    (error,) = client.received()
    assert error.command == "ERROR" and "already in use" in error.header("message")


def test_1_0_unsubscribes_by_destination(auto_engine, clock):
    client = StompEnd(make_factory(auto_engine, clock))
    client.connect(version=None)
    put(auto_engine, "q", b"m1")
    client.frame("SUBSCRIBE", ("destination", "/queue/q"), ("ack", "client"))
    assert commands(client.received()) == ["MESSAGE"]
    client.frame("UNSUBSCRIBE", ("destination", "/queue/q"), ("receipt", "u"))
    assert commands(client.received()) == ["RECEIPT"]
    client.frame("SUBSCRIBE", ("id", "again"), ("destination", "/queue/q"))
    (again,) = client.received()
    assert again.header("redelivered") == "true" and again.header("subscription") == "again"


def test_1_1_and_1_2_still_need_subscription_ids(engine, clock):
    for version in ("1.1", "1.2"):
        client = StompEnd(make_factory(engine, clock))
        client.connect(version=version)
        client.frame("SUBSCRIBE", ("destination", "/queue/q"))
        (error,) = client.received()
        assert error.command == "ERROR" and error.header("message") == (
            "SUBSCRIBE has no id header")


def test_1_0_has_no_nack(auto_engine, clock):
    client = StompEnd(make_factory(auto_engine, clock))
    client.connect(version=None)
    put(auto_engine, "q", b"m1")
    subscribe(client, "q", ack="client")
    _, message = client.received()
    client.frame("NACK", ("message-id", message.header("message-id")), ("receipt", "n"))
    (error,) = client.received()
    assert error.command == "ERROR" and error.header("receipt-id") == "n"
    assert error.header("message") == "NACK is not a command of STOMP 1.0"
    assert client.closed


def test_1_0_headers_are_not_escaped_either_way(auto_engine, clock):
    client = StompEnd(make_factory(auto_engine, clock))
    client.connect(version=None)
    client.frame("SEND", ("destination", "/queue/q"), ("path", "C:\\new\\cat"),
                 ("url", "http://x:1/"), body=b"x")
    auto_engine.submit("q", b"y", {"key:colon": "line\nbreak"}, True)
    subscribe(client, "q")
    raw = client.transport.value()
    assert b"\npath:C:\\new\\cat\n" in raw and b"\nkey\\ccolon:line\\nbreak\n" in raw
    _, first, second = client.received()
    assert first.header("path") == "C:\\new\\cat" and first.header("url") == "http://x:1/"
    # Read by a 1.0 parser, the header that needed escapes stays escaped.
    assert second.header("key\\ccolon") == "line\\nbreak"


def test_a_1_0_login_is_read_without_the_blanks_before_it(auto_engine, clock):
    users = {"orders-app": derive("orders-pw", iterations=4096)}
    permissions = (Permission(("orders-app",), send=("orders",), consume=()),)
    factory = make_factory(auto_engine, clock, secret=b"s" * 32,
                           security=Security(SecurityPolicy(ROUTER, users, permissions)))
    client = StompEnd(factory)
    client.connect(("login", " orders-app"), ("passcode", " orders-pw"),
                   ("client-id", "\tlegacy"), version=None)
    (described,) = factory.sessions.describe()
    assert described["user"] == "orders-app" and described["client_id"] == "legacy"
    # 1.1 and 1.2 read the same CONNECT as it is: a user " orders-app".
    other = StompEnd(factory)
    other.frame("CONNECT", ("accept-version", "1.2"), ("login", " orders-app"),
                ("passcode", "orders-pw"))
    (error,) = other.received()
    assert error.command == "ERROR" and error.header("message") == "authentication failed"
