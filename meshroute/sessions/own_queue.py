"""
A served session's own queue (docs/client-protocol.md, "The session's own
queue"), as Diffusion's client reconnection keeps one: the deliveries the
session holds for its client beyond what the transport holds, while the
client is away (the session is disconnected) or does not read (its
transport is full), and those behind them, so that deliveries keep their
order.

The queue is bounded as L{meshroute.sessions.depth} says (C{max-depth}
while disconnected, C{queue-depth} while connected).  At the bound the
session's subscriptions take no more persistent messages (they stay in
their queue, where another consumer may take them), and a non-persistent
one is dropped as C{max-depth-policy} says: the oldest non-persistent
message held (C{drop-oldest}), or the new one (C{drop-newest}, or when
every message held is persistent).
"""

from collections import deque
from dataclasses import dataclass, field

from meshroute.sessions.depth import SessionDepth
from meshroute.sessions.settings import DROP_OLDEST
from meshroute.wire import client_frames as f


@dataclass(eq=False)
class OwnQueue:
    """
    What one served session holds for its client, and its bound.

    @ivar session: the L{meshroute.sessions.served.ServedSession} whose
        queue it is: its connection, and its
        L{meshroute.sessions.deliveries.Deliveries} (who owns each
        delivery, and the subscriptions to hold back or drop from).
    @ivar pending: the C{Deliver} frames held, oldest first.
    @ivar depth: the bound in force (L{SessionDepth}).
    @ivar holding: the session's subscriptions hold their persistent
        messages back (the queue is at its bound).
    """

    session: object = field(repr=False)
    pending: deque = field(default_factory=deque)
    depth: SessionDepth | None = None
    holding: bool = False

    def __post_init__(self) -> None:
        settings = self.session.settings
        self.depth = SessionDepth(
            settings.max_depth if settings.queue_depth is None else settings.queue_depth,
            settings.max_depth)

    def hold(self, frame: f.Deliver, persistent: bool) -> None:
        """
        Queue a delivery the client cannot take now, within the bound in
        force (L{SessionDepth.limit}).
        """
        pending = self.pending
        if len(pending) >= self.depth.limit and not persistent:
            deliveries = self.session.deliveries
            victim = None
            if self.session.settings.max_depth_policy == DROP_OLDEST:
                for index, queued in enumerate(pending):
                    if not deliveries.owners[queued.delivery_id][2]:
                        victim = queued
                        del pending[index]
                        break
            if victim is None:
                # drop-newest, or every message queued is persistent (never
                # dropped): the new one goes.
                deliveries.drop(frame)
                return
            deliveries.drop(victim)
        pending.append(frame)
        self._update_holding()

    def flush(self) -> None:
        """
        Write what the queue holds while the transport takes it (until it
        is full again); the bound reverts to C{queue-depth} once the queue
        has drained far enough (L{SessionDepth.drained_to}).
        """
        pending, session = self.pending, self.session
        while pending:
            connection = session.connection
            if connection is None or connection.unread:
                break
            session.deliveries.written(pending.popleft())
        if session.connection is not None:
            self.depth.drained_to(len(pending))
        self._update_holding()

    def forget(self, number: int) -> None:
        """
        Subscription C{number} ended: what the queue held for it is gone
        back to its queue (with the subscription).
        """
        if self.pending:
            self.pending = deque(d for d in self.pending if d.subscription != number)
            self._update_holding()

    def disconnected(self) -> None:
        """
        The client is away: the larger bound applies, and an empty queue
        holds persistent messages back at a bound of 0.
        """
        self.depth.disconnected()
        self._update_holding()

    def clear(self) -> None:
        """
        The session's subscriptions ended: nothing is held, nothing held
        back.
        """
        self.pending.clear()
        self.holding = False

    def _update_holding(self) -> None:
        """
        Hold persistent messages back (in their queues) exactly while the
        queue is full (an empty one, only while disconnected: a bound of 0
        holds nothing back from a client that reads).
        """
        pending = self.pending
        holding = (len(pending) >= self.depth.limit
                   and (self.session.connection is None or bool(pending)))
        if holding != self.holding:
            self.holding = holding
            for subscription in list(self.session.deliveries.subscriptions.values()):
                subscription.hold_persistent(holding)
