"""
The bound of a client session's own queue (Diffusion's client
reconnection): the deliveries the session holds for its client beyond
what the transport holds, while the client is away or does not read.

A connected session holds at most C{queue-depth} (C{[clients]}); a
disconnected one at most C{max-depth} (C{[clients.reconnect]}), the
larger bound, so that a client that comes back finds what arrived while
it was away.  After it returns the bound stays at C{max-depth} until the
queue has drained to L{REVERT_FRACTION} of it, and only then reverts to
C{queue-depth}: a client resuming with a full queue is not cut back at
once.  What happens at the bound is the session's business
(L{meshroute.sessions.served}): persistent messages stay in their
queues, non-persistent ones are dropped as C{max-depth-policy} says.

Pure: no reactor, no I/O.
"""

from dataclasses import dataclass

#: How far (a fraction of C{max-depth}) the queue of a returned client
#: must drain before its bound reverts to C{queue-depth}.
REVERT_FRACTION = 0.8


@dataclass
class SessionDepth:
    """
    The bound in force for one session's queue.

    @ivar queue_depth: the bound of a connected session.
    @ivar max_depth: the bound while disconnected, and after a return
        until the queue drained to L{REVERT_FRACTION} of it.
    @ivar expanded: C{max_depth} is in force.
    """

    queue_depth: int
    max_depth: int
    expanded: bool = False

    def __post_init__(self) -> None:
        if not 0 <= self.queue_depth <= self.max_depth:
            raise ValueError(f"queue-depth ({self.queue_depth}) must be between 0 and "
                             f"max-depth ({self.max_depth})")

    @property
    def limit(self) -> int:
        "How many deliveries the session's queue may hold now."
        return self.max_depth if self.expanded else self.queue_depth

    def disconnected(self) -> None:
        "The client is gone: the larger bound applies."
        self.expanded = True

    def drained_to(self, queued: int) -> None:
        """
        The client is back and its queue now holds C{queued}: revert to
        C{queue_depth} once that is at most L{REVERT_FRACTION} of
        C{max_depth}.
        """
        if self.expanded and queued <= self.max_depth * REVERT_FRACTION:
            self.expanded = False
