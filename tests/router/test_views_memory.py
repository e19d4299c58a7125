"""
C{GET /api/v1/topology} and C{/api/v1/topics} (L{meshroute.router.views})
of whole routers linked in memory: what each router knows of the mesh as
links come up, fall silent and come back; its topic subscriptions, the
interest it holds, and what its fan-out did.
"""

import pytest
from twisted.internet.protocol import Factory, Protocol

from meshroute.router.views import describe_topics, describe_topology
from meshroute.testing.memory_mesh import MemoryMesh
from support.mesh_testing import assert_confirmed, send
from support.mesh_testing import line as three_in_a_line
from support.topic_testing import TopicConsumer


@pytest.fixture
def mesh(tmp_path):
    mesh = MemoryMesh(tmp_path)
    yield mesh
    mesh.stop_all()


def ring(mesh: MemoryMesh) -> None:
    mesh.add("router-a", connect_to=["router-b"])
    mesh.add("router-b", connect_to=["router-c"])
    mesh.add("router-c", connect_to=["router-a"])


def stages(topology: dict) -> dict:
    return {(edge["a"], edge["b"]): edge["stage"] for edge in topology["edges"]}


def nodes(topology: dict) -> dict:
    return {node["name"]: (node["reachable"], node["hops"], node["next_hop"])
            for node in topology["nodes"]}


def test_a_ring_in_delivery(mesh):
    ring(mesh)
    mesh.run(1)

    topology = describe_topology(mesh.routers["router-a"])

    assert topology["router"] == "router-a"
    assert topology["window"] == 1024
    assert nodes(topology) == {"router-a": (True, 0, None),
                               "router-b": (True, 1, "router-b"),
                               "router-c": (True, 1, "router-c")}
    assert stages(topology) == {("router-a", "router-b"): "delivery",
                                ("router-a", "router-c"): "delivery",
                                ("router-b", "router-c"): "delivery"}
    # Its own links come with their description; the others' without.
    links = {(edge["a"], edge["b"]): edge["link"] for edge in topology["edges"]}
    assert links[("router-b", "router-c")] is None
    ab = links[("router-a", "router-b")]
    assert (ab["peer"], ab["direction"], ab["stage"], ab["in_flight"]) == (
        "router-b", "connector", "delivery", 0)
    assert links[("router-a", "router-c")]["direction"] == "listener"


def test_a_silent_routers_links_are_closed_and_it_is_unreachable(mesh):
    ring(mesh)
    mesh.run(1)
    mesh.partition("router-b")
    mesh.run(2)

    topology = describe_topology(mesh.routers["router-a"])

    assert nodes(topology)["router-b"] == (False, None, None)
    # router-b still advertises both links; a and c no longer do.
    assert stages(topology) == {("router-a", "router-b"): "closed",
                                ("router-a", "router-c"): "delivery",
                                ("router-b", "router-c"): "closed"}
    closed_at = topology["changed_at"]
    assert closed_at <= mesh.clock.seconds()
    # router-a knows why its own link closed.
    last_close = {(edge["a"], edge["b"]): edge["last_close"] for edge in topology["edges"]}
    assert last_close[("router-a", "router-b")]["reason"] == "keepalive"
    assert last_close[("router-b", "router-c")] is None

    mesh.heal("router-b")
    mesh.run(10)

    topology = describe_topology(mesh.routers["router-a"])
    assert set(stages(topology).values()) == {"delivery"}
    assert nodes(topology)["router-b"] == (True, 1, "router-b")
    assert topology["changed_at"] > closed_at


def test_a_link_coming_up_shows_its_stage(mesh):
    # Something listens at router-a's address and never answers: router-d
    # waits in the connect stage.
    mesh.network.endpoints("router-a").server("router-a").listen(Factory.forProtocol(Protocol))
    started = mesh.clock.seconds()
    mesh.add("router-d", connect_to=["router-a"])
    mesh.run(0.1)

    topology = describe_topology(mesh.routers["router-d"])

    assert stages(topology) == {("router-a", "router-d"): "connect"}
    assert nodes(topology) == {"router-a": (False, None, None), "router-d": (True, 0, None)}
    # No router's links changed since router-d started.
    assert topology["changed_at"] == started


def test_a_links_window_fill_is_its_unacknowledged_transfers(mesh):
    mesh.add("router-a", connect_to=["router-b"])
    mesh.add("router-b")
    mesh.run(1)
    # router-b hears nothing more: what router-a sends stays unacknowledged.
    mesh.partition("router-b")
    engine = mesh.routers["router-a"].engine
    for i in range(10):
        engine.submit("orders@router-b", b"%d" % i, {}, True)
    mesh.run(0.1)

    [edge] = describe_topology(mesh.routers["router-a"])["edges"]

    assert (edge["stage"], edge["link"]["in_flight"]) == ("delivery", 10)
    mesh.heal("router-b")
    mesh.run(1)
    [edge] = describe_topology(mesh.routers["router-a"])["edges"]
    assert edge["link"]["in_flight"] == 0


def subscriptions_of(router) -> list[dict]:
    return describe_topics(router.engine)["subscriptions"]


def test_topics_show_subscriptions_interest_and_fan_out(mesh):
    three_in_a_line(mesh)
    a, b, c = (mesh.routers[name] for name in ("router-a", "router-b", "router-c"))
    durable = TopicConsumer(c, "prices.#", client_id="app", durable="prices", shared=True)
    mesh.run(1)
    durable.subscription.cancel()  # detached: it collects
    TopicConsumer(c, "orders.*")
    TopicConsumer(c, "orders.eu", credit=0)  # holds what it gets
    TopicConsumer(a, "prices.eu.*")
    mesh.run(1)
    assert_confirmed(send(mesh, "router-a", "topic:prices.eu.gbp", 3))
    assert_confirmed(send(mesh, "router-a", "topic:orders.eu", 2, persistent=False))
    mesh.run(1)

    topics = describe_topics(c.engine)

    assert topics["router"] == "router-c"
    assert topics["subscriptions"] == [
        {"queue": "$durable:app:prices", "pattern": "prices.#", "durable": True,
         "client_id": "app", "name": "prices", "shared": True, "consumers": 0, "depth": 3,
         "unacknowledged": 0},
        {"queue": "$subscriber:1", "pattern": "orders.*", "durable": False, "client_id": None,
         "name": None, "shared": False, "consumers": 1, "depth": 0, "unacknowledged": 0},
        {"queue": "$subscriber:2", "pattern": "orders.eu", "durable": False,
         "client_id": None, "name": None, "shared": False, "consumers": 1, "depth": 2,
         "unacknowledged": 0},
    ]
    # orders.eu is covered by orders.*: not advertised again.
    assert topics["advertised"] == {"version": c.engine.interest.local.version,
                                    "patterns": ["orders.*", "prices.#"]}
    # router-b advertises that it wants nothing.
    assert topics["interest"] == [
        {"router": "router-a", "version": a.engine.interest.local.version,
         "patterns": ["prices.eu.*"], "reachable": True},
        {"router": "router-b", "version": b.engine.interest.local.version, "patterns": [],
         "reachable": True}]
    # Each copy crossed b once; at c, orders.eu made one for each of
    # its two subscriptions.
    not_held = {"holding": False, "publishers_held": 0, "hold_at": 4096}
    assert topics["fan_out"] == {"waiting": 0, "publications": {"client": 0, "link": 5},
                                 "copies": {"durable": 3, "non-durable": 4, "link": 0},
                                 **not_held}
    assert describe_topics(b.engine)["fan_out"] == {
        "waiting": 0, "publications": {"client": 0, "link": 5},
        "copies": {"durable": 0, "non-durable": 0, "link": 5}, **not_held}
    at_a = describe_topics(a.engine)
    assert at_a["fan_out"] == {"waiting": 0, "publications": {"client": 5, "link": 0},
                               "copies": {"durable": 0, "non-durable": 3, "link": 5},
                               **not_held}
    assert {row["router"]: row["patterns"] for row in at_a["interest"]} == {
        "router-b": [], "router-c": ["orders.*", "prices.#"]}
    assert describe_topics(b.engine)["advertised"] == {
        "version": b.engine.interest.local.version, "patterns": []}


def test_topics_show_withdrawn_and_unreachable_interest_and_waiting_publications(mesh):
    three_in_a_line(mesh)
    a, b, c = (mesh.routers[name] for name in ("router-a", "router-b", "router-c"))
    TopicConsumer(c, "prices.#", client_id="app", durable="prices")
    orders = TopicConsumer(c, "orders.*")
    mesh.run(1)
    before = describe_topics(c.engine)["advertised"]["version"]

    orders.subscription.cancel()
    mesh.run(1)

    advertised = describe_topics(c.engine)["advertised"]
    assert advertised["patterns"] == ["prices.#"] and advertised["version"] > before
    held = describe_topics(b.engine)["interest"][-1]
    assert held == {"router": "router-c", "version": advertised["version"],
                    "patterns": ["prices.#"], "reachable": True}
    assert [row["pattern"] for row in subscriptions_of(c)] == ["prices.#"]

    # Gone, its interest stays: its durable subscription collects.
    mesh.stop("router-c")
    mesh.run(1)
    held = describe_topics(b.engine)["interest"][-1]
    assert (held["router"], held["reachable"], held["patterns"]) == (
        "router-c", False, ["prices.#"])

    # Publications the fan-out has not taken yet wait in $topic.
    a.engine.fan_out.stop()
    assert_confirmed(send(mesh, "router-a", "topic:prices.x", 4))
    mesh.run(0.1)
    assert describe_topics(a.engine)["fan_out"]["waiting"] == 4
    a.engine.fan_out.start()
    mesh.run(1)
    fan_out = describe_topics(a.engine)["fan_out"]
    assert (fan_out["waiting"], fan_out["publications"]["client"]) == (0, 4)

