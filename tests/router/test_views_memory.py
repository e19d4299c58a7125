"""
C{GET /api/v1/topology} (L{meshroute.router.views}) of whole routers
linked in memory: what each router knows of the mesh as links come up,
fall silent and come back.
"""

import pytest
from twisted.internet.protocol import Factory, Protocol

from meshroute.router.views import describe_topology
from meshroute.testing.memory_mesh import MemoryMesh


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
