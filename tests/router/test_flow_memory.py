"""
Flow through whole routers in memory: per-producer order through a
reroute, backpressure from a frozen next hop, the bounds that keep a
router's memory finite while it waits, and the answer a retried send gets
when a new one would be refused.
"""

import sqlite3

import pytest

from meshroute.router.admission import BacklogFull, UnknownRouter
from meshroute.wire.frames import BATCH_MAX_BYTES
from meshroute.testing.memory_mesh import BUFFER_SIZE, MemoryMesh
from support.mesh_testing import Consumer, assert_confirmed, events_of, send


@pytest.fixture
def mesh(tmp_path):
    mesh = MemoryMesh(tmp_path)
    yield mesh
    mesh.stop_all()


def diamond(mesh):
    """
    a→{b,c}→d; a reaches d through b (the smaller name of two equal paths).
    """
    mesh.add("router-a", connect_to=["router-b", "router-c"])
    mesh.add("router-b", connect_to=["router-d"])
    mesh.add("router-c", connect_to=["router-d"])
    mesh.add("router-d")
    mesh.run(1)
    assert mesh.routers["router-a"].describe_routes()["router-d"]["next_hop"] == "router-b"


def test_reroute_keeps_one_producers_order(mesh):
    """
    Issue 8, scenario 2: 0..99 sit unacknowledged in the outbox of a frozen
    next hop; 100..199, sent once the route moved to c, wait behind them
    and reach d after them, when reroute-delay gives 0..99 back.
    """
    diamond(mesh)
    consumer = Consumer(mesh.routers["router-d"], "q", credit=1000)
    sent = send(mesh, "router-a", "q@router-d", 100)
    mesh.partition("router-b")
    mesh.run(2)  # keepalive closes b's links; d is now reached through c
    assert "router-b" not in mesh.stages("router-a")
    assert mesh.routers["router-a"].describe_routes()["router-d"]["next_hop"] == "router-c"
    sent += send(mesh, "router-a", "q@router-d", 100, start=100)
    elsewhere = Consumer(mesh.routers["router-c"], "q")
    sent += send(mesh, "router-a", "q@router-c", 10)
    mesh.run(1)
    # What it costs: d's messages wait (at most reroute-delay), messages
    # for other destinations do not.
    assert consumer.bodies == []
    assert mesh.routers["router-a"].store.backlog_depths() == {"router-d": 100}
    assert len(elsewhere.bodies) == 10
    mesh.run(10)  # past reroute-delay (5 s)
    assert_confirmed(sent)
    assert consumer.bodies == [b"%d" % i for i in range(200)]


def test_order_kept_through_a_restart_with_an_outbox_for_a_frozen_peer(mesh):
    """
    The outbox of a peer that does not come back is left from before a
    restart: new messages for its destinations wait behind it too.
    """
    diamond(mesh)
    consumer = Consumer(mesh.routers["router-d"], "q", credit=1000)
    sent = send(mesh, "router-a", "q@router-d", 100)
    mesh.partition("router-b")
    config = mesh.routers["router-a"].config
    mesh.crash("router-a")
    mesh.start(config)
    mesh.run(1)
    assert mesh.routers["router-a"].describe_routes()["router-d"]["next_hop"] == "router-c"
    sent += send(mesh, "router-a", "q@router-d", 100, start=100)
    mesh.run(10)
    assert_confirmed(sent)
    assert consumer.bodies == [b"%d" % i for i in range(200)]


def test_messages_held_behind_a_live_peer_move_once_it_acknowledges(mesh):
    """
    A shorter route appears while 0..99 are in flight to the old next hop
    b: 100..199 wait for b's acknowledgement, then take the new route at
    once (no later event is needed to move them).
    """
    mesh.add("router-a", connect_to=["router-b", "router-c"])
    mesh.add("router-b", connect_to=["router-x"])
    mesh.add("router-x", connect_to=["router-d"])
    mesh.add("router-d")
    mesh.run(1)
    assert mesh.routers["router-a"].describe_routes()["router-d"] == {
        "next_hop": "router-b", "hops": 3}
    consumer = Consumer(mesh.routers["router-d"], "q", credit=1000)
    sent = send(mesh, "router-a", "q@router-d", 100)
    mesh.partition("router-b")
    mesh.add("router-c", connect_to=["router-d"])
    mesh.run(0.5)
    assert mesh.routers["router-a"].describe_routes()["router-d"] == {
        "next_hop": "router-c", "hops": 2}
    sent += send(mesh, "router-a", "q@router-d", 100, start=100)
    mesh.network.flush()
    assert mesh.routers["router-a"].store.backlog_depths() == {"router-d": 100}
    mesh.heal("router-b")
    mesh.run(0.01)  # b acknowledges on its next reactor turn
    assert_confirmed(sent)
    assert mesh.routers["router-a"].store.backlog_depths() == {}
    assert sorted(consumer.bodies, key=int) == [b"%d" % i for i in range(200)]


def refused(deferreds) -> list:
    """
    The failures among C{deferreds} (every one has fired).
    """
    failures = []
    for d in deferreds:
        assert d.called
        d.addErrback(failures.append)
    return failures


def unsent(mesh, router: str) -> int:
    return sum(c.unsent_from(router) for c in mesh.network.connections_of(router))


def test_non_persistent_to_a_frozen_next_hop_is_bounded(mesh):
    """
    Issue 8, scenario 4: a frozen next hop stops reading; once the link's
    transport is full, non-persistent messages wait in memory up to
    max-transient-backlog and producers are refused past it.
    """
    mesh.add("router-a", connect_to=["router-b"], max_transient_backlog=10)
    mesh.add("router-b")
    mesh.run(1)
    mesh.partition("router-b")
    body = b"x" * 1024
    engine = mesh.routers["router-a"].engine
    sent = [engine.submit("q@router-b", body, {}, False) for _ in range(20_000)]
    failures = refused(sent)
    assert failures and all(f.check(BacklogFull) for f in failures)
    accepted = 20_000 - len(failures)
    # What fills the transport, one batch frame, and max-transient-backlog.
    assert accepted <= 10 + BUFFER_SIZE // 1024 + 1 + BATCH_MAX_BYTES // 1024
    assert unsent(mesh, "router-a") <= BUFFER_SIZE + BATCH_MAX_BYTES + 2048
    # Persistent transfers stop at the full transport too.
    persistent = send(mesh, "router-a", "q@router-b", 100)
    assert_confirmed(persistent)
    assert unsent(mesh, "router-a") <= BUFFER_SIZE + BATCH_MAX_BYTES + 2048
    mesh.heal("router-b")
    consumer = Consumer(mesh.routers["router-b"], "q", credit=1000)
    mesh.run(1)
    assert len([m for m in consumer.received if not m.persistent]) == accepted
    assert consumer.bodies.count(body) == accepted
    assert len([m for m in consumer.received if m.persistent]) == 100


def test_non_persistent_arriving_for_a_frozen_next_hop_drops_the_oldest(mesh):
    """
    At an intermediate router, messages arriving over links for a paused
    next hop wait up to max-transient-backlog; past it the oldest go
    (message.dropped), and the sender's link keeps flowing.
    """
    mesh.add("router-a", connect_to=["router-b"], max_transient_backlog=10)
    mesh.add("router-b", connect_to=["router-c"], max_transient_backlog=10)
    mesh.add("router-c", max_transient_backlog=10)
    mesh.run(1)
    mesh.partition("router-c")
    engine = mesh.routers["router-a"].engine
    body = b"x" * 1024
    sent = []
    for _ in range(200):
        sent += [engine.submit("q@router-c", body, {}, False) for _ in range(10)]
        mesh.network.flush()
    assert refused(sent) == []
    router_b = mesh.routers["router-b"]
    assert router_b.engine.transient.waiting("router-c") == 10
    assert unsent(mesh, "router-b") <= BUFFER_SIZE + BATCH_MAX_BYTES + 2048
    dropped = events_of(router_b, "message.dropped")
    assert len(dropped) >= 2000 - 10 - BUFFER_SIZE // 1024 - 1 - BATCH_MAX_BYTES // 1024
    assert {e["reason"] for e in dropped} == {"max-backlog"}


@pytest.mark.parametrize("persistent", [True, False])
def test_a_retried_send_past_the_bound_gets_its_original_answer(mesh, persistent):
    """
    A send whose duplicate id was accepted is answered with the first
    message's id even when the destination's backlog is full by now.
    """
    mesh.add("router-a", connect_to=["router-b"], max_backlog=3, max_transient_backlog=3)
    mesh.add("router-b")
    mesh.run(1)
    mesh.stop("router-b")
    mesh.run(1)
    engine = mesh.routers["router-a"].engine
    first = []
    engine.submit("q@router-b", b"0", {}, persistent, duplicate_id="d-0").addCallback(
        first.append)
    send(mesh, "router-a", "q@router-b", 2, persistent=persistent)
    assert len(refused(send(mesh, "router-a", "q@router-b", 1, persistent=persistent))) == 1
    again = []
    engine.submit("q@router-b", b"0", {}, persistent, duplicate_id="d-0").addBoth(again.append)
    assert again == first
    assert refused([engine.submit("q@router-b", b"1", {}, persistent, duplicate_id="d-1")])


def test_a_retried_send_to_a_router_forgotten_by_a_restart_gets_its_original_answer(mesh):
    """
    Router-a is restarted having forgotten router-b (as docs/routing.md
    tells an operator to: its row deleted from the stopped router's
    store): a new send to router-b is refused, a retried one is not.
    """
    mesh.add("router-a", connect_to=["router-b"])
    mesh.add("router-b")
    mesh.run(1)
    mesh.stop("router-b")
    mesh.run(1)
    first = []
    mesh.routers["router-a"].engine.submit(
        "q@router-b", b"0", {}, True, duplicate_id="d-0").addCallback(first.append)
    assert first
    config = mesh.routers["router-a"].config
    mesh.stop("router-a")
    with sqlite3.connect(f"{config.data_dir}/store.db") as store:
        store.execute("DELETE FROM known_routers WHERE router = 'router-b'")
    engine = mesh.start(config).engine
    again = []
    engine.submit("q@router-b", b"0", {}, True, duplicate_id="d-0").addBoth(again.append)
    assert again == first
    [failure] = refused([engine.submit("q@router-b", b"1", {}, True, duplicate_id="d-1")])
    assert failure.check(UnknownRouter)


def test_large_messages_to_a_frozen_next_hop_are_bounded_in_bytes(mesh, monkeypatch):
    """
    The window bounds what a link holds unacknowledged in bytes too: 40
    messages of 1 MiB to a frozen peer leave at most WINDOW_BYTES of bodies
    in flight (in memory; one message more at most: the first of a batch
    always moves, so that no message is too large to move), the rest in
    the store; all arrive once it thaws.
    """
    from meshroute.testing import memory_mesh
    from meshroute.router.peer_channel import WINDOW_BYTES

    # A transport that never pushes back: the window alone must bound it.
    monkeypatch.setattr(memory_mesh._Transport, "buffer_size", 2**31)
    mesh.add("router-a", connect_to=["router-b"])
    mesh.add("router-b")
    mesh.run(1)
    mesh.partition("router-b")
    body = b"x" * 2**20
    sent = [mesh.routers["router-a"].engine.submit("q@router-b", body + b"%d" % n, {}, True)
            for n in range(40)]
    mesh.network.flush()
    channel = mesh.routers["router-a"].engine.forwarding.channel("router-b")
    in_flight = channel.in_flight_bytes
    assert WINDOW_BYTES - len(body) < in_flight <= WINDOW_BYTES + len(body) + 2
    assert mesh.routers["router-a"].store.backlog_depths() == {"router-b": 40 - channel.in_flight}
    mesh.heal("router-b")
    consumer = Consumer(mesh.routers["router-b"], "q")
    mesh.run(2)
    assert_confirmed(sent)
    assert sorted(consumer.bodies) == sorted(body + b"%d" % n for n in range(40))
