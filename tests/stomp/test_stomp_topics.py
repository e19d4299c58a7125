"""
STOMP topics (L{meshroute.stomp.destinations}, L{meshroute.stomp.topic_options},
the topic side of L{meshroute.stomp.connection} and
L{meshroute.stomp.subscriptions}), without sockets: STOMP connections over
C{StringTransport}s to the real message engine over the real store run
inline, on a C{task.Clock}.  A SEND to C{/topic/NAME} publishes, a
SUBSCRIBE to C{/topic/PATTERN} subscribes; durable subscriptions by
client id and name (Artemis' and ActiveMQ's headers), shared or not,
detached or forgotten by UNSUBSCRIBE; a mesh-wide SUBSCRIBE's receipt
held until the router confirms it; the ack modes as for queues.
"""

import pytest

from meshroute import events as event_names
from meshroute.messages import INTEREST_HELD, Message
from meshroute.router.mesh_wide import VERSION
from meshroute.routing.table import RouteTable
from meshroute.stomp.destinations import (
    StompRefusal,
    send_address,
    subscription_source,
    topic_destination,
)
from meshroute.stomp.frames import StompFrame
from meshroute.stomp.topic_options import TopicOptions, forgets, subscribe_options

from support.fake_router import ROUTER
from support.stomp_ends import (  # noqa: F401 (auto_engine, started: fixtures)
    StompEnd, auto_engine, commands, make_factory, started)

DURABLE = "$durable:app:sub"


@pytest.fixture
def factory(started, clock):
    return make_factory(started, clock)


def settle(clock) -> None:
    """
    Run the turns that take a publication, fan it out and deliver it.
    """
    for _ in range(5):
        clock.advance(0)


def connected(factory, *headers, version: str = "1.2") -> StompEnd:
    client = StompEnd(factory)
    client.connect(*headers, version=version)
    return client


def subscribe(client, destination: str, sub: str = "s1", ack: str = "auto", *headers):
    client.frame("SUBSCRIBE", ("id", sub), ("destination", destination), ("ack", ack),
                 ("receipt", f"sub-{sub}"), *headers)


def publish(client, clock, topic: str, *bodies: bytes, headers=()) -> None:
    """
    SEND each of C{bodies} to C{/topic/TOPIC} with a receipt; every
    receipt came once the fan-out ran.
    """
    for i, body in enumerate(bodies):
        client.frame("SEND", ("destination", f"/topic/{topic}"), ("receipt", f"p{i}"),
                     *headers, body=body)
    settle(clock)
    assert [r.header("receipt-id") for r in client.received()] == [
        f"p{i}" for i in range(len(bodies))]


def messages(client, clock) -> list[StompFrame]:
    settle(clock)
    return [frame for frame in client.received() if frame.command == "MESSAGE"]


def frame(command: str, *headers) -> StompFrame:
    return StompFrame(command, tuple(headers))


# -- destinations and headers, pure ---------------------------------------------------


def test_destinations_name_queues_and_topics():
    assert send_address("/queue/orders") == "orders"
    assert send_address("/queue/orders@router-c") == "orders@router-c"
    assert send_address("/topic/prices.eu.gbp") == "topic:prices.eu.gbp"
    assert subscription_source("/queue/orders", ROUTER).queue == "orders"
    assert subscription_source(f"/queue/orders@{ROUTER}", ROUTER).queue == "orders"
    assert subscription_source("/topic/prices.*.gbp", ROUTER).pattern == "prices.*.gbp"
    assert subscription_source("/topic/#", ROUTER).pattern == "#"
    assert topic_destination("prices.eu.gbp") == "/topic/prices.eu.gbp"


@pytest.mark.parametrize("destination", [
    None, "/exchange/x", "/queue/", "/topic/", "queue/x", "/topic/a..b", "/topic/a.*",
    "/topic/a.#", "/topic/a b", "/topic/" + "a" * 256])
def test_what_a_send_may_not_go_to(destination):
    with pytest.raises(StompRefusal):
        send_address(destination)


@pytest.mark.parametrize("destination", [
    "/topic/a..b", "/topic/a.b*", "/topic/a.#b", "/topic/", "/queue/q@router-z",
    f"/queue/@{ROUTER}"])
def test_what_a_subscribe_may_not_take(destination):
    with pytest.raises(StompRefusal):
        subscription_source(destination, ROUTER)


def test_the_durable_name_is_read_as_artemis_reads_it():
    def durable(*headers, connect_client_id="app"):
        return subscribe_options(frame("SUBSCRIBE", *headers), connect_client_id)

    assert durable() == TopicOptions()
    assert durable(("activemq.subscriptionName", "a")) == TopicOptions("a", "app")
    assert durable(("durable-subscriber-name", "b"), ("activemq.subscriptionName", "a")) \
        == TopicOptions("b", "app")
    assert durable(("durable-subscription-name", "c"), ("durable-subscriber-name", "b")) \
        == TopicOptions("c", "app")
    assert durable(("durable-subscription-name", "c"), ("client-id", "other")) \
        == TopicOptions("c", "other")
    assert durable(("durable-subscription-name", "c"), ("client-id", "other"),
                   connect_client_id="") == TopicOptions("c", "other")
    assert durable(("durable-subscription-name", "c"), ("shared", "TRUE"),
                   ("mesh-wide", "true")) == TopicOptions("c", "app", True, True)
    assert durable(("mesh-wide", "true")) == TopicOptions(mesh_wide=True)
    assert durable(("retained", "if-new")) == TopicOptions(retained="if-new")
    for refused in ([("durable-subscription-name", "c")], [("shared", "true")],
                    [("mesh-wide", "yes")], [("retained", "yes")]):
        with pytest.raises(StompRefusal):
            durable(*refused, connect_client_id="")


def test_an_unsubscribe_forgets_the_durable_subscription_it_names():
    options = TopicOptions("sub", "app")
    unsubscribe = frame("UNSUBSCRIBE", ("id", "s1"), ("durable-subscription-name", "sub"))
    assert forgets(unsubscribe, "s1", options, "app")
    assert not forgets(frame("UNSUBSCRIBE", ("id", "s1")), "s1", options, "app")
    assert forgets(frame("UNSUBSCRIBE", ("activemq.subscriptionName", "sub"),
                         ("client-id", "app")), "s1", options, "")
    for named, subscription, client_id in ((unsubscribe, options, "other"),
                                           (unsubscribe, TopicOptions(), "app"),
                                           (unsubscribe, None, "app"),
                                           (unsubscribe, options, "")):
        with pytest.raises(StompRefusal):
            forgets(named, "s1", subscription, client_id)


# -- publishing -----------------------------------------------------------------------


def test_a_send_to_a_topic_is_a_publication(engine, clock):
    client = StompEnd(make_factory(engine, clock))
    client.connect()
    client.frame("SEND", ("destination", "/topic/prices.eu.gbp"), ("receipt", "r1"),
                 ("content-type", "text/plain"), body=b"1.17")
    (submitted,) = engine.submitted
    assert submitted.address == "topic:prices.eu.gbp" and submitted.persistent
    assert submitted.headers == {"content-type": "text/plain"}
    submitted.deferred.callback("router-a:1")
    assert commands(client.received()) == ["RECEIPT"]


@pytest.mark.parametrize("destination", ["/topic/prices..gbp", "/topic/prices.*", "/topic/"])
def test_a_malformed_topic_is_an_error_even_in_a_transaction(engine, clock, destination):
    client = StompEnd(make_factory(engine, clock))
    client.connect()
    client.frame("BEGIN", ("transaction", "t"))
    client.frame("SEND", ("destination", destination), ("transaction", "t"),
                 ("receipt", "r1"), body=b"x")
    (error,) = client.received()
    assert error.command == "ERROR" and error.header("receipt-id") == "r1"
    assert destination in error.header("message")
    assert engine.submitted == [] and client.closed


def test_retain_on_a_send_retains_the_publication(engine, clock):
    client = StompEnd(make_factory(engine, clock))
    client.connect()
    client.frame("SEND", ("destination", "/topic/t"), ("retain", "true"), body=b"kept")
    client.frame("SEND", ("destination", "/topic/t"), ("retain", "false"), body=b"not")
    (kept, plain) = engine.submitted
    assert kept.headers == {"x-retain": "true"} and plain.headers == {}
    client.frame("SEND", ("destination", "/topic/t"), ("retain", "yes"), ("receipt", "r"),
                 body=b"x")
    (error,) = client.received()
    assert error.command == "ERROR" and "retain" in error.header("message")


def test_a_subscribe_asking_for_retained_messages_gets_them_first(factory, clock):
    publisher = connected(factory)
    publish(publisher, clock, "t.a", b"old", b"kept", headers=[("retain", "true")])
    publish(publisher, clock, "t.b", b"gone", headers=[("retain", "true")])
    publish(publisher, clock, "t.b", b"", headers=[("retain", "true")])
    plain, given = connected(factory), connected(factory)
    subscribe(plain, "/topic/t.#", "s1")
    subscribe(given, "/topic/t.#", "s1", "auto", ("retained", "all"))
    settle(clock)
    publish(publisher, clock, "t.a", b"live")
    assert [m.body for m in messages(plain, clock)] == [b"live"]
    retained, live = messages(given, clock)
    assert (retained.body, retained.header("x-retained"), retained.header("x-retain")) == (
        b"kept", "true", "true")
    assert live.body == b"live" and live.header("x-retained") is None


# -- subscribing ----------------------------------------------------------------------


def test_wildcard_subscribers_get_messages_naming_the_topic_published_to(factory, clock):
    gbp, everything = connected(factory), connected(factory)
    subscribe(gbp, "/topic/prices.*.gbp")
    subscribe(everything, "/topic/#", "all", "client-individual")
    settle(clock)
    assert commands(gbp.received()) == commands(everything.received()) == ["RECEIPT"]
    publisher = connected(factory)
    publish(publisher, clock, "prices.eu.gbp", b"1", headers=[("content-type", "text/plain"),
                                                               ("x-trace", "t-1")])
    publish(publisher, clock, "orders.new", b"2")
    (message,) = messages(gbp, clock)
    assert message.body == b"1"
    assert message.header("destination") == "/topic/prices.eu.gbp"
    assert message.header("subscription") == "s1"
    assert message.header("content-type") == "text/plain"
    assert message.header("x-trace") == "t-1"
    assert message.header("ack") is None
    names = {name for name, _ in message.headers}
    assert not names & {"x-topic", "x-publication", "x-topic-targets"}
    both = messages(everything, clock)
    assert [(m.header("destination"), m.body) for m in both] == [
        ("/topic/prices.eu.gbp", b"1"), ("/topic/orders.new", b"2")]
    assert all(m.header("subscription") == "all" and m.header("ack") for m in both)
    # Each copy's id starts with its publication's: two subscribers, one
    # publication, two ids.
    assert message.header("message-id") != both[0].header("message-id")
    assert message.header("message-id").split("/")[0] == both[0].header("message-id").split("/")[0]


def test_a_malformed_pattern_is_an_error(factory, clock):
    client = connected(factory)
    subscribe(client, "/topic/prices.g*")
    (error,) = client.received()
    assert error.command == "ERROR" and error.header("receipt-id") == "sub-s1"
    assert "/topic/prices.g*" in error.header("message")


def test_topic_headers_on_a_queue_subscription_are_an_error(factory, clock):
    for header in (("durable-subscription-name", "sub"), ("mesh-wide", "true"),
                   ("shared", "true"), ("retained", "all")):
        client = connected(factory, ("client-id", "app"))
        subscribe(client, "/queue/q", "s1", "auto", header)
        (error,) = client.received()
        assert error.command == "ERROR" and header[0] in error.header("message")


def test_client_ack_mode_is_cumulative_on_a_topic_and_nack_redelivers(factory, clock, started):
    client = connected(factory, ("client-id", "app"))
    subscribe(client, "/topic/t.#", "s1", "client", ("durable-subscription-name", "sub"))
    settle(clock)
    publish(connected(factory), clock, "t.a", b"1", b"2", b"3")
    got = messages(client, clock)
    assert [m.body for m in got] == [b"1", b"2", b"3"]
    # Both cumulative: the NACK of the third gives all three back, the
    # ACK of the last redelivery takes them all.
    client.frame("NACK", ("id", got[2].header("ack")))
    again = messages(client, clock)
    assert [m.body for m in again] == [b"1", b"2", b"3"]
    assert all(m.header("redelivered") == "true" for m in again)
    client.frame("ACK", ("id", again[2].header("ack")), ("receipt", "acked"))
    settle(clock)
    assert [r.header("receipt-id") for r in client.received()] == ["acked"]
    consumed = [e for e in started.events.named(event_names.MESSAGE_CONSUMED)
                if e["queue"] == DURABLE]
    assert sorted(e["msg_id"] for e in consumed) == sorted(m.header("message-id") for m in got)


def test_auto_ack_renews_the_credit_of_a_topic_subscription(factory, clock):
    client = connected(factory)
    subscribe(client, "/topic/t", "s1", "auto", ("prefetch-count", "2"))
    settle(clock)
    client.received()
    publish(connected(factory), clock, "t", *(b"%d" % i for i in range(5)))
    assert [m.body for m in messages(client, clock)] == [b"%d" % i for i in range(5)]


def test_stomp_1_0_subscribes_to_a_topic_by_destination(factory, clock):
    client = connected(factory, version=None)
    client.frame("SUBSCRIBE", ("destination", "/topic/news.*"))
    settle(clock)
    publish(connected(factory), clock, "news.eu", b"n")
    (message,) = messages(client, clock)
    assert message.header("subscription") == "/topic/news.*"
    assert message.header("destination") == "/topic/news.eu"
    client.frame("UNSUBSCRIBE", ("destination", "/topic/news.*"), ("receipt", "u"))
    settle(clock)
    assert commands(client.received()) == ["RECEIPT"]


# -- durable ---------------------------------------------------------------------------


def test_a_durable_subscription_collects_while_its_client_is_away(factory, clock, started):
    first = connected(factory, ("client-id", "app"))
    subscribe(first, "/topic/t.#", "s1", "client-individual",
              ("durable-subscription-name", "sub"))
    settle(clock)
    assert commands(first.received()) == ["RECEIPT"]
    first.frame("DISCONNECT", ("receipt", "bye"))
    settle(clock)
    publish(connected(factory), clock, "t.a", b"1", b"2")
    assert DURABLE in started.topics.durable
    # ActiveMQ's header, the client id on the SUBSCRIBE.
    again = connected(factory)
    subscribe(again, "/topic/t.#", "s9", "client-individual",
              ("activemq.subscriptionName", "sub"), ("client-id", "app"))
    settle(clock)
    frames = again.received()
    assert commands(frames) == ["RECEIPT", "MESSAGE", "MESSAGE"]
    assert [m.body for m in frames[1:]] == [b"1", b"2"]
    assert all(m.header("subscription") == "s9" for m in frames[1:])


def test_a_durable_subscription_without_a_client_id_is_an_error(factory, clock):
    client = connected(factory, ("login", "someone"))
    subscribe(client, "/topic/t", "s1", "auto", ("durable-subscription-name", "sub"))
    (error,) = client.received()
    assert error.command == "ERROR" and "client-id" in error.header("message")


def test_a_plain_unsubscribe_detaches_and_a_named_one_forgets(factory, clock, started):
    client = connected(factory, ("client-id", "app"))
    subscribe(client, "/topic/t", "s1", "client", ("durable-subscription-name", "sub"))
    settle(clock)
    client.frame("UNSUBSCRIBE", ("id", "s1"), ("receipt", "detached"))
    settle(clock)
    assert [r.header("receipt-id") for r in client.received()] == ["sub-s1", "detached"]
    publish(connected(factory), clock, "t", b"kept")
    assert DURABLE in started.topics.durable

    subscribe(client, "/topic/t", "s2", "client", ("durable-subscription-name", "sub"))
    settle(clock)
    receipt, message = client.received()
    assert receipt.header("receipt-id") == "sub-s2" and message.body == b"kept"
    client.frame("UNSUBSCRIBE", ("id", "s2"), ("durable-subscription-name", "sub"),
                 ("receipt", "forgotten"))
    settle(clock)
    assert [r.header("receipt-id") for r in client.received()] == ["forgotten"]
    assert DURABLE not in started.topics.durable
    # Gone with what it held ("kept", unacknowledged, which a detach
    # would have given back), and nothing collected since.
    publish(connected(factory), clock, "t", b"to no one")
    subscribe(client, "/topic/t", "s3", "client", ("durable-subscription-name", "sub"))
    assert messages(client, clock) == []


def test_an_unsubscribe_naming_another_durable_subscription_is_an_error(factory, clock,
                                                                         started):
    client = connected(factory, ("client-id", "app"))
    subscribe(client, "/topic/t", "s1", "auto", ("durable-subscription-name", "sub"))
    settle(clock)
    client.received()
    client.frame("UNSUBSCRIBE", ("id", "s1"), ("durable-subscription-name", "other"),
                 ("receipt", "u"))
    (error,) = client.received()
    assert error.command == "ERROR" and error.header("receipt-id") == "u"
    assert "'other'" in error.header("message")
    # The connection ended: the subscription is detached, not forgotten.
    settle(clock)
    assert DURABLE in started.topics.durable


def test_a_second_consumer_needs_a_shared_subscription(factory, clock):
    headers = (("durable-subscription-name", "sub"),)
    one = connected(factory, ("client-id", "app"))
    subscribe(one, "/topic/t", "s1", "auto", *headers)
    settle(clock)
    two = connected(factory, ("client-id", "app"))
    subscribe(two, "/topic/t", "s1", "auto", *headers)
    settle(clock)
    (error,) = two.received()
    assert error.command == "ERROR" and "subscription-in-use" in error.body.decode()
    assert error.header("receipt-id") == "sub-s1"

    shared = (("durable-subscription-name", "shared"), ("shared", "true"))
    consumers = [connected(factory, ("client-id", "app")) for _ in range(2)]
    for consumer in consumers:
        subscribe(consumer, "/topic/s", "s1", "auto", *shared)
    settle(clock)
    assert [commands(c.received()) for c in consumers] == [["RECEIPT"], ["RECEIPT"]]
    publish(connected(factory), clock, "s", *(b"%d" % i for i in range(10)))
    got = [m.body for c in consumers for m in messages(c, clock)]
    assert sorted(got) == sorted(b"%d" % i for i in range(10))


# -- mesh-wide ------------------------------------------------------------------------


def reach_router_b(engine, clock) -> None:
    """
    Give the engine's route table a route to router-b, which must then
    confirm a mesh-wide subscription's interest.
    """
    routes: RouteTable = engine.destinations.routes
    other = RouteTable("router-b", clock)
    for advertisement in routes.link_up("router-b"):
        other.received(advertisement)
    for advertisement in other.link_up(ROUTER):
        routes.received(advertisement)
    assert "router-b" in routes.routes()


def test_a_mesh_wide_subscribe_is_receipted_once_every_router_holds_it(factory, clock,
                                                                        started):
    reach_router_b(started, clock)
    client = connected(factory)
    subscribe(client, "/topic/t.#", "s1", "auto", ("mesh-wide", "true"))
    plain = connected(factory)
    subscribe(plain, "/topic/u", "s1")
    settle(clock)
    assert client.received() == []
    assert commands(plain.received()) == ["RECEIPT"]
    clock.advance(1)
    assert client.received() == []
    started.system.arrived(Message(
        msg_id="router-b:held", origin="router-b", dest_router=ROUTER,
        dest_queue=INTEREST_HELD, body=b"",
        headers={VERSION: str(started.interest.local.version)}, persistent=False))
    settle(clock)
    assert [r.header("receipt-id") for r in client.received()] == ["sub-s1"]


def test_a_mesh_wide_subscribe_never_confirmed_is_an_error(factory, clock, started):
    reach_router_b(started, clock)
    client = connected(factory)
    subscribe(client, "/topic/t", "s1", "auto", ("mesh-wide", "true"))
    clock.advance(31)
    settle(clock)
    (error,) = client.received()
    assert error.command == "ERROR" and error.header("receipt-id") == "sub-s1"
    assert "router-b" in error.header("message") and client.closed


def test_a_publication_takes_a_duplicate_id_and_a_transaction_as_a_send(factory, clock):
    subscriber = connected(factory)
    subscribe(subscriber, "/topic/t")
    settle(clock)
    subscriber.received()
    publisher = connected(factory)
    for _ in range(2):
        publisher.frame("SEND", ("destination", "/topic/t"), ("duplicate-id", "d-1"),
                        body=b"once")
    publisher.frame("BEGIN", ("transaction", "tx"))
    publisher.frame("SEND", ("destination", "/topic/t"), ("transaction", "tx"), body=b"held")
    assert [m.body for m in messages(subscriber, clock)] == [b"once"]
    publisher.frame("COMMIT", ("transaction", "tx"), ("receipt", "committed"))
    assert [m.body for m in messages(subscriber, clock)] == [b"held"]
