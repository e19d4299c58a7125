"""
Exactly once on the persistent data path when links, routers and stores
misbehave: a router restarted with an empty data dir (a new store
incarnation), a message bounced back while its hand-over is still
unacknowledged, store writes that fail, and messages too large for a link.
Each test is a scenario of issue 8, on the in-memory mesh (one clock).
"""

import shutil

from twisted.internet.defer import Deferred

import pytest

from meshroute.router.peer_channel import ACK_DELAY_S
from meshroute.wire.codec import FrameDecoder
from meshroute.wire.frames import Ack, Transfer
from meshroute.testing.memory_mesh import MemoryMesh
from support.mesh_testing import (
    Consumer,
    assert_confirmed,
    closes_for_store,
    events_of,
    line,
    send,
    take_store_failures,
)


@pytest.fixture
def mesh(tmp_path):
    mesh = MemoryMesh(tmp_path)
    yield mesh
    mesh.stop_all()


def restart_empty(mesh, name: str) -> None:
    """
    Crash C{name} and start it again on an empty data dir (a replaced
    disk): same name and configuration, new store.
    """
    config = mesh.routers[name].config
    mesh.crash(name)
    shutil.rmtree(config.data_dir)
    mesh.start(config)


def connection(mesh, one: str, other: str):
    """
    The in-memory connection between routers C{one} and C{other}.
    """
    (found,) = [c for c in mesh.network.connections_of(one) if other in c.routers]
    return found


def test_restart_with_empty_data_dir_loses_nothing_sent_by_it(mesh):
    """
    Scenario 1: b numbers its transfers to a from 1 again after losing its
    store; a, which remembers b's old sequence numbers, must take the new
    ones as new, not as already received.
    """
    mesh.add("router-a")
    mesh.add("router-b", connect_to=["router-a"])
    mesh.run(1)
    consumer = Consumer(mesh.routers["router-a"], "q")
    assert_confirmed(send(mesh, "router-b", "q@router-a", 50))
    mesh.run(1)
    assert len(consumer.bodies) == 50
    # Its numbers skip (early sends take them from reserved blocks).
    received = mesh.routers["router-a"].store.last_received("router-b")
    assert received >= 50
    restart_empty(mesh, "router-b")
    mesh.run(2)
    assert mesh.stages("router-a").get("router-b") == "delivery"
    sent = send(mesh, "router-b", "q@router-a", 80, start=50)
    mesh.run(2)
    assert_confirmed(sent)
    assert consumer.bodies == [b"%d" % i for i in range(130)]
    reset = events_of(mesh.routers["router-a"], "link.incarnation")
    assert [(e["peer"], e["discarded_last_received"]) for e in reset] == [
        ("router-b", received)]


def test_restart_with_empty_data_dir_gets_the_peers_unacknowledged_replay(mesh):
    """
    The other direction: a's outbox to b still holds transfers b never
    acknowledged (b lost them with its disk); a replays all of them to
    the new b, and new traffic follows.
    """
    mesh.add("router-a", connect_to=["router-b"])
    mesh.add("router-b")
    mesh.run(1)
    assert_confirmed(send(mesh, "router-a", "q@router-b", 40))
    mesh.run(1)
    mesh.partition("router-b")
    sent = send(mesh, "router-a", "q@router-b", 30, start=40)
    mesh.network.flush()
    restart_empty(mesh, "router-b")
    consumer = Consumer(mesh.routers["router-b"], "q")
    mesh.run(2)
    sent += send(mesh, "router-a", "q@router-b", 30, start=70)
    mesh.run(2)
    assert_confirmed(sent)
    assert consumer.bodies == [b"%d" % i for i in range(40, 100)]


def test_restart_from_an_older_copy_of_the_data_dir_loses_nothing_sent_by_it(mesh):
    """
    Scenario 1's other half: a router started on an older copy of its own
    store (a restored backup; later, an HA promotion of a lagging replica)
    has the same store id, and would number its transfers from the copy's
    stale next sequence, at or below what its peer already received from
    it.  The peer's recovery point is about this store, so it tells the
    router where to number from: above it, never into it.
    """
    mesh.add("router-a")
    mesh.add("router-b", connect_to=["router-a"])
    mesh.run(1)
    consumer = Consumer(mesh.routers["router-a"], "q")
    assert_confirmed(send(mesh, "router-b", "q@router-a", 20))
    mesh.run(1)
    config = mesh.routers["router-b"].config
    mesh.stop("router-b")
    backup = f"{config.data_dir}.backup"
    shutil.copytree(config.data_dir, backup)
    mesh.start(config)
    mesh.run(2)
    assert_confirmed(send(mesh, "router-b", "q@router-a", 30, start=20))
    mesh.run(1)
    assert len(consumer.bodies) == 50
    mesh.crash("router-b")
    shutil.rmtree(config.data_dir)
    shutil.copytree(backup, config.data_dir)
    mesh.start(config)
    mesh.run(2)
    assert mesh.stages("router-a").get("router-b") == "delivery"
    sent = send(mesh, "router-b", "q@router-a", 30, start=50)
    mesh.run(2)
    assert_confirmed(sent)
    assert consumer.bodies == [b"%d" % i for i in range(80)]


def test_failed_store_write_closes_the_link_and_is_replayed(mesh, observe_errors):
    """
    Scenario 5: storing received transfer k fails once; the link closes
    (nothing after k is acknowledged) and the sender replays k.
    """
    mesh.add("router-a", connect_to=["router-b"])
    mesh.add("router-b")
    mesh.run(1)
    consumer = Consumer(mesh.routers["router-b"], "q")
    assert_confirmed(send(mesh, "router-a", "q@router-b", 10))
    mesh.run(1)
    mesh.routers["router-b"].store.executor.fail_next("receive_local")
    sent = send(mesh, "router-a", "q@router-b", 10, start=10)
    mesh.run(3)
    assert_confirmed(sent)
    assert sorted(consumer.bodies, key=int) == [b"%d" % i for i in range(20)]
    assert len(closes_for_store(mesh.routers["router-b"])) == 1
    assert len(take_store_failures(observe_errors)) == 1


@pytest.mark.parametrize("function", ["acknowledge", "assign"])
def test_failed_sender_store_call_closes_the_link(mesh, observe_errors, function):
    """
    Scenario 5, sending side: recording the peer's acknowledgement or
    taking messages from the backlog fails once; the link closes and,
    once it is back, every message arrives once.
    """
    mesh.add("router-a", connect_to=["router-b"])
    mesh.add("router-b")
    mesh.run(1)
    consumer = Consumer(mesh.routers["router-b"], "q")
    mesh.routers["router-a"].store.executor.fail_next(function)
    sent = send(mesh, "router-a", "q@router-b", 10)
    mesh.run(3)
    assert_confirmed(sent)
    assert sorted(consumer.bodies, key=int) == [b"%d" % i for i in range(10)]
    assert len(consumer.bodies) == 10
    assert len(closes_for_store(mesh.routers["router-a"])) == 1
    assert len(take_store_failures(observe_errors)) == 1


def test_failed_outbox_replay_closes_the_link_before_anything_new_is_sent(
        mesh, observe_errors):
    """
    Scenario 5, recovery: reading the outbox to replay fails; nothing new
    may go out before the replay (a receiver that got a higher sequence
    first would take the replayed ones as already received), and the link
    closes so that the next recovery replays it.
    """
    mesh.add("router-a", connect_to=["router-b"])
    mesh.add("router-b")
    mesh.run(1)
    consumer = Consumer(mesh.routers["router-b"], "q")
    mesh.partition("router-b")
    sent = send(mesh, "router-a", "q@router-b", 20)
    mesh.run(3)  # keepalive closes the link; the 20 wait in a's outbox
    assert "router-b" not in mesh.stages("router-a")
    sent += send(mesh, "router-a", "q@router-b", 20, start=20)  # a's backlog
    mesh.routers["router-a"].store.executor.fail_next("read_outbox")
    mesh.heal("router-b")
    mesh.run(5)
    assert_confirmed(sent)
    assert sorted(consumer.bodies, key=int) == [b"%d" % i for i in range(40)]
    assert len(closes_for_store(mesh.routers["router-a"])) == 1
    assert len(take_store_failures(observe_errors)) == 1


def test_message_bounced_back_before_its_ack_is_kept(mesh):
    """
    Scenario 3: a hands M to b; b's link to d dies and b's new route to d
    goes back through a, so b forwards M to a before its Ack of M reaches
    a.  a's outbox to b still holds M: the copy that came back must be
    kept (not acknowledged as a duplicate, which lets b delete it while
    b's Ack then deletes a's), and M ends enqueued once at d.
    """
    mesh.add("router-d")
    mesh.add("router-b", connect_to=["router-d"])
    mesh.add("router-c", connect_to=["router-d"])
    mesh.add("router-a", connect_to=["router-b", "router-c"])
    mesh.run(1)
    assert mesh.routers["router-a"].describe_routes()["router-d"]["next_hop"] == "router-b"
    consumer = Consumer(mesh.routers["router-d"], "q")
    sent = send(mesh, "router-a", "q@router-d", 1)  # Transfer(M) waits in a's transport
    connection(mesh, "router-b", "router-d").reset_from("router-d")
    # b sees its link to d die; nobody else knows yet.
    assert mesh.routers["router-b"].describe_routes()["router-d"]["next_hop"] == "router-a"
    a_b = connection(mesh, "router-a", "router-b")
    a_b.server_io.bufferReceived(a_b.client_io.getOutBuffer())  # M reaches b
    mesh.clock.advance(0)  # the end of b's reactor turn: it acknowledges and forwards
    answer = a_b.server_io.getOutBuffer()
    carried = [type(f) for f in FrameDecoder().feed(answer) if type(f) in (Ack, Transfer)]
    assert carried == [Ack, Transfer]  # b acknowledges M before it sends M back
    a_b.client_io.bufferReceived(answer)
    mesh.run(3)
    assert_confirmed(sent)
    assert consumer.bodies == [b"0"]
    for name in ("router-a", "router-b", "router-c"):
        store = mesh.routers[name].store
        assert (store.backlog_depths(), store.outbox_peers()) == ({}, []), name


def largest_send_body(address: str) -> bytes:
    """
    The body of the largest Send a client may make to C{address}: its frame
    is exactly at the client's limit.
    """
    from meshroute.wire.client_frames import MAX_FRAME_SIZE, Send
    from meshroute.wire.codec import encode

    overhead = len(encode(Send(2**63 - 1, address, {}, b"", True))) - 4
    body = b"x" * (MAX_FRAME_SIZE - overhead)
    while len(encode(Send(2**63 - 1, address, {}, body, True))) - 4 > MAX_FRAME_SIZE:
        body = body[:-1]
    return body


def test_largest_legal_send_is_forwarded_over_two_links(mesh):
    """
    Scenario 6: the Transfer a legal Send becomes is larger than the Send;
    the link must take it (it used to be refused as a protocol error and
    replayed on every reconnect, blocking the link).
    """
    mesh.add("router-a", connect_to=["router-b"])
    mesh.add("router-b", connect_to=["router-c"])
    mesh.add("router-c")
    mesh.run(1)
    consumer = Consumer(mesh.routers["router-c"], "q")
    body = largest_send_body("q@router-c")
    engine = mesh.routers["router-a"].engine
    sent = [engine.submit("q@router-c", body, {}, True)]
    sent += send(mesh, "router-a", "q@router-c", 3)
    mesh.run(3)
    assert_confirmed(sent)
    assert consumer.bodies == [body, b"0", b"1", b"2"]
    for name in ("router-a", "router-b", "router-c"):
        assert events_of(mesh.routers[name], "link.closed") == [], name


def test_every_frame_a_legal_send_becomes_fits_its_limit():
    """
    The one rule: a client Send is at most MAX_FRAME_SIZE; a link and a
    client accept frames up to MAX_MESSAGE_FRAME_SIZE, which leaves room
    for what a message gains on its way (Transfer and Deliver fields with
    the longest names, the dead-letter headers).
    """
    from meshroute.client.options import ClientOptions
    from meshroute.wire.client_frames import Deliver
    from meshroute.wire.codec import DEFAULT_MAX_FRAME_SIZE, MAX_MESSAGE_FRAME_SIZE, encode
    from meshroute.wire.frames import Transfer

    router, queue = "r" * 64, "q" * 128
    body = largest_send_body(f"{queue}@{router}")
    headers = {"x-dead-letter-reason": "too-large", "x-original-address": f"{queue}@{router}"}
    msg_id = f"{router}:{'f' * 12}:{2**63 - 1}"
    transfer = Transfer(2**63 - 1, msg_id, router, router, queue, 2**63 - 1, 1e300, headers, body)
    deliver = Deliver(2**63 - 1, 2**63 - 1, msg_id, router, headers, body, True)
    assert DEFAULT_MAX_FRAME_SIZE == MAX_MESSAGE_FRAME_SIZE == ClientOptions().max_frame_size
    for frame in (transfer, deliver):
        assert len(encode(frame)) - 4 <= MAX_MESSAGE_FRAME_SIZE


def test_message_too_large_for_any_link_is_dead_lettered_not_replayed(mesh):
    """
    Scenario 6: a message no link would take (here submitted past the
    client limit through the engine's API) is dead-lettered where it is,
    with a reason, and what follows it flows.
    """
    from meshroute.messages import DEAD_LETTER_QUEUE
    from meshroute.wire.codec import MAX_MESSAGE_FRAME_SIZE

    mesh.add("router-a", connect_to=["router-b"])
    mesh.add("router-b")
    mesh.run(1)
    consumer = Consumer(mesh.routers["router-b"], "q")
    dead = Consumer(mesh.routers["router-a"], DEAD_LETTER_QUEUE)
    engine = mesh.routers["router-a"].engine
    sent = [engine.submit("q@router-b", b"x" * MAX_MESSAGE_FRAME_SIZE, {}, True)]
    sent += send(mesh, "router-a", "q@router-b", 3)
    mesh.run(3)
    assert_confirmed(sent)
    assert consumer.bodies == [b"0", b"1", b"2"]
    assert len(dead.received) == 1
    assert dead.received[0].headers["x-dead-letter-reason"] == "too-large"
    (event,) = events_of(mesh.routers["router-a"], "message.dead-lettered")
    assert (event["reason"], event["dest"]) == ("too-large", "q@router-b")
    assert events_of(mesh.routers["router-a"], "link.closed") == []


def test_message_bounced_back_through_another_router_is_kept(mesh):
    """
    Scenario 3 across routers: m hands M to b and the link dies before
    b's Ack reaches m; b, which still believes c reaches d directly,
    forwards M to c; c, which knows better, forwards it to m.  m's outbox
    to b still holds M: the copy from c must be kept (it used to be
    acknowledged as a duplicate, c deleted it, and the next recovery with
    b deleted m's copy too).
    """
    mesh.add("router-d")
    mesh.add("router-e", connect_to=["router-d"])
    mesh.add("router-m", connect_to=["router-e"])
    mesh.add("router-c", connect_to=["router-m", "router-d"])
    mesh.add("router-b", connect_to=["router-m", "router-d", "router-c"])
    mesh.run(2)
    routes = {name: mesh.routers[name].describe_routes()["router-d"]["next_hop"]
              for name in ("router-m", "router-b", "router-c")}
    assert routes == {"router-m": "router-b", "router-b": "router-d", "router-c": "router-d"}
    consumer = Consumer(mesh.routers["router-d"], "q")
    sent = send(mesh, "router-m", "q@router-d", 1)  # Transfer(M) waits in m's transport
    connection(mesh, "router-b", "router-d").reset_from("router-d")
    connection(mesh, "router-c", "router-d").reset_from("router-d")
    m_b = connection(mesh, "router-m", "router-b")
    m_b.pump(held=False)  # b (the connector) gets M, still routing d through c
    mesh.clock.advance(0)  # the end of b's reactor turn: it acknowledges and forwards
    assert mesh.routers["router-b"].store.outbox_peers() == ["router-c"]
    m_b.reset_from("router-b")  # b's Ack of M is lost with the link
    mesh.run(5)
    assert_confirmed(sent)
    assert consumer.bodies == [b"0"]


def count_acknowledgements(store) -> list[int]:
    """
    The sequence numbers of the cumulative acknowledgements C{store} records
    from now on (each one an outbox deletion at the sender).
    """
    acknowledged = []
    record = store.acknowledge

    def counting(peer, up_to_seq):
        acknowledged.append(up_to_seq)
        return record(peer, up_to_seq)

    store.acknowledge = counting
    return acknowledged


def test_forwarding_router_acknowledges_a_run_of_transfers_together(mesh):
    """
    Acknowledging a forwarded message before forwarding it (scenario 3)
    must not cost one Ack, and so one outbox deletion at the sender, per
    message: the transfers that arrive together are acknowledged together,
    as those for a local queue are.
    """
    line(mesh)
    consumer = Consumer(mesh.routers["router-c"], "q")
    acknowledged = count_acknowledgements(mesh.routers["router-a"].store)
    sent = send(mesh, "router-a", "q@router-c", 500)
    mesh.run(1)
    assert_confirmed(sent)
    assert consumer.bodies == [b"%d" % i for i in range(500)]
    assert len(acknowledged) < 10, acknowledged


def test_at_a_low_rate_one_ack_covers_several_transfers(mesh):
    """
    Transfers that arrive one at a time, for a local queue, are
    acknowledged together within ACK_DELAY_S: not one Ack, and one outbox
    deletion at the sender, per message.  Every outbox still empties.
    """
    line(mesh)
    consumer = Consumer(mesh.routers["router-c"], "q")
    acknowledged = count_acknowledgements(mesh.routers["router-b"].store)
    sent = []
    for _ in range(20):
        sent += send(mesh, "router-a", "q@router-c", 1)
        mesh.run(ACK_DELAY_S / 5)
    mesh.run(1)
    assert_confirmed(sent)
    assert len(consumer.bodies) == 20
    assert 1 < len(acknowledged) <= 20 // 4, acknowledged
    assert acknowledged[-1] == 20
    assert all(r.store.outbox_depths() == {} for r in mesh.routers.values())


def test_transfer_durable_after_its_link_closed_is_still_forwarded(mesh):
    """
    With the threaded store a transfer may become durable after its link
    closed (the write was queued before the close): it must still be
    forwarded, even though no acknowledgement goes out for it any more.
    """
    line(mesh)
    consumer = Consumer(mesh.routers["router-c"], "q")
    store = mesh.routers["router-b"].store
    held = []
    receive = store.receive

    def later(*args):
        d = Deferred()
        held.append(lambda: receive(*args).chainDeferred(d))
        return d

    store.receive = later
    assert_confirmed(send(mesh, "router-a", "q@router-c", 1))
    mesh.network.flush()
    assert len(held) == 1  # M reached b; its write waits in b's store queue
    mesh.partition("router-a")
    connection(mesh, "router-a", "router-b").reset_from("router-a")
    store.receive = receive
    held.pop()()
    mesh.run(5)
    assert consumer.bodies == [b"0"]
