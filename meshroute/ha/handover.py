"""
When the active instance hands the router over to its peer.

A hand-over is the role's (C{handover_due}, L{meshroute.harules.role}):
an election the active runs for its in-sync peer, which then confirms
the epoch with every voter before it serves
(L{meshroute.ha.activation.Activation.confirm_hand_over}).  The active
starts one in two cases:

 - failback (C{allow-failback}, docs/ha.md): the backup, active, has
   readmitted the returning primary in sync in a replicated epoch.  Once
   handed back, the backup follows the primary again or, with
   C{restart-backup = false}, stops;
 - C{failover-on-shutdown}: at a stop, an active serving replicated hands
   over to its in-sync backup first, and waits at most a second for it.

Either way only when the peer can take the router, and can learn that
it was handed it:

 - the peer acknowledged the start record of the replicated epoch
   (L{meshroute.ha.instance.ReplicationSide.peer_position}): it holds
   everything the active ever confirmed (what the active confirmed
   alone comes before that record, what follows it is confirmed only
   once acknowledged), and its own position names the epoch, so that the
   voters find it in sync by its own word, not only by the active's;
 - the active's vote connection to the peer's voter is up: the peer
   learns of a hand-over only from its own voter, which grants it the
   epoch at the active's request.

The election names the peer's position as the active knows it, not the
active's own (whose last changes, never confirmed, the peer may lack):
what the voters record of the candidate is then what it holds.  Should
the peer still miss the hand-over (the vote connection closed as the
request crossed it, and the active stopped), it is the candidate those
voters granted, in sync by what it held then, and it takes the router by
itself once the active is silent, as after a failover.
"""

from collections.abc import Callable

from automat import NoTransition
from twisted.internet import defer
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger

from meshroute.harules import role
from meshroute.harules.quorum import LogPosition
from meshroute.harules.settings import BACKUP, HASettings

log = Logger()

#: How long a stopping active waits for its hand-over, in seconds.
STOP_HAND_OVER_S = 1.0


class HandOver:
    """
    The hand-overs of the instance C{instance} of C{ha}.

    @param replication: the instance's L{meshroute.ha.instance.ReplicationSide}
        (its C{peer_position}).
    @param peer_voter_reachable: whether the vote connection to the
        peer's voter is up.
    @param handover_due: the role's input; raises L{NoTransition} when the
        role cannot hand over now (it lost its in-sync peer, or hands over
        already).
    @param serves_replicated_in: whether the instance still serves
        replicated in an epoch, and is not stopping.

    @ivar peer_position: the peer's position the hand-over under way
        names (what the peer acknowledged when it began).
    """

    def __init__(self, clock: IReactorTime, ha: HASettings, instance: str, replication,
                 peer_voter_reachable: Callable[[], bool],
                 handover_due: Callable[[], None],
                 serves_replicated_in: Callable[[int], bool]) -> None:
        self._clock = clock
        self._ha = ha
        self._instance = instance
        self._replication = replication
        self._peer_voter_reachable = peer_voter_reachable
        self._handover_due = handover_due
        self._serves_replicated_in = serves_replicated_in
        self.peer_position: LogPosition | None = None
        self._fail_back_in: int | None = None
        self._said_unreachable = False
        self._failing_back = False
        self._at_stop: defer.Deferred | None = None
        self._stop_due = False
        self._stop_timeout = None

    def _peer_ready(self) -> bool:
        """
        Whether the peer can take the router now, and learn of it.
        """
        if self._replication.peer_position() is None:
            return False
        if self._peer_voter_reachable():
            self._said_unreachable = False
            return True
        if not self._said_unreachable:
            self._said_unreachable = True
            log.info("HA instance {instance}: the peer is in sync, but the vote connection to "
                     "its voter is down: handing over once it is up",
                     instance=self._instance)
        return False

    def _hand_over(self) -> bool:
        """
        Start the hand-over, naming the peer's position now; whether the
        role took it.
        """
        self.peer_position = self._replication.peer_position()
        try:
            self._handover_due()
        except NoTransition:
            return False
        return True

    # -- failback ---------------------------------------------------------------

    def serving(self, state: str, epoch: int) -> None:
        """
        The instance serves in C{epoch}, in C{state}: a backup with
        C{allow-failback} serving replicated (the primary in sync) hands
        back once the primary is ready (L{acknowledged}).
        """
        if (self._ha.role == BACKUP and self._ha.allow_failback
                and state == role.ACTIVE_REPLICATED):
            self._fail_back_in = epoch
            self.acknowledged()

    def acknowledged(self) -> None:
        """
        The peer acknowledged more, or is alive (each heartbeat-interval):
        hand over (after the role finished its current transition) if it
        is due and the peer is ready now.
        """
        if self._stop_due and self._peer_ready():
            self._clock.callLater(0, self._stop_hand_over)
        if self._fail_back_in is None or not self._peer_ready():
            return
        epoch, self._fail_back_in = self._fail_back_in, None
        self._clock.callLater(0, self._fail_back, epoch)

    def _fail_back(self, epoch: int) -> None:
        if not self._serves_replicated_in(epoch):
            return
        log.info("HA instance {instance}: the primary is in sync: handing the router back "
                 "(allow-failback)", instance=self._instance)
        # Refused: it lost the primary meanwhile, or hands over already.
        self._failing_back = self._hand_over()

    def handed_back(self) -> bool:
        """
        Whether the instance, following now, has just failed back (told
        once per failback).
        """
        handed, self._failing_back = self._failing_back, False
        return handed

    # -- at a stop ----------------------------------------------------------------

    def at_stop(self, state: str) -> defer.Deferred:
        """
        The instance stops, in C{state}: with C{failover-on-shutdown}, an
        active serving replicated hands over first, once its peer is
        ready.  Fires once handed over (L{stop_handed_over}), or after
        L{STOP_HAND_OVER_S} (handed over or not: a peer not ready by then
        takes over by itself once this instance is silent), or at once
        when there is nothing to hand over.
        """
        if state != role.ACTIVE_REPLICATED or not self._ha.failover_on_shutdown:
            return defer.succeed(None)
        self._at_stop = defer.Deferred()
        self._stop_timeout = self._clock.callLater(STOP_HAND_OVER_S, self.stop_handed_over)
        self._stop_due = True
        self._stop_hand_over()
        return self._at_stop

    def _stop_hand_over(self) -> None:
        if not self._stop_due or not self._peer_ready():
            return
        self._stop_due = False
        if not self._hand_over():
            # Not with an in-sync backup now (it lost it, or hands over
            # already): nothing to hand over to.
            self.stop_handed_over()

    def stop_handed_over(self) -> None:
        """
        The stopping instance handed over (or waited long enough).
        """
        self._stop_due = False
        if self._at_stop is not None and not self._at_stop.called:
            if self._stop_timeout.active():
                self._stop_timeout.cancel()
            self._at_stop.callback(None)
