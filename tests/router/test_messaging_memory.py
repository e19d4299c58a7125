"""
Routed messaging across whole routers in memory: real engines, stores
(inline executor) and queues on iosim links and one clock.  Multi-hop
delivery, exactly once through partitions, crashes and reroutes, waiting
for an unreachable destination, hop limits and the non-persistent path.
"""


from meshroute.router.admission import BacklogFull, UnknownRouter
from meshroute.messages import DEAD_LETTER_QUEUE, AddressError
from support.mesh_testing import (  # noqa: F401 (mesh: a fixture)
    mesh,
    Consumer,
    send,
    assert_confirmed,
    events_of,
    line,
)


def test_two_hops_in_order_exactly_once(mesh):
    line(mesh)
    consumer = Consumer(mesh.routers["router-c"], "orders")
    sent = send(mesh, "router-a", "orders@router-c", 3000)
    mesh.run(1)
    assert_confirmed(sent)
    assert consumer.bodies == [b"%d" % i for i in range(3000)]
    assert {m.hops for m in consumer.received} == {2}
    assert {m.origin for m in consumer.received} == {"router-a"}
    enqueued = events_of(mesh.routers["router-c"], "message.enqueued")
    assert len(enqueued) == len({e["msg_id"] for e in enqueued}) == 3000
    assert len(events_of(mesh.routers["router-a"], "message.accepted")) == 3000
    assert mesh.routers["router-b"].store.backlog_depths() == {}


def test_routes_are_learned_and_shown(mesh):
    line(mesh)
    assert mesh.routers["router-a"].describe_routes() == {
        "router-b": {"next_hop": "router-b", "hops": 1},
        "router-c": {"next_hop": "router-b", "hops": 2},
    }


def test_partition_mid_stream_exactly_once(mesh):
    line(mesh)
    consumer = Consumer(mesh.routers["router-c"], "q")
    sent = send(mesh, "router-a", "q@router-c", 2000)
    mesh.network.flush()
    mesh.partition("router-b")
    sent += send(mesh, "router-a", "q@router-c", 2000, start=2000)
    mesh.run(3)  # keepalive closes both of b's links
    assert "router-b" not in mesh.stages("router-a")
    mesh.heal("router-b")
    mesh.run(10)
    assert_confirmed(sent)
    assert sorted(consumer.bodies, key=int) == [b"%d" % i for i in range(4000)]
    assert len(consumer.bodies) == 4000


def test_crash_and_restart_of_the_middle_router(mesh):
    line(mesh)
    consumer = Consumer(mesh.routers["router-c"], "q")
    sent = send(mesh, "router-a", "q@router-c", 1500)
    mesh.network.flush()
    config = mesh.routers["router-b"].config
    mesh.crash("router-b")
    sent += send(mesh, "router-a", "q@router-c", 1500, start=1500)
    mesh.run(2)
    mesh.start(config)
    mesh.run(10)
    assert_confirmed(sent)
    assert sorted(consumer.bodies, key=int) == [b"%d" % i for i in range(3000)]
    assert len(consumer.bodies) == 3000


def test_ring_reroutes_when_a_link_dies(mesh):
    mesh.add("router-a", connect_to=["router-b"])
    mesh.add("router-b", connect_to=["router-c"])
    mesh.add("router-c", connect_to=["router-a"])
    mesh.add("router-d", connect_to=["router-b"])
    mesh.run(1)
    # a reaches d through b, one link shorter than through c.
    assert mesh.routers["router-a"].describe_routes()["router-d"]["next_hop"] == "router-b"
    consumer = Consumer(mesh.routers["router-d"], "q")
    sent = send(mesh, "router-a", "q@router-d", 1000)
    mesh.network.flush()
    mesh.crash("router-b")  # d is now unreachable: b was its only link
    sent += send(mesh, "router-a", "q@router-d", 1000, start=1000)
    mesh.run(2)
    assert mesh.routers["router-a"].describe_routes().get("router-d") is None
    mesh.add("router-e", connect_to=["router-c", "router-d"])  # a new path a-c-e-d
    mesh.run(15)
    assert mesh.routers["router-a"].describe_routes()["router-d"]["next_hop"] == "router-c"
    assert_confirmed(sent)
    assert sorted(consumer.bodies, key=int) == [b"%d" % i for i in range(2000)]
    assert len(consumer.bodies) == 2000


def test_destination_down_messages_wait_then_flow(mesh):
    line(mesh)
    config = mesh.routers["router-c"].config
    mesh.stop("router-c")
    mesh.run(1)
    sent = send(mesh, "router-a", "q@router-c", 500)
    mesh.run(5)
    assert_confirmed(sent)
    # With no route to router-c at all, they wait where they are: at the origin.
    assert mesh.routers["router-a"].store.backlog_depths() == {"router-c": 500}
    router_c = mesh.start(config)
    consumer = Consumer(router_c, "q")
    mesh.run(5)
    assert consumer.bodies == [b"%d" % i for i in range(500)]


def test_backlog_bound_refuses_producers(mesh):
    mesh.add("router-a", connect_to=["router-b"], max_backlog=10)
    mesh.add("router-b")
    mesh.run(1)
    mesh.stop("router-b")
    mesh.run(1)
    sent = send(mesh, "router-a", "q@router-b", 12)
    errors = []
    for d in sent:
        d.addErrback(lambda f: errors.append(f.value))
    assert len(errors) == 2
    assert all(isinstance(e, BacklogFull) for e in errors)


def test_bad_addresses_and_unknown_routers(mesh):
    line(mesh)
    engine = mesh.routers["router-a"].engine
    for address, error in [("bad queue@router-c", AddressError), ("q@bad/router", AddressError),
                           ("q@router-zz", UnknownRouter), ("", AddressError)]:
        failure = []
        engine.submit(address, b"x", {}, True).addErrback(failure.append)
        assert len(failure) == 1 and failure[0].check(error), address


def test_local_queue_without_forwarding(mesh):
    mesh.add("router-a")
    consumer = Consumer(mesh.routers["router-a"], "local")
    assert_confirmed(send(mesh, "router-a", "local", 10))
    mesh.run(0.1)
    assert consumer.bodies == [b"%d" % i for i in range(10)]


def test_max_hops_dead_letters(mesh):
    mesh.add("router-a", connect_to=["router-b"], max_hops=1)
    mesh.add("router-b", connect_to=["router-c"], max_hops=1)
    mesh.add("router-c", max_hops=1)
    mesh.run(1)
    dead = Consumer(mesh.routers["router-b"], DEAD_LETTER_QUEUE)
    assert_confirmed(send(mesh, "router-a", "q@router-c", 3))
    mesh.run(1)
    assert len(dead.received) == 3
    assert dead.received[0].headers["x-dead-letter-reason"] == "max-hops"
    assert dead.received[0].headers["x-original-address"] == "q@router-c"
    assert len(events_of(mesh.routers["router-b"], "message.dead-lettered")) == 3


def test_non_persistent_fast_path(mesh):
    line(mesh)
    consumer = Consumer(mesh.routers["router-c"], "fast")
    assert_confirmed(send(mesh, "router-a", "fast@router-c", 1000, persistent=False))
    mesh.run(1)
    assert consumer.bodies == [b"%d" % i for i in range(1000)]
    assert mesh.routers["router-a"].store.backlog_depths() == {}
    assert all(not m.persistent for m in consumer.received)


def test_non_persistent_lost_with_a_router_never_duplicated(mesh):
    line(mesh)
    consumer = Consumer(mesh.routers["router-c"], "fast")
    mesh.partition("router-b")
    sent = send(mesh, "router-a", "fast@router-c", 100, persistent=False)
    mesh.crash("router-b")
    mesh.run(5)
    assert_confirmed(sent)
    assert len(consumer.bodies) == len(set(consumer.bodies)) <= 100


def test_window_bounds_what_is_in_flight(mesh, monkeypatch):
    """
    With the next hop silent, a link holds at most WINDOW unacknowledged
    transfers; the rest waits in the store's backlog, not in memory.  (The
    transport's buffer is made large enough that the window, not
    backpressure, is what stops it.)
    """
    from meshroute.testing import memory_mesh
    from meshroute.router.peer_channel import WINDOW

    monkeypatch.setattr(memory_mesh._Transport, "buffer_size", 2**20)

    mesh.add("router-a", connect_to=["router-b"])
    mesh.add("router-b")
    mesh.run(1)
    mesh.partition("router-b")
    assert_confirmed(send(mesh, "router-a", "q@router-b", WINDOW + 500))
    mesh.network.flush()
    channel = mesh.routers["router-a"].engine.forwarding.channel("router-b")
    assert channel.in_flight == WINDOW
    assert mesh.routers["router-a"].store.backlog_depths() == {"router-b": 500}
    mesh.heal("router-b")
    consumer = Consumer(mesh.routers["router-b"], "q")
    mesh.run(1)
    assert len(consumer.bodies) == len(set(consumer.bodies)) == WINDOW + 500
