"""
Early sends (docs/routing.md, "Forwarding while the origin's commit is in
flight"): a fresh persistent send leaves its origin before its accept is
committed.  Each hazard of that window on the in-memory mesh, one virtual
clock, with stores whose commits take time (L{LaggingExecutor}: a crash
loses what is not committed).
"""

import shutil

import pytest

from meshroute.testing.memory_mesh import MemoryMesh
from meshroute.events import read_events
from meshroute.wire.frames import Ack
from support.mesh_testing import (
    Consumer,
    assert_confirmed,
    closes_for_store,
    send,
    take_store_failures,
)

#: How long the origin's commits take (its peers' take a millisecond).
SLOW_S = 0.05


@pytest.fixture
def mesh(tmp_path):
    mesh = MemoryMesh(tmp_path, store_lag_s=0.001)
    yield mesh
    mesh.stop_all()


def pair(mesh, origin_lag_s: float = SLOW_S, peer_lag_s: float = 0.001):
    """
    router-a connected to router-b, a's commits taking C{origin_lag_s} and
    b's C{peer_lag_s}, a consumer on b's queue q, and one message sent
    and delivered (the link then holds a reserved block).
    """
    mesh.add("router-a", connect_to=["router-b"])
    mesh.add("router-b")
    mesh.run(1)
    mesh.executors["router-a"].lag_s = origin_lag_s
    mesh.executors["router-b"].lag_s = peer_lag_s
    consumer = Consumer(mesh.routers["router-b"], "q")
    paced(mesh, 2)
    return consumer


def paced(mesh, count: int, start: int = 0, router: str = "router-a",
          address: str = "q@router-b") -> list:
    """
    Send C{count} numbered messages one every 10 ms, then let a second
    pass; return their Deferreds.
    """
    sent = []
    for i in range(start, start + count):
        sent += send(mesh, router, address, 1, start=i)
        mesh.run(0.01)
    mesh.run(1)
    return sent


def channel_of(mesh, router: str, peer: str):
    return mesh.routers[router].engine.forwarding.channel(peer)


def events_about(router, msg_id: str) -> list[str]:
    "The events C{router} wrote about message C{msg_id}, in order."
    router.events.flush()
    return [e["event"] for e in read_events(router.events.data_dir)
            if e.get("msg_id") == msg_id]


def test_a_paced_send_reaches_its_destination_before_its_origin_commits(mesh):
    """
    The transfer leaves before the origin's commit: the destination has
    the message while the producer still waits, and the producer is
    answered only once the message is durable at the origin.
    """
    consumer = pair(mesh)
    (d,) = send(mesh, "router-a", "q@router-b", 1, start=2)
    mesh.run(SLOW_S / 2)
    assert consumer.bodies[-1] == b"2"
    assert not d.called
    mesh.run(SLOW_S)
    assert_confirmed([d])
    mesh.run(1)
    assert mesh.routers["router-a"].store.outbox_depths() == {}
    assert consumer.bodies == [b"0", b"1", b"2"]


def test_an_acknowledgement_before_the_origins_commit_applies_after_it(mesh):
    """
    b acknowledges an early send before a's commit of it: a holds the Ack
    until then, so the outbox deletion finds the message (the outbox ends
    empty), the window frees it only then, and the message's forwarded
    event follows its accepted event.
    """
    consumer = pair(mesh)
    channel = channel_of(mesh, "router-a", "router-b")
    (d,) = send(mesh, "router-a", "q@router-b", 1, start=2)
    mesh.run(SLOW_S / 2)  # b stored and acknowledged it; a has not committed
    assert channel._core.early_accepts.held_ack is not None
    assert channel.in_flight == 1
    mesh.run(1)
    assert_confirmed([d])
    assert channel._core.early_accepts.held_ack is None
    assert channel.in_flight == 0
    assert mesh.routers["router-a"].store.outbox_depths() == {}
    assert events_about(mesh.routers["router-a"], d.result) == [
        "message.accepted", "message.forwarded"]
    assert consumer.bodies == [b"0", b"1", b"2"]


def test_a_crash_between_send_and_commit_never_reuses_a_number_the_peer_saw(mesh):
    """
    a sends M early and dies before committing it; b, whose commits are
    slow, has not stored M yet when a is back and b tells it its recovery
    point (below M's number), and stores M after.  Were a to number its
    next transfer from its store's committed counter, it would give M's
    number to a confirmed message that b would then discard as already
    received.  a numbers above its durably reserved block instead: every
    message confirmed after the restart arrives, once; M, never
    confirmed, may arrive too.
    """
    consumer = pair(mesh, origin_lag_s=SLOW_S, peer_lag_s=1.0)
    mesh.run(2)
    (lost,) = send(mesh, "router-a", "q@router-b", 1, start=2)
    mesh.run(SLOW_S / 2)  # M is at b, in b's slow commit; a's commit is pending
    config = mesh.routers["router-a"].config
    mesh.crash("router-a")
    assert not lost.called
    mesh.start(config)
    mesh.executors["router-a"].lag_s = SLOW_S
    mesh.run(0.5)  # reconnected: b's recovery point is below M's number
    assert mesh.stages("router-a").get("router-b") == "delivery"
    sent = paced(mesh, 10, start=3)
    mesh.run(3)
    assert_confirmed(sent)
    assert consumer.bodies == [b"0", b"1", b"2"] + [b"%d" % i for i in range(3, 13)]


def test_a_crash_and_an_empty_data_dir_between_send_and_commit(mesh):
    """
    a sends M early, dies before committing it and comes back on an empty
    data dir (a new store, numbering from 1 again): b forgets a's old
    numbers, and every message confirmed after the restart arrives once.
    """
    consumer = pair(mesh)
    (lost,) = send(mesh, "router-a", "q@router-b", 1, start=2)
    mesh.run(SLOW_S / 2)
    config = mesh.routers["router-a"].config
    mesh.crash("router-a")
    shutil.rmtree(config.data_dir)
    mesh.start(config)
    mesh.executors["router-a"].lag_s = SLOW_S
    mesh.run(1)
    sent = paced(mesh, 10, start=3)
    mesh.run(2)
    assert_confirmed(sent)
    assert consumer.bodies == [b"0", b"1", b"2"] + [b"%d" % i for i in range(3, 13)]


def test_a_failed_early_accept_closes_the_link_and_its_number_is_not_reused(
        mesh, observe_errors):
    """
    The store call of an early send fails after its transfer left: the
    producer gets the error, the link closes, and the next recovery
    numbers above the reserved block, so the messages sent after it all
    arrive.
    """
    consumer = pair(mesh)
    mesh.routers["router-a"].store.executor.fail_next("accept_to_outbox")
    (failed,) = send(mesh, "router-a", "q@router-b", 1, start=2)
    errors = []
    failed.addErrback(errors.append)
    mesh.run(1)
    assert len(errors) == 1
    assert len(closes_for_store(mesh.routers["router-a"])) == 1
    assert len(take_store_failures(observe_errors)) == 1
    mesh.run(2)
    sent = paced(mesh, 10, start=3)
    assert_confirmed(sent)
    assert consumer.bodies[:2] == [b"0", b"1"]
    assert [b for b in consumer.bodies[2:] if b != b"2"] == [b"%d" % i for i in range(3, 13)]


def test_a_backlog_is_not_overtaken_by_an_early_send(mesh):
    """
    While a's backlog for b drains (the link was down), new sends go
    behind it, not early: one producer's messages arrive in order.
    """
    consumer = pair(mesh)
    mesh.partition("router-b")
    mesh.run(3)  # keepalive closes the link
    assert "router-b" not in mesh.stages("router-a")
    sent = send(mesh, "router-a", "q@router-b", 300, start=2)  # a's backlog
    mesh.heal("router-b")
    sent += paced(mesh, 30, start=302)  # sent while it drains
    mesh.run(3)
    assert_confirmed(sent)
    assert consumer.bodies == [b"%d" % i for i in range(332)]


def test_a_send_being_accepted_into_the_backlog_is_not_overtaken(mesh):
    """
    A send with a duplicate id goes to the backlog (its id is checked in
    its accept); the producer's next sends, right behind it, must not
    leave early past it while its accept is in flight.
    """
    consumer = pair(mesh)
    engine = mesh.routers["router-a"].engine
    sent = [engine.submit("q@router-b", b"2", {}, True, duplicate_id="two")]
    sent += send(mesh, "router-a", "q@router-b", 10, start=3)
    mesh.run(2)
    assert_confirmed(sent)
    assert consumer.bodies == [b"%d" % i for i in range(13)]


def test_no_early_send_on_a_replicated_store(mesh):
    """
    An HA pair's active hands every transaction to its replication gate:
    nothing unconfirmed leaves it, so its links send nothing early.
    """
    pair(mesh)
    router = mesh.routers["router-a"]
    channel = channel_of(mesh, "router-a", "router-b")
    assert channel.early_room()[0] > 0
    router.store.executor.replication = object()
    assert router.store.replicated
    forwarding = router.engine.forwarding
    replicated = forwarding.link_up("router-x", lambda frame: None, lambda detail: None,
                                    lambda *a, **kw: None, channel.version, lambda: None)
    assert replicated.early_room() == (0, 0)


# -- the hold: an acknowledgement within it spares the origin's write ------------

#: The origin's early-accept-hold in the tests below.
HOLD_MS = 20


@pytest.fixture
def held(tmp_path):
    "A mesh whose routers hold their early accepts for HOLD_MS."
    mesh = MemoryMesh(tmp_path, store_lag_s=0.001, early_accept_hold_ms=HOLD_MS)
    yield mesh
    mesh.stop_all()


def test_an_acknowledgement_within_the_hold_spares_the_origins_write(held):
    """
    b holds the send durably before a's hold ends: a never writes it (an
    accept into the outbox or the deletion an acknowledgement brings
    would fail here), the producer is answered on b's acknowledgement,
    and the events say accepted, then forwarded.
    """
    consumer = pair(held, origin_lag_s=0.001)
    executor = held.routers["router-a"].store.executor
    executor.fail_next("accept_to_outbox")
    executor.fail_next("acknowledge")
    (d,) = send(held, "router-a", "q@router-b", 1, start=2)
    held.run(HOLD_MS / 1000 * 0.9)
    assert_confirmed([d])
    held.run(1)
    assert executor.failed == []
    assert closes_for_store(held.routers["router-a"]) == []
    assert channel_of(held, "router-a", "router-b").in_flight == 0
    assert events_about(held.routers["router-a"], d.result) == [
        "message.accepted", "message.forwarded"]
    assert consumer.bodies == [b"0", b"1", b"2"]


def test_a_send_not_acknowledged_within_the_hold_is_written(held):
    """
    b's commit is slower than a's hold: a writes the accept when the hold
    ends and answers the producer once that is durable, before b's
    acknowledgement; the acknowledgement then empties the outbox.
    """
    consumer = pair(held, origin_lag_s=0.001, peer_lag_s=0.2)
    (d,) = send(held, "router-a", "q@router-b", 1, start=2)
    held.run(HOLD_MS / 1000 + 0.01)
    assert_confirmed([d])
    assert held.routers["router-a"].store.outbox_depths() == {"router-b": {"router-b": 1}}
    held.run(1)
    assert held.routers["router-a"].store.outbox_depths() == {}
    assert events_about(held.routers["router-a"], d.result) == [
        "message.accepted", "message.forwarded"]
    assert consumer.bodies == [b"0", b"1", b"2"]


def test_held_accepts_are_written_when_the_link_closes(held):
    """
    b dies with a's sends held at a and not stored at b: a writes them
    when the link closes (before its hold would end), answers the
    producer, and replays them when b is back; each arrives once.
    """
    consumer = pair(held, origin_lag_s=0.001, peer_lag_s=1.0)
    sent = send(held, "router-a", "q@router-b", 3, start=2)
    held.run(0.005)
    assert not any(d.called for d in sent)
    config = held.routers["router-b"].config
    held.crash("router-b")
    held.run(0.005)
    assert_confirmed(sent)
    assert held.routers["router-a"].store.outbox_depths() == {"router-b": {"router-b": 3}}
    held.start(config)
    held.executors["router-b"].lag_s = 0.001
    consumer = Consumer(held.routers["router-b"], "q")
    held.run(2)
    assert held.routers["router-a"].store.outbox_depths() == {}
    # 0 and 1, delivered before the crash and not acknowledged, come again.
    assert [b for b in consumer.bodies if b not in (b"0", b"1")] == [b"2", b"3", b"4"]


def test_a_crash_during_the_hold_never_reuses_a_number_the_peer_saw(held):
    """
    a sends M early and dies while its accept is held (never written); b,
    whose commits are slow, stores M after a is back.  As for a crash
    before the commit: a numbers above its reserved block, every message
    confirmed after the restart arrives once, and M, never confirmed, may
    arrive too.
    """
    consumer = pair(held, origin_lag_s=0.001, peer_lag_s=1.0)
    held.run(2)
    (lost,) = send(held, "router-a", "q@router-b", 1, start=2)
    held.run(HOLD_MS / 1000 / 2)
    config = held.routers["router-a"].config
    held.crash("router-a")
    assert not lost.called
    held.start(config)
    held.run(0.5)
    assert held.stages("router-a").get("router-b") == "delivery"
    sent = paced(held, 10, start=3)
    held.run(3)
    assert_confirmed(sent)
    assert [b for b in consumer.bodies if b != b"2"] == [b"0", b"1"] + [
        b"%d" % i for i in range(3, 13)]
    assert consumer.bodies.count(b"2") <= 1


def test_a_held_send_is_not_overtaken_when_the_route_moves(tmp_path):
    """
    A shorter route appears while a's sends to d are held and in flight
    to the old next hop b (not in a's outbox, which the reroute rule
    reads): the sends after them wait in the backlog until b holds them,
    instead of leaving early on the new route.
    """
    held = MemoryMesh(tmp_path, store_lag_s=0.001, early_accept_hold_ms=1000)
    held.add("router-a", connect_to=["router-b", "router-c"])
    held.add("router-b", connect_to=["router-x"])
    held.add("router-x", connect_to=["router-d"])
    held.add("router-d")
    held.run(1)
    consumer = Consumer(held.routers["router-d"], "q", credit=1000)
    assert_confirmed(paced(held, 2, address="q@router-d"))  # a's block is reserved
    sent = send(held, "router-a", "q@router-d", 50, start=2)
    channel = channel_of(held, "router-a", "router-b")
    assert channel.in_flight == 50
    held.partition("router-b")
    held.add("router-c", connect_to=["router-d"])
    held.run(0.5)
    assert held.routers["router-a"].describe_routes()["router-d"]["next_hop"] == "router-c"
    assert held.routers["router-a"].store.outbox_depths() == {}
    sent += send(held, "router-a", "q@router-d", 50, start=52)
    held.run(0.01)
    assert held.routers["router-a"].store.backlog_depths() == {"router-d": 50}
    held.heal("router-b")
    held.run(2)
    assert_confirmed(sent)
    assert held.routers["router-a"].store.backlog_depths() == {}
    assert sorted(consumer.bodies, key=int) == [b"%d" % i for i in range(102)]
    held.stop_all()


#: What goes to the backlog behind held sends: a send with a duplicate id
#: (its id is checked in its accept) and a transaction's send.
BEHIND_HELD = {
    "duplicate-id": lambda engine: engine.submit("q@router-b", b"5", {}, True,
                                                 duplicate_id="five"),
    "transaction": lambda engine: engine.commit([("q@router-b", b"5", {}, True, "")], []),
}


@pytest.mark.parametrize("behind", sorted(BEHIND_HELD))
def test_a_send_to_the_backlog_behind_held_sends_keeps_its_place(tmp_path, behind):
    """
    a's sends to b are held (b is cut off, so no acknowledgement comes)
    when the producer's next message for b goes to the backlog: the held
    ones are written first, so when the outbox goes back to the backlog
    after reroute-delay, they are still ahead of it by entry id, and b
    gets them all in order.
    """
    held = MemoryMesh(tmp_path, store_lag_s=0.001, early_accept_hold_ms=1000)
    consumer = pair(held, origin_lag_s=0.001)
    held.partition("router-b")
    engine = held.routers["router-a"].engine
    sent = send(held, "router-a", "q@router-b", 3, start=2)
    assert channel_of(held, "router-a", "router-b").in_flight == 3
    sent.append(BEHIND_HELD[behind](engine))
    held.run(3)  # the keepalive closes the link
    assert "router-b" not in held.stages("router-a")
    held.run(6)  # past reroute-delay: the outbox is back in the backlog
    assert held.routers["router-a"].store.outbox_depths() == {}
    assert held.routers["router-a"].store.backlog_depths() == {"router-b": 4}
    held.heal("router-b")
    held.run(3)
    assert_confirmed(sent)
    assert [b for b in consumer.bodies if b not in (b"0", b"1")] == [b"2", b"3", b"4", b"5"]
    held.stop_all()


def test_an_acknowledgement_of_part_of_a_batch_applies_after_its_write(held):
    """
    b holds the first of a batch's three early sends (its transfers can
    cross in two frames, committed apart): a writes the batch's accept at
    once, and reports the first forwarded only after it is accepted.
    """
    pair(held, origin_lag_s=0.001, peer_lag_s=0.5)
    engine = held.routers["router-a"].engine
    channel = channel_of(held, "router-a", "router-b")
    d = engine.submit_many([("q@router-b", {}, b"%d" % i, True, "") for i in (2, 3, 4)])
    first = max(channel._core.in_flight) - 2
    channel.acknowledged(Ack(first))  # as b would, for the first frame
    held.run(HOLD_MS / 1000 / 2)
    assert d.called  # written at once, not after the hold
    held.run(2)
    assert events_about(held.routers["router-a"], d.result[0]) == [
        "message.accepted", "message.forwarded"]


def test_a_send_from_an_answer_on_an_acknowledgement_leaves_early(held):
    """
    A producer answered on the Ack that made its accept moot sends again
    at once, from its answer: that send leaves early on the same link
    (the answer comes outside the link's sending machine, which would
    refuse a send in the middle of its own transition).
    """
    consumer = pair(held, origin_lag_s=0.001)
    engine = held.routers["router-a"].engine
    results = []
    (d,) = send(held, "router-a", "q@router-b", 1, start=2)
    d.addCallback(lambda _: engine.submit("q@router-b", b"3", {}, True))
    d.addBoth(results.append)
    held.run(2)
    assert isinstance(results[0], str), results
    assert consumer.bodies == [b"0", b"1", b"2", b"3"]
