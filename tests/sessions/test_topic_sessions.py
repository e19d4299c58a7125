"""
The router's side of topic subscriptions (client protocol version 8,
docs/client-protocol.md "Topics"), frame by frame without sockets, over
the real message engine and SQLite store run inline on a C{task.Clock}:
SubscribeTopic answered once the router made the subscription (its
credit granted after the Confirm), wildcards, durable subscriptions
named by the frame's client id or the session's, shared or in use, an
Unsubscribe that forgets, the bounds and numbers a Subscribe has, the
Unsubscribe or Close that comes while the router is still making one, a
disconnected session keeping its subscriptions, and older connections
refused the version-8 frames, and the user's publish and subscribe
permissions.
"""

import pytest
from twisted.internet.defer import Deferred

from meshroute import events
from meshroute.security.credentials import derive
from meshroute.security.policy import Permission, Security, SecurityPolicy
from meshroute.sessions.limits import ClientLimits
from meshroute.sessions.native_listener import ClientFactory
from meshroute.wire import client_frames as f

from support.client_auth_testing import scram_open
from support.fake_router import ROUTER
from support.router_connection import Connection, every_delivery
from support.router_engine import engine, store  # noqa: F401 (fixtures)
from support.served_sessions import factory, make_factory  # noqa: F401 (a fixture)


class Version8(Connection):
    """
    A client of version 8 that numbers its commands; what it received is
    read once the router's turns (the fan-out's, the deliveries') ran.
    """

    def __init__(self, factory, client_id: str = "app", versions=(8,)) -> None:  # noqa: F811
        super().__init__(factory)
        self.next_id = 1
        self.send(f.Open(list(versions), client_id, "", 60000))
        opened = self.expect()
        assert isinstance(opened, f.Opened), opened
        self.opened = opened

    def command(self) -> int:
        self.next_id += 1
        return self.next_id - 1

    def received(self) -> list:
        for _ in range(5):
            self.factory.clock.advance(0)
        return [frame for frame in super().received() if not isinstance(frame, f.Processed)]

    def subscribe(self, pattern: str, number: int = 1, credit: int = 100, **durable):
        command_id = self.command()
        self.send(f.SubscribeTopic(command_id, number, pattern, credit, **durable))
        return command_id

    def publish(self, topic: str, *bodies: bytes, persistent: bool = True) -> list:
        """
        Publish C{bodies} to C{topic}: the answers, once the fan-out ran.
        """
        for body in bodies:
            self.send(f.Send(self.command(), f"topic:{topic}", {}, body, persistent))
        answers = self.received()
        assert [type(fr) for fr in answers] == [f.Confirm] * len(bodies), answers
        return answers

    def answer(self, command_id: int):
        frames = self.received()
        answers = [fr for fr in frames if isinstance(fr, (f.Confirm, f.Error))
                   and fr.command_id == command_id]
        assert answers, frames
        self.rest = frames
        return answers[0]


@pytest.fixture
def started(engine):  # noqa: F811
    engine.start()
    yield engine
    engine.stop()


def bodies(frames) -> list[bytes]:
    return [d.body for d in every_delivery(frames)]


def ack_all(client: Version8, frames) -> None:
    client.send(f.Ack(client.command(), [d.delivery_id for d in every_delivery(frames)]))


# -- subscribing -------------------------------------------------------------------


def test_wildcard_subscriptions_receive_what_matches(factory, started):  # noqa: F811
    gbp, wide = Version8(factory), Version8(factory)
    assert isinstance(gbp.answer(gbp.subscribe("prices.*.gbp")), f.Confirm)
    assert isinstance(wide.answer(wide.subscribe("prices.#")), f.Confirm)
    publisher = Version8(factory)
    publisher.publish("prices.eu.gbp", b"1")
    publisher.publish("prices.us.usd", b"2")
    publisher.publish("orders.new", b"3")
    publisher.publish("prices.uk.gbp", b"4", persistent=False)
    got = gbp.received()
    assert bodies(got) == [b"1", b"4"]
    assert [d.headers["x-topic"] for d in every_delivery(got)] == ["prices.eu.gbp",
                                                                  "prices.uk.gbp"]
    assert bodies(wide.received()) == [b"1", b"2", b"4"]


def test_the_confirm_comes_before_the_first_delivery(factory, started):  # noqa: F811
    first = Version8(factory)
    first.answer(first.subscribe("t.#", durable="sub"))
    first.send(f.Close(first.command()))
    Version8(factory).publish("t.a", b"waiting")
    again = Version8(factory)
    command_id = again.subscribe("t.#", credit=5, durable="sub")
    frames = again.received()
    assert isinstance(frames[0], f.Confirm) and frames[0].command_id == command_id
    assert bodies(frames[1:]) == [b"waiting"]


def test_credit_bounds_a_topic_subscription_as_a_queue_s(factory, started):  # noqa: F811
    client = Version8(factory)
    client.answer(client.subscribe("t", credit=2))
    Version8(factory).publish("t", b"1", b"2", b"3")
    frames = client.received()
    assert bodies(frames) == [b"1", b"2"]
    ack_all(client, frames)
    client.send(f.Credit(client.command(), 1, 5))
    assert bodies(client.received()) == [b"3"]


def test_a_bad_pattern_or_durable_name_is_a_bad_address(factory, started):  # noqa: F811
    client = Version8(factory)
    assert client.answer(client.subscribe("prices.**")).code == f.BAD_ADDRESS
    assert client.answer(client.subscribe("t", 2, durable="no spaces")).code == f.BAD_ADDRESS
    # The number of a refused subscription is free again.
    assert isinstance(client.answer(client.subscribe("t", 2)), f.Confirm)
    assert not client.closed


def test_a_durable_subscription_is_named_by_the_frame_s_client_id_or_the_session_s(
        factory, started):  # noqa: F811
    client = Version8(factory, client_id="shop-7")
    client.answer(client.subscribe("t", 1, durable="own"))
    client.answer(client.subscribe("t", 2, durable="given", client_id="billing"))
    assert set(started.topics.durable) == {"$durable:shop-7:own", "$durable:billing:given"}


def test_a_durable_subscription_takes_one_consumer_unless_shared(factory, started):  # noqa: F811
    one, two = Version8(factory), Version8(factory)
    one.answer(one.subscribe("t", durable="single"))
    refused = two.answer(two.subscribe("t", durable="single"))
    assert refused.code == f.SUBSCRIPTION_IN_USE
    one.answer(one.subscribe("t", 2, durable="many", shared=True))
    assert isinstance(two.answer(two.subscribe("t", 2, durable="many", shared=True)), f.Confirm)
    Version8(factory).publish("t", *[b"%d" % i for i in range(6)])
    got = bodies(one.received()) + bodies(two.received())
    # "single" (one's) gets every one; "many" shares them out.
    assert sorted(got) == sorted([b"%d" % i for i in range(6)] * 2)


def test_numbers_credit_and_limits_are_a_subscribe_s(engine, clock):  # noqa: F811
    engine.start()
    factory = make_factory(engine, clock, limits=ClientLimits(  # noqa: F811
        max_subscriptions=2, max_unacknowledged=100))
    client = Version8(factory)
    client.send(f.Subscribe(client.command(), 1, "q", 10))
    assert client.answer(client.subscribe("t", 1)).code == f.INVALID_ARGUMENT
    assert client.answer(client.subscribe("t", 2, credit=-1)).code == f.INVALID_ARGUMENT
    assert client.answer(client.subscribe("t", 2, credit=91)).code == f.LIMIT_REACHED
    assert isinstance(client.answer(client.subscribe("t", 2, credit=90)), f.Confirm)
    assert client.answer(client.subscribe("t", 3, credit=0)).code == f.LIMIT_REACHED
    engine.stop()


# -- unsubscribing and forgetting --------------------------------------------------


def test_a_plain_unsubscribe_leaves_a_durable_subscription_collecting(factory,
                                                                       started):  # noqa: F811
    client = Version8(factory)
    client.answer(client.subscribe("t.#", durable="sub"))
    command_id = client.command()
    client.send(f.Unsubscribe(command_id, 1))
    assert isinstance(client.answer(command_id), f.Confirm)
    Version8(factory).publish("t.x", b"kept")
    assert started.topics.describe()["durable"][0]["depth"] == 1
    client.answer(client.subscribe("t.#", 2, durable="sub"))
    assert bodies(client.rest) == [b"kept"]


def test_an_unsubscribe_that_forgets_deletes_the_durable_subscription(factory,
                                                                       started):  # noqa: F811
    client = Version8(factory)
    client.answer(client.subscribe("t.#", credit=0, durable="sub"))
    Version8(factory).publish("t.x", b"gone with it")
    command_id = client.command()
    client.send(f.Unsubscribe(command_id, 1, forget=True))
    assert isinstance(client.answer(command_id), f.Confirm)
    assert started.topics.durable == {}
    assert started.queues.depths() == {}
    # A non-durable one has nothing more to forget.
    client.answer(client.subscribe("t.#", 2))
    command_id = client.command()
    client.send(f.Unsubscribe(command_id, 2, forget=True))
    assert isinstance(client.answer(command_id), f.Confirm)
    assert started.topics.describe()["non_durable"] == []


def test_forgetting_a_shared_subscription_others_consume_is_in_use(factory,
                                                                   started):  # noqa: F811
    one, two = Version8(factory), Version8(factory)
    one.answer(one.subscribe("t", durable="many", shared=True))
    two.answer(two.subscribe("t", durable="many", shared=True))
    command_id = one.command()
    one.send(f.Unsubscribe(command_id, 1, forget=True))
    assert one.answer(command_id).code == f.SUBSCRIPTION_IN_USE
    # It ended all the same; the other consumer still has it.
    assert not one.closed  # the session goes on
    Version8(factory).publish("t", b"x")
    assert bodies(two.received()) == [b"x"] and bodies(one.received()) == []


# -- while the router makes the subscription ----------------------------------------


class HeldTopics:
    """
    The engine's topic subscriptions, whose subscribes wait until the test
    releases them (as a durable one waits for the store, or a mesh-wide
    one for the mesh).
    """

    def __init__(self, topics) -> None:
        self._topics = topics
        self.durable = topics.durable
        self.forget = topics.forget
        self.describe = topics.describe
        self.held: list = []

    def subscribe(self, *args, **kwargs) -> Deferred:
        d = Deferred()
        self.held.append((d, args, kwargs))
        return d

    def release(self) -> None:
        held, self.held = self.held, []
        for d, args, kwargs in held:
            self._topics.subscribe(*args, **kwargs).chainDeferred(d)


@pytest.fixture
def held(started, monkeypatch):  # noqa: F811
    topics = HeldTopics(started.topics)
    monkeypatch.setattr(started, "topics", topics)
    return topics


def test_nothing_is_answered_until_the_router_made_it(factory, held, started):  # noqa: F811
    client = Version8(factory)
    command_id = client.subscribe("t", 1)
    assert client.received() == []
    # Its number is taken meanwhile.
    assert client.answer(client.subscribe("t", 1)).code == f.INVALID_ARGUMENT
    held.release()
    assert isinstance(client.answer(command_id), f.Confirm)


def test_an_unsubscribe_waits_for_the_subscription_it_names(factory, held,
                                                            started):  # noqa: F811
    client = Version8(factory)
    subscribed = client.subscribe("t", 1, durable="sub")
    unsubscribed = client.command()
    client.send(f.Unsubscribe(unsubscribed, 1, forget=True))
    assert client.received() == []
    held.release()
    frames = client.received()
    assert [(type(fr), fr.command_id) for fr in frames] == [(f.Confirm, subscribed),
                                                            (f.Confirm, unsubscribed)]
    assert started.topics.durable == {}


def test_close_waits_for_a_subscription_being_made_and_ends_it(factory, held,
                                                               started):  # noqa: F811
    client = Version8(factory)
    subscribed = client.subscribe("t", 1)
    client.send(f.Close(client.command()))
    assert client.received() == []
    held.release()
    frames = client.received()
    assert [type(fr) for fr in frames] == [f.Confirm, f.Closed]
    assert frames[0].command_id == subscribed
    assert started.topics.describe()["non_durable"] == []


# -- a session that loses its connection ---------------------------------------------


def test_a_disconnected_session_keeps_its_topic_subscriptions(factory, started,
                                                              clock):  # noqa: F811
    client = Version8(factory)
    client.answer(client.subscribe("t", 1))
    client.answer(client.subscribe("t", 2, durable="sub"))
    session = factory.sessions.resumable(client.opened.session_id)
    kept = dict(session.deliveries.subscriptions)
    client.lose()
    Version8(factory).publish("t", b"while away")
    Version8(factory).publish("t", b"fast", persistent=False)
    back = Connection(factory)
    back.send(f.Open([8], "app", client.opened.session_id, 60000, client.next_id - 1, 0))
    for _ in range(5):
        clock.advance(0)
    frames = back.received()
    assert frames[0].reattached
    assert session.deliveries.subscriptions == kept
    by_number = {}
    for d in every_delivery(frames):
        by_number.setdefault(d.subscription, []).append(d.body)
    assert by_number == {1: [b"while away", b"fast"], 2: [b"while away", b"fast"]}


def test_a_session_that_expires_ends_its_topic_subscriptions(factory, started,
                                                             clock):  # noqa: F811
    client = Version8(factory)
    client.answer(client.subscribe("t", 1))
    client.answer(client.subscribe("t", 2, durable="sub"))
    client.lose()
    clock.advance(6)  # keep-alive is 5 s in these tests
    described = started.topics.describe()
    assert described["non_durable"] == []
    assert [d["consumers"] for d in described["durable"]] == [0]
    Version8(factory).publish("t", b"for later")
    assert started.topics.describe()["durable"][0]["depth"] == 1


# -- older connections ----------------------------------------------------------------


@pytest.mark.parametrize("frame", [f.SubscribeTopic(1, 1, "t", 10),
                                   f.Unsubscribe(1, 1, forget=True)])
def test_an_older_connection_may_not_use_version_8_s_frames(factory, started,
                                                            frame):  # noqa: F811
    client = Version8(factory, versions=(1, 2, 3, 4, 5, 6, 7))
    assert client.opened.version == 7
    client.send(frame)
    (error,) = client.received()
    assert (error.command_id, error.code) == (0, f.BAD_COMMAND)
    assert "needs protocol version 8; this connection speaks 7" in error.detail
    assert client.closed


def test_an_older_client_publishes_and_unsubscribes_as_before(factory, started):  # noqa: F811
    listener = Version8(factory)
    listener.answer(listener.subscribe("t"))
    old = Version8(factory, versions=(1,))
    old.send(f.Subscribe(old.command(), 1, "q", 1))
    command_id = old.command()
    old.send(f.Unsubscribe(command_id, 1))
    assert isinstance(old.answer(command_id), f.Confirm)
    old.publish("t", b"from version 1")
    assert bodies(listener.received()) == [b"from version 1"]


# -- permissions -------------------------------------------------------------------


@pytest.fixture
def secured(started, clock):  # noqa: F811
    users = {"pricer": derive("pricer-pw", iterations=4096)}
    permissions = (Permission(("pricer",), send=("orders",), publish=("prices.*.*",),
                              subscribe=("prices.eu.*", "alerts.#")),)
    security = Security(SecurityPolicy(ROUTER, users, permissions))
    return ClientFactory(started, clock, security=security, secret=b"router secret")


class Pricer(Version8):
    """
    A version-8 client logged in as C{pricer}.
    """

    def __init__(self, factory) -> None:  # noqa: F811
        Connection.__init__(self, factory)
        self.next_id = 1
        authenticated, self.opened = scram_open(self, "pricer", "pricer-pw", versions=(8,))
        assert authenticated.user == "pricer"


def test_publishing_is_judged_by_publish_patterns_not_send_ones(secured, started):
    client = Pricer(secured)
    allowed, refused, malformed = client.command(), client.command(), client.command()
    client.send(f.Send(allowed, "topic:prices.eu.gbp", {}, b"x", True),
                f.Send(refused, "topic:orders", {}, b"x", True),
                f.Send(malformed, "topic:prices..gbp", {}, b"x", True))
    got = {fr.command_id: fr for fr in client.received()}
    assert isinstance(got[allowed], f.Confirm)
    assert got[refused] == f.Error(refused, f.NOT_ALLOWED,
                                   "user 'pricer' may not publish to 'orders'")
    assert got[malformed].code == f.BAD_ADDRESS
    (denial,) = started.events.named(events.SECURITY_DENIED)
    assert denial == {"user": "pricer", "action": "publish", "target": "orders",
                      "reason": "no permission publishes to it"}


def test_a_subscription_must_stay_within_the_subscribe_patterns(secured, started):
    client = Pricer(secured)
    answers = [client.answer(client.subscribe(pattern, number))
               for number, pattern in enumerate(["prices.eu.gbp", "alerts.#", "prices.#",
                                                 "#", "prices.**"], 1)]
    assert [getattr(a, "code", "ok") for a in answers] == [
        "ok", "ok", f.NOT_ALLOWED, f.NOT_ALLOWED, f.BAD_ADDRESS]
    assert answers[2].detail == "user 'pricer' may not subscribe to 'prices.#'"
    denials = started.events.named(events.SECURITY_DENIED)
    assert [(d["action"], d["target"]) for d in denials] == [("subscribe", "prices.#"),
                                                            ("subscribe", "#")]
