"""
Flooding advertisements once per reactor turn.

A router that floods every advertisement the moment it is news, and
recomputes its routes each time, does work in proportion to the
advertisements that pass through it: when a mesh of N routers starts,
each router's advertisement changes with each of its links and reaches
every router, so each router recomputed its routes (a search over all N)
some 2N times, and passed on versions of one origin's advertisement that
a newer one, arriving in the same turn, had already superseded.

So the news of one reactor turn is gathered here and handed over at the
end of the turn (C{callLater(0)}: the next reactor iteration, after
everything that arrived in this one): the newest advertisement of each
origin, each with the neighbours that already hold it (those it came
from, and a neighbour whose link came up and was sent the whole
database), which it is not sent back to.  The engine then floods one
C{Routes} frame per neighbour and recomputes its routes once.  No
latency is added: the turn's frames are written when it ends either way.
"""

from collections.abc import Callable

from twisted.internet.interfaces import IDelayedCall, IReactorTime

from meshroute.routing.table import Advertisement


class TurnFlood:
    """
    The advertisements to flood at the end of this reactor turn.

    @param clock: schedules the end of the turn.
    @param turn_ended: called at the end of a turn that had news, with
        C{{origin: (advertisement, holders)}}: the newest advertisement of
        each origin and the set of neighbours known to hold it already.
    """

    def __init__(self, clock: IReactorTime,
                 turn_ended: Callable[[dict[str, tuple[Advertisement, set[str]]]], None]
                 ) -> None:
        self._clock = clock
        self._turn_ended = turn_ended
        self._pending: dict[str, tuple[Advertisement, set[str]]] = {}
        self._call: IDelayedCall | None = None
        self._stopped = False

    def news(self, advertisement: Advertisement, holder: str | None = None) -> None:
        """
        C{advertisement} is news (newer than what we held for its origin):
        flood it at the end of the turn, except to C{holder}, the
        neighbour it came from (None: one of our own).  It supersedes a
        pending older one of the same origin.
        """
        self._pending[advertisement.origin] = (
            advertisement, {holder} if holder is not None else set())
        self.changed()

    def heard_again(self, advertisement: Advertisement, holder: str) -> None:
        """
        C{advertisement}, not news, arrived from C{holder}: if it is the
        one pending for its origin, C{holder} does not need it.
        """
        pending = self._pending.get(advertisement.origin)
        if pending is not None and pending[0].order == advertisement.order:
            pending[1].add(holder)

    def sent_everything(self, peer: str) -> None:
        """
        C{peer} was just sent the whole database: it holds every pending
        advertisement.
        """
        for _advertisement, holders in self._pending.values():
            holders.add(peer)

    def changed(self) -> None:
        """
        The routes changed: end the turn with a call to C{turn_ended},
        even if nothing is left to flood.
        """
        if self._call is None and not self._stopped:
            self._call = self._clock.callLater(0, self._end_turn)

    def stop(self) -> None:
        """
        The router is stopping: nothing more is flooded (its links close
        after this, and their news is for no one).
        """
        self._stopped = True
        if self._call is not None and self._call.active():
            self._call.cancel()
        self._call = None
        self._pending = {}

    def _end_turn(self) -> None:
        self._call = None
        pending, self._pending = self._pending, {}
        self._turn_ended(pending)
