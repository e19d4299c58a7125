"""
How an HA instance comes to serve, and how it is fenced: what it asks its
voters (L{meshroute.ha.voters.Voters}) and what it makes of their answers.

 - The start-up question, on the way up and whenever its role asks
   again: who is active, decided by L{quorum.decide_start} (follow the
   active, resume with the newest data, or wait); never anything but
   wait while the pair is refused (L{meshroute.ha.pairing}): a mistyped
   C{group-name} must not make a second active for the router's name.
 - An election for the next epoch: for this instance, or for its peer
   (a hand-over: failback, or C{failover-on-shutdown}).  Each asks above
   the newest epoch any answer, record or datum told this instance of.
 - On a backup whose own voter granted it an epoch at the active peer's
   request (the peer learns of a hand-over from its own voter), that
   same epoch asked again as its own candidate: each voter that granted
   it grants it again (rule 1 of L{quorum}), and so the backup learns that
   a majority did before it serves.
 - While it serves, the lease of its epoch (C{Voters.hold_lease}): a
   lease lost, or a voter that knows a newer epoch, fences it.

A forced activation (C{meshroute ha force-activate}) asks no voter: the
instance serves alone at once, in an epoch above every epoch it knows,
and its lease says so.

The outcomes go back to the instance as calls, which it turns into its
role's inputs (L{meshroute.harules.role}).
"""

from collections.abc import Callable

from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger

from meshroute.ha.pairing import Pairing
from meshroute.ha.voters import Voters
from meshroute.harules import quorum
from meshroute.harules.election import Defeat
from meshroute.harules.lease import LEASE_EXPIRED
from meshroute.harules.settings import PRIMARY, HASettings

log = Logger()


class Activation:
    """
    What one instance asks its voters.

    @param granted: the newest epoch this instance's own voter granted.
    @param position: this instance's data position now.
    @param confirmed: the newest change it confirmed to anyone (its
        heartbeats carry it).
    @param stopping: whether the instance is stopping: it asks no more
        start-up questions, and ignores the answers of one under way.

    @ivar newest_epoch: the newest epoch this instance has heard of.
    @ivar forced_epoch: the epoch a forced activation serves in, if any.
    """

    def __init__(self, clock: IReactorTime, ha: HASettings, instance: str, voters: Voters,
                 pairing: Pairing, granted: Callable[[], int],
                 position: Callable[[], quorum.LogPosition],
                 confirmed: Callable[[], quorum.LogPosition],
                 stopping: Callable[[], bool]) -> None:
        self._clock = clock
        self._ha = ha
        self._instance = instance
        self._voters = voters
        self._pairing = pairing
        self._granted = granted
        self._position = position
        self._confirmed = confirmed
        self._stopping = stopping
        self.newest_epoch = 0
        self.forced_epoch: int | None = None
        self._said_stale = False
        self._lease = None

    def heard_of(self, epoch: int) -> None:
        """
        Some record or answer names C{epoch}.
        """
        self.newest_epoch = max(self.newest_epoch, epoch)

    def _question_timeout(self) -> float:
        """
        How long an election or the start-up question waits for voters
        that have not answered: two heartbeats, as long as a heartbeat may
        be late without danger.
        """
        return 2 * self._ha.heartbeat_interval_ms / 1000

    # -- on the way up ------------------------------------------------------

    def force(self, requested_by: str) -> int:
        """
        C{meshroute ha force-activate} asked to serve without the voters:
        the epoch to serve alone in, above every epoch this instance knows
        (its voter's record, its data).
        """
        self.forced_epoch = max(self.newest_epoch, self._position().epoch) + 1
        self.newest_epoch = self.forced_epoch
        log.warn("HA instance {instance}: activation forced by {by}: serving alone in "
                 "epoch {epoch} without asking the voters", instance=self._instance,
                 by=requested_by, epoch=self.forced_epoch)
        return self.forced_epoch

    def ask_start(self, decided: Callable[[quorum.StartDecision], None]) -> None:
        """
        Ask every voter who is active; C{decided} gets what the start-up
        rule decides from their answers.  Whatever election was under
        way, the role no longer awaits it.
        """
        self._voters.abandon()
        if not self._stopping():
            self._voters.ask_start(self._question_timeout(),
                                   lambda answers: self._decide_start(answers, decided))

    def _decide_start(self, answers: list[quorum.StartAnswer],
                      decided: Callable[[quorum.StartDecision], None]) -> None:
        if self._stopping():
            return
        for answer in answers:
            self.heard_of(answer.record.granted_epoch)
        decision = quorum.decide_start(self._instance, self._ha.role == PRIMARY,
                                       self._position(), self._voters.names, answers)
        if self._pairing.refusal is not None:
            # The other instance is of another group (a mistyped
            # group-name): never a second active for this router name.
            decision = quorum.StartDecision.WAIT
        if decision == quorum.StartDecision.STALE and not self._said_stale:
            log.warn("HA instance {instance}: a voter knows of confirmed changes this "
                     "instance lacks; it never activates by itself (it follows an active "
                     "that appears, or meshroute ha force-activate)", instance=self._instance)
        self._said_stale = decision == quorum.StartDecision.STALE
        decided(decision)

    # -- elections ------------------------------------------------------------

    def elect(self, candidate: str, alone: bool, served_epoch: int,
              won: Callable[[int], None], lost: Callable[[], None],
              position: quorum.LogPosition | None = None) -> None:
        """
        Ask every voter for the next epoch for C{candidate} (this instance,
        or its peer): above every epoch this instance knows, C{served_epoch}
        (the one it serves or last served in) among them.

        @param position: the candidate's position, when the candidate is
            the peer (a hand-over names what the peer acknowledged: the
            voters keep it as what their grantee held); this instance's
            own by default.
        """
        epoch = max(self.newest_epoch, served_epoch, self._position().epoch,
                    self._granted()) + 1
        self.newest_epoch = epoch
        request = quorum.VoteRequest(candidate, self._instance, epoch,
                                     position if position is not None else self._position(),
                                     alone)

        def defeated(defeat: Defeat) -> None:
            self.heard_of(defeat.newest_epoch)
            log.info("HA instance {instance}: election lost ({reason}: {refusals})",
                     instance=self._instance, reason=defeat.reason, refusals=defeat.refusals)
            lost()

        self._voters.elect(request, self._question_timeout(), won, defeated)

    def confirm_hand_over(self, epoch: int, alone: bool, until: float,
                          in_sync: Callable[[], bool],
                          handed_over: Callable[[int, bool], None]) -> None:
        """
        Ask every voter for the handed-over C{epoch} as this instance's
        own: each that granted it to this instance grants it again.  A
        voter asked before the active's request reached it refuses
        (C{active-alive}): ask again each heartbeat-interval, until
        C{until} (by then the active's silence has this instance ask for
        an epoch by itself), while C{in_sync}.  C{alone}: the active stops,
        and hands over an epoch to run alone in.
        """
        if not in_sync() or self._clock.seconds() >= until:
            return
        request = quorum.VoteRequest(self._instance, self._instance, epoch,
                                     self._position(), alone)

        def granted(handed: int) -> None:
            if in_sync():
                handed_over(handed, alone)

        def again(defeat: Defeat) -> None:
            self._clock.callLater(self._ha.heartbeat_interval_ms / 1000,
                                  self.confirm_hand_over, epoch, alone, until, in_sync,
                                  handed_over)

        self._voters.elect(request, self._question_timeout(), granted, again)

    # -- the lease --------------------------------------------------------

    def hold_lease(self, epoch: int, expired: Callable[[], None],
                   superseded: Callable[[int], None]) -> None:
        """
        Hold the lease of C{epoch} (instead of any held before); when it
        is lost, C{expired}, or C{superseded} with the newest epoch this
        instance has heard of.
        """
        self.release_lease()

        def lost(reason: str) -> None:
            self._lease = None
            if reason == LEASE_EXPIRED:
                expired()
            else:
                superseded(self.newest_epoch)

        self._lease = self._voters.hold_lease(
            lambda: (self._position(), self._confirmed()),
            self._ha.heartbeat_interval_ms / 1000, self._ha.lease_timeout_ms / 1000,
            lost, forced_epoch=epoch if epoch == self.forced_epoch else None)

    def release_lease(self) -> None:
        if self._lease is not None:
            self._lease.release()
            self._lease = None
