"""
A pair of real HA instances (L{build_instance}: ha.db, vote connections,
the replication listener, the follower, the gate) and a witness router,
in the in-memory mesh on one clock, with inline store executors.
"""

import dataclasses
import os
import sqlite3

from twisted.internet.protocol import Factory, Protocol

from meshroute.wire import client_frames as f
from support.mesh_testing import Consumer
from meshroute.ha import records
from meshroute.harules import role
from meshroute.ha.instance import HAInstance
from meshroute.harules.settings import BACKUP, PRIMARY
from meshroute.wire.codec import FrameDecoder, encode
from support.ha_pair import (  # noqa: F401 (pair: a fixture)
    ROUTER,
    HEARTBEAT_MS,
    LEASE_MS,
    FAILOVER_BOUND,
    Pair,
    pair,
    serving,
    start_both,
    ha_events,
    send,
    depth,
)

def test_a_send_confirmed_on_the_primary_is_on_the_backup_after_its_death(pair):
    primary, backup = start_both(pair)
    sends = send(primary, 20)
    pair.run_until(lambda: all(d.called for d in sends), 5.0)
    confirmed = []
    for d in sends:
        d.addCallback(confirmed.append)
    assert len(confirmed) == 20
    pair.kill(PRIMARY)
    took = 2.0 + pair.run_until(lambda: serving(backup), FAILOVER_BOUND - 2.0)
    assert took <= FAILOVER_BOUND
    assert depth(backup) == 20
    [failover] = ha_events(backup, "ha.failover")
    assert (failover["from"], failover["to"], failover["kind"]) == (PRIMARY, BACKUP, "takeover")
    assert failover["duration_ms"] <= FAILOVER_BOUND * 1000


def test_while_the_backup_is_cut_off_nothing_is_confirmed_until_the_primary_runs_alone(pair):
    primary, backup = start_both(pair)
    pair.mesh.partition(pair.key(BACKUP))
    sends = send(primary, 5)
    pair.mesh.run(1.0)
    assert not any(d.called for d in sends)  # held: the backup has not acknowledged
    # replication-timeout, then an epoch to run alone (primary + witness).
    pair.run_until(lambda: all(d.called for d in sends), 10.0)
    assert pair.states()[pair.key(PRIMARY)] == role.ACTIVE_ALONE
    assert [e["status"] for e in ha_events(primary, "ha.replication")] == [
        "connected", "in-sync", "lost"]
    assert [(e["epoch"], e["mode"]) for e in ha_events(primary, "ha.epoch")] == [
        (1, "alone"), (2, "replicated"), (3, "alone")]
    # The backup, cut off from everyone, never activates.
    pair.mesh.run(30.0)
    assert backup.router is None
    # Healed, it catches up and the primary runs replicated again.
    pair.mesh.heal(pair.key(BACKUP))
    pair.run_until(lambda: pair.states() == {
        pair.key(PRIMARY): role.ACTIVE_REPLICATED, pair.key(BACKUP): role.BACKUP_IN_SYNC},
        20.0)
    # The replicated epoch starts with a change, which the backup holds:
    # its data is that epoch's, and it may take over from now on.
    pair.run_until(lambda: backup.replication.position() == primary.replication.position(),
                   1.0)
    assert backup.replication.position().epoch == primary.role.epoch == 4


def test_at_start_up_the_primary_serves_and_the_backup_follows_in_sync(pair):
    primary, backup = start_both(pair)
    assert backup.router is None
    pair.mesh.run(10.0)  # it stays so: the lease holds, the backup hears the active
    assert pair.states() == {pair.key(PRIMARY): role.ACTIVE_REPLICATED,
                             pair.key(BACKUP): role.BACKUP_IN_SYNC}
    status = primary.ha_status().describe()
    assert (status["role"], status["state"], status["epoch"]) == (
        PRIMARY, role.ACTIVE_REPLICATED, 2)
    assert status["peer"]["connected"] and status["voters"][0]["connected"]


def test_snapshot_files_a_killed_pair_left_are_deleted_when_it_starts_again(pair):
    """
    A pair killed while the active sent a snapshot leaves the active's
    copy and the backup's partial file, each as large as the store:
    nothing reads them again, and the next start deletes them.
    """
    left = {PRIMARY: "snapshot-q8z1.db", BACKUP: "incoming-snapshot-2bc0.db"}
    for ha_role, name in left.items():
        data_dir = pair.tmp_path / pair.key(ha_role).replace("/", "-")
        data_dir.mkdir()
        (data_dir / name).write_bytes(b"SQLite format 3\0" + b"\0" * 4096)
    primary, backup = start_both(pair)
    for instance in (primary, backup):
        assert not [n for n in os.listdir(instance.config.data_dir) if "snapshot-" in n]


def test_the_active_routers_views_carry_its_ha_state(pair):
    """
    What another router asking through the mesh gets (L{RouterService.describe_view}):
    the router view and the ha view, as the instance's admin API answers them.
    """
    primary, _backup = start_both(pair)
    described = primary.ha_status().describe()
    assert primary.router.describe_view("router")["ha"] == described
    assert primary.router.describe_view("ha") == described


def test_a_graceful_stop_hands_over_within_a_second(pair):
    primary, backup = start_both(pair)
    sends = send(primary, 5)
    pair.run_until(lambda: all(d.called for d in sends), 5.0)
    stopped = primary.stopService()
    took = pair.run_until(lambda: serving(backup), 1.0, step=0.01)
    assert took <= 1.0
    pair.run_until(lambda: stopped.called, 2.0)
    del pair.instances[pair.key(PRIMARY)]
    assert pair.states()[pair.key(BACKUP)] == role.ACTIVE_ALONE
    assert depth(backup) == 5
    [failover] = ha_events(backup, "ha.failover")
    assert (failover["from"], failover["to"], failover["kind"]) == (PRIMARY, BACKUP, "handover")


def test_a_stale_instance_never_activates_unless_forced(pair):
    primary, backup = start_both(pair)
    pair.mesh.partition(pair.key(BACKUP))
    sends = send(primary, 3)
    pair.run_until(lambda: all(d.called for d in sends), 10.0)  # confirmed alone
    pair.kill(BACKUP)
    pair.kill(PRIMARY)
    backup = pair.start(BACKUP)  # lacks what the primary confirmed alone
    pair.mesh.run(10.0)
    assert backup.router is None and pair.states()[pair.key(BACKUP)] == role.STARTING
    pair.kill(BACKUP)
    data_dir = str(pair.tmp_path / pair.key(BACKUP).replace("/", "-"))
    records.record_forced_activation(data_dir, records.ForcedActivation("op@host", 0.0))
    backup = pair.start(BACKUP)
    pair.run_until(lambda: serving(backup), 1.0)
    pair.mesh.run(10.0)  # its lease holds: the voters learn its epoch
    assert pair.states()[pair.key(BACKUP)] == role.ACTIVE_ALONE
    assert backup.role.epoch == 4  # above the epoch 3 it knew of
    assert [(e["step"], e["epoch"]) for e in ha_events(backup, "ha.force-activate")] == [
        ("activated", 4)]


def took_over_from_the_primary(pair, **ha) -> tuple[HAInstance, list]:
    """
    The primary dies, the backup (started with C{ha}) serves alone and
    confirms sends; the primary returns.
    """
    pair.start(PRIMARY)
    backup = pair.start(BACKUP, **ha)
    pair.run_until(lambda: pair.states().get(pair.key(BACKUP)) == role.BACKUP_IN_SYNC, 15.0)
    pair.kill(PRIMARY)
    pair.run_until(lambda: serving(backup), FAILOVER_BOUND)
    sends = send(backup, 10)
    pair.run_until(lambda: all(d.called for d in sends), 5.0)
    return pair.start(PRIMARY), sends


def test_without_failback_the_backup_stays_active(pair):
    primary, _ = took_over_from_the_primary(pair, allow_failback=False)
    pair.run_until(lambda: pair.states() == {
        pair.key(PRIMARY): role.BACKUP_IN_SYNC, pair.key(BACKUP): role.ACTIVE_REPLICATED}, 20.0)
    pair.mesh.run(10.0)
    assert pair.states() == {pair.key(PRIMARY): role.BACKUP_IN_SYNC,
                             pair.key(BACKUP): role.ACTIVE_REPLICATED}


class RawClient(Protocol):
    """
    A client connection that keeps what the router wrote and whether it
    was closed.
    """

    def connectionMade(self):
        self.data = b""
        self.closed = False

    def dataReceived(self, data):
        self.data += data

    def connectionLost(self, reason=None):
        self.closed = True

    def frames(self) -> list:
        return FrameDecoder(frames=f.FROM_ROUTER).feed(self.data)


def test_an_active_that_stops_serving_sends_its_clients_away_not_active(pair):
    """
    The router of an active period stops (here: a hand-over at a graceful
    stop): its client connections are told C{not-active} and closed at
    once, so that clients fail over (a send in flight is unblocked, and
    retried with its duplicate id), instead of staying attached to a
    router whose store is closed.
    """
    primary, backup = start_both(pair)
    connecting = pair.mesh.network._connect("a-client", "clients-primary",
                                            Factory.forProtocol(RawClient))
    client = connecting.result
    client.transport.write(encode(f.Open([3], "shop-7", "", 60000)))
    pair.mesh.network.flush()
    assert [type(frame) for frame in client.frames()] == [f.OpenedWithTopology]
    stopped = pair.instances.pop(pair.key(PRIMARY)).stopService()
    pair.run_until(lambda: client.closed, 1.0, step=0.01)
    error = client.frames()[-1]
    assert (type(error), error.command_id, error.code) == (f.Error, 0, f.NOT_ACTIVE)
    pair.run_until(lambda: stopped.called, 2.0)



def test_failback_waits_until_the_primary_has_what_the_backup_confirmed_alone(pair):
    """
    Sends the backup confirmed while serving alone, after the returning
    primary said it was in sync and before the backup readmitted it,
    reach the primary before the backup hands the router back: here the
    stream to the primary is paused meanwhile (its transport's buffer is
    full, say), and the hand-over waits for the primary's acknowledgement.
    """
    pair.start(PRIMARY)
    backup = pair.start(BACKUP)
    pair.run_until(lambda: pair.states().get(pair.key(BACKUP)) == role.BACKUP_IN_SYNC, 15.0)
    pair.kill(PRIMARY)
    pair.run_until(lambda: serving(backup), FAILOVER_BOUND)
    server = backup.replication.server
    caught_up, sends, paused = server.peer_caught_up, [], []

    def sends_then_caught_up() -> None:
        # Before the backup acts on the news, it confirms 3 more sends
        # alone, which the paused stream does not bring the primary yet.
        paused.extend(server._feeds)
        for feed in paused:
            feed.pause()
        sends.extend(send(backup, 3))
        server.peer_caught_up = caught_up
        caught_up()

    server.peer_caught_up = sends_then_caught_up
    primary = pair.start(PRIMARY)
    pair.run_until(lambda: paused, 10.0)
    assert all(d.called for d in sends)  # confirmed alone
    pair.mesh.run(0.2)
    for feed in paused:
        feed.resume()
    pair.run_until(lambda: serving(primary), 10.0)
    assert depth(primary) == 3


def test_the_returning_primary_catches_up_and_the_backup_hands_the_router_back(pair):
    primary, backup = start_both(pair)
    pair.kill(PRIMARY)
    pair.run_until(lambda: serving(backup), FAILOVER_BOUND)
    sends = send(backup, 7)
    pair.run_until(lambda: all(d.called for d in sends), 1.0)
    primary = pair.start(PRIMARY)
    pair.run_until(lambda: pair.states() == {
        pair.key(PRIMARY): role.ACTIVE_REPLICATED, pair.key(BACKUP): role.BACKUP_IN_SYNC}
        and serving(primary), 20.0)
    assert depth(primary) == 7
    assert pair.stopped == []


def reported_epochs(pair, follower: HAInstance, active: HAInstance) -> tuple[int, int]:
    """
    Run until C{follower} is in sync with C{active} and holds its store's
    head (the start record of its epoch with it); then the epochs both
    report (C{GET /api/v1/ha}).
    """
    pair.run_until(lambda: serving(active)
                   and follower.ha_status().state == role.BACKUP_IN_SYNC
                   and follower.replication.position().position
                   == active.replication.position().position, 20.0)
    return follower.ha_status().describe()["epoch"], active.ha_status().describe()["epoch"]


def test_a_backup_in_sync_reports_the_epoch_of_the_active_it_follows(pair):
    """
    Through the pair's life (start-up, the returning primary after a
    failover, the backup after the failback), the instance in sync reports
    the epoch the active serves in; the one it last served in itself is
    its C{served_epoch}.
    """
    primary, backup = start_both(pair)
    assert reported_epochs(pair, backup, primary) == (2, 2)
    assert backup.ha_status().served_epoch == 0
    pair.kill(PRIMARY)
    pair.run_until(lambda: serving(backup), FAILOVER_BOUND)
    primary = pair.start(PRIMARY)
    followed, served = reported_epochs(pair, primary, backup)
    assert followed == served in (3, 4)  # run alone, or readmitted
    assert reported_epochs(pair, backup, primary) == (5, 5)
    assert backup.ha_status().served_epoch == 4


def test_without_restart_backup_the_backup_stops_after_handing_back(pair):
    primary = pair.start(PRIMARY)
    backup = pair.start(BACKUP, restart_backup=False)
    pair.run_until(lambda: serving(primary) and pair.states()[pair.key(BACKUP)]
                   == role.BACKUP_IN_SYNC, 15.0)
    pair.kill(PRIMARY)
    pair.run_until(lambda: serving(backup), FAILOVER_BOUND)
    primary = pair.start(PRIMARY)
    pair.run_until(lambda: pair.stopped == [pair.key(BACKUP)], 20.0)
    pair.run_until(lambda: serving(primary), 1.0)


def consumer_on_router_c(pair) -> "Consumer":
    """
    Start router-c, dialling the pair's primary then its backup, with a
    consumer on its queue C{far}.
    """
    base = pair.mesh.config("router-c", connect_to=[ROUTER])
    (connector,) = base.connectors
    config = dataclasses.replace(base, connectors=(dataclasses.replace(
        connector, endpoint=(pair.key(PRIMARY), pair.key(BACKUP))),))
    return Consumer(pair.mesh.start(config), "far")


def test_a_neighbour_s_consumer_gets_every_message_once_across_a_failover(pair):
    """
    router-c dials both instances (an endpoint list); messages sent on
    router-b to a queue on router-c are confirmed on the primary while c
    is cut off (held in b's outbox, replicated), the primary dies, and
    the backup forwards them and the next ones: c's consumer gets each
    one once.
    """
    consumer = consumer_on_router_c(pair)
    primary, backup = start_both(pair)
    pair.run_until(lambda: "router-c" in primary.router.describe_routes(), 5.0)
    pair.mesh.partition("router-c")
    engine = primary.router.engine
    first = [engine.submit("far@router-c", b"%d" % i, {}, True) for i in range(30)]
    pair.run_until(lambda: all(d.called for d in first), 5.0)
    assert consumer.received == []
    pair.kill(PRIMARY)
    pair.mesh.heal("router-c")
    pair.run_until(lambda: serving(backup), FAILOVER_BOUND)
    # c moves its link to the new active (the next endpoint of its list).
    pair.run_until(lambda: "router-c" in backup.router.describe_routes(), 2.0)
    engine = backup.router.engine
    rest = [engine.submit("far@router-c", b"%d" % i, {}, True) for i in range(30, 50)]
    pair.run_until(lambda: all(d.called for d in rest) and len(consumer.received) >= 50, 10.0)
    pair.mesh.run(5.0)
    assert sorted(int(body) for body in consumer.bodies) == list(range(50))


def test_a_frozen_active_woken_up_confirms_nothing_once_its_lease_ran_out(pair):
    """
    SIGSTOP, in memory: time passes and none of the primary's timers run;
    when it wakes, the backup's acknowledgements of its last sends are
    read before its overdue lease timer runs.  Its lease ran out by its
    own clock meanwhile (the backup may be serving already): it must not
    confirm them (docs/ha.md, "The lease").
    """
    primary, backup = start_both(pair)
    sends = send(primary, 5)  # committed, on their way to the backup
    assert not any(d.called for d in sends)
    pair.clock.rightNow += (LEASE_MS + HEARTBEAT_MS) / 1000  # frozen: no timer runs
    pair.mesh.network.flush()  # woken: the backup's acknowledgements arrive first
    assert primary.replication.lag() == 0  # acknowledged...
    assert not any(d.called for d in sends)  # ...and still not confirmed
    pair.run_until(lambda: pair.states()[pair.key(PRIMARY)] != role.ACTIVE_REPLICATED, 1.0)
    assert not any(d.called for d in sends)


def test_the_new_active_takes_sends_to_a_router_the_old_one_knew_before_its_links_are_up(
        pair):
    """
    router-c, known to the primary, is cut off when the primary dies: the
    backup, serving with no link to c yet, takes a send to c into its
    backlog (the names heard of are in the replicated store), not
    C{unknown-router}, and forwards it once c's link is up.
    """
    consumer = consumer_on_router_c(pair)
    primary, backup = start_both(pair)
    pair.run_until(lambda: "router-c" in primary.router.describe_routes(), 5.0)
    pair.mesh.partition("router-c")
    pair.kill(PRIMARY)
    pair.run_until(lambda: serving(backup), FAILOVER_BOUND)
    assert "router-c" not in backup.router.describe_routes()
    sent = backup.router.engine.submit("far@router-c", b"0", {}, True)
    pair.run_until(lambda: sent.called, 2.0)
    outcome = []
    sent.addBoth(outcome.append)
    assert isinstance(outcome[0], str), outcome[0]  # its message id: taken
    pair.mesh.heal("router-c")
    pair.run_until(lambda: consumer.bodies == [b"0"], 10.0)


def test_a_backup_that_caught_up_while_the_active_ran_alone_is_not_promotable(pair):
    """
    A backup that caught up during the primary's alone epoch, but was not
    yet readmitted in a replicated epoch, holds only part of that epoch:
    the voters know what was confirmed in it only as of the primary's
    last heartbeat.  If the primary dies in that window with sends
    confirmed since its last heartbeat that the backup lacks, the backup
    must not take over without them (docs/ha.md "Epochs").
    """
    primary, _ = start_both(pair)
    pair.kill(BACKUP)
    pair.run_until(lambda: pair.states()[pair.key(PRIMARY)] == role.ACTIVE_ALONE, 10.0)
    server = primary.replication.server
    server.peer_caught_up = lambda: None  # the primary never readmits it
    backup = pair.start(BACKUP)
    pair.run_until(lambda: pair.states()[pair.key(BACKUP)] == role.BACKUP_IN_SYNC, 20.0)
    pair.mesh.run(1.0)  # heartbeats report everything the backup holds as confirmed
    for feed in list(server._feeds):
        feed.pause()
    sends = send(primary, 5)
    assert all(d.called for d in sends)  # confirmed alone, not yet reported
    pair.kill(PRIMARY)
    pair.mesh.run(2 * FAILOVER_BOUND)
    assert not serving(backup)
    assert backup.replication.position() < primary.replication.position()


def test_a_backup_that_missed_the_active_s_last_epoch_takes_over_within_the_bound(pair):
    """
    The active won a new epoch with the witness's grant and died before
    its backup heard of it (no request, no heartbeat of that epoch reached
    the backup's own voter): the backup's first request, for that same
    epoch, is refused stale-epoch by the witness, which loses the
    election at once (no waiting for the dead active's vote); the backup
    asks who is active, then above that epoch, and serves within the
    bound.
    """
    primary, backup = start_both(pair)
    pair.mesh.run(0.5)
    witness = pair.witness_router.witness._groups[ROUTER].voter
    record = witness.record
    taken = record.granted_epoch + 1
    witness.record = dataclasses.replace(record, granted_epoch=taken,
                                         granted_to=pair.key(PRIMARY))
    pair.kill(PRIMARY)
    took = 2.0 + pair.run_until(lambda: serving(backup), 2 * FAILOVER_BOUND)
    assert backup.role.epoch > taken
    assert took <= FAILOVER_BOUND


def test_an_instance_handed_the_router_to_run_alone_readmits_its_returning_peer(pair):
    """
    The backup readmitted the returning primary (a replicated epoch) and
    handed the router back to it (failback); the primary then stops
    (SIGTERM) and hands the backup an epoch to run alone.  When the
    primary returns and catches up, the backup asks for a replicated
    epoch again: its earlier readmission, long over, does not count.
    """
    primary, backup = start_both(pair)
    pair.kill(PRIMARY)
    pair.run_until(lambda: serving(backup), FAILOVER_BOUND)
    primary = pair.start(PRIMARY)
    pair.run_until(lambda: serving(primary) and pair.states()[pair.key(BACKUP)]
                   == role.BACKUP_IN_SYNC, 20.0)
    stopped = primary.stopService()
    pair.run_until(lambda: serving(backup), 1.0, step=0.01)
    pair.run_until(lambda: stopped.called, 2.0)
    del pair.instances[pair.key(PRIMARY)]
    assert pair.states()[pair.key(BACKUP)] == role.ACTIVE_ALONE
    pair.start(PRIMARY)
    pair.run_until(lambda: pair.states()[pair.key(BACKUP)] == role.ACTIVE_REPLICATED, 20.0)


def test_a_backup_whose_requests_cross_the_witness_s_idle_closes_takes_over(pair):
    """
    The primary dies a second after start-up: the backup's vote
    connection to the witness, idle since, is closed by the witness
    (stage-valid-timeout) at the very instant each of the backup's vote
    requests goes out on it.  A request lost so is asked again on the
    next connection: the backup serves within the bound, not stuck in
    C{starting} asking for epoch after epoch.
    """
    primary, backup = start_both(pair)
    pair.mesh.run(1.0)
    pair.kill(PRIMARY)
    took = 2.0 + pair.run_until(lambda: serving(backup), FAILOVER_BOUND)
    assert took <= FAILOVER_BOUND


# -- a mistyped group-name ------------------------------------------------------

TYPO = f"{ROUTER}-typo"


def run_watching(pair: Pair, seconds: float) -> None:
    """
    Run the mesh for C{seconds}, checking at every step that at most one
    instance serves.
    """
    end = pair.clock.seconds() + seconds
    while pair.clock.seconds() < end:
        pair.mesh.run(0.05)
        assert sum(serving(i) for i in pair.instances.values()) <= 1, pair.states()


def test_an_instance_of_another_group_is_refused_and_never_serves_beside_the_active(pair):
    """
    The backup's group-name is mistyped: the active primary refuses it
    and goes on serving alone; the backup, refused, never activates (it
    waits, and says why in its status), not even once the primary is
    killed: it holds none of what the primary confirmed.
    """
    primary = pair.start(PRIMARY)
    pair.run_until(lambda: serving(primary), 15.0)
    backup = pair.start(BACKUP, group_name=TYPO)
    run_watching(pair, 4 * LEASE_MS / 1000)
    assert serving(primary) and primary.role.state == role.ACTIVE_ALONE
    assert backup.role.state == role.STARTING
    for instance in (primary, backup):
        refusal = instance.ha_status().describe()["peer"]["refusal"]
        assert refusal.startswith("group-mismatch: ") and repr(ROUTER) in refusal
        assert repr(TYPO) in refusal
    pair.kill(PRIMARY)
    run_watching(pair, 4 * LEASE_MS / 1000)
    assert not serving(backup)


def test_two_instances_of_two_groups_started_together_never_serve_at_once(pair):
    pair.start(PRIMARY)
    pair.start(BACKUP, group_name=TYPO)
    run_watching(pair, 6 * LEASE_MS / 1000)
    assert all(i.ha_status().peer.refusal for i in pair.instances.values())


def test_a_mended_group_name_pairs_again(pair):
    """
    The operator mends the backup's configuration and restarts it: it
    pairs, follows in sync, and the primary's refusal is over.
    """
    primary = pair.start(PRIMARY)
    pair.run_until(lambda: serving(primary), 15.0)
    pair.start(BACKUP, group_name=TYPO)
    run_watching(pair, 2 * LEASE_MS / 1000)
    pair.kill(BACKUP)
    backup = pair.start(BACKUP)
    pair.run_until(lambda: pair.states()[pair.key(BACKUP)] == role.BACKUP_IN_SYNC, 15.0)
    assert primary.ha_status().peer.refusal is None
    assert backup.ha_status().peer.refusal is None


def test_a_durable_topic_subscription_fails_over_with_what_it_collected(pair):
    primary, backup = start_both(pair)
    subscribed = []
    primary.router.engine.topics.subscribe("t.#", lambda delivery: None, 0,
                                           client_id="app", durable="sub").addCallback(
        subscribed.append)
    pair.run_until(lambda: bool(subscribed), 5.0)
    subscribed[0].cancel()
    engine = primary.router.engine
    sends = [engine.submit("topic:t.x", b"%d" % i, {}, True) for i in range(10)]
    pair.run_until(lambda: all(d.called for d in sends), 5.0)
    pair.mesh.run(0.5)
    pair.kill(PRIMARY)
    pair.run_until(lambda: serving(backup), FAILOVER_BOUND)
    queue = "$durable:app:sub"
    pair.run_until(lambda: backup.router.engine.topics.durable.get(queue) is not None, 5.0)
    consumer = Consumer(backup.router, queue)
    pair.run_until(lambda: len(consumer.received) == 10, 5.0)
    assert consumer.bodies == [b"%d" % i for i in range(10)]
    # The backup took the subscription up: it advertises its interest.
    assert backup.router.engine.interest.local.advertised == {("t", "#")}


def test_a_retained_message_fails_over_with_the_store(pair):
    primary, backup = start_both(pair)
    engine = primary.router.engine
    sends = [engine.submit("topic:t.x", b"kept", {"x-retain": "true"}, True),
             engine.submit("topic:t.y", b"", {"x-retain": "true"}, True)]
    pair.run_until(lambda: all(d.called for d in sends), 5.0)
    pair.mesh.run(0.5)
    pair.kill(PRIMARY)
    pair.run_until(lambda: serving(backup), FAILOVER_BOUND)
    retained = backup.router.engine.retained
    pair.run_until(lambda: "t.x" in retained.table.entries, 5.0)
    assert retained.table.entries["t.x"].body == b"kept"
    assert retained.table.entries["t.y"].cleared
    given = []
    backup.router.engine.topics.subscribe("t.#", given.append, 10, retained="all")
    pair.mesh.run(0.5)
    assert [delivery.message.body for delivery in given] == [b"kept"]


def test_an_active_whose_store_fails_a_commit_it_sent_stops_serving_and_the_pair_agrees_again(
        pair, observe_errors):
    """
    A batch goes to the backup before the active's own COMMIT returns
    (docs/ha.md, "Shipping before the commit").  When that COMMIT fails,
    the backup may hold a change the active lacks: the active stops
    serving (C{store-failed}) instead of committing another change at
    the same position, and its callers are never answered.  Whichever
    instance the voters let serve next, the other follows it, and the two
    stores agree again (the unconfirmed change is on both, or on
    neither).
    """
    primary, backup = start_both(pair)
    executor = primary.router.store.executor
    # A deferred foreign key fails at COMMIT on the primary, whose
    # connection checks foreign keys; the backup's does not.
    executor.run(lambda connection: connection.execute("PRAGMA foreign_keys = ON"))

    def create(connection) -> None:
        connection.execute("CREATE TABLE parent (id INTEGER PRIMARY KEY)")
        connection.execute("CREATE TABLE child (parent INTEGER REFERENCES parent (id) "
                           "DEFERRABLE INITIALLY DEFERRED)")

    tables = executor.submit(create)
    pair.run_until(lambda: tables.called, 5.0)
    failing = executor.submit(
        lambda connection: connection.execute("INSERT INTO child VALUES (7)"))
    pair.run_until(lambda: pair.states().get(pair.key(PRIMARY)) != role.ACTIVE_REPLICATED, 1.0)
    [fenced] = ha_events(primary, "ha.fenced")
    assert fenced["reason"] == "store-failed"
    pair.run_until(lambda: sorted(pair.states().values()) == [
        role.ACTIVE_REPLICATED, role.BACKUP_IN_SYNC], 20.0)
    assert not failing.called
    active = primary if serving(primary) else backup
    follower = backup if active is primary else primary
    rows = active.router.store.executor.submit(
        lambda connection: connection.execute("SELECT parent FROM child").fetchall())
    pair.run_until(lambda: rows.called, 5.0)
    held = rows.result
    assert held in ([], [(7,)])
    active.router.store.executor.submit(lambda connection: connection.execute(
        "INSERT INTO parent VALUES (1)"))
    pair.run_until(lambda: follower.replication.position() == active.replication.position(), 5.0)
    with sqlite3.connect(follower.replication.replica.path) as connection:
        assert connection.execute("SELECT parent FROM child").fetchall() == held
    assert len(observe_errors.take(lambda event: "could not commit" in event["log_format"])) == 1
