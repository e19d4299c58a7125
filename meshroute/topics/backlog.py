"""
Topic publishers held while the fan-out is behind.

A publication is accepted into its router's C{$topic} queue and answered
there (confirmed, PUBACKed, receipted): durable at the origin is the
promise, and the fan-out makes its copies afterwards
(docs/topics.md).  So the limit on a session's sends in progress bounds
nothing here: a client publishing faster than the fan-out copies, or
many clients together, would grow C{$topic} without end, and every
other publisher's publications would wait behind theirs.

The rule, as RabbitMQ's flow control and its blocked connections: once
C{$topic} holds L{TopicBacklog.hold_at} publications, the router stops
reading every connection that publishes to a topic (the sessions layer
pauses the one that does, at its next publication: it asks
L{TopicBacklog.holds_publishers} for each read's sends), and reads them
all again once a fan-out turn ends with half that or fewer.  TCP then
slows the publishers down; connections that only send to queues or
consume are never held.  What a held connection had read already is
still accepted, and the depth counts committed publications only, so
C{$topic} may pass the limit by the publishers' sends in progress (at
most 8,192 per session: L{meshroute.sessions.sends}).

Pure: C{$topic}'s depth is asked of a function, and the fan-out reports
it after each of its turns (L{TopicBacklog.measured}); no timer, no
reactor.
"""

from collections.abc import Callable

#: Publications waiting in C{$topic} at which topic publishers are held:
#: sixteen fan-out turns of 256, a few seconds of a loaded fan-out.
DEFAULT_HOLD_AT = 4096


class TopicBacklog:
    """
    Whether this router holds its topic publishers now, and who waits.

    @ivar hold_at: C{$topic}'s depth at which publishers are held.
    @ivar resume_at: the depth at which they are read again (half).
    @ivar holding: publishers are held now.

    @param depth: C{$topic}'s depth now.
    @param changed: called C{(holding, depth)} when publishers start or
        stop being held (the router logs it).
    """

    def __init__(self, hold_at: int = DEFAULT_HOLD_AT,
                 depth: Callable[[], int] = lambda: 0,
                 changed: Callable[[bool, int], None] = lambda holding, depth: None) -> None:
        self.hold_at = hold_at
        self.resume_at = hold_at // 2
        self.holding = False
        self._depth = depth
        self._changed = changed
        self._waiting: list[Callable[[], None]] = []

    def holds_publishers(self) -> bool:
        """
        Whether a publisher is held now: publishers are held already, or
        C{$topic} reached L{hold_at} since the fan-out's last turn.
        """
        if not self.holding:
            self._hold_if(self._depth())
        return self.holding

    def measured(self, depth: int) -> None:
        """
        A fan-out turn ended with C{depth} publications in C{$topic}:
        hold from L{hold_at} on, release everyone at L{resume_at}.
        """
        if not self.holding:
            self._hold_if(depth)
            return
        if depth <= self.resume_at:
            self.holding = False
            self._changed(False, depth)
            waiting, self._waiting = self._waiting, []
            for resume in waiting:
                resume()

    def _hold_if(self, depth: int) -> None:
        if depth >= self.hold_at:
            self.holding = True
            self._changed(True, depth)

    def wait(self, resume: Callable[[], None]) -> None:
        """
        A publisher held: call C{resume} once publishers are read again.
        """
        self._waiting.append(resume)

    @property
    def waiting(self) -> int:
        "Publishers held now (for C{/api/v1/topics} and the metrics)."
        return len(self._waiting)
