"""
One instance of an HA pair: what C{twistd meshroute} runs for a router
with C{[ha]} (docs/ha.md).

An L{HAInstance} is always up, whatever its role: its admin endpoint, its
replication side (the replication listener, where the peer instance votes
and, while this one is active, replicates), its own voter (a L{Witness}
over its own C{ha.db}, not the replicated C{store.db}), and its
L{Voters}: the witnesses and the peer.  The role machine
(L{meshroute.harules.role}) decides what it does; this class carries out
the machine's L{meshroute.harules.role.RoleActions} and turns what
happens into the machine's inputs, with a collaborator for each part of
the work:

 - L{Activation}, what it asks its voters: on the way up, and when
   fenced, who is active (L{quorum.decide_start}); elections for the next
   epoch, its own or, handing over, its peer's; while active, the lease
   of its epoch (a lease lost, or a voter that knows a newer epoch,
   fences it);
 - L{ActiveRouter}, who holds C{store.db}: while active, a
   L{RouterService} built afresh for each active period (routing
   listener, connectors, client listener, deliveries), whose store's
   commits pass through the replication gate; while backup, the replica,
   following the active (the replication side's C{follow});
 - L{OwnVoter}, its own voter as the peer and its L{Voters} ask it: a
   heartbeat of the active peer it accepts is the peer heard, and an
   epoch it grants this instance at the active peer's request is a
   hand-over;
 - L{HandOver}, when, active, it hands the router over to its peer:
   failback (C{allow-failback}) and C{failover-on-shutdown};
 - L{HAEventLog} and L{HAStatus}: its C{ha.*} events, C{GET /api/v1/ha}.

A hand-over is an election the active runs for its peer, naming the
peer's position (L{HandOver} says when, and why so).  The peer learns of
it from its own voter, which grants it the epoch at the active's request;
it then makes sure a majority did before it serves
(L{Activation.confirm_hand_over}).
"""

import os
from collections.abc import Callable
from typing import Protocol

from twisted.application.service import MultiService
from twisted.internet import defer
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger
from twisted.web.server import Site
from zope.interface import implementer

from meshroute import __version__, events
from meshroute.ha.activation import Activation
from meshroute.ha.active_router import ActiveRouter
from meshroute.ha.handover import HandOver
from meshroute.ha.own_voter import OwnVoter
from meshroute.ha.pairing import Pairing
from meshroute.ha.records import ForcedActivation, InstanceIdentity, InstanceVoterRecords
from meshroute.ha.reporting import HANDOVER, TAKEOVER, HAEventLog
from meshroute.ha.status import HAStatus, PeerStatus, VoterStatus
from meshroute.ha.voters import Voters
from meshroute.harules import quorum, role
from meshroute.harules.quorum import instance_name
from meshroute.harules.settings import BACKUP, PRIMARY, HASettings
from meshroute.interfaces import IHAInstanceView
from meshroute.link.registry import LinkRegistry
from meshroute.router.listening import listening
from meshroute.router.service import HostedParts, RouterService, lock_data_dir, open_data_dir
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


class ReplicationSide(Protocol):
    """
    What an instance needs of replication (the gate, the source, the
    replica and the replication connection).

    C{store.db} is the replica's while the instance does not serve, and
    the serving router's while it does: C{open_replica} and
    C{close_replica} hand it over, one at a time.
    """

    def remove_left_snapshots(self) -> None:
        "Delete the snapshot files an earlier run left in the data dir."

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

    def peer_position(self) -> quorum.LogPosition | None:
        "The backup's position, once it holds this active's replicated epoch's start record."

    def executor(self, lease_holds: Callable[[], bool], store_failed: Callable[[], None]):
        """
        The store executor of the router serving now, its commits gated
        (and C{lease_holds}); C{store_failed()} when it could not commit
        a change it had sent to the backup.
        """

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
        name and the instance (whose L{OwnVoter} answers as a L{Witness}
        does).
    @param replication_for: builds this instance's L{ReplicationSide}
        from the instance.
    @param stop_process: ends the instance's part of the process: a backup
        that handed the router back with C{restart-backup = false} stops,
        and so does an instance whose C{ha.db} or C{store.db} cannot be
        opened (L{meshroute.process}: the process ends with its last
        instance).
    @param read_config: reads C{config}'s file again, for each active
        period's router (L{RouterService}'s C{read_config}).
    @param admin_site: makes the site of the instance's admin endpoint
        (C{[admin]}) given C{ha}, C{token} and C{reactor}, as
        L{meshroute.admin.api.admin_site} does.  The composition layer
        hands it down, for the admin API sits above the pair; without
        it the instance serves no admin endpoint.

    @ivar name: the router's name (both instances carry it).
    @ivar instance: this instance's name (L{instance_name}).
    @ivar registry: its connections (vote connections, the replication
        listener's and the follower's), closed when it stops.
    @ivar own_voter: its own voter, as the peer and its L{Voters} ask it.
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
        self.ha: HASettings = ha
        self._clock = clock
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
        voter_records = InstanceVoterRecords(ha.group_name, records)
        self.witness = Witness(self.instance, voter_records, clock, self.events,
                               own_position=self.replication.position)
        self.own_voter = OwnVoter(self.witness, voter_records, ha.group_name, self.instance,
                                  self.peer_instance, self._handed_over, self._peer_heard)
        self.voters = voters_for(self.instance, self)
        self.voters.setServiceParent(self)
        self.activation = Activation(clock, ha, self.instance, self.voters, self.pairing,
                                     self.own_voter.granted_epoch, self.replication.position,
                                     self.replication.confirmed, lambda: self._stopping)
        self.handover = HandOver(clock, ha, self.instance, self.replication,
                                 lambda: self.voters.connected().get(self.peer_instance, False),
                                 lambda: self._role.handover_due(), self._serves_replicated_in)
        if config.admin is not None and admin_site is not None:
            listening(endpoints, config, "admin.endpoint", config.admin.endpoint,
                      admin_site(ha=self, token=config.admin.token,
                                 reactor=clock)).setServiceParent(self)
        self._active_router = ActiveRouter(
            self, config, clock, endpoints, self.replication,
            HostedParts(self.events, self.witness, self.ha_status, stop_process), self.own_voter,
            read_config)
        self._role: role.RoleInputs | None = None
        self.role: role.RoleCore | None = None
        self._started_at: float | None = None
        self._peer_heard_at: float | None = None
        self._stopping = False
        self._readmitting = False
        # The epoch the peer handed over to this instance, until it serves.
        self._handed_epoch: int | None = None
        # The role's state and epoch as its actions tell them (the role
        # may act before start_role returns its core: a forced activation).
        self._state = role.STARTING
        self._epoch = 0
        self._stop_reason: str | None = None

    @property
    def router(self) -> RouterService | None:
        """
        The L{RouterService} while active, else None.
        """
        return self._active_router.router

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
            instance=self.instance,
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
        self.replication.remove_left_snapshots()
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
        self.activation.heard_of(self.own_voter.granted_epoch())
        self.records.forced_activation().addCallback(self._start_role)

    def _start_role(self, forced: ForcedActivation | None) -> None:
        """
        Start the role: ask the voters, or, when C{meshroute ha
        force-activate} asked for it, serve alone at once in an epoch above
        every epoch this instance knows.
        """
        if forced is not None:
            self._epoch = self.activation.force(forced.requested_by)
            self.ha_events.force_activate("activated", forced.requested_by, self._epoch)
            self.records.clear_forced_activation()
        self._role, self.role = role.start_role(self._clock, self.ha, self,
                                                forced_epoch=self.activation.forced_epoch)

    @defer.inlineCallbacks
    def stopService(self):
        """
        Hand over to an in-sync backup first (C{failover-on-shutdown}),
        then stop serving or following, and everything else.
        """
        self._stopping = True
        yield self.handover.at_stop(self._state)
        if self.role is not None:
            self.role.stop_watching()
            self.role.stop_asking()
        self.activation.release_lease()
        yield self._active_router.close()
        yield defer.maybeDeferred(super().stopService)
        yield self.registry.close_all()
        yield self.records.close()
        self.events.emit(events.ROUTER_STOPPED)
        self.events.close()
        self._unlock()

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
        self.activation.ask_start(self._decide_start)

    def _decide_start(self, decision: quorum.StartDecision) -> None:
        if decision == quorum.StartDecision.FOLLOW:
            self._role.active_found()
        elif decision == quorum.StartDecision.RESUME:
            self._role.holds_newest_data()
        else:
            self._role.must_wait()

    def follow(self) -> None:
        if self.handover.handed_back() and not self.ha.restart_backup:
            log.info("HA instance {instance}: handed the router back; it stops "
                     "(restart-backup = false)", instance=self.instance)
            self._clock.callLater(0, self._stop_process)
            return
        if self._stopping:
            # Handed over at the stop: finish stopping once the role has
            # finished this transition (it arms its timers after this).
            self._clock.callLater(0, self.handover.stop_handed_over)
            return
        self._peer_heard_at = self._clock.seconds()
        self._active_router.follow(self._caught_up, self._role.peer_heard)

    def _caught_up(self) -> None:
        if self._state == role.BACKUP_SYNCING:
            self._role.caught_up()

    def _backup_connected(self) -> None:
        head = self.replication.position().position
        self.ha_events.replication("connected", head, self.replication.lag())

    def _backup_heard(self) -> None:
        self._role.peer_heard()
        self.handover.acknowledged()

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
        self._active_router.stop_following()

    def request_votes(self, alone: bool) -> None:
        self.activation.elect(self.instance, alone, self._epoch, self._won, self._lost)

    def hand_over(self) -> None:
        # An active that stops (now, or after handing the router back with
        # restart-backup = false) hands over an epoch to run alone: the
        # peer will have no backup to wait for.
        self.activation.elect(self.peer_instance, self._stopping or not self.ha.restart_backup,
                              self._epoch, self._won, self._lost,
                              position=self.handover.peer_position)

    def _won(self, epoch: int) -> None:
        self._readmitting = False
        self._role.epoch_granted(epoch)

    def _lost(self) -> None:
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
        self._active_router.serve(lambda: self._serve(epoch, alone))

    def _serve(self, epoch: int, alone: bool) -> None:
        """
        Start this active period's router on C{store.db}, its commits
        tagged with C{epoch}, once C{store.db} is free.
        """
        if self._epoch != epoch or self._state not in _SERVING:
            return  # fenced or handed over before store.db was free
        self.replication.serve_in(epoch, alone)
        self.replication.confirm(alone)
        self._active_router.start(
            epoch, self.replication.executor(self.voters.lease_holds,
                                             self._store_failed),
            self._client_view)
        self.replication.lead(self._backup_connected, self._peer_caught_up, self._backup_heard)
        self.handover.serving(self._state, self._epoch)

    def _store_failed(self) -> None:
        """
        The serving router's store could not commit a change it had sent
        to the backup: fenced (the role ignores it once the instance
        serves no more; no other router's store can report it then, since
        store.db passes to the next only once closed), in a turn of its
        own (the store may be in the middle of a call, which stopping the
        router must not close under it).
        """
        self._clock.callLater(0, lambda: self._role.store_failed())

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
        self.handover.serving(self._state, self._epoch)

    def _serves_replicated_in(self, epoch: int) -> bool:
        return not self._stopping and self._state == role.ACTIVE_REPLICATED and self._epoch == epoch

    def stop_serving(self, reason: str) -> None:
        log.info("HA instance {instance}: stops serving ({reason})", instance=self.instance,
                 reason=reason)
        self._stop_reason = reason
        if reason != role.HANDING_OVER:
            self.ha_events.fenced(self._epoch, reason)
        self.activation.release_lease()
        self.own_voter.instance_stopped()
        self.replication.stop_leading()
        self._active_router.stop_serving()

    def hold_acknowledgements(self) -> None:
        self.ha_events.replication("lost", self.replication.position().position, None)
        self.replication.hold()

    def release_acknowledgements(self) -> None:
        self.replication.confirm(alone=True)

    def _hold_lease(self) -> None:
        # The role's inputs are looked up when the lease is lost: a forced
        # activation holds it before start_role has returned them.
        self.activation.hold_lease(self._epoch, lambda: self._role.lease_lost(),
                                   lambda newest: self._role.superseded(newest))

    # -- what its own voter tells it ------------------------------------------

    def _handed_over(self, request: frames.VoteRequest) -> None:
        """
        Its own voter granted it an epoch at the active peer's request:
        while in sync, make sure a majority did before serving in it.
        """
        self.activation.confirm_hand_over(
            request.epoch, request.alone, self._clock.seconds() + self.ha.lease_timeout_ms / 1000,
            self._in_sync, self._epoch_handed_over)

    def _in_sync(self) -> bool:
        return self._state == role.BACKUP_IN_SYNC

    def _epoch_handed_over(self, epoch: int, alone: bool) -> None:
        self._handed_epoch = epoch
        if alone:
            self._role.epoch_handed_over_alone(epoch)
        else:
            self._role.epoch_handed_over(epoch)

    def _peer_heard(self) -> None:
        """
        Its own voter accepted the active peer's heartbeat.
        """
        if self._role is not None:
            self._peer_heard_at = self._clock.seconds()
            self._role.peer_heard()
