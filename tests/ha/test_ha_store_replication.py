"""
L{StoreReplication}'s pieces: its replication server gives a catching-up
backup C{initial-replication-sync-timeout}; what the store commits is
confirmed only while the lease holds; an instance that stops following
serves from the position its store holds; snapshot files an earlier run
left are deleted at start.
"""

import os
from types import SimpleNamespace

from twisted.internet.task import Clock
from twisted.logger import capturedLogs

from meshroute.ha.store_replication import StoreReplication, _Confirming, _DeadlinedServer
from meshroute.harules.quorum import LogPosition
from meshroute.harules.settings import HASettings, ReplicationSettings
from meshroute.store.changes import ChangeBatch
from meshroute.store import TurnExecutor
from meshroute.store.settings import StoreConfig


class Link:
    def __init__(self) -> None:
        self.shut = False

    def shutdown(self) -> None:
        self.shut = True


def following() -> tuple[Clock, _DeadlinedServer, Link]:
    """
    A serving server with a timeout of 30 s, and one follower's link.
    """
    clock = Clock()
    server = _DeadlinedServer(clock, 30_000)
    server.serve(object(), object())
    link = Link()
    server.feed(SimpleNamespace(send_while_open=lambda frame: None, peer="router-b", link=link),
                lambda why: None)
    return clock, server, link


def test_a_backup_not_in_sync_by_the_timeout_is_closed_to_start_again():
    clock, server, link = following()
    clock.advance(29.9)
    assert not link.shut
    clock.advance(0.1)
    assert link.shut


def test_a_backup_in_sync_in_time_keeps_its_connection():
    clock, server, link = following()
    clock.advance(10)
    server.caught_up()
    clock.advance(60)
    assert not link.shut
    assert clock.getDelayedCalls() == []


class Gate:
    """
    A gate that lets everything out at once, in epoch 3.
    """

    epoch = 3

    def committed(self, batch, fire) -> None:
        fire()


def test_nothing_is_confirmed_while_the_lease_is_not_held():
    """
    An active woken from SIGSTOP may commit before its overdue lease
    timer fences it: the lease is checked, by the clock, at each
    confirmation.
    """
    held = [True]
    confirmed, fired = [], []
    confirming = _Confirming(Gate(), confirmed.append, lambda: held[0], lambda: None)
    confirming.committed(ChangeBatch(3, 7, ()), lambda: fired.append(7))
    held[0] = False
    confirming.committed(ChangeBatch(3, 8, ()), lambda: fired.append(8))
    confirming.committed(None, lambda: fired.append("read"))
    assert fired == [7]
    assert confirmed == [LogPosition(3, 7)]


def test_an_active_period_starts_where_the_replica_ended_with_a_batch_still_committing(
        tmp_path):
    """
    A failback: the backup applies the last batch the active sent, and is
    promoted before that batch's commit has fired.  Its active period's
    retained log must start at the store's position, that batch included:
    starting one behind, the period's first commit would not follow it and
    no follower could ever catch up.
    """
    clock = Clock()
    config = instance_config(tmp_path)
    replication = StoreReplication(clock, config, endpoints=None, events=None, registry=None,
                                   executor_factory=lambda replication=None: TurnExecutor(clock))
    opened = []
    replication.open_replica().addCallback(opened.append)
    clock.advance(0)
    assert opened == [None]
    replication.replica.apply([batch(1)])
    clock.advance(0)
    replication.replica.apply([batch(2)])  # commits at the turn's end: not yet
    closed = []
    replication.close_replica().addCallback(closed.append)
    assert closed == [None]
    replication.serve_in(5, alone=False)
    assert replication.position() == LogPosition(5, 2)


def instance_config(tmp_path) -> SimpleNamespace:
    """
    What L{StoreReplication} reads of a primary's configuration.
    """
    return SimpleNamespace(name="router-b", data_dir=str(tmp_path), store=StoreConfig(),
                           ha=HASettings("primary", "router-b", ReplicationSettings(
                               "tcp:0:interface=127.0.0.1", "tcp:127.0.0.1:1",
                               "password-file")))


def batch(position: int) -> ChangeBatch:
    return ChangeBatch(4, position, (
        ("INSERT INTO meta (key, value) VALUES (?, ?)", (f"k{position}", "v")),
    ))


def test_snapshot_files_an_earlier_run_left_are_deleted_and_nothing_else(tmp_path):
    """
    An instance killed while it sent a snapshot (the active's copy) or
    received one (the backup's partial file) leaves a file as large as
    the store: the next start deletes it, and only it.
    """
    config = instance_config(tmp_path)
    replication = StoreReplication(Clock(), config, endpoints=None, events=None, registry=None)
    left = ["snapshot-k2j3.db", "snapshot-k2j3.db-journal", "incoming-snapshot-x81a.db",
            "incoming-snapshot-x81a.db-shm"]
    kept = ["store.db", "store.db-wal", "ha.db", "snapshot-notes.txt", "router.lock"]
    for name in left + kept:
        (tmp_path / name).write_bytes(b"x" * 100)
    os.mkdir(tmp_path / "oldreplica.1")
    with capturedLogs() as logged:
        replication.remove_left_snapshots()
    assert sorted(os.listdir(tmp_path)) == sorted(kept + ["oldreplica.1"])
    assert sorted(e["path"] for e in logged) == sorted(str(tmp_path / n) for n in left)
