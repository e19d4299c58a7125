"""
An HA pair's new active takes the router's place in the mesh (issue 9,
"Failover"), on the in-memory mesh: real routers, one clock.

Router b connects to a and c.  Its first instance serves in epoch 1;
then it freezes (a SIGSTOP, a partition: its links stay open, silent),
and its other instance starts in epoch 2 on a copy of its store, as the
backup of a pair holds (store.db is replicated whole, store id
included).  The copy is SQLite's online backup of the frozen instance's
store.db: everything it committed, which is at least what a backup holds
of an active (an active acknowledges nothing its backup lacks).

What must hold: a and c admit the new instance at once, closing the old
instance's links C{superseded} (not after their keepalive runs out, and
not refusing the new one C{name-in-use}); the old one, when it wakes up
and reconnects, is refused C{stale-epoch}, also by a router restarted
since; routes follow the new epoch although its sequence numbers are
lower; and messages the old instance held or was handed and did not
acknowledge reach c exactly once.
"""

import dataclasses
import sqlite3

import pytest

from meshroute.testing.memory_mesh import MemoryMesh
from support.mesh_testing import Consumer, assert_confirmed, events_of, send

A, B, C = "router-a", "router-b", "router-c"
OLD_B, NEW_B = "b-epoch-1", "b-epoch-2"

#: How far the old instance's clock runs ahead of the new one's: its
#: route advertisements are numbered an hour above the new instance's.
OLD_CLOCK_AHEAD_S = 3600.0


class _ClockAhead:
    """
    The mesh's clock, read C{OLD_CLOCK_AHEAD_S} later: another machine's
    clock (timers still run on the mesh's).
    """

    def __init__(self, clock) -> None:
        self._clock = clock

    def seconds(self) -> float:
        return self._clock.seconds() + OLD_CLOCK_AHEAD_S

    def callLater(self, delay, f, *args, **kwargs):
        return self._clock.callLater(delay, f, *args, **kwargs)

    def getDelayedCalls(self) -> list:
        return self._clock.getDelayedCalls()


class PairMesh(MemoryMesh):
    """
    A mesh whose next router started gets a clock ahead of the others'
    when C{clock_ahead} is set.
    """

    clock_ahead = False

    def router_clock(self, name: str):
        if self.clock_ahead:
            self.clock_ahead = False
            return _ClockAhead(self.clock)
        return self.clock


@pytest.fixture
def mesh(tmp_path):
    mesh = PairMesh(tmp_path)
    yield mesh
    mesh.stop_all()


def b_instance(mesh: PairMesh, tmp_path, key: str):
    """
    The configuration of one instance of b: the same router, its own
    data dir.
    """
    return dataclasses.replace(mesh.config(B, connect_to=[A, C], listen=False),
                               data_dir=str(tmp_path / key))


#: Where each instance of b listens, when it does.
ADDRESSES = {OLD_B: "b-address-1", NEW_B: "b-address-2"}


def start_listening_b(mesh: PairMesh, tmp_path, key: str, epoch: int, connect_to=()) -> None:
    """
    Start instance C{key} of b, listening at its own address.
    """
    config = mesh.config(B, connect_to=connect_to)
    mesh.start(dataclasses.replace(
        config, data_dir=str(tmp_path / key),
        listener=dataclasses.replace(config.listener, endpoint=ADDRESSES[key])),
        key=key, epoch=epoch)


def dialling_both_bs(config):
    """
    C{config} with its connector to b listing both instances' addresses.
    """
    return dataclasses.replace(config, connectors=tuple(
        dataclasses.replace(c, endpoint=tuple(ADDRESSES.values())) if c.router == B else c
        for c in config.connectors))


def copy_store(source_dir: str, target_dir) -> None:
    """
    SQLite's online backup of C{source_dir}'s store.db into C{target_dir}.
    """
    target_dir.mkdir()
    source = sqlite3.connect(f"{source_dir}/store.db")
    target = sqlite3.connect(str(target_dir / "store.db"))
    with target:
        source.backup(target)
    source.close()
    target.close()


def closes(mesh, router: str, peer: str) -> list[str]:
    return [e["reason"] for e in events_of(mesh.routers[router], "link.closed")
            if e["peer"] == peer]


def rejections(mesh, router: str) -> set:
    return {(e["code"], e["by"]) for e in events_of(mesh.routers[router], "link.rejected")}


def b_advertisement(mesh, router: str):
    (held,) = [adv for adv in mesh.routers[router].engine.routes.advertisements()
               if adv.origin == B]
    return held


def test_a_new_epoch_takes_b_s_place_and_the_old_one_is_refused(mesh, tmp_path):
    mesh.add(A)
    mesh.add(C)
    mesh.clock_ahead = True
    mesh.start(b_instance(mesh, tmp_path, OLD_B), key=OLD_B, epoch=1)
    mesh.run(1)
    assert mesh.stages(A) == {B: "delivery"} and mesh.stages(C) == {B: "delivery"}
    old_advertisement = b_advertisement(mesh, A)
    assert old_advertisement.epoch == 1
    consumer = Consumer(mesh.routers[C], "q")

    # Handed to old b, stored there, not acknowledged: b freezes before
    # its acknowledgement (sent at the end of the reactor turn) leaves.
    sent = send(mesh, A, "q@router-c", 50)
    mesh.network.flush()
    mesh.partition(OLD_B)
    assert mesh.routers[OLD_B].store.backlog_depths() == {C: 50}
    copy_store(mesh.routers[OLD_B].config.data_dir, tmp_path / NEW_B)
    # Handed to old b after it froze: never stored there.
    sent += send(mesh, A, "q@router-c", 50, start=50)
    mesh.network.flush()
    assert mesh.routers[A].store.outbox_depths() == {B: {C: 100}}

    mesh.start(b_instance(mesh, tmp_path, NEW_B), key=NEW_B, epoch=2)
    mesh.run(0.1)  # far less than a keepalive close (5 × 200 ms)
    assert closes(mesh, A, B) == closes(mesh, C, B) == ["superseded"]
    assert mesh.stages(A) == {B: "delivery"} and mesh.stages(C) == {B: "delivery"}
    assert [link["peer"] for link in mesh.routers[NEW_B].describe_links()] == [A, C]
    assert_confirmed(sent)
    assert consumer.bodies == [b"%d" % i for i in range(100)]
    assert mesh.routers[A].store.outbox_depths() == {}

    # Routes follow the new epoch, whose sequence numbers are an hour lower.
    new_advertisement = b_advertisement(mesh, A)
    assert new_advertisement.epoch == 2
    assert new_advertisement.seq < old_advertisement.seq
    assert b_advertisement(mesh, C) == new_advertisement
    assert mesh.routers[A].describe_routes()[C] == {"next_hop": B, "hops": 2}

    # The old instance wakes up: its links are gone, and it is refused.
    mesh.heal(OLD_B)
    mesh.run(2)
    assert rejections(mesh, A) == rejections(mesh, C) == {("stale-epoch", "local")}
    assert rejections(mesh, OLD_B) == {("stale-epoch", "peer")}
    assert all(link["stage"] != "delivery" for link in mesh.routers[OLD_B].describe_links())
    assert mesh.stages(A) == {B: "delivery"}
    assert b_advertisement(mesh, A) == b_advertisement(mesh, C)
    assert b_advertisement(mesh, A).epoch == 2

    # Still refused by a restarted a, even when it comes back first.
    mesh.partition(NEW_B)
    config_a = mesh.routers[A].config
    mesh.stop(A)
    mesh.start(config_a)
    mesh.run(2)
    assert ("stale-epoch", "local") in rejections(mesh, A)
    assert B not in mesh.stages(A)
    mesh.heal(NEW_B)
    mesh.run(2)
    assert mesh.stages(A) == {B: "delivery"}
    sent = send(mesh, A, "q@router-c", 10, start=100)
    mesh.run(1)
    assert_confirmed(sent)

    assert consumer.bodies == [b"%d" % i for i in range(110)]
    enqueued = events_of(mesh.routers[C], "message.enqueued")
    assert len(enqueued) == len({e["msg_id"] for e in enqueued}) == 110


def test_a_version_2_link_carries_no_epochs(mesh, tmp_path, monkeypatch):
    """
    A router that links at version 2 cannot read an epoch in Routes: it
    gets b's advertisements without it (and compares seq alone).
    """
    monkeypatch.setattr("meshroute.link.handshake.SUPPORTED_VERSIONS", (2,))
    mesh.add(A)
    mesh.add(C)
    mesh.start(b_instance(mesh, tmp_path, NEW_B), key=NEW_B, epoch=2)
    mesh.run(1)
    assert {link["peer"] for link in mesh.routers[NEW_B].describe_links()} == {A, C}
    assert b_advertisement(mesh, A).epoch == b_advertisement(mesh, C).epoch == 0


def test_a_connector_refuses_the_stale_instance_and_tries_the_other(mesh, tmp_path):
    """
    a's connector lists both instances of b.  Once a has linked with the
    epoch-2 instance, the epoch-1 one is refused when a reaches it (the
    connector's rotation then tries the other endpoint at once).
    """
    mesh.start(dialling_both_bs(mesh.config(A, connect_to=[B], listen=False)))
    start_listening_b(mesh, tmp_path, OLD_B, 1)
    mesh.run(1)
    assert [link["endpoint"] for link in mesh.routers[A].describe_links()] == [
        ADDRESSES[OLD_B]]
    mesh.partition(OLD_B)  # frozen: a's link to it dies by keepalive
    start_listening_b(mesh, tmp_path, NEW_B, 2)
    mesh.run(2)
    (link,) = [link for link in mesh.routers[A].describe_links() if link["stage"] == "delivery"]
    assert (link["endpoint"], link["peer_epoch"]) == (ADDRESSES[NEW_B], 2)

    mesh.heal(OLD_B)
    mesh.crash(NEW_B)
    mesh.run(3)  # a tries b's endpoints in turn: the old one is refused every time
    refused = events_of(mesh.routers[A], "link.rejected")
    assert refused and {(e["code"], e["by"]) for e in refused} == {("stale-epoch", "local")}
    assert B not in mesh.stages(A) or mesh.stages(A)[B] != "delivery"
    start_listening_b(mesh, tmp_path, NEW_B, 2)
    mesh.run(3)
    (link,) = [link for link in mesh.routers[A].describe_links() if link["stage"] == "delivery"]
    assert (link["endpoint"], link["peer_epoch"]) == (ADDRESSES[NEW_B], 2)


def test_a_router_that_only_dials_b_leaves_the_old_instance_on_hearing_the_new_epoch(
        mesh, tmp_path):
    """
    x dials b (both instances listed) and a; b's instances dial a.  When
    the new instance takes b's place at a, its advertisement (epoch 2)
    reaches x through a: x closes its link to the frozen old instance
    (C{superseded}) and moves to the new one at once, without waiting for
    its keepalive to notice the silence.
    """
    X = "router-x"
    mesh.add(A)
    mesh.start(dialling_both_bs(mesh.config(X, connect_to=[A, B], listen=False)))
    start_listening_b(mesh, tmp_path, OLD_B, 1, connect_to=[A])
    mesh.run(1)
    assert mesh.stages(X) == {A: "delivery", B: "delivery"}
    mesh.partition(OLD_B)
    start_listening_b(mesh, tmp_path, NEW_B, 2, connect_to=[A])
    mesh.run(0.5)  # x's keepalive would take 5 × 200 ms to notice
    assert closes(mesh, X, B) == ["superseded"]
    links = {link["peer"]: link for link in mesh.routers[X].describe_links()}
    assert (links[B]["stage"], links[B]["endpoint"], links[B]["peer_epoch"]) == (
        "delivery", ADDRESSES[NEW_B], 2)
    assert mesh.routers[X].peer_epochs.highest(B) == 2
