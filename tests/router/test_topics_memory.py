"""
Topics across whole routers linked in memory: interest flooded over the
links, publications fanned out along the route tree toward it and to
nobody else, durable subscriptions collecting while detached and through
restarts.
"""

import pytest

from meshroute.router.topic_subscriptions import DurableInUse
from support.mesh_testing import assert_confirmed, mesh  # noqa: F401 (mesh: a fixture)


class TopicConsumer:
    """
    Subscribes to a pattern at one router and acknowledges what it gets.
    """

    def __init__(self, router, pattern: str, credit: int = 1000, **durable) -> None:
        self.received = []
        self.subscription = None
        d = router.engine.topics.subscribe(pattern, self._deliver, 0, **durable)
        d.addCallback(self._subscribed, credit)
        self.failure = []
        d.addErrback(self.failure.append)

    def _subscribed(self, subscription, credit: int) -> None:
        self.subscription = subscription
        subscription.add_credit(credit)

    def _deliver(self, delivery) -> None:
        self.received.append(delivery.message)
        self.subscription.ack([delivery.delivery_id])
        self.subscription.add_credit(1)

    @property
    def bodies(self) -> list[bytes]:
        return [m.body for m in self.received]


def publish(mesh, router: str, topic: str, count: int, start: int = 0, persistent=True):
    engine = mesh.routers[router].engine
    return [engine.submit(f"topic:{topic}", b"%d" % i, {}, persistent)
            for i in range(start, start + count)]


def star(mesh) -> None:
    """
    a - b - c, and d and e beyond b.
    """
    mesh.add("router-a", connect_to=["router-b"])
    mesh.add("router-b")
    mesh.add("router-c", connect_to=["router-b"])
    mesh.add("router-d", connect_to=["router-b"])
    mesh.add("router-e", connect_to=["router-d"])
    mesh.run(1)


def links_sent(router, peer: str) -> int:
    return sum(link["sent"] for link in router.describe_links()
               if link["peer"] == peer)


@pytest.mark.parametrize("persistent", [True, False])
def test_publications_reach_matching_subscriptions_only(mesh, persistent):
    star(mesh)
    routers = mesh.routers
    wide = TopicConsumer(routers["router-c"], "prices.#")
    gbp = TopicConsumer(routers["router-e"], "prices.*.gbp")
    local = TopicConsumer(routers["router-a"], "prices.eu.*")
    other = TopicConsumer(routers["router-d"], "orders.#")
    mesh.run(1)
    sent_to_d = links_sent(routers["router-b"], "router-d")
    assert_confirmed(publish(mesh, "router-a", "prices.eu.gbp", 5, persistent=persistent))
    assert_confirmed(publish(mesh, "router-a", "prices.us.usd", 5, 5, persistent=persistent))
    mesh.run(2)
    numbers = [b"%d" % i for i in range(10)]
    assert wide.bodies == numbers
    assert gbp.bodies == numbers[:5]
    assert local.bodies == numbers[:5]
    assert other.bodies == []
    # One copy per link: b sent d the five for e, nothing else.
    assert links_sent(routers["router-b"], "router-d") - sent_to_d == 5
    assert all(m.headers["x-topic"] for m in wide.received)


def test_no_interest_no_traffic(mesh):
    star(mesh)
    routers = mesh.routers
    before = {name: links_sent(routers["router-a"], "router-b") for name in ["router-a"]}
    assert_confirmed(publish(mesh, "router-a", "nobody.listens", 20))
    mesh.run(1)
    assert links_sent(routers["router-a"], "router-b") == before["router-a"]


def test_withdrawn_interest_stops_the_flow(mesh):
    star(mesh)
    routers = mesh.routers
    consumer = TopicConsumer(routers["router-e"], "a.b")
    mesh.run(1)
    assert_confirmed(publish(mesh, "router-a", "a.b", 3))
    mesh.run(1)
    assert len(consumer.bodies) == 3
    consumer.subscription.cancel()
    mesh.run(1)
    assert routers["router-a"].engine.interest.interested(("a", "b")) == set()
    sent = links_sent(routers["router-a"], "router-b")
    assert_confirmed(publish(mesh, "router-a", "a.b", 3))
    mesh.run(1)
    assert links_sent(routers["router-a"], "router-b") == sent


def test_durable_subscription_collects_while_detached_and_through_restart(mesh):
    star(mesh)
    routers = mesh.routers
    first = TopicConsumer(routers["router-c"], "t.#", client_id="app", durable="sub")
    mesh.run(1)
    assert first.failure == []
    assert_confirmed(publish(mesh, "router-a", "t.x", 3))
    mesh.run(1)
    assert first.bodies == [b"0", b"1", b"2"]
    first.subscription.cancel()
    assert_confirmed(publish(mesh, "router-a", "t.y", 3, 3))
    mesh.run(1)
    mesh.stop("router-c")
    assert_confirmed(publish(mesh, "router-a", "t.z", 3, 6))
    mesh.run(1)
    mesh.add("router-c", connect_to=["router-b"])
    mesh.run(2)
    again = TopicConsumer(mesh.routers["router-c"], "t.#", client_id="app", durable="sub")
    mesh.run(1)
    assert again.bodies == [b"%d" % i for i in range(3, 9)]


def test_a_durable_subscription_takes_one_consumer_unless_shared(mesh):
    star(mesh)
    router = mesh.routers["router-c"]
    TopicConsumer(router, "t", client_id="app", durable="one")
    mesh.run(0.1)
    second = TopicConsumer(router, "t", client_id="app", durable="one")
    mesh.run(0.1)
    assert second.failure and second.failure[0].check(DurableInUse)
    shared = [TopicConsumer(router, "t", client_id="app", durable="many", shared=True)
              for _ in range(2)]
    mesh.run(1)
    assert_confirmed(publish(mesh, "router-a", "t", 10))
    mesh.run(1)
    got = sorted(b for consumer in shared for b in consumer.bodies)
    assert got == sorted(b"%d" % i for i in range(10))
    assert all(consumer.bodies for consumer in shared)
