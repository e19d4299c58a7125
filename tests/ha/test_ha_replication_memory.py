"""
The replication connection end to end, in memory: the active's real
store behind its real gate and source, its replication listener and
server, and the backup's real replica and follower, connected through the
in-memory network of L{memory_mesh} (iosim transports; link timers on a
L{task.Clock}).  Snapshots are taken in a thread, as the source always
does, so the test runs under the reactor and polls with a deadline.

A new backup gets a snapshot of the active's store, then the batches
committed meanwhile and the live stream; it says it is in sync, and its
acknowledgements reach the gate, which confirms a send only then.
"""

import os

import pytest_twisted
from twisted.internet import reactor
from twisted.internet.task import Clock, deferLater

from meshroute.testing.memory_mesh import MemoryNetwork
from meshroute.events import EventLog
from meshroute.ha.feed import ReplicationServer
from meshroute.ha.follower import ReplicationFollower
from meshroute.ha.gate import ALONE, ReplicationGate
from meshroute.ha.listener import replication_listener
from meshroute.ha.pairing import Pairing
from meshroute.ha.replica import Replica
from meshroute.ha.source import ReplicationSource
from meshroute.harules.quorum import ORIGIN
from meshroute.link.context import RouterContext
from meshroute.link.registry import LinkRegistry
from meshroute.link.retry import RetrySchedule
from meshroute.link.rotation import EndpointRotation
from meshroute.link.settings import ConnectorSettings, ListenerSettings
from meshroute.store import InlineExecutor, SQLiteStore
from meshroute.router.witness import Witness
from support.held_records import HeldRecords
from support.replicated_stores import message, rows
from support.store_testing import ROUTER

SECRET = b"pair secret"
ADDRESS = "active:7100"


class Pair:
    """
    The active's store and replication listener, the backup's replica and
    follower, on one in-memory network.
    """

    def __init__(self, tmp_path) -> None:
        self.network = MemoryNetwork()
        clock: Clock = self.network.clock
        self.events = EventLog(str(tmp_path), ROUTER, clock)
        self.reports: list[str] = []
        active_dir = tmp_path / "active"
        active_dir.mkdir()
        path = str(active_dir / "store.db")
        # A small retained log: a replica that is not caught up by the
        # time it follows needs the snapshot.
        self.source = ReplicationSource(reactor, path, "", ORIGIN, retained_bytes=4096)
        self.gate = ReplicationGate(self.source, 1, mode=ALONE)
        self.store = SQLiteStore(path, "normal", InlineExecutor(self.gate), router=ROUTER,
                                 clock=clock, dedup_window_s=100, duplicate_id_window_s=50)
        self.server = ReplicationServer(lambda: self.reports.append("peer-caught-up"),
                                        lambda: self.reports.append("peer-heard"))
        witness = Witness(ROUTER, HeldRecords(), clock, self.events)
        listener = replication_listener(
            ROUTER, clock, self.events, LinkRegistry(), witness, self.server,
            ListenerSettings(secret=SECRET, keepalive_interval_ms=1000,
                             stage_valid_timeout_ms=5000, reject_disconnect_delay_ms=500),
            Pairing(ROUTER, ROUTER))
        self.network.endpoints("active").server(ADDRESS).listen(listener)
        self.backup_dir = str(tmp_path / "backup")
        os.mkdir(self.backup_dir)
        self.replica = Replica(self.backup_dir, InlineExecutor, sync="full")
        context = RouterContext(name=ROUTER, clock=clock, events=self.events,
                                registry=LinkRegistry(), engine=None, group=ROUTER)
        self.follower = ReplicationFollower(
            context, ConnectorSettings(secret=SECRET, expected_peer=ROUTER,
                                       stage_valid_timeout_ms=5000),
            EndpointRotation([(ADDRESS, self.network.endpoints("backup").client(ADDRESS))]),
            RetrySchedule(200, 1.0, 200, -1), clock, self.replica, self.backup_dir,
            caught_up=lambda: self.reports.append("caught-up"),
            lost=lambda: self.reports.append("lost"),
            peer_heard=lambda: self.reports.append("heard"))

    async def until(self, condition, seconds: float = 20.0) -> None:
        """
        Move the network's traffic (and let the reactor run the source's
        snapshot thread) until C{condition()} holds.
        """
        deadline = reactor.seconds() + seconds
        while True:
            self.network.flush()
            if condition():
                return
            assert reactor.seconds() < deadline, "not reached in time"
            await deferLater(reactor, 0.01, lambda: None)


@pytest_twisted.ensureDeferred
async def test_a_new_backup_gets_a_snapshot_then_the_stream_and_its_acknowledgements_confirm(
        tmp_path):
    pair = Pair(tmp_path)
    await pair.store.open()
    pair.source.store_id = pair.store.store_id
    for n in range(40):  # more than the retained log holds
        await pair.store.accept(message(n, local=n % 2 == 0))
    assert pair.source.since(0, 0) is None
    pair.server.serve(pair.source, pair.gate)
    await pair.replica.open()
    assert pair.replica.store_id != pair.store.store_id

    pair.follower.startService()
    await pair.until(lambda: "caught-up" in pair.reports)
    assert pair.replica.store_id == pair.store.store_id  # a copy of the active's store
    assert pair.replica.position() == pair.source.head
    await pair.until(lambda: "peer-caught-up" in pair.reports)
    assert not [name for name in os.listdir(pair.backup_dir) if "snapshot" in name]

    # Replicated: a send is confirmed once the backup acknowledged it.
    pair.gate.run_replicated()
    confirmed = pair.store.accept(message(100, local=True))
    assert not confirmed.called
    await pair.until(lambda: confirmed.called)
    assert pair.gate.acknowledged_position == pair.source.head.position
    assert pair.replica.position() == pair.source.head

    # And the live stream goes on, batch after batch.
    for n in range(101, 106):
        await pair.until(lambda: True)
        sending = pair.store.accept(message(n, local=False))
        await pair.until(lambda: sending.called)
    assert pair.replica.position() == pair.source.head
    assert pair.reports.count("caught-up") == 1
    assert "lost" not in pair.reports

    stopping = pair.follower.stopService()
    await pair.until(lambda: stopping.called)
    await pair.replica.close()
    await pair.store.close()
    assert rows(pair.replica.path) == rows(pair.store.path)
    pair.events.close()
