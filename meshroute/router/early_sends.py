"""
Which of a client batch's sends leave for their next hop before their
accept is committed at this router, their origin (docs/routing.md,
"Forwarding while the origin's commit is in flight").

A paced persistent message used to wait at its origin for the commit of
its accept (and often of its link's assign) before its transfer left,
and then at its destination for the commit of its receive: two fsyncs
in series.  A send that goes early overlaps them.  It may, only when
nothing for its destination router waits ahead of it at this router, so
that it cannot overtake a producer's earlier message: no backlog for that
router, none being accepted into it, none in the outbox of a peer that is
no longer its next hop (L{Forwarding.early_channel
<meshroute.router.forwarding.Forwarding.early_channel>}), and no earlier
send of the same batch for it went another way; and only on a link that
is C{ready} (nothing being assigned or replayed) with room in its window
and in its durably reserved block of sequence numbers
(L{PeerChannel.early_room<meshroute.router.peer_channel.PeerChannel.early_room>}).
Once one send for a router goes to the backlog, the batch's later ones
for it follow it there.
"""

from twisted.internet.defer import Deferred
from twisted.python.failure import Failure

from meshroute.messages import Message


class EarlySends:
    """
    The early sends of one client batch, gathered per link.

    @param forwarding: L{meshroute.router.forwarding.Forwarding}.
    @param message_events: L{meshroute.router.message_events.MessageEvents}.
    @param backlog_depth: C{backlog_depth(router)}: the messages for it in
        the store's backlog.
    @param accepting: C{accepting(router)}: messages for it submitted to
        the store and not yet in its backlog.
    @param now: the time (epoch milliseconds): an expired send is not
        forwarded, its link sets it aside.
    """

    def __init__(self, forwarding, message_events, backlog_depth, accepting,
                 now: int) -> None:
        self._forwarding = forwarding
        self._events = message_events
        self._backlog_depth = backlog_depth
        self._accepting = accepting
        self._now = now
        # The link each router's sends may take early; None once they may not.
        self._routers: dict[str, object] = {}
        # Per link: [messages, bytes] of room left; the sends taken, with
        # their positions in the batch.
        self._rooms: dict[object, list[int]] = {}
        self._taken: dict[object, list[tuple[int, Message]]] = {}

    def take(self, position: int, message: Message) -> bool:
        """
        Whether C{message}, the batch's send at C{position}, goes early
        (it is then sent by L{send}); if not, it goes to the backlog, and
        so do the batch's later sends for its router.
        """
        router = message.dest_router
        if router in self._routers:
            channel = self._routers[router]
        else:
            channel = self._routers[router] = self._channel(router)
        if channel is None:
            return False
        room = self._rooms[channel]
        size = len(message.body)
        if room[0] < 1 or size > room[1] or (message.headers and message.expired(self._now)):
            self._routers[router] = None
            return False
        room[0] -= 1
        room[1] -= size
        self._taken[channel].append((position, message))
        return True

    def hold(self, router: str) -> None:
        """
        A send for C{router} goes to the backlog (it carries a duplicate
        id): the batch's later ones for it follow it there.
        """
        self._routers[router] = None

    def _channel(self, router: str):
        if self._backlog_depth(router) or self._accepting(router):
            return None
        channel = self._forwarding.early_channel(router)
        if channel is not None and channel not in self._rooms:
            self._rooms[channel] = list(channel.early_room())
            self._taken[channel] = []
        return channel

    def send(self, outcomes: list) -> list[Deferred]:
        """
        Send what was taken, one store call per link.  Once that is
        durable, each send's outcome is its message id (put in
        C{outcomes} at its position, with C{message.accepted}); if it
        failed, the store's L{Failure}.

        @return: a Deferred per link, firing (with None) once its sends'
            outcomes are in C{outcomes}.
        """
        sent = []
        for channel, taken in self._taken.items():
            if taken:
                d = channel.send_early([message for _, message in taken])
                sent.append(d.addBoth(self._answered, taken, outcomes))
        return sent

    def _answered(self, result, taken: list, outcomes: list) -> None:
        if isinstance(result, Failure):
            for position, _ in taken:
                outcomes[position] = result
            return None
        self._events.accepted([message for _, message in taken])
        for position, message in taken:
            outcomes[position] = message.msg_id
        return None
