"""
Hand-overs in the in-memory mesh (a real pair and a witness on one
clock): the active hands the router to its peer only when the peer can
take it and learn of it, and a peer that misses a hand-over it was
granted takes the router by itself (docs/ha.md, "Failback").

The pair's stores commit at the end of each clock turn here
(C{turns=True}), as twistd's executors commit after the call that
submitted the work: the start record of a readmission epoch is committed
after the turn that readmitted the primary.
"""

from twisted.python.failure import Failure

from meshroute.ha.handover import STOP_HAND_OVER_S
from meshroute.harules import role
from meshroute.harules.settings import BACKUP, PRIMARY
from support.ha_pair import (  # noqa: F401 (pair: a fixture)
    FAILOVER_BOUND,
    LEASE_MS,
    ROUTER,
    Pair,
    depth,
    ha_events,
    pair,
    send,
    serving,
    start_both,
)


def backup_serving_after_the_primary_died(pair: Pair, **ha) -> list:
    """
    Start both, the backup with C{ha}; the primary dies, and the backup
    confirms sends alone; the backup's dials to the primary's replication
    listener (its vote connection) are refused from then on.  The
    confirmed sends.
    """
    pair.start(PRIMARY, turns=True)
    backup = pair.start(BACKUP, turns=True, **ha)
    pair.run_until(lambda: pair.states().get(pair.key(BACKUP)) == role.BACKUP_IN_SYNC, 15.0)
    pair.kill(PRIMARY)
    pair.refuse(BACKUP, "repl-primary")
    pair.run_until(lambda: serving(backup), FAILOVER_BOUND)
    sends = send(backup, 5)
    pair.run_until(lambda: all(d.called for d in sends), 5.0)
    return sends


def stalled_stream_once_in_sync(pair: Pair) -> list:
    """
    When the returning primary reports itself in sync, the backup's
    stream to it stalls (a full transport buffer, say): the start record
    of the readmission epoch does not reach it yet.  The stalled feeds
    (filled in then).
    """
    server = pair.instances[pair.key(BACKUP)].replication.server
    caught_up, stalled = server.peer_caught_up, []

    def stall_then_caught_up() -> None:
        stalled.extend(server._feeds)
        for feed in stalled:
            feed.pause()
        server.peer_caught_up = caught_up
        caught_up()

    server.peer_caught_up = stall_then_caught_up
    return stalled


def run_served(pair: Pair, seconds: float) -> None:
    """
    Run for C{seconds}, the router served by one instance at every step.
    """
    end = pair.clock.seconds() + seconds
    while pair.clock.seconds() < end:
        pair.mesh.run(0.05)
        assert sum(serving(i) for i in pair.instances.values()) == 1, (
            f"the router is not served: {pair.states()}, ended {pair.stopped}")


def test_a_failback_waits_until_the_primary_can_take_the_router_and_learn_of_it(pair):
    """
    C{restart-backup = false}: the backup, serving, readmits the returning
    primary and would hand the router back and end its process.  It does
    not while the primary lacks the readmission epoch's start record (by
    its own position it is not in sync for the voters), nor while its
    vote connection to the primary's voter, the only way the primary
    learns of a hand-over, is down: handed over then, the primary never
    activated (its own election refused C{stale-epoch}, then stale for
    the voters), and the router was served by no one for good.
    """
    sends = backup_serving_after_the_primary_died(pair, restart_backup=False)
    stalled = stalled_stream_once_in_sync(pair)
    primary = pair.start(PRIMARY, turns=True)
    pair.run_until(lambda: stalled, 10.0)
    run_served(pair, 2.0)
    backup = pair.instances[pair.key(BACKUP)]
    assert backup.replication.peer_position() is None
    assert primary.replication.position().epoch < backup.role.epoch
    for feed in stalled:
        feed.resume()
    run_served(pair, 2 * LEASE_MS / 1000)
    assert pair.stopped == [] and primary.role.state == role.BACKUP_IN_SYNC
    assert backup.replication.peer_position() == primary.replication.position()
    assert primary.replication.position().epoch == backup.role.epoch
    pair.heal_dials(BACKUP, "repl-primary")
    pair.run_until(lambda: pair.stopped == [pair.key(BACKUP)] and serving(primary), 5.0)
    assert depth(primary) == len(sends)


def test_a_primary_that_dies_before_it_learns_it_was_handed_the_router_resumes(pair):
    """
    The backup hands the router back (C{restart-backup = false}) with
    changes of its own the primary does not hold yet (committed, never
    confirmed), and ends; the primary is cut off as the hand-over's
    request to its voter crosses, and dies.  Restarted, it is the
    instance the voters granted the handed-over epoch, holding what the
    hand-over said it held: it resumes, with every confirmed send.  (Had
    the hand-over named the backup's position, the voters would find the
    primary stale, and it would never activate by itself.)
    """
    primary = pair.start(PRIMARY)
    backup = pair.start(BACKUP, restart_backup=False)
    pair.run_until(lambda: pair.states()[pair.key(BACKUP)] == role.BACKUP_IN_SYNC, 15.0)
    pair.kill(PRIMARY)
    pair.run_until(lambda: serving(backup), FAILOVER_BOUND)
    confirmed = send(backup, 5)
    pair.run_until(lambda: all(d.called for d in confirmed), 5.0)
    handover_due, unconfirmed = backup.handover._handover_due, []

    def tail_then_cut_off() -> None:
        for feed in backup.replication.server._feeds:
            feed.pause()
        unconfirmed.extend(send(backup, 3))
        pair.mesh.partition(pair.key(PRIMARY))
        handover_due()

    backup.handover._handover_due = tail_then_cut_off
    pair.start(PRIMARY)
    pair.run_until(lambda: pair.stopped == [pair.key(BACKUP)], 20.0)
    assert backup.replication.position() > pair.instances[pair.key(PRIMARY)].replication.position()
    pair.kill(PRIMARY)
    primary = pair.start(PRIMARY)
    pair.run_until(lambda: serving(primary), FAILOVER_BOUND)
    assert depth(primary) == len(confirmed)
    assert not any(d.called and not isinstance(d.result, Failure) for d in unconfirmed)


def test_a_stopping_active_does_not_hand_over_to_a_backup_that_cannot_learn_of_it(pair):
    """
    C{failover-on-shutdown}, with the primary's vote connection to the
    backup's voter down: the primary waits its second for it, then stops
    without handing over (the voters grant the backup nothing it cannot
    hear of); the backup takes over by itself, within the bound of a
    failover.
    """
    primary, backup = start_both(pair)
    sends = send(primary, 5)
    pair.run_until(lambda: all(d.called for d in sends), 5.0)
    pair.refuse(PRIMARY, "repl-backup")
    pair.run_until(lambda: not primary.ha_status().peer.connected, 1.0)
    stopping = primary.stopService()
    took = pair.run_until(lambda: stopping.called, 2.0, step=0.01)
    assert took >= STOP_HAND_OVER_S
    del pair.instances[pair.key(PRIMARY)]
    pair.run_until(lambda: serving(backup), FAILOVER_BOUND)
    assert depth(backup) == len(sends)
    witness = pair.witness_router.witness._groups[ROUTER].voter.record
    assert witness.granted_to == pair.key(BACKUP) and witness.granted_epoch == backup.role.epoch
    [failover] = ha_events(backup, "ha.failover")
    assert failover["kind"] == "takeover"
