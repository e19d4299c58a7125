"""
Whether a client is still there, whatever protocol its connection speaks:
what its listener's L{meshroute.sessions.watch.ConnectionWatch} asks
every connection each C{connection-ttl-check-interval}, and the bytes the
listener holds for it.

The connection TTL: a connection silent (no whole frame) for its TTL is
aborted (C{ttl_expired}).  Bytes of a frame not yet complete are not
life: a client trickling a frame byte by byte is as silent as one sending
nothing.

Partial frames: a connection whose current frame began more than
L{PARTIAL_FRAME_TIMEOUT_S} ago and is still incomplete is aborted
(C{frame_overdue}), whatever its TTL (even -1).  The bytes of partial
frames held for all connections of a listener are bounded (a
L{BufferBudget}, by default L{MAX_BUFFERED_FRAMES} frames of the largest
size); a connection whose partial frame would pass the bound is aborted
(C{buffers_full}).  Either way the session stays resumable, as after a
TTL expiry, and the reason is logged.
"""

from dataclasses import dataclass

from twisted.internet.interfaces import IReactorTime

from meshroute.wire import client_frames as f

#: How long a client may take to send one frame, from its first byte to
#: its last: 4 MiB at 1 Mbit/s takes 34 s.
PARTIAL_FRAME_TIMEOUT_S = 60.0

#: The default bound of the bytes of partial frames a listener holds for
#: all its connections together, in frames of the largest size.
MAX_BUFFERED_FRAMES = 8

#: Slack when comparing silence with a TTL, so that float clocks never
#: close a connection a hair before its TTL nor miss the check that
#: reaches it.
EPSILON_S = 1e-6


@dataclass(eq=False)
class BufferBudget:
    """
    The bytes of partial frames one listener holds for all its connections,
    and their bound.

    @ivar limit: the bound, at least one frame of the largest size.
    @ivar held: bytes held now.
    """

    limit: int = MAX_BUFFERED_FRAMES * f.MAX_FRAME_SIZE
    held: int = 0


@dataclass(eq=False)
class Liveness:
    """
    When one connection's client was last heard, and the partial frame it
    is sending.

    @ivar budget: its listener's L{BufferBudget}.
    @ivar made: when the connection was made (clock seconds).
    @ivar last_heard: when the client last sent a whole frame.
    @ivar partial_since: when the frame the client is sending began, while
        it is incomplete.
    @ivar buffered: the bytes of that frame held, counted in C{budget}.
    """

    clock: IReactorTime
    budget: BufferBudget
    made: float = 0.0
    last_heard: float = 0.0
    partial_since: float | None = None
    buffered: int = 0

    def __post_init__(self) -> None:
        self.made = self.last_heard = self.clock.seconds()

    def read(self, whole_frames: int, pending: int) -> bool:
        """
        The client's bytes were decoded into C{whole_frames} frames, and
        C{pending} bytes of the next frame are held.

        @return: whether the listener's buffers have room for them.
        """
        now = self.clock.seconds()
        if whole_frames:
            self.last_heard = now
        if not pending:
            self.partial_since = None
        elif whole_frames or self.partial_since is None:
            self.partial_since = now
        return self._hold(pending)

    def heard_again(self) -> None:
        """
        The router reads the connection again after holding it: its
        silence, and the partial frame it was sending, count from now.
        """
        now = self.clock.seconds()
        self.last_heard = now
        if self.partial_since is not None:
            self.partial_since = now

    def release(self) -> None:
        "The connection is gone: the listener holds nothing more for it."
        self._hold(0)

    def _hold(self, pending: int) -> bool:
        budget = self.budget
        budget.held += pending - self.buffered
        self.buffered = pending
        return budget.held <= budget.limit

    def silent_for(self, ttl_ms: int, now: float) -> bool:
        """
        Whether the client has sent no whole frame for C{ttl_ms} (-1:
        never too long).
        """
        return ttl_ms != -1 and now - self.last_heard >= ttl_ms / 1000 - EPSILON_S

    def frame_late(self, now: float) -> bool:
        """
        Whether the frame the client is sending began more than
        L{PARTIAL_FRAME_TIMEOUT_S} ago.
        """
        return (self.partial_since is not None
                and now - self.partial_since >= PARTIAL_FRAME_TIMEOUT_S - EPSILON_S)

    def older_than(self, timeout_s: float, now: float) -> bool:
        "Whether the connection was made at least C{timeout_s} ago."
        return now - self.made >= timeout_s - EPSILON_S
