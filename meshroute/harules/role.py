"""
The HA role of one instance, as an Automat machine.

Each machine state is named for what the instance waits for; each maps to
one of the states the admin API reports (C{GET /api/v1/ha}; the core's
C{state}):

    state               API state           waits for
    ------------------  ------------------  -------------------------------------
    asking_voters       starting            the start-up rule's decision
    claiming            starting            the election for a first epoch
    catching_up         backup-syncing      replication to reach the live stream
    following           backup-in-sync      the active's heartbeats (or its hand-over)
    taking_over         backup-in-sync      the election after the active fell silent
    serving_replicated  active-replicated   the backup's acknowledgements
    isolating           active-replicated   the election for an epoch to run alone
    handing_over        active-replicated   the election of the peer (failback, stop)
    serving_alone       active-alone        the returning peer to catch up
    readmitting_peer    active-alone        the election for a replicated epoch
    fenced              fenced              the voters' word on who is active

The transitions, top to bottom (the code below follows the same order):

    asking_voters, fenced  ─ active_found ─────────▶ catching_up
    asking_voters, fenced  ─ holds_newest_data ────▶ claiming
    asking_voters, fenced  ─ must_wait ────────────▶ (same, asks again later)
    asking_voters          ─ activation_forced ────▶ serving_alone
    claiming               ─ epoch_granted ────────▶ serving_alone
    claiming               ─ election_lost ────────▶ asking_voters
    catching_up            ─ caught_up ────────────▶ following
    catching_up            ─ peer_silent ──────────▶ asking_voters
    following              ─ peer_silent ──────────▶ taking_over
    following              ─ epoch_handed_over ────▶ serving_replicated
    following              ─ epoch_handed_over_alone ▶ serving_alone
    taking_over            ─ epoch_granted ────────▶ serving_alone
    taking_over            ─ election_lost ────────▶ asking_voters
    serving_replicated     ─ peer_silent ──────────▶ isolating
    serving_replicated     ─ handover_due ─────────▶ handing_over
    isolating              ─ epoch_granted ────────▶ serving_alone
    isolating              ─ election_lost ────────▶ fenced
    serving_alone          ─ peer_caught_up ───────▶ readmitting_peer
    readmitting_peer       ─ epoch_granted ────────▶ serving_replicated
    readmitting_peer       ─ election_lost ────────▶ serving_alone
    handing_over           ─ epoch_granted ────────▶ catching_up
    handing_over           ─ election_lost ────────▶ fenced
    every active state     ─ lease_lost, superseded, store_failed ▶ fenced

C{peer_heard} (a heartbeat from the active, an acknowledgement from the
backup) restarts the silence timer in the states that watch the peer: a
backup waits C{lease-timeout} for the active's heartbeats, an active
C{replication-timeout} for its backup's acknowledgements; the timer
feeds C{peer_silent}.  Elsewhere C{peer_heard} is ignored.

C{store_failed} (the active's store could not commit a change it had
already sent to the backup, L{meshroute.ha.gate}) fences an active: it
must not commit another change at that position.  An instance that no
longer serves ignores it.

The machine decides; it does nothing itself.  Its outputs are calls on a
L{RoleActions} (start serving, stop serving, request votes, hold
acknowledgements, ...), which the HA instance implements
(L{meshroute.ha.instance.HAInstance}) and tests record.  The inputs come from the start-up
rule (L{meshroute.harules.quorum.decide_start}), elections
(L{meshroute.harules.election}), the lease (L{meshroute.harules.lease}) and
replication.  An input the current state has no transition for raises
C{NoTransition} before any output: an election result arriving in a
state that asked for none cannot make an instance active.
"""

from dataclasses import dataclass, field
from typing import Protocol

from automat import TypeMachineBuilder
from twisted.internet.interfaces import IDelayedCall, IReactorTime

from meshroute.harules.settings import HASettings

STARTING = "starting"
BACKUP_SYNCING = "backup-syncing"
BACKUP_IN_SYNC = "backup-in-sync"
ACTIVE_REPLICATED = "active-replicated"
ACTIVE_ALONE = "active-alone"
FENCED = "fenced"

#: Why an instance stops serving (C{RoleActions.stop_serving}).
HANDING_OVER = "handing-over"
NO_MAJORITY = "no-majority"
LEASE_LOST = "lease-lost"
SUPERSEDED = "superseded"
STORE_FAILED = "store-failed"


class RoleActions(Protocol):
    """
    What the role machine asks of the router.
    """

    def state_changed(self, state: str) -> None:
        "The API state changed (an C{ha.*} event, the admin API)."

    def ask_voters(self) -> None:
        "Ask every voter who is active (check-for-live-server)."

    def follow(self) -> None:
        "Connect to the active and replicate from it (catching up first)."

    def stop_following(self) -> None:
        "Drop the replication connection to the (former) active."

    def request_votes(self, alone: bool) -> None:
        "Start an election for the next epoch for this instance."

    def hand_over(self) -> None:
        "Start an election for the next epoch for the peer (replicated)."

    def start_serving(self, epoch: int) -> None:
        "Become the router: connectors, client traffic, deliveries."

    def serve_in(self, epoch: int) -> None:
        "Go on serving, in the new epoch C{epoch}: tag everything with it."

    def stop_serving(self, reason: str) -> None:
        "Stop accepting and delivering at once."

    def hold_acknowledgements(self) -> None:
        "Confirm nothing more until told (the backup is not answering)."

    def release_acknowledgements(self) -> None:
        "Confirm again: a majority recorded that this instance runs alone."


class RoleInputs(Protocol):
    """
    Everything that can happen to an instance's role.
    """

    def active_found(self) -> None:
        "The voters name another instance as active."

    def holds_newest_data(self) -> None:
        "Nothing is active and this instance holds the newest data."

    def must_wait(self) -> None:
        "No decision yet, or the peer should resume, or this one is stale."

    def activation_forced(self, epoch: int) -> None:
        "C{meshroute ha force-activate}: serve alone in C{epoch}, asking no voter."

    def caught_up(self) -> None:
        "The backup's replication reached the active's live stream."

    def peer_heard(self) -> None:
        "A heartbeat from the active, or an acknowledgement from the backup."

    def peer_silent(self) -> None:
        "The peer was not heard for its timeout."

    def peer_caught_up(self) -> None:
        "The returning peer reached this active's live stream."

    def epoch_granted(self, epoch: int) -> None:
        "The election this instance started was won."

    def election_lost(self) -> None:
        "The election this instance started was lost."

    def epoch_handed_over(self, epoch: int) -> None:
        "The active handed this in-sync backup its place in epoch C{epoch}."

    def epoch_handed_over_alone(self, epoch: int) -> None:
        "The active, stopping, handed this backup its place in C{epoch}, to run alone."

    def handover_due(self) -> None:
        "Time to hand over to the in-sync peer (failback, graceful stop)."

    def lease_lost(self) -> None:
        "No majority answered heartbeats within lease-timeout."

    def superseded(self, epoch: int) -> None:
        "A voter or neighbour knows a newer epoch."

    def store_failed(self) -> None:
        "The store could not commit a change the backup may already hold."


@dataclass
class RoleCore:
    """
    The role's data and timers.

    @ivar state: the current API state.
    @ivar epoch: the epoch this instance serves (or last served) in.
    """

    clock: IReactorTime
    settings: HASettings
    actions: RoleActions
    state: str = STARTING
    epoch: int = 0
    _silence: IDelayedCall | None = field(default=None, init=False)
    _silence_timeout: float = field(default=0.0, init=False)
    _ask_again: IDelayedCall | None = field(default=None, init=False)

    def enter(self, state: str) -> None:
        if state != self.state:
            self.state = state
            self.actions.state_changed(state)

    def watch_peer(self, inputs: RoleInputs, timeout_ms: int) -> None:
        """
        Expect the peer within C{timeout_ms}, and again after each time
        it is heard.
        """
        self._silence_timeout = timeout_ms / 1000
        self.peer_heard(inputs)

    def peer_heard(self, inputs: RoleInputs) -> None:
        self.stop_watching()
        self._silence = self.clock.callLater(self._silence_timeout, inputs.peer_silent)

    def stop_watching(self) -> None:
        if self._silence is not None and self._silence.active():
            self._silence.cancel()
        self._silence = None

    def ask_voters_later(self) -> None:
        """
        Ask the voters again one heartbeat-interval from now.
        """
        self._ask_again = self.clock.callLater(
            self.settings.heartbeat_interval_ms / 1000, self.actions.ask_voters
        )

    def stop_asking(self) -> None:
        if self._ask_again is not None and self._ask_again.active():
            self._ask_again.cancel()
        self._ask_again = None

    def activate(self, epoch: int, state: str) -> None:
        self.epoch = epoch
        self.enter(state)

    def fence(self, reason: str | None) -> None:
        """
        Stop serving (unless already stopped) and ask who is active now.
        """
        self.stop_watching()
        if reason is not None:
            self.actions.stop_serving(reason)
        self.enter(FENCED)
        self.actions.ask_voters()


def _build_role_machine():
    builder = TypeMachineBuilder(RoleInputs, RoleCore)
    asking_voters = builder.state("asking_voters")
    claiming = builder.state("claiming")
    catching_up = builder.state("catching_up")
    following = builder.state("following")
    taking_over = builder.state("taking_over")
    serving_replicated = builder.state("serving_replicated")
    isolating = builder.state("isolating")
    handing_over = builder.state("handing_over")
    serving_alone = builder.state("serving_alone")
    readmitting_peer = builder.state("readmitting_peer")
    fenced = builder.state("fenced")

    # -- starting, or fenced: the voters decide -------------------------------

    @asking_voters.upon(RoleInputs.active_found).to(catching_up)
    @fenced.upon(RoleInputs.active_found).to(catching_up)
    def follow_active(inputs: RoleInputs, core: RoleCore) -> None:
        core.stop_asking()
        core.enter(BACKUP_SYNCING)
        core.actions.follow()
        core.watch_peer(inputs, core.settings.lease_timeout_ms)

    @asking_voters.upon(RoleInputs.holds_newest_data).to(claiming)
    @fenced.upon(RoleInputs.holds_newest_data).to(claiming)
    def resume(inputs: RoleInputs, core: RoleCore) -> None:
        core.stop_asking()
        core.enter(STARTING)
        core.actions.request_votes(alone=True)

    @asking_voters.upon(RoleInputs.must_wait).loop()
    @fenced.upon(RoleInputs.must_wait).loop()
    def wait(inputs: RoleInputs, core: RoleCore) -> None:
        core.ask_voters_later()

    @asking_voters.upon(RoleInputs.activation_forced).to(serving_alone)
    def forced(inputs: RoleInputs, core: RoleCore, epoch: int) -> None:
        # The operator accepted losing what this instance lacks
        # (docs/ha.md, "Operating a pair"): no election.
        core.activate(epoch, ACTIVE_ALONE)
        core.actions.start_serving(epoch)

    @claiming.upon(RoleInputs.epoch_granted).to(serving_alone)
    def resumed(inputs: RoleInputs, core: RoleCore, epoch: int) -> None:
        core.activate(epoch, ACTIVE_ALONE)
        core.actions.start_serving(epoch)

    @claiming.upon(RoleInputs.election_lost).to(asking_voters)
    def not_resumed(inputs: RoleInputs, core: RoleCore) -> None:
        core.ask_voters_later()

    # -- backup ---------------------------------------------------------------

    @catching_up.upon(RoleInputs.caught_up).to(following)
    def in_sync(inputs: RoleInputs, core: RoleCore) -> None:
        core.enter(BACKUP_IN_SYNC)

    @catching_up.upon(RoleInputs.peer_silent).to(asking_voters)
    def lost_active_unsynced(inputs: RoleInputs, core: RoleCore) -> None:
        # Not promotable: find out who is active now.
        core.actions.stop_following()
        core.enter(STARTING)
        core.actions.ask_voters()

    @following.upon(RoleInputs.peer_silent).to(taking_over)
    def lost_active(inputs: RoleInputs, core: RoleCore) -> None:
        core.actions.request_votes(alone=True)

    @following.upon(RoleInputs.epoch_handed_over).to(serving_replicated)
    def handed_over(inputs: RoleInputs, core: RoleCore, epoch: int) -> None:
        core.activate(epoch, ACTIVE_REPLICATED)
        core.actions.start_serving(epoch)
        core.watch_peer(inputs, core.settings.replication_timeout_ms)

    @following.upon(RoleInputs.epoch_handed_over_alone).to(serving_alone)
    def handed_over_alone(inputs: RoleInputs, core: RoleCore, epoch: int) -> None:
        # The active stops: there is no backup to wait for.
        core.stop_watching()
        core.activate(epoch, ACTIVE_ALONE)
        core.actions.start_serving(epoch)

    @taking_over.upon(RoleInputs.epoch_granted).to(serving_alone)
    def took_over(inputs: RoleInputs, core: RoleCore, epoch: int) -> None:
        core.actions.stop_following()
        core.activate(epoch, ACTIVE_ALONE)
        core.actions.start_serving(epoch)

    @taking_over.upon(RoleInputs.election_lost).to(asking_voters)
    def not_taken_over(inputs: RoleInputs, core: RoleCore) -> None:
        core.actions.stop_following()
        core.enter(STARTING)
        core.actions.ask_voters()

    # -- active ---------------------------------------------------------------

    @serving_replicated.upon(RoleInputs.peer_silent).to(isolating)
    def lost_backup(inputs: RoleInputs, core: RoleCore) -> None:
        # Never confirm what a promotable backup lacks: hold until a
        # majority records that this instance runs alone.
        core.actions.hold_acknowledgements()
        core.actions.request_votes(alone=True)

    @serving_replicated.upon(RoleInputs.handover_due).to(handing_over)
    def hand_over(inputs: RoleInputs, core: RoleCore) -> None:
        core.stop_watching()
        core.actions.stop_serving(HANDING_OVER)
        core.actions.hand_over()

    @isolating.upon(RoleInputs.epoch_granted).to(serving_alone)
    def alone(inputs: RoleInputs, core: RoleCore, epoch: int) -> None:
        core.activate(epoch, ACTIVE_ALONE)
        core.actions.serve_in(epoch)
        core.actions.release_acknowledgements()

    @isolating.upon(RoleInputs.election_lost).to(fenced)
    def cannot_run_alone(inputs: RoleInputs, core: RoleCore) -> None:
        core.fence(NO_MAJORITY)

    @serving_alone.upon(RoleInputs.peer_caught_up).to(readmitting_peer)
    def readmit(inputs: RoleInputs, core: RoleCore) -> None:
        core.actions.request_votes(alone=False)

    @readmitting_peer.upon(RoleInputs.epoch_granted).to(serving_replicated)
    def replicated(inputs: RoleInputs, core: RoleCore, epoch: int) -> None:
        core.activate(epoch, ACTIVE_REPLICATED)
        core.actions.serve_in(epoch)
        core.watch_peer(inputs, core.settings.replication_timeout_ms)

    @readmitting_peer.upon(RoleInputs.election_lost).to(serving_alone)
    def still_alone(inputs: RoleInputs, core: RoleCore) -> None:
        # Nothing changed for the voters: carry on alone, ask again when
        # the peer next reports it caught up.
        pass

    @handing_over.upon(RoleInputs.epoch_granted).to(catching_up)
    def became_backup(inputs: RoleInputs, core: RoleCore, epoch: int) -> None:
        core.enter(BACKUP_SYNCING)
        core.actions.follow()
        core.watch_peer(inputs, core.settings.lease_timeout_ms)

    @handing_over.upon(RoleInputs.election_lost).to(fenced)
    def not_handed_over(inputs: RoleInputs, core: RoleCore) -> None:
        core.fence(None)

    serving = (serving_replicated, isolating, serving_alone, readmitting_peer)
    for state in serving:

        @state.upon(RoleInputs.lease_lost).to(fenced)
        def lease_lost(inputs: RoleInputs, core: RoleCore) -> None:
            core.fence(LEASE_LOST)

        @state.upon(RoleInputs.superseded).to(fenced)
        def superseded(inputs: RoleInputs, core: RoleCore, epoch: int) -> None:
            core.fence(SUPERSEDED)

        @state.upon(RoleInputs.store_failed).to(fenced)
        def store_failed(inputs: RoleInputs, core: RoleCore) -> None:
            core.fence(STORE_FAILED)

    # A commit that fails once the router is stopping (its store finishes
    # what was queued) changes nothing: it serves no more.
    for stopped in (asking_voters, claiming, catching_up, following, taking_over,
                    handing_over, fenced):
        stopped.upon(RoleInputs.store_failed).loop().returns(None)

    # Already stopped serving while handing over: fencing only asks.
    @handing_over.upon(RoleInputs.lease_lost).to(fenced)
    def lease_lost_handing_over(inputs: RoleInputs, core: RoleCore) -> None:
        core.fence(None)

    @handing_over.upon(RoleInputs.superseded).to(fenced)
    def superseded_handing_over(inputs: RoleInputs, core: RoleCore, epoch: int) -> None:
        core.fence(None)

    # -- the peer's liveness ----------------------------------------------------

    for watching in (catching_up, following, serving_replicated):

        @watching.upon(RoleInputs.peer_heard).loop()
        def heard(inputs: RoleInputs, core: RoleCore) -> None:
            core.peer_heard(inputs)

    for deaf in (asking_voters, claiming, taking_over, isolating, handing_over,
                 serving_alone, readmitting_peer, fenced):
        deaf.upon(RoleInputs.peer_heard).loop().returns(None)
    return builder.build()


_ROLE_MACHINE = _build_role_machine()


def start_role(clock: IReactorTime, settings: HASettings, actions: RoleActions,
               forced_epoch: int | None = None) -> tuple[RoleInputs, RoleCore]:
    """
    Start an instance's role: it asks the voters first (always; Artemis'
    C{check-for-live-server}), unless the operator forced its activation.

    @param forced_epoch: given when C{meshroute ha force-activate} recorded
        a forced activation (L{meshroute.ha.records}): the instance serves
        alone in this epoch at once, which the caller chose above every
        epoch it knows.
    @return: the machine's inputs and its core (for C{state} and C{epoch}).
    """
    core = RoleCore(clock, settings, actions)
    inputs = _ROLE_MACHINE(core)
    actions.state_changed(STARTING)
    if forced_epoch is None:
        actions.ask_voters()
    else:
        inputs.activation_forced(forced_epoch)
    return inputs, core
