"""
When the active instance hands the router over to its peer.

A hand-over is the role's (C{handover_due}, L{meshroute.harules.role}):
an election the active runs for its in-sync peer, which then confirms
the epoch with every voter before it serves
(L{meshroute.ha.activation.Activation.confirm_hand_over}).  The active
starts one in two cases:

 - failback (C{allow-failback}, docs/ha.md): the backup, active, has
   readmitted the returning primary in sync in a replicated epoch, and
   the primary acknowledged everything the backup may have confirmed
   while it ran alone (up to the position the replicated epoch began at:
   what follows is confirmed only once acknowledged anyway).  Once handed
   back, the backup follows the primary again or, with C{restart-backup
   = false}, stops;
 - C{failover-on-shutdown}: at a stop, an active serving replicated hands
   over to its in-sync backup first, and waits at most a second for it.
"""

from collections.abc import Callable

from automat import NoTransition
from twisted.internet import defer
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger

from meshroute.harules import role
from meshroute.harules.settings import BACKUP, HASettings

log = Logger()

#: How long a stopping active waits for its hand-over, in seconds.
STOP_HAND_OVER_S = 1.0


class HandOver:
    """
    The hand-overs of the instance C{instance} of C{ha}.

    @param replication: the instance's L{meshroute.ha.instance.ReplicationSide}
        (its C{position} and its backup's C{lag}).
    @param handover_due: the role's input; raises L{NoTransition} when the
        role cannot hand over now (it lost its in-sync peer, or hands over
        already).
    @param serves_replicated_in: whether the instance still serves
        replicated in an epoch, and is not stopping.
    """

    def __init__(self, clock: IReactorTime, ha: HASettings, instance: str, replication,
                 handover_due: Callable[[], None],
                 serves_replicated_in: Callable[[int], bool]) -> None:
        self._clock = clock
        self._ha = ha
        self._instance = instance
        self._replication = replication
        self._handover_due = handover_due
        self._serves_replicated_in = serves_replicated_in
        self._fail_back_at: tuple[int, int] | None = None
        self._failing_back = False
        self._at_stop: defer.Deferred | None = None
        self._stop_timeout = None

    # -- failback ---------------------------------------------------------------

    def serving(self, state: str, epoch: int) -> None:
        """
        The instance serves in C{epoch}, in C{state}: a backup with
        C{allow-failback} serving replicated (the primary in sync) hands
        back once the primary acknowledged the position this epoch begins
        at.
        """
        if (self._ha.role == BACKUP and self._ha.allow_failback
                and state == role.ACTIVE_REPLICATED):
            self._fail_back_at = (epoch, self._replication.position().position)
            self.acknowledged()

    def acknowledged(self) -> None:
        """
        The backup acknowledged more: fail back (after the role finished
        its current transition) if it is due now.
        """
        if self._fail_back_at is None:
            return
        epoch, position = self._fail_back_at
        lag = self._replication.lag()
        if lag is None or self._replication.position().position - lag < position:
            return
        self._fail_back_at = None
        self._clock.callLater(0, self._fail_back, epoch)

    def _fail_back(self, epoch: int) -> None:
        if not self._serves_replicated_in(epoch):
            return
        log.info("HA instance {instance}: the primary is in sync: handing the router back "
                 "(allow-failback)", instance=self._instance)
        try:
            self._handover_due()
        except NoTransition:
            return  # it lost the primary meanwhile, or hands over already
        self._failing_back = True

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
        active serving replicated hands over first.  Fires once handed
        over (L{stop_handed_over}), or after L{STOP_HAND_OVER_S}, or at
        once when there is nothing to hand over.
        """
        if state != role.ACTIVE_REPLICATED or not self._ha.failover_on_shutdown:
            return defer.succeed(None)
        self._at_stop = defer.Deferred()
        self._stop_timeout = self._clock.callLater(STOP_HAND_OVER_S, self.stop_handed_over)
        try:
            self._handover_due()
        except NoTransition:
            # Not with an in-sync backup now (it lost it, or hands over
            # already): nothing to hand over to.
            self.stop_handed_over()
        return self._at_stop

    def stop_handed_over(self) -> None:
        """
        The stopping instance handed over (or waited long enough).
        """
        if self._at_stop is not None and not self._at_stop.called:
            if self._stop_timeout.active():
                self._stop_timeout.cancel()
            self._at_stop.callback(None)
