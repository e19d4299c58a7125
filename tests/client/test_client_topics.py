"""
The client's topics (client protocol version 8): C{Client.publish} and
C{Client.subscribe_topic} against the router's real side (its client
listener over the real message engine and store, inline, on a
C{task.Clock}), through in-memory connections: wildcards, durable
subscriptions detached and forgotten, the router's refusals, the
arguments the client checks itself, an older router, and subscriptions
through a reattachment and a recreation of the session (a forget whose
session was lost is carried out in the next one); C{meshroute send
--topic} and C{meshroute receive --topic}.
"""

import json

import pytest
from twisted.python import usage

from meshroute.cli import receive_command, send_command
from meshroute.client import (
    FAILOVER,
    UNSUPPORTED,
    SendError,
    SubscribeError,
    TopicSubscription,
    connect_endpoint,
)
from meshroute.sessions.native_listener import ClientFactory
from meshroute.sessions.settings import SessionSettings
from meshroute.wire import client_frames as f

from support.client_testing import (  # noqa: F401 (a fixture)
    failure_of,
    kept_clients,
    parse_command,
    result_of,
    run_command,
)
from support.fake_router import CuttableEndpoint, Harness
from support.router_engine import engine, store  # noqa: F401 (fixtures)


@pytest.fixture
def started(engine):  # noqa: F811
    engine.start()
    yield engine
    engine.stop()


@pytest.fixture
def harness(started, clock):
    return Harness(started, clock)


class Collector:
    """
    An C{on_message} that keeps what it gets and acknowledges it.
    """

    def __init__(self) -> None:
        self.messages = []

    def __call__(self, message) -> None:
        self.messages.append(message)
        message.ack()

    @property
    def bodies(self) -> list[bytes]:
        return [m.body for m in self.messages]


def settle(harness) -> None:
    """
    Let the routers' turns (the fan-out's, the deliveries') and the
    connections run until nothing moves.
    """
    for _ in range(4):
        harness.flush()
        harness.clock.advance(0)
    harness.flush()


def test_publications_reach_the_subscriptions_that_match(harness, started):
    client = harness.connect()
    gbp, wide = Collector(), Collector()
    first = client.subscribe_topic("prices.*.gbp", gbp)
    second = client.subscribe_topic("prices.#", wide, prefetch=1)
    settle(harness)
    subscription = result_of(first)
    assert isinstance(subscription, TopicSubscription) and result_of(second).active
    assert subscription.queue == "topic:prices.*.gbp"
    sent = [client.publish("prices.eu.gbp", b"1"), client.publish("prices.us.usd", b"2")]
    settle(harness)
    # Non-persistent ones are a stream of their own (which may overtake).
    sent.append(client.publish("prices.uk.gbp", b"3", persistent=False,
                               headers={"content-type": "text/plain"}))
    settle(harness)
    assert all(type(result_of(d)) is str for d in sent)
    assert gbp.bodies == [b"1", b"3"] and wide.bodies == [b"1", b"2", b"3"]
    assert [m.topic for m in wide.messages] == ["prices.eu.gbp", "prices.us.usd",
                                                "prices.uk.gbp"]
    assert wide.messages[2].headers["content-type"] == "text/plain"
    assert gbp.messages[0].queue == "topic:prices.*.gbp"
    assert started.queues.depths() == {}


def test_a_durable_subscription_collects_while_detached_until_forgotten(harness, started):
    publisher = harness.connect("publisher")
    first = Collector()
    subscription = harness.connect("app")
    detached = result_of(_subscribed(harness, subscription.subscribe_topic(
        "orders.#", first, durable="audit")))
    published = publisher.publish("orders.new", b"1")
    settle(harness)
    assert type(result_of(published)) is str
    assert first.bodies == [b"1"]
    unsubscribed = detached.unsubscribe()
    settle(harness)
    assert result_of(unsubscribed) is None and not detached.active
    for n in (2, 3):
        publisher.publish("orders.new", b"%d" % n)
    settle(harness)
    # Another client of the same client id takes it up.
    later = Collector()
    again = result_of(_subscribed(harness, harness.connect("app").subscribe_topic(
        "orders.#", later, durable="audit")))
    settle(harness)
    assert later.bodies == [b"2", b"3"]
    forgotten = again.unsubscribe(forget=True)
    settle(harness)
    assert result_of(forgotten) is None
    assert started.topics.durable == {}
    publisher.publish("orders.new", b"4")
    settle(harness)
    assert started.queues.depths() == {}


def _subscribed(harness, d):
    settle(harness)
    return d


def test_the_router_s_refusals_fail_the_subscription(harness):
    client = harness.connect("app")
    _subscribed(harness, client.subscribe_topic("t", Collector(), durable="one"))
    in_use = failure_of(_subscribed(harness, client.subscribe_topic("t", Collector(),
                                                                     durable="one")))
    assert isinstance(in_use, SubscribeError) and in_use.code == f.SUBSCRIPTION_IN_USE
    bad = failure_of(_subscribed(harness, client.subscribe_topic("t.**", Collector())))
    assert bad.code == f.BAD_ADDRESS
    refused = failure_of(_subscribed(harness, client.publish("prices..gbp", b"x")))
    assert isinstance(refused, SendError) and refused.code == f.BAD_ADDRESS


def test_what_the_client_checks_itself(harness):
    anonymous = harness.connect(client_id=None)
    with pytest.raises(ValueError, match="client id"):
        anonymous.subscribe_topic("t", Collector(), durable="d")
    client = harness.connect("app")
    with pytest.raises(ValueError, match="durable"):
        client.subscribe_topic("t", Collector(), shared=True)
    with pytest.raises(TypeError):
        client.subscribe_topic(b"t", Collector())
    with pytest.raises(TypeError):
        client.publish(b"t", b"x")
    with pytest.raises(ValueError, match="prefetch"):
        client.subscribe_topic("t", Collector(), prefetch=0)
    # A durable subscription of a client without a configured id names
    # one itself.
    result_of(_subscribed(harness, anonymous.subscribe_topic("t", Collector(), durable="d",
                                                             client_id="given")))


def test_the_frame_carries_what_was_asked(harness, started, monkeypatch):
    asked = []
    subscribe = started.topics.subscribe

    def recorded(*args, **kwargs):
        asked.append(kwargs)
        return subscribe(*args, **kwargs)

    monkeypatch.setattr(started.topics, "subscribe", recorded)
    client = harness.connect("app")
    result_of(_subscribed(harness, client.subscribe_topic("t.#", Collector(), durable="d",
                                                          shared=True, mesh_wide=True,
                                                          retained="if-new")))
    assert asked == [{"client_id": "app", "durable": "d", "shared": True, "user": None,
                      "mesh_wide": True, "retained": "if-new"}]
    with pytest.raises(ValueError):
        client.subscribe_topic("t", Collector(), retained="yes")


def test_an_older_router_is_told_apart(started, clock, monkeypatch):
    monkeypatch.setattr(f, "SUPPORTED_VERSIONS", (1, 2, 3, 4, 5, 6, 7))
    harness = Harness(started, clock)
    client = harness.connect("app")
    refused = failure_of(client.subscribe_topic("t", Collector()))
    assert isinstance(refused, SubscribeError) and refused.code == UNSUPPORTED
    refused = failure_of(client.publish("t", b"x"))
    assert isinstance(refused, SendError) and refused.code == UNSUPPORTED


def test_a_router_of_version_8_is_asked_for_no_retained_messages(started, clock, monkeypatch):
    monkeypatch.setattr(f, "SUPPORTED_VERSIONS", (1, 2, 3, 4, 5, 6, 7, 8))
    harness = Harness(started, clock)
    client = harness.connect("app")
    refused = failure_of(client.subscribe_topic("t", Collector(), retained="all"))
    assert isinstance(refused, SubscribeError) and refused.code == UNSUPPORTED
    result_of(_subscribed(harness, client.subscribe_topic("t", Collector())))


# -- across failures ---------------------------------------------------------------


def listener(engine, clock):  # noqa: F811
    factory = ClientFactory(engine, clock, settings=SessionSettings(keep_alive_ms=5000))
    return CuttableEndpoint(factory, clock)


def connect(clock, net, client_id: str = "app"):
    d = connect_endpoint(clock, net, client_id=client_id, confirmation_window_size=1 << 20,
                         reconnect_attempts=-1, retry_interval_ms=2000)
    clock.advance(0)
    net.flush()
    client = result_of(d)
    events = []
    client.add_failure_listener(events.append)
    return client, events


def run(clock, net) -> None:
    for _ in range(4):
        net.flush()
        clock.advance(0)
    net.flush()


def test_a_topic_subscription_survives_a_reattachment(started, clock):
    net = listener(started, clock)
    client, events = connect(clock, net)
    publisher, _ = connect(clock, net, "publisher")
    got = Collector()
    client.subscribe_topic("t.#", got)
    run(clock, net)
    net.cut()
    # The publisher's connection was cut too: its publications wait for
    # the reattachment with the rest.
    for n in range(3):
        publisher.publish("t.x", b"%d" % n)
    clock.advance(2)
    run(clock, net)
    assert events == [FAILOVER] and client.last_failover == "reattached"
    assert got.bodies == [b"0", b"1", b"2"]


def test_a_recreated_session_subscribes_again_and_forgets_what_it_was_forgetting(started,
                                                                                 clock):
    net = listener(started, clock)
    client, events = connect(clock, net)
    wide, durable = Collector(), Collector()
    client.subscribe_topic("t.#", wide)
    kept = client.subscribe_topic("t.#", durable, durable="gone")
    run(clock, net)
    subscription = result_of(kept)
    net.cut()
    net.refusing = True
    forgotten = subscription.unsubscribe(forget=True)  # waits: no connection
    clock.advance(6)  # past keep-alive: the router ends the session
    net.refusing = False
    clock.advance(2)
    run(clock, net)
    assert events == [FAILOVER] and client.last_failover == "recreated"
    assert result_of(forgotten) is None
    assert started.topics.durable == {}
    publisher, _ = connect(clock, net, "publisher")
    publisher.publish("t.y", b"after")
    run(clock, net)
    assert wide.bodies == [b"after"] and durable.bodies == []


# -- the command line ----------------------------------------------------------------


def test_send_and_receive_topics_from_the_command_line(harness, started):
    wide = run_command(receive_command.run_receive, harness,
                       ["receive", "--connect", "tcp:x:1", "--topic", "prices.#", "--json",
                        "--count", "3"])
    durable = run_command(receive_command.run_receive, harness,
                          ["receive", "--connect", "tcp:x:1", "--topic", "prices.*.gbp",
                           "--durable", "ticks", "--client-id", "shop", "--mesh-wide",
                           "--count", "1"])
    settle(harness)
    for topic in ("prices.eu.gbp", "prices.us.usd"):
        sent, out, err = run_command(send_command.run_send, harness,
                                     ["send", "--connect", "tcp:x:1", "--topic", topic])
        settle(harness)
        assert result_of(sent) == 0, err.getvalue()
    assert out.getvalue() == "1 message to topic:prices.us.usd accepted\n"
    # The durable subscriber took one and left; the next publication
    # waits for it.
    assert result_of(durable[0]) == 0, durable[2].getvalue()
    assert durable[1].getvalue() == "message 1\n"
    sent = run_command(send_command.run_send, harness,
                       ["send", "--connect", "tcp:x:1", "--topic", "prices.uk.gbp"])[0]
    settle(harness)
    assert result_of(wide[0]) == 0, wide[2].getvalue()
    lines = [json.loads(line) for line in wide[1].getvalue().splitlines()]
    assert [line["headers"]["x-topic"] for line in lines] == ["prices.eu.gbp", "prices.us.usd",
                                                               "prices.uk.gbp"]
    assert started.topics.describe()["durable"][0]["depth"] == 1
    # --forget with no end: gone at once, with what it held.
    forget = run_command(receive_command.run_receive, harness,
                         ["receive", "--connect", "tcp:x:1", "--topic", "prices.*.gbp",
                          "--durable", "ticks", "--client-id", "shop", "--forget"])
    settle(harness)
    assert result_of(forget[0]) == 0, forget[2].getvalue()
    assert forget[1].getvalue() == ""
    assert started.topics.durable == {} and started.queues.depths() == {}


def test_retained_messages_from_the_command_line(harness, started):
    for body in ("old", "kept"):
        sent = run_command(send_command.run_send, harness,
                           ["send", "--connect", "tcp:x:1", "--topic", "prices.eu.gbp",
                            "--retain", "--body", body])[0]
        settle(harness)
        assert result_of(sent) == 0
    got = run_command(receive_command.run_receive, harness,
                      ["receive", "--connect", "tcp:x:1", "--topic", "prices.#", "--json",
                       "--retained", "all", "--count", "1"])
    settle(harness)
    assert result_of(got[0]) == 0, got[2].getvalue()
    [line] = [json.loads(line) for line in got[1].getvalue().splitlines()]
    assert line["body"] == "kept" and line["headers"]["x-retained"] == "true"


def test_a_refused_topic_subscription_fails_the_command(harness):
    d, out, err = run_command(receive_command.run_receive, harness,
                              ["receive", "--connect", "tcp:x:1", "--topic", "a..b"])
    settle(harness)
    assert result_of(d) == 1
    assert err.getvalue().startswith("meshroute: receive from topic:a..b failed: bad-address")


@pytest.mark.parametrize("argv, message", [
    (["send", "--connect", "c", "--to", "q", "--topic", "t"], "one of --to and --topic"),
    (["receive", "--connect", "c", "--queue", "q", "--topic", "t"], "one of --queue and --topic"),
    (["receive", "--connect", "c", "--queue", "q", "--durable", "d"], "--durable needs --topic"),
    (["receive", "--connect", "c", "--topic", "t", "--durable", "d"],
     "--durable needs --client-id"),
    (["receive", "--connect", "c", "--topic", "t", "--forget"], "--forget needs --durable"),
    (["receive", "--connect", "c", "--topic", "t", "--shared"], "--shared needs --durable"),
    (["receive", "--connect", "c", "--queue", "q", "--mesh-wide"], "--mesh-wide needs --topic"),
    (["receive", "--connect", "c", "--queue", "q", "--retained", "all"],
     "--retained needs --topic"),
    (["receive", "--connect", "c", "--topic", "t", "--retained", "yes"], "--retained is all"),
    (["send", "--connect", "c", "--to", "q", "--retain"], "--retain needs --topic"),
])
def test_topic_options_that_do_not_go_together(argv, message):
    with pytest.raises(usage.UsageError, match=message):
        parse_command(argv)
