"""
Topics across whole routers linked in memory: interest flooded over the
links, publications fanned out along the route tree toward it and to
nobody else, durable subscriptions collecting while detached and through
restarts.
"""

import pytest

from meshroute.router.topic_subscriptions import DurableInUse, NotOwner
from meshroute.testing.memory_mesh import MemoryMesh
from meshroute.wire.frames import Interest
from support.mesh_testing import assert_confirmed, events_of, mesh  # noqa: F401 (mesh: a fixture)
from support.topic_testing import TopicConsumer, publish, star


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


def test_mesh_wide_fires_once_every_router_holds_the_interest(mesh):
    star(mesh)
    routers = mesh.routers
    others = ("router-b", "router-c", "router-d", "router-e")
    subscribed = []
    d = routers["router-a"].engine.topics.subscribe("late.#", lambda delivery: None, 0,
                                                    mesh_wide=True)
    d.addCallback(subscribed.append)
    seen_missing = False
    for _ in range(1000):
        holding = [name for name in others
                   if routers[name].engine.interest.interested(("late", "x")) == {"router-a"}]
        if subscribed:
            break
        seen_missing = seen_missing or len(holding) < len(others)
        mesh.run(0.001)
    assert len(subscribed) == 1
    # It fired after every router held it, and not before.
    assert holding == list(others) and seen_missing


def test_mesh_wide_times_out_when_a_reachable_router_stays_silent(mesh):
    star(mesh)
    routers = mesh.routers
    mesh_wide = routers["router-a"].engine.mesh_wide
    # e takes the interest but its notice never comes back.
    routers["router-e"].engine.mesh_wide.taken = lambda origins: None
    failures = []
    routers["router-a"].engine.topics.subscribe("t", lambda delivery: None, 0,
                                                mesh_wide=True).addErrback(failures.append)
    mesh.run(5)
    assert failures == [] and mesh_wide.missing(routers["router-a"].engine.interest.local
                                                .version) == {"router-e"}
    mesh.run(30)
    assert len(failures) == 1 and "router-e" in str(failures[0].value)
    # The subscription went with the failure: its interest is withdrawn.
    assert routers["router-a"].engine.interest.local.advertised == frozenset()


def test_an_interest_frame_naming_no_pattern_closes_the_link(mesh):
    star(mesh)
    routers = mesh.routers
    channel = routers["router-a"].engine.forwarding.channel("router-b")
    channel.send(Interest([["router-a", 2**40, ["not a pattern"]]]))
    mesh.run(0.1)
    closed = [e for e in events_of(routers["router-b"], "link.closed")
              if e["peer"] == "router-a"]
    assert closed and "Interest from router-a" in closed[0]["detail"]
    mesh.run(2)
    assert mesh.stages("router-b")["router-a"] == "delivery"


def test_durable_exactly_once_through_a_frozen_router_and_a_reroute(mesh):
    # a - b - c and a - d - c: b freezes while publications flow.
    mesh.add("router-a", connect_to=["router-b", "router-d"])
    mesh.add("router-b", connect_to=["router-c"])
    mesh.add("router-d", connect_to=["router-c"])
    mesh.add("router-c")
    mesh.run(1)
    routers = mesh.routers
    durable = TopicConsumer(routers["router-c"], "s.#", client_id="app", durable="all")
    plain = TopicConsumer(routers["router-c"], "s.#")
    mesh.run(1)
    confirmed = []
    for n in range(60):
        confirmed += publish(mesh, "router-a", "s.x", 1, n)
        if n == 20:
            mesh.partition("router-b")
        mesh.run(0.1)
    mesh.run(3)
    mesh.heal("router-b")
    mesh.run(5)
    assert_confirmed(confirmed)
    assert sorted(durable.bodies, key=int) == [b"%d" % n for n in range(60)]
    assert len(plain.bodies) == len(set(plain.bodies))
    # Before the freeze, and after the reroute, in the order published.
    assert durable.bodies[:20] == [b"%d" % n for n in range(20)]


def test_publications_left_by_a_crash_go_where_the_interest_was(mesh):
    star(mesh)
    routers = mesh.routers
    durable = TopicConsumer(routers["router-e"], "k.#", client_id="app", durable="k")
    mesh.run(1)
    durable.subscription.cancel()
    # Accepted at a, then a dies before its fan-out runs.
    sends = publish(mesh, "router-a", "k.v", 5)
    assert_confirmed(sends)
    mesh.crash("router-a")
    mesh.partition("router-b")  # a hears nothing from the mesh after its restart
    mesh.add("router-a", connect_to=["router-b"])
    mesh.run(1)
    mesh.heal("router-b")
    mesh.run(3)
    again = TopicConsumer(routers["router-e"], "k.#", client_id="app", durable="k")
    mesh.run(1)
    assert again.bodies == [b"%d" % i for i in range(5)]


def test_copies_for_a_router_whose_backlog_is_full_are_dropped_not_the_publisher(mesh):
    mesh.add("router-a", connect_to=["router-b"], max_backlog=3)
    mesh.add("router-b")
    mesh.run(1)
    routers = mesh.routers
    TopicConsumer(routers["router-b"], "f", client_id="app", durable="f")
    mesh.run(1)
    mesh.stop("router-b")
    mesh.run(1)
    assert_confirmed(publish(mesh, "router-a", "f", 5))
    mesh.run(1)
    assert routers["router-a"].store.backlog_depths() == {"router-b": 3}
    dropped = [e for e in events_of(routers["router-a"], "message.dropped")
               if e["reason"] == "max-backlog"]
    assert len(dropped) == 2


def test_an_ended_subscription_drops_what_its_consumer_gave_back(mesh):
    star(mesh)
    router = mesh.routers["router-c"]
    held = []
    subscribed = []
    router.engine.topics.subscribe("g", held.append, 5).addCallback(subscribed.append)
    mesh.run(1)
    assert_confirmed(publish(mesh, "router-a", "g", 3, persistent=False))
    mesh.run(1)
    assert len(held) == 3  # delivered, never acknowledged
    subscribed[0].cancel()
    assert router.engine.queues.depths() == {}
    dropped = [e for e in events_of(router, "message.dropped") if e["reason"] == "unsubscribed"]
    assert len(dropped) == 3


def test_only_the_user_that_made_a_durable_subscription_attaches_to_it(mesh):
    star(mesh)
    topics = mesh.routers["router-c"].engine.topics
    made, refused = [], []
    topics.subscribe("t", lambda d: None, 0, client_id="app", durable="d",
                     user="alice").addCallback(made.append)
    mesh.run(0.1)
    made[0].cancel()
    topics.subscribe("other", lambda d: None, 0, client_id="app", durable="d",
                     user="mallory").addErrback(refused.append)
    assert refused and refused[0].check(NotOwner)
    assert refused[0].value.code == "not-allowed"
    assert topics.durable["$durable:app:d"].pattern == ("t",)


def test_the_links_assign_shares_the_commit_of_the_copies_it_takes(tmp_path):
    """
    At the publisher's router a persistent publication costs two commits
    before its copy leaves: its accept (with the fan-out's read of it),
    then its copies with the link's assign of the copy for the next hop,
    which the link submits behind them while they are being placed
    (C{TopicFanOut.placing}) instead of in a commit of its own after them.
    """
    mesh = MemoryMesh(tmp_path, store_lag_s=0.001)
    try:
        mesh.add("router-a", connect_to=["router-b"])
        mesh.add("router-b")
        mesh.run(1)
        consumer = TopicConsumer(mesh.routers["router-b"], "p", client_id="app", durable="p")
        mesh.run(1)
        executor = mesh.executors["router-a"]
        before = executor.commits
        (d,) = publish(mesh, "router-a", "p", 1)
        for _ in range(20):
            if consumer.bodies:
                break
            mesh.run(0.0005)
        assert consumer.bodies == [b"0"]
        assert_confirmed([d])
        # Counted as the copy reaches b's subscriber: a's relaxed commit of
        # b's acknowledgement comes later.
        assert executor.commits - before == 2
    finally:
        mesh.stop_all()
