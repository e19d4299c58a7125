"""
What one reactor turn submits to the store, gathered to commit together
at the turn's end: the turn executor's whole schedule
(L{meshroute.store.turn_executor}), and the adaptive executor's for the
turns it commits on the reactor thread
(L{meshroute.store.adaptive_executor}).
"""

from twisted.internet.interfaces import IDelayedCall, IReactorTime

from meshroute.store.transactions import RELAXED_DELAY_S


class TurnGathering:
    """
    The items (C{(kind, fn, args, deferred)}, in submission order)
    submitted since the last hand-over, handed to C{ready(items)} when the
    reactor turn that submitted the first of them has ended.

    The turn ends after the reactor's next pass over its sockets, not
    before it: two C{callLater(0)}s in a row (the reactor runs a call
    scheduled by a call on its next iteration, after polling).  A
    transport's C{write} only buffers; the reactor sends when it polls.
    With one C{callLater(0)} the turn's writes waited behind its fsync,
    so an origin's early send (docs/routing.md, "Forwarding while the
    origin's commit is in flight") left for the next hop only once the
    origin's own commit was done: the very wait early sends take away.
    The pass costs one poll that does not block; what arrives during it
    joins the commit.

    Relaxed items alone (L{meshroute.store.transactions}, "Relaxed
    commits") wait up to L{RELAXED_DELAY_S} instead, or for the next item
    that is not relaxed, and go with it.

    @ivar delay_s: how long after the turn's end the items are handed
        over: 0 (a test's executor may wait longer, for a commit that
        takes time: see L{meshroute.testing.memory_mesh.LaggingExecutor}).
    """

    delay_s = 0.0

    def __init__(self, clock: IReactorTime, ready) -> None:
        """
        @param clock: where the turn's end and the relaxed delay are
            scheduled.
        @param ready: called with the gathered items, once per hand-over.
        """
        self._clock = clock
        self._ready = ready
        self._items: list = []
        # The scheduled hand-over, and whether it is the turn's end (else
        # the relaxed delay).
        self._call: IDelayedCall | None = None
        self._soon = False

    def __bool__(self) -> bool:
        """
        Whether items wait for their hand-over.
        """
        return bool(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def add(self, item: tuple, relaxed: bool) -> None:
        """
        Gather C{item}; C{relaxed}: it may wait for the relaxed delay.
        """
        self._items.append(item)
        if self._call is None:
            self._soon = not relaxed
            self._call = (self._clock.callLater(0, self._turn_written) if self._soon
                          else self._clock.callLater(RELAXED_DELAY_S, self._hand_over))
        elif not (relaxed or self._soon):
            # Relaxed items were waiting: they go with this one.
            self._call.cancel()
            self._soon = True
            self._call = self._clock.callLater(0, self._turn_written)

    def take(self) -> list:
        """
        The items gathered, now, without waiting for the turn's end: the
        hand-over they waited for is cancelled.
        """
        if self._call is not None and self._call.active():
            self._call.cancel()
        self._call = None
        items, self._items = self._items, []
        return items

    def _turn_written(self) -> None:
        """
        The turn that submitted work ended; its writes go out on the
        reactor's next pass over its sockets, and the hand-over follows
        that pass (the class's docstring says why).
        """
        self._call = self._clock.callLater(self.delay_s, self._hand_over)

    def _hand_over(self) -> None:
        self._call = None
        items, self._items = self._items, []
        self._ready(items)
