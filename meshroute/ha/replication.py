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

from twisted.internet import defer
from twisted.internet.interfaces import IReactorTime

from meshroute.config import RouterConfig
from meshroute.ha.feed import ReplicationServer
from meshroute.ha.follower import ReplicationFollower
from meshroute.ha.gate import HELD, ReplicationGate
from meshroute.ha.instance import stage_valid_timeout_ms
from meshroute.ha.quorum import ORIGIN, LogPosition
from meshroute.ha.replica import STORE_NAME, Replica
from meshroute.ha.source import ReplicationSource
from meshroute.link.handshake import ConnectorSettings, RouterContext
from meshroute.link.registry import LinkRegistry
from meshroute.link.retry import RetrySchedule
from meshroute.link.rotation import EndpointRotation
from meshroute.store.executor import ThreadedExecutor


class _Confirming:
    """
    What the serving store's executor hands its transactions to: the
    gate, noting each batch it confirms.
    """

    def __init__(self, gate: ReplicationGate, confirmed) -> None:
        self._gate = gate
        self._confirmed = confirmed

    @property
    def epoch(self) -> int:
        return self._gate.epoch

    def committed(self, batch, fire) -> None:
        if batch is None:
            self._gate.committed(None, fire)
            return

        def confirm() -> None:
            self._confirmed(LogPosition(batch.epoch, batch.position))
            fire()

        self._gate.committed(batch, confirm)


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
            L{ThreadedExecutor} on C{reactor} by default.
        """
        ha = config.ha
        self._reactor = reactor
        self._config = config
        self._endpoints = endpoints
        self._events = events
        self._registry = registry
        self._path = os.path.join(config.data_dir, STORE_NAME)
        self._executor_factory = executor_factory or (
            lambda replication=None: ThreadedExecutor(reactor, replication=replication))
        self.replica = Replica(config.data_dir, self._executor_factory, ha.replica_sync,
                               ha.max_saved_replicated_journals_size)
        self.server = ReplicationServer(lambda: None, lambda: None)
        self._follower: ReplicationFollower | None = None
        self._replica_open = False
        self._held = ORIGIN
        self._store_id = ""
        self._source: ReplicationSource | None = None
        self._gate: ReplicationGate | None = None
        self._confirmed = ORIGIN

    # -- store.db ----------------------------------------------------------

    def open_replica(self) -> defer.Deferred:
        opening = self.replica.open()
        opening.addCallback(self._replica_opened)
        return opening

    def _replica_opened(self, position: LogPosition) -> None:
        self._replica_open = True
        self._held = position

    def close_replica(self) -> defer.Deferred:
        if not self._replica_open:
            return defer.succeed(None)
        self._replica_open = False
        self._held = self.replica.position()
        self._store_id = self.replica.store_id
        return self.replica.close()

    # -- where the data stands -------------------------------------------------

    def position(self) -> LogPosition:
        if self._source is not None:
            return self._source.head
        if self._replica_open:
            return self.replica.position()
        return self._held

    def confirmed(self) -> LogPosition:
        return self._confirmed

    def lag(self) -> int | None:
        if self._gate is None or self._gate.mode != "replicated":
            return None
        return self._source.head.position - self._gate.acknowledged_position

    # -- serving ---------------------------------------------------------------

    def serve_in(self, epoch: int) -> None:
        if self._gate is None:
            head = self._held
            self._confirmed = head
            self._source = ReplicationSource(self._reactor, self._path, self._store_id, head)
            self._gate = ReplicationGate(self._source, epoch, HELD)
        self._gate.epoch = epoch

    def executor(self):
        return self._executor_factory(
            replication=_Confirming(self._gate, self._note_confirmed))

    def _note_confirmed(self, position: LogPosition) -> None:
        self._confirmed = max(self._confirmed, position)

    def confirm(self, alone: bool) -> None:
        if alone:
            self._gate.run_alone()
        else:
            self._gate.run_replicated()

    def hold(self) -> None:
        self._gate.hold_acknowledgements()

    def lead(self, caught_up, heard) -> None:
        self.server.peer_caught_up = caught_up
        self.server.peer_heard = heard
        self.server.serve(self._source, self._gate)

    def stop_leading(self) -> None:
        """
        Stop feeding followers; what the gate still holds is never
        confirmed (the router stops with it).
        """
        self.server.stop()
        if self._gate is not None:
            self._gate.hold_acknowledgements()
            self._held = self._source.head
        self._source = self._gate = None

    # -- following ---------------------------------------------------------------

    def follow(self, caught_up, heard) -> None:
        """
        Follow the active over a replication connection to the peer's
        replication listener, dialled again each heartbeat-interval while
        down.
        """
        ha = self._config.ha
        context = RouterContext(name=self._config.name, clock=self._reactor,
                                events=self._events, registry=self._registry, engine=None)
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
