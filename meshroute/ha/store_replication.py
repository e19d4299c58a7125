"""
An HA instance's replication over its C{store.db}: the
L{meshroute.ha.instance.ReplicationSide} that a real instance runs.

While the instance does not serve, C{store.db} is its L{Replica}, which
the follower fills from the active.  While it serves, C{store.db} is its
router's store, whose executor hands every transaction to this side
(C{replication=}): the L{ReplicationGate} confirms it when its mode
allows, after the L{ReplicationSource} took its batch for the followers
the L{ReplicationServer} feeds.  What the gate confirmed is what the
active's heartbeats report as confirmed.
"""

import os
import re
from collections.abc import Callable

from twisted.internet import defer
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger
from zope.interface import implementer

from meshroute.ha.epoch_starts import start_epoch
from meshroute.ha.feed import ReplicationServer
from meshroute.ha.follower import INCOMING_SNAPSHOT_PREFIX, ReplicationFollower
from meshroute.ha.gate import HELD, REPLICATED, ReplicationGate
from meshroute.ha.instance import stage_valid_timeout_ms
from meshroute.ha.replica import STORE_NAME, Replica
from meshroute.ha.source import SNAPSHOT_PREFIX, ReplicationSource
from meshroute.harules.quorum import ORIGIN, LogPosition, instance_name
from meshroute.interfaces import ICommitGate
from meshroute.link.context import RouterContext
from meshroute.link.registry import LinkRegistry
from meshroute.link.retry import RetrySchedule
from meshroute.link.rotation import EndpointRotation
from meshroute.link.settings import ConnectorSettings
from meshroute.router.settings import RouterConfig
from meshroute.store.writers import store_executor

log = Logger()

#: The files of a snapshot an earlier run was sending or receiving.
_LEFT_SNAPSHOT = re.compile(
    rf"({re.escape(SNAPSHOT_PREFIX)}|{re.escape(INCOMING_SNAPSHOT_PREFIX)})"
    r"[^/]*\.db(-journal|-wal|-shm)?\Z")


@implementer(ICommitGate)
class _Confirming:
    """
    What the serving store's executor hands its transactions to: the
    gate, noting each batch it confirms, and confirming nothing at all
    while the lease is not held by the clock (an active woken from
    SIGSTOP may commit before its overdue expiry timer fences it; what
    it does not confirm then, it never does: its router stops).  A batch
    sent to the backup that the store then failed to commit calls
    C{store_failed()}: the instance must stop serving (L{meshroute.ha.gate}).
    """

    def __init__(self, gate: ReplicationGate, confirmed: Callable[[LogPosition], None],
                 lease_holds: Callable[[], bool], store_failed: Callable[[], None]) -> None:
        self._gate = gate
        self._confirmed = confirmed
        self._lease_holds = lease_holds
        self._store_failed = store_failed

    @property
    def epoch(self) -> int:
        return self._gate.epoch

    def prepared(self, batch) -> None:
        self._gate.prepared(batch)

    def abandoned(self, batch) -> None:
        log.critical("HA: the store could not commit change {position}, which may already be "
                     "on the backup; this instance stops serving", position=batch.position)
        self._gate.abandoned(batch)
        self._store_failed()

    def committed(self, batch, fire) -> None:
        def confirm() -> None:
            if not self._lease_holds():
                return
            if batch is not None:
                self._confirmed(LogPosition(batch.epoch, batch.position))
            fire()

        self._gate.committed(batch, confirm)


class _DeadlinedServer(ReplicationServer):
    """
    A L{ReplicationServer} that gives each follower
    C{initial-replication-sync-timeout} to catch up: the active confirms
    alone meanwhile (no write waits for a catching-up backup), and a
    follower that is not in sync by then has its connection closed, to
    start again (from the log, or a new snapshot) rather than stay
    behind for ever.
    """

    def __init__(self, clock: IReactorTime, timeout_ms: int) -> None:
        super().__init__(lambda: None, lambda: None)
        self.connected: Callable[[], None] = lambda: None
        self._clock = clock
        self._timeout = timeout_ms / 1000
        self._deadlines: dict = {}

    def feed(self, core, fail):
        feed = super().feed(core, fail)
        self.connected()
        self._deadlines[feed] = self._clock.callLater(self._timeout, self._too_slow, feed)
        return feed

    def _too_slow(self, feed) -> None:
        del self._deadlines[feed]
        log.warn("HA: the backup did not catch up within initial-replication-sync-timeout "
                 "({timeout} s); its replication connection is closed, and it starts again",
                 timeout=self._timeout)
        feed.link.shutdown()

    def caught_up(self) -> None:
        """
        A follower is in sync: no deadline for it any more.
        """
        for deadline in self._deadlines.values():
            if deadline.active():
                deadline.cancel()
        self._deadlines.clear()

    def forget(self, feed) -> None:
        deadline = self._deadlines.pop(feed, None)
        if deadline is not None and deadline.active():
            deadline.cancel()
        super().forget(feed)


class StoreReplication:
    """
    The replication side of the instance whose data dir is C{data_dir}.

    @ivar server: the L{ReplicationServer} its replication listener
        serves followers with.
    """

    def __init__(self, reactor: IReactorTime, config: RouterConfig, endpoints, events,
                 registry: LinkRegistry, executor_factory=None) -> None:
        """
        @param config: the instance's configuration (its C{[ha]} and
            data dir).
        @param endpoints: turns endpoint strings into endpoints.
        @param events: the instance's event log.
        @param registry: the instance's connections.
        @param executor_factory: makes an unstarted store executor, given
            its C{replication} (None for the replica's): a
            the one C{[store] writer} names, on C{reactor}, by default.
        """
        ha = config.ha
        self._reactor = reactor
        self._config = config
        self._endpoints = endpoints
        self._events = events
        self._registry = registry
        self._path = os.path.join(config.data_dir, STORE_NAME)
        self._instance = instance_name(config.name, ha.role)
        self._executor_factory = executor_factory or (
            lambda replication=None: store_executor(config.store, reactor,
                                                    replication=replication))
        self.replica = Replica(config.data_dir, self._executor_factory, ha.replica_sync,
                               ha.max_saved_replicated_journals_size)
        self.server = _DeadlinedServer(reactor, ha.initial_replication_sync_timeout_ms)
        self._follower: ReplicationFollower | None = None
        self._replica_open = False
        self._held = ORIGIN
        self._held_epoch = 0
        self._start: tuple[int, bool] | None = None
        self._store_id = ""
        self._source: ReplicationSource | None = None
        self._executor = None
        self._gate: ReplicationGate | None = None
        self._confirmed = ORIGIN
        # The source's head once the start record of the replicated
        # epoch served in now was confirmed: a peer that acknowledged it
        # holds that record (None: not yet, or the epoch runs alone).
        self._begun: int | None = None

    # -- store.db ----------------------------------------------------------

    def remove_left_snapshots(self) -> None:
        """
        Delete the snapshot files an earlier run left in the data dir: one
        this instance was sending as the active, or receiving as the
        backup, when it was killed.  Nothing reads them again, and each
        is as large as the store.  SQLite's files beside them
        (C{-journal}, C{-wal}, C{-shm}) go too.  Call it once, at start,
        holding the data dir.  A file that cannot be deleted is logged,
        and left: it costs room, not correctness.
        """
        directory = self._config.data_dir
        for name in sorted(os.listdir(directory)):
            if not _LEFT_SNAPSHOT.match(name):
                continue
            path = os.path.join(directory, name)
            try:
                size = os.path.getsize(path)
                os.unlink(path)
            except OSError as e:
                log.warn("cannot delete {path}, a snapshot an earlier run left: {why}",
                         path=path, why=e.strerror or e)
                continue
            log.info("deleted {path} ({size} bytes), a snapshot an earlier run left",
                     path=path, size=size)

    def open_replica(self) -> defer.Deferred:
        opening = self.replica.open()
        opening.addCallback(self._replica_opened)
        return opening

    def _replica_opened(self, position: LogPosition) -> None:
        self._replica_open = True
        self._held = position
        self._held_epoch = self._replica_epoch()

    def _replica_epoch(self) -> int:
        return self.replica.epoch_starts().newest_naming(self._instance)

    def close_replica(self) -> defer.Deferred:
        """
        Close the replica and hold its position for the active period
        that may follow.  The position is read once the replica has
        closed: a batch submitted before (the last one the active sent
        before handing over) may still be committing, and the position
        moves only when its Deferred fires.  Read before, it would lag
        the store by that batch, and the retained log of the next active
        period would start behind the store: the period's first commit
        would not follow it, and no follower could catch up.
        """
        if not self._replica_open:
            return defer.succeed(None)
        closing = self.replica.close()
        closing.addCallback(self._replica_closed)
        return closing

    def _replica_closed(self, _) -> None:
        if self._replica_open:
            self._replica_open = False
            self._held = self.replica.position()
            self._held_epoch = self._replica_epoch()
            self._store_id = self.replica.store_id

    # -- where the data stands -------------------------------------------------

    def position(self) -> LogPosition:
        """
        This instance's position in a vote (docs/ha.md "Epochs"): the
        last change it holds, and the newest epoch in which its data was
        complete: the epoch it serves in, or else the newest epoch whose
        start record names it (a backup that caught up while the active
        ran alone holds that epoch's changes, not that epoch).
        """
        if self._source is not None:
            return LogPosition(self._gate.epoch, self._gate.committed_head.position)
        if self._replica_open:
            return LogPosition(self._replica_epoch(), self.replica.position().position)
        return LogPosition(self._held_epoch, self._held.position)

    def followed_epoch(self) -> int:
        """
        The epoch of the newest change C{store.db} holds.  Every epoch
        opens with its start record, so on a backup that holds the
        active's head it is the epoch the active serves in; until then,
        the epoch it last followed (or served) in.  (L{position} may name
        an older epoch: only one whose start record names this instance.)
        """
        if self._source is not None:
            return self._source.head.epoch
        if self._replica_open:
            return self.replica.position().epoch
        return self._held.epoch

    def confirmed(self) -> LogPosition:
        return self._confirmed

    def lag(self) -> int | None:
        if self._gate is None or self._gate.mode != REPLICATED:
            return None
        return self._source.head.position - self._gate.acknowledged_position

    def peer_position(self) -> LogPosition | None:
        """
        The peer's position as this active knows it: the replicated epoch
        it serves in and the newest change the peer acknowledged, once
        the peer acknowledged that epoch's start record (which names it
        in sync), else None.  The start record comes after everything
        this active confirmed alone, and what follows it is confirmed
        only once the peer acknowledged it: a peer that holds it holds
        everything this active ever confirmed.
        """
        gate = self._gate
        if gate is None or gate.mode != REPLICATED or self._begun is None:
            return None
        if gate.acknowledged_position < self._begun:
            return None
        return LogPosition(gate.epoch, gate.acknowledged_position)

    # -- serving ---------------------------------------------------------------

    def serve_in(self, epoch: int, alone: bool) -> None:
        """
        Tag what is committed from now on with C{epoch}.  Every epoch
        starts with a change of its own, its start record, which says
        whether it runs C{alone} or replicated: a backup that holds it is
        named in sync in that epoch only when it runs replicated.  (The
        first epoch of an active period starts once the router's store
        is up: L{lead}.)
        """
        if self._gate is None:
            head = self._held
            self._confirmed = head
            self._source = ReplicationSource(self._reactor, self._path, self._store_id, head,
                                             keep_free=self._config.store.min_free_disk)
            self._gate = ReplicationGate(self._source, epoch, HELD)
            self._start = (epoch, alone)
            return
        self._gate.epoch = epoch
        self._begin_epoch(epoch, alone)

    def _begin_epoch(self, epoch: int, alone: bool) -> None:
        self._begun = None
        starting = self._executor.submit(start_epoch, epoch, self._instance, alone)
        if not alone:
            starting.addCallback(self._epoch_begun, epoch, self._source)
        starting.addErrback(self._epoch_not_begun, epoch)

    def _epoch_begun(self, _, epoch: int, source: ReplicationSource) -> None:
        """
        The start record of the replicated C{epoch} is committed and
        confirmed: the source's head is at or past it.  (Confirmed
        replicated, the peer acknowledged it already; written while the
        gate still confirmed alone, a readmission's, not necessarily.)
        """
        if self._source is source and self._gate.epoch == epoch:
            self._begun = source.head.position

    def _epoch_not_begun(self, failure, epoch: int) -> None:
        log.failure("HA: cannot write the start of epoch {epoch}", failure, epoch=epoch)

    def executor(self, lease_holds: Callable[[], bool], store_failed: Callable[[], None]):
        self._executor = self._executor_factory(
            replication=_Confirming(self._gate, self._note_confirmed, lease_holds, store_failed))
        return self._executor

    def _note_confirmed(self, position: LogPosition) -> None:
        self._confirmed = max(self._confirmed, position)

    def confirm(self, alone: bool) -> None:
        if alone:
            self._gate.run_alone()
        else:
            self._gate.run_replicated()

    def hold(self) -> None:
        self._gate.hold_acknowledgements()

    def lead(self, connected, caught_up, heard) -> None:
        def in_sync() -> None:
            self.server.caught_up()
            caught_up()

        self.server.connected = connected
        self.server.peer_caught_up = in_sync
        self.server.peer_heard = heard
        self.server.serve(self._source, self._gate)
        start, self._start = self._start, None
        if start is not None:
            self._begin_epoch(*start)

    def stop_leading(self) -> None:
        """
        Stop feeding followers; what the gate still holds is never
        confirmed (the router stops with it).
        """
        self.server.stop()
        if self._gate is not None:
            self._gate.hold_acknowledgements()
            # What the store committed (the source may hold a batch sent
            # before a commit that failed).
            self._held = self._gate.committed_head
            self._held_epoch = self._gate.epoch
        self._source = self._gate = self._start = self._begun = None

    # -- following ---------------------------------------------------------------

    def follow(self, caught_up, heard) -> None:
        """
        Follow the active over a replication connection to the peer's
        replication listener, dialled again each heartbeat-interval while
        down.
        """
        ha = self._config.ha
        context = RouterContext(name=self._config.name, clock=self._reactor,
                                events=self._events, registry=self._registry, engine=None,
                                group=ha.group_name)
        peer = ha.replication.peer
        self._follower = ReplicationFollower(
            context, ConnectorSettings(ha.replication.secret, self._config.name,
                                       stage_valid_timeout_ms(self._config)),
            EndpointRotation([(peer, self._endpoints.client(peer))]),
            RetrySchedule(ha.heartbeat_interval_ms, 1.0, ha.heartbeat_interval_ms, -1),
            self._reactor, self.replica, self._config.data_dir, caught_up,
            lambda: None, heard)
        self._follower.startService()

    def stop_following(self) -> defer.Deferred:
        follower, self._follower = self._follower, None
        if follower is None:
            return defer.succeed(None)
        return defer.maybeDeferred(follower.stopService)
