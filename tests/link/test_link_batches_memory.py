"""
Link protocol version 4 across whole routers in memory: messages travel in
L{TransferBatch} and L{FastTransferBatch} frames, a batch is stored in one
store call, and a router that speaks only versions 2 and 3 (a build from
before version 4) still links with a new one, either side dialling, with
one message per frame.
"""

import pytest

from meshroute.link import handshake
from meshroute.link.core import LinkCore
from meshroute.wire.codec import encode
from meshroute.wire.frames import (
    BATCH_MAX_BYTES,
    BATCH_MAX_MESSAGES,
    FastTransfer,
    FastTransferBatch,
    Transfer,
    TransferBatch,
)
from meshroute.testing.memory_mesh import MemoryMesh
from support.mesh_testing import (
    Consumer,
    assert_confirmed,
    closes_for_store,
    events_of,
    send,
    take_store_failures,
)

A = "router-a"
B = "router-b"
DATA_FRAMES = (Transfer, TransferBatch, FastTransfer, FastTransferBatch)


@pytest.fixture
def mesh(tmp_path):
    mesh = MemoryMesh(tmp_path)
    yield mesh
    mesh.stop_all()


@pytest.fixture
def wire(monkeypatch) -> list:
    """
    Every data frame any link writes, as C{(router, frame)}.
    """
    written = []
    send = LinkCore.send

    def recording(core, frame) -> None:
        if type(frame) in DATA_FRAMES:
            written.append((core.context.name, frame))
        send(core, frame)

    monkeypatch.setattr(LinkCore, "send", recording)
    return written


class OldRouters(set):
    """
    Router names, and the versions they speak.
    """

    versions: tuple = ()


@pytest.fixture(params=[(2, 3), (2,)], ids=["v3", "v2"])
def old_routers(request, monkeypatch) -> set:
    """
    The routers named in the returned set speak the link versions of a
    build from before version 4 (C{old_routers.versions}).
    """
    old = OldRouters()
    old.versions = request.param
    for name in ("hello", "vet_hello", "vet_welcome"):
        original = getattr(handshake, name)

        def speaking(core, *args, _original=original):
            if core.context.name not in old:
                return _original(core, *args)
            new = handshake.SUPPORTED_VERSIONS
            handshake.SUPPORTED_VERSIONS = old.versions
            try:
                return _original(core, *args)
            finally:
                handshake.SUPPORTED_VERSIONS = new

        monkeypatch.setattr(handshake, name, speaking)
    return old


def frames_from(wire: list, router: str, kind) -> list:
    return [frame for sender, frame in wire if sender == router and type(frame) is kind]


def waiting_for_b(mesh) -> None:
    """
    a and b linked, then b stopped: what a is sent for b waits in a's
    backlog until b is back (L{back}), and then leaves in batches.
    """
    mesh.add(A, connect_to=[B])
    mesh.add(B)
    mesh.run(1)
    mesh.stop(B)


def back(mesh) -> None:
    mesh.start(mesh.config(B))


def counting_receives(store) -> dict:
    """
    Count C{store}'s receive calls, one by one and by batch.
    """
    calls = {"receive": 0, "receive_many": 0}
    for name in calls:
        original = getattr(store, name)

        def counted(*args, _name=name, _original=original):
            calls[_name] += 1
            return _original(*args)

        setattr(store, name, counted)
    return calls


def test_a_backlog_crosses_a_version_4_link_in_batches_one_store_call_each(mesh, wire):
    waiting_for_b(mesh)
    sent = send(mesh, A, "q@router-b", 600)
    back(mesh)
    calls = counting_receives(mesh.routers[B].store)
    consumer = Consumer(mesh.routers[B], "q", credit=1000)
    mesh.run(1)
    assert_confirmed(sent)
    assert consumer.bodies == [b"%d" % i for i in range(600)]
    batches = frames_from(wire, A, TransferBatch)
    assert sum(len(f.messages) for f in batches) == 600
    assert all(len(f.messages) <= BATCH_MAX_MESSAGES for f in batches)
    assert frames_from(wire, A, Transfer) == []
    assert calls == {"receive": 0, "receive_many": len(batches)}
    enqueued = events_of(mesh.routers[B], "message.enqueued")
    assert len(enqueued) == len({e["msg_id"] for e in enqueued}) == 600
    assert len(events_of(mesh.routers[A], "message.forwarded")) == 600


def test_the_non_persistent_messages_of_one_turn_go_in_one_frame(mesh, wire):
    """
    One FastTransferBatch at the end of the reactor turn, or sooner
    whenever it holds a batch's worth.
    """
    mesh.add(A, connect_to=[B])
    mesh.add(B)
    mesh.run(1)
    consumer = Consumer(mesh.routers[B], "fast", credit=2000)
    assert_confirmed(send(mesh, A, "fast@router-b", 100, persistent=False))
    assert frames_from(wire, A, FastTransferBatch) == []  # the turn goes on
    mesh.run(1)
    assert [len(f.messages) for f in frames_from(wire, A, FastTransferBatch)] == [100]
    assert_confirmed(send(mesh, A, "fast@router-b", 900, start=100, persistent=False))
    full = frames_from(wire, A, FastTransferBatch)[1:]
    assert full and all(len(encode(f)) <= BATCH_MAX_BYTES for f in full)
    mesh.run(1)
    batches = frames_from(wire, A, FastTransferBatch)[1:]
    assert len(batches) == len(full) + 1
    assert sum(len(f.messages) for f in batches) == 900
    assert frames_from(wire, A, FastTransfer) == []
    assert consumer.bodies == [b"%d" % i for i in range(1000)]
    assert all(not m.persistent and m.hops == 1 for m in consumer.received)
    # Each message's records, written a batch at a time, in order.
    received = [m.msg_id for m in consumer.received]
    forwarded = events_of(mesh.routers[A], "message.forwarded")
    assert [e["msg_id"] for e in forwarded] == received
    assert {(e["peer"], e["origin"], e["hops"]) for e in forwarded} == {(B, A, 1)}
    enqueued = events_of(mesh.routers[B], "message.enqueued")
    assert [e["msg_id"] for e in enqueued] == received
    assert {(e["origin"], e["queue"], e["hops"], e["persistent"]) for e in enqueued} == {
        (A, "fast", 1, False)}
    assert [e["accepted_at"] for e in enqueued] == [m.accepted_at for m in consumer.received]


def test_a_batch_that_cannot_be_stored_closes_the_link_and_is_replayed(
        mesh, wire, observe_errors):
    waiting_for_b(mesh)
    sent = send(mesh, A, "q@router-b", 300)
    back(mesh)
    mesh.routers[B].store.executor.fail_next("receive_many")
    consumer = Consumer(mesh.routers[B], "q", credit=1000)
    mesh.run(3)
    assert_confirmed(sent)
    assert consumer.bodies == [b"%d" % i for i in range(300)]
    assert len(closes_for_store(mesh.routers[B])) == 1
    assert len(take_store_failures(observe_errors)) == 1
    enqueued = events_of(mesh.routers[B], "message.enqueued")
    assert len(enqueued) == len({e["msg_id"] for e in enqueued}) == 300


@pytest.mark.parametrize("old", [A, B], ids=["old-connector", "old-listener"])
def test_an_older_router_links_with_a_version_4_one(mesh, wire, old_routers, old):
    """
    Either side may be the old build: the link agrees the old build's
    newest version, and both directions carry one message per frame,
    exactly once, in order.
    """
    old_routers.add(old)
    waiting_for_b(mesh)
    sent = send(mesh, A, "q@router-b", 300)
    back(mesh)
    at_b = Consumer(mesh.routers[B], "q", credit=1000)
    at_a = Consumer(mesh.routers[A], "q", credit=1000)
    sent += send(mesh, B, "q@router-a", 300)
    mesh.run(1)
    sent += send(mesh, A, "q@router-b", 300, start=300, persistent=False)
    sent += send(mesh, B, "q@router-a", 300, start=300, persistent=False)
    mesh.run(1)
    assert_confirmed(sent)
    assert at_b.bodies == at_a.bodies == [b"%d" % i for i in range(600)]
    agreed = max(old_routers.versions)
    assert mesh.routers[A].engine.forwarding.channel(B).version == agreed
    assert mesh.routers[B].engine.forwarding.channel(A).version == agreed
    assert {type(frame) for _, frame in wire} == {Transfer, FastTransfer}
    assert len(frames_from(wire, A, Transfer)) == len(frames_from(wire, B, Transfer)) == 300


def test_a_batchs_records_of_enqueued_arrivals_keep_its_order_across_queues(mesh, wire):
    waiting_for_b(mesh)
    queues = ["q1", "q1", "q1", "q2", "q2", "q1", "q3", "q1"]
    sent = [d for i, queue in enumerate(queues)
            for d in send(mesh, A, f"{queue}@router-b", 1, start=i)]
    back(mesh)
    calls = counting_receives(mesh.routers[B].store)
    mesh.run(1)
    assert_confirmed(sent)
    assert calls == {"receive": 0, "receive_many": 1}
    enqueued = events_of(mesh.routers[B], "message.enqueued")
    accepted = events_of(mesh.routers[A], "message.accepted")
    assert [(e["msg_id"], e["queue"]) for e in enqueued] == list(
        zip([e["msg_id"] for e in accepted], queues))
