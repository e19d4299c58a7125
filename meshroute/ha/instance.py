"""
One instance of an HA pair: what C{twistd meshroute} runs for a router
with C{[ha]} (docs/ha.md).

An L{HAInstance} is always up, whatever its role: its admin endpoint, its
replication side (the replication listener, where the peer instance votes
and, while this one is active, replicates), its own voter (a L{Witness}
over its own C{ha.db}, not the replicated C{store.db}), and its
L{Voters}: the witnesses and the peer.  The role machine
(L{meshroute.harules.role}) decides what it does; this module carries out the
machine's L{meshroute.harules.role.RoleActions}:

 - while active, it runs a L{RouterService} on C{store.db}, built afresh
   for each active period (routing listener, connectors, client listener,
   deliveries), whose store's commits pass through the replication gate,
   and it holds the lease of its epoch (C{Voters.hold_lease}): a lease
   lost, or a voter that knows a newer epoch, fences it;
 - while backup, it follows the active (the replication side's
   C{follow}) and counts the active's heartbeats, which its own voter
   hears, as the peer heard;
 - on the way up, and when fenced, it asks every voter who is active and
   decides by L{quorum.decide_start}.

A hand-over (failback, or C{failover-on-shutdown} at SIGTERM) is an
election the active runs for its peer.  Failback (C{allow-failback} on
the backup) is due when the active backup has readmitted the returning
primary, in sync, in a replicated epoch.  The peer learns of it from its
own voter, which grants it the epoch at the active's request; it then
asks every voter for that same epoch as its own candidate, which each
voter that granted it grants again (rule 1 of L{quorum}), and so learns
that a majority did before it serves.
"""

import dataclasses
import os
from collections.abc import Callable
from typing import Protocol

from twisted.application.service import MultiService
from twisted.internet import defer
from twisted.internet.interfaces import IReactorTime
from automat import NoTransition
from twisted.logger import Logger
from twisted.web.server import Site
from zope.interface import implementer

from meshroute import __version__, events
from meshroute.errors import NotServing
from meshroute.ha.pairing import Pairing
from meshroute.ha.records import ForcedActivation, InstanceIdentity, InstanceVoterRecords
from meshroute.ha.reporting import HANDOVER, TAKEOVER, HAEventLog
from meshroute.ha.status import HAStatus, PeerStatus, VoterStatus
from meshroute.ha.voters import Voters, WitnessConnection, asking_witness
from meshroute.harules import quorum, role
from meshroute.harules.election import Defeat
from meshroute.harules.lease import LEASE_EXPIRED
from meshroute.harules.quorum import instance_name
from meshroute.harules.settings import BACKUP, PRIMARY, HASettings
from meshroute.interfaces import IHAInstanceView
from meshroute.link.handshake import ConnectorSettings, RouterContext
from meshroute.link.registry import LinkRegistry
from meshroute.link.retry import RetrySchedule
from meshroute.link.rotation import EndpointRotation
from meshroute.router.service import HostedParts, RouterService, listening, lock_data_dir, open_data_dir
from meshroute.router.settings import RouterConfig
from meshroute.sessions.ha_view import HAView
from meshroute.wire import frames
from meshroute.router.witness import Witness

log = Logger()


#: The API states in which an instance serves.
_SERVING = (role.ACTIVE_REPLICATED, role.ACTIVE_ALONE)


def peer_role(ha_role: str) -> str:
    return BACKUP if ha_role == PRIMARY else PRIMARY


def stage_valid_timeout_ms(config: RouterConfig) -> int:
    """
    How long the instance's vote and replication connections wait for a
    handshake stage or an answer: its routing listener's
    C{stage-valid-timeout}, else that key's default.
    """
    return config.listener.stage_valid_timeout_ms if config.listener is not None else 15000


def vote_connections(config: RouterConfig, clock: IReactorTime,
                     endpoints) -> Callable[[str, "HAInstance"], Voters]:
    """
    How an instance of C{config} reaches its voters: its own voter
    directly, the peer over a vote connection to the peer's replication
    listener, each witness over one to its routing listener; all with
    the mesh secret (C{ha.replication.password-file}), dialled again every
    heartbeat-interval while down.
    """
    ha = config.ha
    lease_timeout = ha.lease_timeout_ms / 1000

    def connection(context, router: str, endpoint: str, voter: str | None = None):
        return WitnessConnection(
            context, ConnectorSettings(ha.replication.secret, router,
                                       stage_valid_timeout_ms(config)),
            EndpointRotation([(endpoint, endpoints.client(endpoint))]),
            RetrySchedule(ha.heartbeat_interval_ms, 1.0, ha.heartbeat_interval_ms, -1),
            clock, ha.group_name, lease_timeout, voter=voter)

    def voters_for(name: str, own: "HAInstance") -> Voters:
        context = RouterContext(name=config.name, clock=clock, events=own.events,
                                registry=own.registry, engine=None, group=ha.group_name)
        # The peer's connection checks that both are of one group.
        peer = connection(dataclasses.replace(context, pairing=own.pairing), config.name,
                          ha.replication.peer, own.peer_instance)
        witnesses = [connection(context, witness.router, witness.endpoint)
                     for witness in ha.witnesses]
        return Voters(clock, name, {name: asking_witness(own, name, ha.group_name,
                                                         lease_timeout)},
                      [peer, *witnesses])

    return voters_for


class ReplicationSide(Protocol):
    """
    What an instance needs of replication (the gate, the source, the
    replica and the replication connection).

    C{store.db} is the replica's while the instance does not serve, and
    the serving router's while it does: C{open_replica} and
    C{close_replica} hand it over, one at a time.
    """

    def open_replica(self) -> defer.Deferred:
        "Open C{store.db} as the replica (creating it if new); fires when open."

    def close_replica(self) -> defer.Deferred:
        "Close the replica; fires when closed."

    def position(self) -> quorum.LogPosition:
        "The newest change this instance's C{store.db} holds."

    def followed_epoch(self) -> int:
        "The epoch of the newest change C{store.db} holds: on a backup, the active's."

    def confirmed(self) -> quorum.LogPosition:
        "The newest change confirmed to anyone (the active's heartbeats carry it)."

    def lag(self) -> int | None:
        "Changes the backup lacks, as far as a replication connection tells."

    def executor(self, lease_holds: Callable[[], bool]):
        "The store executor of the router serving now, its commits gated (and C{lease_holds})."

    def serve_in(self, epoch: int, alone: bool) -> None:
        "Tag what is committed from now on with C{epoch}, which begins with its start record."

    def confirm(self, alone: bool) -> None:
        "Confirm commits: at once when C{alone}, else once the backup acknowledged them."

    def hold(self) -> None:
        "Confirm nothing more (the backup is silent)."

    def lead(self, connected: Callable[[], None], caught_up: Callable[[], None],
             heard: Callable[[], None]) -> None:
        "Serve followers; C{connected} for each, C{caught_up} when in sync, C{heard} on traffic."

    def stop_leading(self) -> None:
        "Stop serving the follower (this instance stops serving)."

    def follow(self, caught_up: Callable[[], None], heard: Callable[[], None]) -> None:
        "Replicate from the active; C{caught_up} once in sync, C{heard} on its traffic."

    def stop_following(self) -> defer.Deferred:
        "Drop the replication connection to the active; fires once its work is done."


@implementer(IHAInstanceView)
class HAInstance(MultiService):
    """
    One instance of an HA pair.

    @param records: this instance's C{ha.db} (L{HARecords}), opened at
        start and closed at stop.
    @param voters_for: builds this instance's L{Voters} from its instance
        name and its own voter (this instance, which answers as a
        L{Witness} does).
    @param replication_for: builds this instance's L{ReplicationSide}
        from the instance.
    @param stop_process: ends the process (C{reactor.stop}): a backup that
        handed the router back with C{restart-backup = false} stops.
    @param read_config: reads C{config}'s file again, for each active
        period's router (L{RouterService}'s C{read_config}).
    @param admin_site: makes the site of the instance's admin endpoint
        (C{[admin]}) given C{ha}, C{token} and C{reactor}, as
        L{meshroute.admin.api.admin_site} does.  The composition layer
        hands it down, for the admin API sits above the pair; without
        it the instance serves no admin endpoint.

    @ivar name: the router's name (both instances carry it).
    @ivar instance: this instance's name (L{instance_name}).
    @ivar router: the L{RouterService} while active, else None.
    @ivar registry: its connections (vote connections, the replication
        listener's and the follower's), closed when it stops.
    @ivar role: the role machine's core (C{state}, C{epoch}) once started.
    """

    def __init__(self, config: RouterConfig, clock: IReactorTime, endpoints, records,
                 voters_for: Callable[[str, "HAInstance"], Voters],
                 replication_for: Callable[["HAInstance"], ReplicationSide],
                 stop_process: Callable[[], None],
                 read_config: Callable[[], RouterConfig] | None = None,
                 admin_site: Callable[..., Site] | None = None) -> None:
        super().__init__()
        ha = config.ha
        self.config = config
        self._read_config = read_config
        self.ha: HASettings = ha
        self._clock = clock
        self._endpoints = endpoints
        self.name = config.name
        self.instance = instance_name(config.name, ha.role)
        self.peer_instance = instance_name(config.name, peer_role(ha.role))
        self._lock_file = None
        self.pairing = Pairing(config.name, ha.group_name)
        self.events = open_data_dir(config, clock, self._lock, self._unlock)
        self.ha_events = HAEventLog(self.events, clock, ha.group_name, ha.role)
        self.records = records
        self.registry = LinkRegistry()
        self.replication = replication_for(self)
        self._stop_process = stop_process
        # Its own group's record in ha.db, other groups' in the serving
        # router's replicated store.db (InstanceVoterRecords says why).
        self.voter_records = InstanceVoterRecords(ha.group_name, records)
        self.witness = Witness(self.instance, self.voter_records, clock, self.events,
                               own_position=self.replication.position)
        self.voters = voters_for(self.instance, self)
        self.voters.setServiceParent(self)
        if config.admin is not None and admin_site is not None:
            listening(endpoints, config, "admin.endpoint", config.admin.endpoint,
                      admin_site(ha=self, token=config.admin.token,
                                 reactor=clock)).setServiceParent(self)
        self.router: RouterService | None = None
        # Each change of who holds store.db (the replica, the router) waits
        # for the one before it.
        self._store_turn: defer.Deferred = defer.succeed(None)
        self._role: role.RoleInputs | None = None
        self.role: role.RoleCore | None = None
        self._lease = None
        self._newest_epoch = 0
        self._started_at: float | None = None
        self._peer_heard_at: float | None = None
        self._stopping = False
        self._handed: defer.Deferred | None = None
        self._readmitting = False
        self._fail_back_at: tuple[int, int] | None = None
        self._forced_epoch: int | None = None
        self._failing_back = False
        self._said_stale = False
        # The epoch the peer handed over to this instance, until it serves.
        self._handed_epoch: int | None = None
        # The role's state and epoch as its actions tell them (the role
        # may act before start_role returns its core: a forced activation).
        self._state = role.STARTING
        self._epoch = 0
        self._stop_reason: str | None = None

    # -- IHAInstanceView --------------------------------------------------

    def ha_status(self) -> HAStatus:
        """
        What C{GET /api/v1/ha} and the C{meshroute_ha_*} metrics report.
        An instance that does not serve reports the epoch it follows (or
        last followed): the epoch it last served in itself is old news
        once another instance serves, in a newer epoch.
        """
        connected = self.voters.connected()
        return HAStatus(
            role=self.ha.role,
            state=self._state,
            epoch=self._epoch if self._state in _SERVING else self.replication.followed_epoch(),
            served_epoch=self._epoch,
            position=self.replication.position(),
            lag=self.replication.lag(),
            peer=PeerStatus(self.ha.replication.peer,
                            connected.get(self.peer_instance, False), self.pairing.refusal),
            voters=tuple(VoterStatus(witness.router, witness.endpoint,
                                     connected.get(witness.router, False))
                         for witness in self.ha.witnesses),
        )

    def uptime_s(self) -> float:
        return 0.0 if self._started_at is None else self._clock.seconds() - self._started_at

    def reload_security(self) -> bool:
        """
        SIGHUP: the serving router reads C{[security]} and the users file
        again; an instance that is not serving reads them when it next
        serves.
        """
        return self.router is not None and self.router.reload_security()

    # -- the service ------------------------------------------------------

    def startService(self) -> None:
        if self._lock_file is None:
            self._lock()
        self._started_at = self._clock.seconds()
        self.events.emit(events.ROUTER_STARTED, version=__version__, pid=os.getpid())
        log.info("HA instance {instance} starting (meshroute {version})",
                 instance=self.instance, version=__version__)
        super().startService()
        opening = self.records.open(InstanceIdentity(self.name, self.ha.group_name, self.ha.role))
        opening.addCallback(lambda _: self.witness.load())
        opening.addCallback(lambda _: self.replication.open_replica())
        opening.addCallback(self._loaded)
        opening.addErrback(self._cannot_open)

    def _cannot_open(self, failure) -> None:
        log.failure("HA instance {instance}: cannot open its ha.db or store.db; stopping",
                    failure, instance=self.instance)
        self._stop_process()

    def _loaded(self, _) -> None:
        if not self.running:
            return
        record = self.witness.records().get(self.ha.group_name)
        if record is not None:
            self._newest_epoch = record.granted_epoch
        self.records.forced_activation().addCallback(self._start_role)

    def _start_role(self, forced: ForcedActivation | None) -> None:
        """
        Start the role: ask the voters, or, when C{meshroute ha
        force-activate} asked for it, serve alone at once in an epoch above
        every epoch this instance knows (its voter's record, its data).
        """
        if forced is not None:
            self._forced_epoch = max(self._newest_epoch,
                                     self.replication.position().epoch) + 1
            self._newest_epoch = self._epoch = self._forced_epoch
            log.warn("HA instance {instance}: activation forced by {by}: serving alone in "
                     "epoch {epoch} without asking the voters", instance=self.instance,
                     by=forced.requested_by, epoch=self._forced_epoch)
            self.ha_events.force_activate("activated", forced.requested_by,
                                          self._forced_epoch)
            self.records.clear_forced_activation()
        self._role, self.role = role.start_role(self._clock, self.ha, self,
                                                forced_epoch=self._forced_epoch)

    @defer.inlineCallbacks
    def stopService(self):
        """
        Hand over to an in-sync backup first (C{failover-on-shutdown}),
        waiting at most a second for the election, then stop serving or
        following, and everything else.
        """
        self._stopping = True
        if self._state == role.ACTIVE_REPLICATED and self.ha.failover_on_shutdown:
            self._handed = defer.Deferred()
            timeout = self._clock.callLater(1.0, self._hand_over_ended)
            try:
                self._role.handover_due()
            except NoTransition:
                # Not with an in-sync backup now (it lost it, or hands over
                # already): nothing to hand over to.
                self._hand_over_ended()
            yield self._handed
            if timeout.active():
                timeout.cancel()
        if self.role is not None:
            self.role.stop_watching()
            self.role.stop_asking()
        self._release_lease()
        self._store_turn.addCallback(lambda _: self.replication.stop_following())
        self._store_turn.addCallback(lambda _: self._stop_router())
        self._store_turn.addCallback(lambda _: self.replication.close_replica())
        yield self._store_turn
        yield defer.maybeDeferred(super().stopService)
        yield self.registry.close_all()
        yield self.records.close()
        self.events.emit(events.ROUTER_STOPPED)
        self.events.close()
        self._unlock()

    def _hand_over_ended(self) -> None:
        if self._handed is not None and not self._handed.called:
            self._handed.callback(None)

    def _lock(self) -> None:
        self._lock_file = lock_data_dir(self.config)

    def _unlock(self) -> None:
        if self._lock_file is not None:
            self._lock_file.close()
            self._lock_file = None

    # -- RoleActions ------------------------------------------------------

    def state_changed(self, state: str) -> None:
        self._state = state
        if state != role.ACTIVE_ALONE:
            # A readmission belongs to one spell of running alone.
            self._readmitting = False
        if self.role is not None:
            self._epoch = self.role.epoch
        log.info("HA instance {instance}: {state} (epoch {epoch})", instance=self.instance,
                 state=state, epoch=self._epoch)
        reason, self._stop_reason = self._stop_reason, None
        self.ha_events.state(state, self._epoch, reason)

    def ask_voters(self) -> None:
        # Whatever election was under way, the role no longer awaits it.
        self.voters.abandon()
        if not self._stopping:
            self.voters.ask_start(self._question_timeout(), self._decide_start)

    def _question_timeout(self) -> float:
        """
        How long an election or the start-up question waits for voters
        that have not answered: two heartbeats, as long as a heartbeat may
        be late without danger.
        """
        return 2 * self.ha.heartbeat_interval_ms / 1000

    def _decide_start(self, answers: list[quorum.StartAnswer]) -> None:
        if self._stopping:
            return
        for answer in answers:
            self._newest_epoch = max(self._newest_epoch, answer.record.granted_epoch)
        decision = quorum.decide_start(self.instance, self.ha.role == PRIMARY,
                                       self.replication.position(), self.voters.names, answers)
        if self.pairing.refusal is not None:
            # The other instance is of another group (a mistyped
            # group-name): never a second active for this router name.
            decision = quorum.StartDecision.WAIT
        if decision == quorum.StartDecision.STALE and not self._said_stale:
            log.warn("HA instance {instance}: a voter knows of confirmed changes this "
                     "instance lacks; it never activates by itself (it follows an active "
                     "that appears, or meshroute ha force-activate)", instance=self.instance)
        self._said_stale = decision == quorum.StartDecision.STALE
        if decision == quorum.StartDecision.FOLLOW:
            self._role.active_found()
        elif decision == quorum.StartDecision.RESUME:
            self._role.holds_newest_data()
        else:
            self._role.must_wait()

    def follow(self) -> None:
        if self._failing_back:
            self._failing_back = False
            if not self.ha.restart_backup:
                log.info("HA instance {instance}: handed the router back; it stops "
                         "(restart-backup = false)", instance=self.instance)
                self._clock.callLater(0, self._stop_process)
                return
        if self._stopping:
            # Handed over at the stop: finish stopping once the role has
            # finished this transition (it arms its timers after this).
            self._clock.callLater(0, self._hand_over_ended)
            return
        self._peer_heard_at = self._clock.seconds()
        self._store_turn.addCallback(
            lambda _: self.replication.follow(self._caught_up, self._role.peer_heard))

    def _caught_up(self) -> None:
        if self._state == role.BACKUP_SYNCING:
            self._role.caught_up()

    def _backup_connected(self) -> None:
        head = self.replication.position().position
        self.ha_events.replication("connected", head, self.replication.lag())

    def _backup_heard(self) -> None:
        self._role.peer_heard()
        self._fail_back_if_acknowledged()

    def _peer_caught_up(self) -> None:
        """
        The backup reached the live stream: news to the role only for an
        instance serving alone (and not already readmitting it).
        """
        self.ha_events.replication("in-sync", self.replication.position().position, 0)
        if self._state == role.ACTIVE_ALONE and not self._readmitting:
            self._readmitting = True
            self._role.peer_caught_up()

    def stop_following(self) -> None:
        self._store_turn.addCallback(lambda _: self.replication.stop_following())

    def request_votes(self, alone: bool) -> None:
        self._elect(self.instance, alone)

    def hand_over(self) -> None:
        # An active that stops (now, or after handing the router back with
        # restart-backup = false) hands over an epoch to run alone: the
        # peer will have no backup to wait for.
        self._elect(self.peer_instance, alone=self._stopping or not self.ha.restart_backup)

    def _elect(self, candidate: str, alone: bool) -> None:
        own = self.witness.records().get(self.ha.group_name)
        epoch = max(self._newest_epoch, self._epoch, self.replication.position().epoch,
                    own.granted_epoch if own is not None else 0) + 1
        self._newest_epoch = epoch
        request = quorum.VoteRequest(candidate, self.instance, epoch,
                                     self.replication.position(), alone)
        self.voters.elect(request, self._question_timeout(), self._won, self._lost)

    def _won(self, epoch: int) -> None:
        self._readmitting = False
        self._role.epoch_granted(epoch)

    def _lost(self, defeat: Defeat) -> None:
        self._newest_epoch = max(self._newest_epoch, defeat.newest_epoch)
        log.info("HA instance {instance}: election lost ({reason}: {refusals})",
                 instance=self.instance, reason=defeat.reason, refusals=defeat.refusals)
        self._readmitting = False
        self._role.election_lost()

    def start_serving(self, epoch: int) -> None:
        self._epoch = epoch
        alone = self._state == role.ACTIVE_ALONE
        self.ha_events.epoch(epoch, alone)
        handed, self._handed_epoch = self._handed_epoch == epoch, None
        if self._peer_heard_at is not None:
            # It followed the peer until now: a failover, handed over (a
            # failback, or a graceful stop, whose epoch may run alone) or
            # taken over.
            self.ha_events.failover(from_instance=peer_role(self.ha.role), to_instance=self.ha.role,
                                    epoch=epoch, kind=HANDOVER if handed else TAKEOVER,
                                    last_heard=self._peer_heard_at)
            self._peer_heard_at = None
        self._hold_lease()
        self._store_turn.addCallback(lambda _: self.replication.stop_following())
        self._store_turn.addCallback(lambda _: self.replication.close_replica())
        self._store_turn.addCallback(lambda _: self._serve(epoch, alone))

    def _serve(self, epoch: int, alone: bool) -> None:
        """
        Start this active period's router on C{store.db}, its commits
        tagged with C{epoch}.
        """
        if self._epoch != epoch or self._state not in _SERVING:
            return  # fenced or handed over before store.db was free
        self.replication.serve_in(epoch, alone)
        self.replication.confirm(alone)
        # Its links and route advertisements carry the epoch it started
        # serving in (a later epoch of the same active period, to run alone
        # or replicated again, is newer still than any earlier active's).
        self.router = RouterService(dataclasses.replace(self.config, admin=None), self._clock,
                                    self._endpoints, executor=self.replication.executor(self.voters.lease_holds),
                                    host=HostedParts(self.events, self.witness, self.ha_status),
                                    epoch=epoch,
                                    ha_view=self._client_view,
                                    read_config=self._read_config)
        # The router's witness loads the other groups' records from this
        # store once it is open (the other instance may have granted some):
        # no voter of another group held from before may shadow them.
        self.voter_records.serve(self.router.store)
        self.witness.retain(self.ha.group_name)
        self.router.setServiceParent(self)
        self.replication.lead(self._backup_connected, self._peer_caught_up, self._backup_heard)
        self._fail_back_when_due()

    def _client_view(self) -> HAView:
        """
        What the serving router's client listener tells clients (and
        whether it takes them: not once this instance stops serving).
        """
        return HAView(active=self._state in _SERVING and self.router is not None,
                      epoch=self._epoch, endpoints=self.ha.client_endpoints)

    def serve_in(self, epoch: int) -> None:
        self._epoch = epoch
        alone = self._state == role.ACTIVE_ALONE
        self.ha_events.epoch(epoch, alone)
        self.replication.serve_in(epoch, alone)
        if not alone:
            # Readmitted: confirm once the backup has it.  (An epoch to
            # run alone is confirmed by release_acknowledgements.)
            self.replication.confirm(alone=False)
        self._hold_lease()
        self._fail_back_when_due()

    def _fail_back_when_due(self) -> None:
        """
        With C{allow-failback}, a backup serving with the primary in sync
        hands the router back to it, once the primary acknowledged
        everything this instance may have confirmed while it ran alone (up
        to now: what follows is confirmed only once acknowledged anyway).
        """
        if (self.ha.role == BACKUP and self.ha.allow_failback
                and self._state == role.ACTIVE_REPLICATED):
            self._fail_back_at = (self._epoch, self.replication.position().position)
            self._fail_back_if_acknowledged()

    def _fail_back_if_acknowledged(self) -> None:
        """
        Fail back (after the role finished its current transition) once the
        primary acknowledged the position the replicated epoch began at.
        """
        if self._fail_back_at is None:
            return
        epoch, position = self._fail_back_at
        lag = self.replication.lag()
        if lag is None or self.replication.position().position - lag < position:
            return
        self._fail_back_at = None
        self._clock.callLater(0, self._fail_back, epoch)

    def _fail_back(self, epoch: int) -> None:
        if self._stopping or self._state != role.ACTIVE_REPLICATED or self._epoch != epoch:
            return
        log.info("HA instance {instance}: the primary is in sync: handing the router back "
                 "(allow-failback)", instance=self.instance)
        try:
            self._role.handover_due()
        except NoTransition:
            return  # it lost the primary meanwhile, or hands over already
        self._failing_back = True

    def stop_serving(self, reason: str) -> None:
        log.info("HA instance {instance}: stops serving ({reason})", instance=self.instance,
                 reason=reason)
        self._stop_reason = reason
        if reason != role.HANDING_OVER:
            self.ha_events.fenced(self._epoch, reason)
        self._release_lease()
        self.witness.own_instance_stopped(self.ha.group_name)
        self.replication.stop_leading()
        self._store_turn.addCallback(lambda _: self._stop_router())
        self._store_turn.addCallback(lambda _: self.replication.open_replica())

    def hold_acknowledgements(self) -> None:
        self.ha_events.replication("lost", self.replication.position().position, None)
        self.replication.hold()

    def release_acknowledgements(self) -> None:
        self.replication.confirm(alone=True)

    # -- the lease --------------------------------------------------------

    def _hold_lease(self) -> None:
        self._release_lease()
        epoch = self._epoch
        self._lease = self.voters.hold_lease(
            lambda: (self.replication.position(), self.replication.confirmed()),
            self.ha.heartbeat_interval_ms / 1000, self.ha.lease_timeout_ms / 1000,
            self._lease_lost, forced_epoch=epoch if epoch == self._forced_epoch else None)

    def _release_lease(self) -> None:
        if self._lease is not None:
            self._lease.release()
            self._lease = None

    def _lease_lost(self, reason: str) -> None:
        self._lease = None
        if reason == LEASE_EXPIRED:
            self._role.lease_lost()
        else:
            self._role.superseded(self._newest_epoch)

    # -- this instance's voter, as the peer asks it ---------------------------

    def vote(self, peer: str, frame: frames.VoteRequest) -> defer.Deferred:
        """
        Answer the peer's vote request with this instance's own voter.
        When it grants this instance an epoch at the active peer's request
        (a hand-over), make sure a majority did before serving in it.
        """
        if not self._answers(frame.group):
            return self._not_serving(frame.group)
        return self.witness.vote(peer, frame).addCallback(self._voted, frame)

    def _answers(self, group: str) -> bool:
        """
        Whether this instance's voter answers C{group} now: its own group
        always, another only while serving (its records are the serving
        store's: L{InstanceVoterRecords}).
        """
        return self.voter_records.owns(group) or self.router is not None

    def _not_serving(self, group: str) -> defer.Deferred:
        """
        No answer (the vote connection closes), and the voter is not
        touched: a grant it could not save must not linger in memory.
        """
        return defer.fail(NotServing(f"{self.instance} is not active: it answers no "
                                     f"vote of group {group!r}"))

    def _voted(self, answer: frames.VoteAnswer, frame: frames.VoteRequest):
        if (answer.granted and frame.candidate == self.instance
                and frame.requester == self.peer_instance and self._in_sync()):
            self._confirm_hand_over(frame.epoch, frame.alone,
                                    self._clock.seconds() + self.ha.lease_timeout_ms / 1000)
        return answer

    def _in_sync(self) -> bool:
        return self._state == role.BACKUP_IN_SYNC

    def _confirm_hand_over(self, epoch: int, alone: bool, until: float) -> None:
        """
        Ask every voter for the handed-over C{epoch} as this instance's
        own: each that granted it to this instance grants it again.  A
        voter asked before the active's request reached it refuses
        (C{active-alive}): ask again each heartbeat-interval, until
        C{until} (by then the active's silence has this instance ask for
        an epoch by itself).  C{alone}: the active stops, and hands over
        an epoch to run alone in.
        """
        if not self._in_sync() or self._clock.seconds() >= until:
            return
        request = quorum.VoteRequest(self.instance, self.instance, epoch,
                                     self.replication.position(), alone)

        def handed_over(epoch: int) -> None:
            if not self._in_sync():
                return
            self._handed_epoch = epoch
            if alone:
                self._role.epoch_handed_over_alone(epoch)
            else:
                self._role.epoch_handed_over(epoch)

        def again(defeat: Defeat) -> None:
            self._clock.callLater(self.ha.heartbeat_interval_ms / 1000,
                                  self._confirm_hand_over, epoch, alone, until)

        self.voters.elect(request, self._question_timeout(), handed_over, again)

    def heartbeat(self, peer: str, frame: frames.Heartbeat) -> defer.Deferred:
        """
        Answer the peer's heartbeat with this instance's own voter; one it
        accepts from the active peer is the peer heard.
        """
        if not self._answers(frame.group):
            return self._not_serving(frame.group)
        return self.witness.heartbeat(peer, frame).addCallback(self._heard, frame)

    def _heard(self, answer: frames.HeartbeatAnswer, frame: frames.Heartbeat):
        if answer.accepted and frame.instance == self.peer_instance and self._role is not None:
            self._peer_heard_at = self._clock.seconds()
            self._role.peer_heard()
        return answer

    def start(self, peer: str, frame: frames.StartQuery) -> defer.Deferred:
        """
        Answer the peer's start-up question (with this instance's data
        position).
        """
        if not self._answers(frame.group):
            return self._not_serving(frame.group)
        return self.witness.start(peer, frame)

    # -- stopping ---------------------------------------------------------

    def _stop_router(self) -> defer.Deferred | None:
        router, self.router = self.router, None
        if router is not None:
            # Other groups' records are the next active's now.
            self.voter_records.stop_serving()
            self.witness.retain(self.ha.group_name)
            return defer.maybeDeferred(router.disownServiceParent)
        return None
