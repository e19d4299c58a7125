"""
Flow through whole routers in memory: per-producer order through a
reroute, backpressure from a frozen next hop, and the bounds that keep a
router's memory finite while it waits.
"""

import pytest

from memory_mesh import MemoryMesh
from test_messaging_memory import Consumer, assert_confirmed, send


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
