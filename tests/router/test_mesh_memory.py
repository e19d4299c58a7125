"""
Whole routers linked in memory, on one deterministic clock: topology,
partitions, restarts and rejections at mesh level, with exact timings.
"""

import dataclasses


from meshroute.testing.memory_mesh import MemoryMesh
from support.mesh_testing import events_of, mesh  # noqa: F401 (mesh: a fixture)

INTERVAL = 0.2  # the mesh's keepalive interval, seconds


def ring(mesh: MemoryMesh) -> None:
    mesh.add("router-a", connect_to=["router-b"])
    mesh.add("router-b", connect_to=["router-c"])
    mesh.add("router-c", connect_to=["router-a"])


def test_ring_reaches_delivery_on_every_link(mesh):
    ring(mesh)
    mesh.run(0.5)
    for name, peers in [("router-a", {"router-b", "router-c"}),
                        ("router-b", {"router-a", "router-c"}),
                        ("router-c", {"router-a", "router-b"})]:
        assert mesh.stages(name) == {peer: "delivery" for peer in peers}
    stages = [e["stage"] for e in events_of(mesh.routers["router-a"], "link.stage")
              if e["direction"] == "connector"]
    assert stages == ["connect", "authentication", "recovery", "delivery"]


def test_links_stay_up_for_a_long_time(mesh):
    ring(mesh)
    mesh.run(600)
    assert all(stage == "delivery" for stage in mesh.stages("router-b").values())
    assert events_of(mesh.routers["router-b"], "link.closed") == []
    counters = {l["keepalive_counter"] for l in mesh.routers["router-b"].describe_links()}
    assert counters <= {4, 5, 6}


def test_connector_starts_before_its_listener(mesh):
    mesh.add("router-a", connect_to=["router-b"])
    mesh.run(5)
    assert mesh.stages("router-a") == {}
    mesh.add("router-b")
    mesh.run(0.5)
    assert mesh.stages("router-a") == {"router-b": "delivery"}


def test_partition_closes_links_by_keepalive_and_heals(mesh):
    ring(mesh)
    mesh.run(1)
    cut_at = mesh.clock.seconds()
    mesh.partition("router-b")
    mesh.run(6 * INTERVAL)
    assert mesh.stages("router-a") == {"router-c": "delivery"}
    closed = events_of(mesh.routers["router-a"], "link.closed")
    assert [(c["peer"], c["reason"]) for c in closed] == [("router-b", "keepalive")]
    # The counter (about 5 when the peer went silent) reaches 0 after five
    # more of our own keepalives, the first of which goes out within one
    # interval: so between 4 and 6 intervals after the peer was last heard.
    assert closed[0]["last_heard"] <= cut_at
    silent_for = closed[0]["time"] - closed[0]["last_heard"]
    assert 4 * INTERVAL < silent_for <= 6 * INTERVAL + 1e-9
    mesh.heal("router-b")
    mesh.run(1)
    for name in ("router-a", "router-b", "router-c"):
        assert set(mesh.stages(name).values()) == {"delivery"}
        assert len(mesh.stages(name)) == 2


def test_restarted_router_is_reconnected(mesh):
    ring(mesh)
    mesh.run(1)
    mesh.stop("router-b")
    assert mesh.stages("router-a") == {"router-c": "delivery"}
    closed = events_of(mesh.routers["router-a"], "link.closed")
    assert [(c["peer"], c["reason"]) for c in closed] == [("router-b", "peer-closed")]
    mesh.add("router-b", connect_to=["router-c"])
    mesh.run(1)
    assert mesh.stages("router-b") == {"router-a": "delivery", "router-c": "delivery"}


def test_second_router_with_a_connected_name_is_rejected(mesh, tmp_path):
    mesh.add("router-a")
    mesh.add("router-b", connect_to=["router-a"])
    mesh.run(0.5)
    impostor = dataclasses.replace(
        mesh.config("router-b", connect_to=["router-a"], listen=False),
        data_dir=str(tmp_path / "impostor"),
    )
    mesh.start(impostor, key="impostor")
    mesh.run(3)
    assert mesh.stages("router-a") == {"router-b": "delivery"}
    rejected = events_of(mesh.routers["router-a"], "link.rejected")
    assert len(rejected) >= 3
    assert {(r["code"], r["by"]) for r in rejected} == {("name-in-use", "local")}
    seen_by_impostor = events_of(mesh.routers["impostor"], "link.rejected")
    assert {(r["code"], r["by"]) for r in seen_by_impostor} == {("name-in-use", "peer")}


def test_wrong_secret_never_reaches_delivery(mesh):
    mesh.add("router-a")
    mesh.add("router-b", connect_to=["router-a"], secret=b"another secret")
    mesh.run(2)
    assert mesh.stages("router-a") == {}
    codes = {(r["code"], r["by"]) for r in events_of(mesh.routers["router-a"], "link.rejected")}
    assert codes == {("auth-failed", "local")}


def test_recovery_points_are_exchanged(mesh):
    mesh.add("router-a")
    mesh.add("router-b", connect_to=["router-a"])
    mesh.run(0.5)
    (a_link,) = mesh.routers["router-a"].describe_links()
    (b_link,) = mesh.routers["router-b"].describe_links()
    assert a_link["peer_last_received"] == 0
    assert b_link["peer_last_received"] == 0


def test_a_router_says_it_serves_only_once_its_store_is_open(mesh, monkeypatch):
    """
    C{GET /api/v1/router}'s C{serving}: false while the store opens (the
    listeners then close every connection at once), true from then on,
    false again once stopped.  Readiness checks wait for it.
    """
    from twisted.internet.defer import Deferred

    from meshroute.store.sqlite import SQLiteStore

    opening = Deferred()
    real_open = SQLiteStore.open
    monkeypatch.setattr(SQLiteStore, "open", lambda store: opening)
    router = mesh.start(mesh.config("router-a"))
    assert router.describe()["serving"] is False
    real_open(router.store).chainDeferred(opening)
    assert router.describe()["serving"] is True
    mesh.stop("router-a")
    assert router.describe()["serving"] is False


def test_a_paused_address_holds_connections_until_it_accepts_again():
    """
    The network's listening port pauses as a socket's does
    (L{meshroute.router.listening}): a connection made to a paused address
    waits, as in a listen backlog, and is made once the port resumes;
    one still waiting when the port closes is refused.
    """
    from twisted.internet.error import ConnectionRefusedError
    from twisted.internet.protocol import Factory, Protocol

    from meshroute.testing.memory_mesh import MemoryNetwork

    network = MemoryNetwork()
    endpoints = network.endpoints("router-a")
    server = Factory.forProtocol(Protocol)
    port = endpoints.server("clients-a").listen(server).result
    port.pauseProducing()
    client = network.endpoints("a-client").client("clients-a")
    held = client.connect(Factory.forProtocol(Protocol))
    assert not held.called and network.connections_of("router-a") == []
    port.resumeProducing()
    assert isinstance(held.result, Protocol)
    assert len(network.connections_of("router-a")) == 1
    port.pauseProducing()
    refused = client.connect(Factory.forProtocol(Protocol))
    port.stopListening()
    failures: list = []
    refused.addErrback(failures.append)
    assert [failure.type for failure in failures] == [ConnectionRefusedError]
