"""
What routing costs a router as the mesh changes, on the in-memory mesh
(real routers, one clock; a flush is one reactor turn): routes are
computed once per turn however many advertisements arrived in it, and
each neighbour gets one frame per turn with only the newest
advertisements it does not already hold (docs/routing.md, "Flooding").
"""

from collections import Counter

import pytest

from meshroute.router.forwarding import Forwarding
from meshroute.routing.table import RouteTable
from meshroute.testing.memory_mesh import MemoryMesh

#: A ring of twelve routers with chords: 3 or 4 links each.
NAMES = [f"r{i:02d}" for i in range(12)]
LINKS = [(NAMES[i], NAMES[(i + 1) % 12]) for i in range(12)] + [
    (NAMES[i], NAMES[(i + 5) % 12]) for i in range(0, 12, 2)]


class RoutingMeter:
    """
    Route computations per router, and the C{Routes} frames and
    advertisements each router received from each neighbour.
    """

    def __init__(self, monkeypatch) -> None:
        self.computations: Counter = Counter()
        self.frames: Counter = Counter()
        self.advertisements: Counter = Counter()
        compute = RouteTable._compute
        received = Forwarding.routes_received

        def counted_compute(table):
            self.computations[table.name] += 1
            return compute(table)

        def counted_received(forwarding, peer, frame):
            self.frames[forwarding.name, peer] += 1
            self.advertisements[forwarding.name, peer] += len(frame.advertisements)
            return received(forwarding, peer, frame)

        monkeypatch.setattr(RouteTable, "_compute", counted_compute)
        monkeypatch.setattr(Forwarding, "routes_received", counted_received)

    def reset(self) -> None:
        self.computations.clear()
        self.frames.clear()
        self.advertisements.clear()


@pytest.fixture
def mesh(tmp_path):
    mesh = MemoryMesh(tmp_path, retry_interval_ms=1)
    yield mesh
    mesh.stop_all()


def start_together(mesh: MemoryMesh) -> None:
    """
    Start every router isolated, then let them all onto the network at
    the same instant.
    """
    mesh.network.partitioned.update(NAMES)
    for name in NAMES:
        mesh.add(name, [b for a, b in LINKS if a == name])
    mesh.network.partitioned.clear()


def wait_for_a_router_that_is_down(mesh: MemoryMesh) -> None:
    """
    Give every router a backlog: a message for a router heard of once and
    down, so that every change of routes makes it look for what may move
    now (and compute its routes), as a router with traffic does.
    """
    for router in mesh.routers.values():
        router.engine.routes.remember(["gone"])
        accepted = router.engine.submit("q@gone", b"waits", {}, True)
        assert accepted.called and not isinstance(accepted.result, Exception)


def converge_then_close_a_link(mesh: MemoryMesh, meter: RoutingMeter) -> tuple[str, str]:
    """
    Start the mesh, let it converge, then close one link (its connector
    stopped) and let the mesh take the change in: what the meter counts
    is the change's.

    @return: the link's two ends.
    """
    start_together(mesh)
    mesh.run(0.1)
    meter.reset()
    a, b = LINKS[0]
    mesh.routers[a].getServiceNamed(f"connector:{b}").stopService()
    mesh.run(0)
    return a, b


def assert_every_route_known(mesh: MemoryMesh) -> None:
    for name in NAMES:
        assert set(mesh.routers[name].engine.routes.routes()) == set(NAMES) - {name}


def test_a_starting_mesh_computes_each_routers_routes_a_few_times(mesh, monkeypatch):
    meter = RoutingMeter(monkeypatch)
    start_together(mesh)
    wait_for_a_router_that_is_down(mesh)
    mesh.run(0.1)
    # Once per turn with news (7 here: the message sent, then the turns
    # the links take to come up), whatever N.  Every router's
    # advertisement changes with each link it brings up and reaches every
    # router: once per advertisement that is news was some 2.5N here (30
    # for 12 routers).
    assert max(meter.computations.values()) <= 8, meter.computations
    assert_every_route_known(mesh)


def test_a_starting_mesh_floods_no_superseded_advertisement(mesh, monkeypatch):
    meter = RoutingMeter(monkeypatch)
    start_together(mesh)
    mesh.run(0.1)
    # Per link direction: the whole database when the link comes up, and
    # the newest advertisement of each origin the turn it changed, not
    # each of its versions.
    assert max(meter.advertisements.values()) <= 2 * len(NAMES), meter.advertisements
    assert_every_route_known(mesh)


def test_a_router_failure_is_computed_once_per_turn_not_per_advertisement(
        mesh, monkeypatch):
    meter = RoutingMeter(monkeypatch)
    start_together(mesh)
    wait_for_a_router_that_is_down(mesh)
    mesh.run(0.1)
    meter.reset()
    dead = NAMES[0]
    neighbours = {b for a, b in LINKS if a == dead} | {a for a, b in LINKS if b == dead}
    assert len(neighbours) == 3
    mesh.crash(dead)
    mesh.run(0)
    # Its three neighbours' new advertisements cross the mesh: a router
    # that is not one of them takes those that reach it in the same turn
    # (the same number of hops away) together, and computes its routes
    # once for them.  Once per advertisement was three times each.
    others = set(NAMES) - neighbours - {dead}
    assert max(meter.computations[name] for name in others) < 3, meter.computations
    assert min(meter.computations[name] for name in others) == 1, meter.computations
    for name in set(NAMES) - {dead}:
        assert set(mesh.routers[name].engine.routes.routes()) == set(NAMES) - {name, dead}


def test_an_advertisement_is_not_sent_back_to_the_neighbours_it_came_from(
        mesh, monkeypatch):
    meter = RoutingMeter(monkeypatch)
    a, b = converge_then_close_a_link(mesh, meter)
    # Two new advertisements (a's and b's) crossing 12 routers: at least
    # 22 must arrive.  Each router passes each on only to the neighbours
    # it did not get it from in this turn (34 here); passing it on to all
    # but the first sender sent 46.
    assert sum(meter.advertisements.values()) <= 36, meter.advertisements
    assert_every_route_known(mesh)


def test_a_router_with_nothing_to_forward_computes_no_routes_until_asked(
        mesh, monkeypatch):
    meter = RoutingMeter(monkeypatch)
    a, b = converge_then_close_a_link(mesh, meter)
    assert sum(meter.computations.values()) == 0, meter.computations
    # The first question computes them, over what the mesh holds now.
    assert mesh.routers[a].engine.routes.next_hop(b) != b
    assert meter.computations == {a: 1}
