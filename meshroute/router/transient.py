"""
The non-persistent path (C{persistent=False}): messages that never touch
the store.  They travel as C{FastTransfer} frames (or, on a version-4
link, in one C{FastTransferBatch} per reactor turn) without sequence or
acknowledgement, so they may be lost with a link or a router and are
never duplicated.  While they have no route, or their link is paused,
they wait in memory, at most C{max-transient-backlog} per destination:
past it producers are refused (L{TransientPath.full}) and, of
those arriving over links, the oldest is dropped.
"""

from collections import defaultdict, deque

from meshroute.expiry import IN_BACKLOG, now_ms
from meshroute.messages import Message
from meshroute.router.message_events import forwarded

#: How many waiting non-persistent messages one reactor turn hands a link
#: once a route appears, so that a large wait does not stall the reactor.
TRANSIENT_BATCH = 1024


class TransientPath:
    """
    Routes router C{name}'s non-persistent messages: into its C{queues},
    on through C{forwarding}'s links, or waiting in memory.

    @param destinations: the routing decisions
        (L{meshroute.router.destinations.Destinations}).
    @param message_events: L{meshroute.router.message_events.MessageEvents}.
    @param expired: L{meshroute.router.expired.ExpiredMessages}.
    """

    def __init__(self, name: str, clock, destinations, forwarding, queues, message_events,
                 expired, max_transient_backlog: int) -> None:
        self._name = name
        self._clock = clock
        self._destinations = destinations
        self._forwarding = forwarding
        self._queues = queues
        self._events = message_events
        self._expired = expired
        self._max_waiting = max_transient_backlog
        self._waiting: dict[str, deque] = defaultdict(deque)

    def waiting(self, router: str) -> int:
        """
        How many non-persistent messages wait for C{router}.
        """
        return len(self._waiting.get(router, ()))

    def full(self, router: str) -> bool:
        """
        Whether as many non-persistent messages wait for C{router} as may
        (C{max-transient-backlog}): a producer's send to it is refused.
        """
        return self.waiting(router) >= self._max_waiting

    def depths(self) -> dict[str, int]:
        """
        C{{router: messages}}: the non-persistent messages waiting in
        memory for each destination router (no route, or its link paused).
        """
        return {router: len(waiting) for router, waiting in self._waiting.items() if waiting}

    def route(self, messages) -> None:
        """
        Route non-persistent messages, in order: each expired one set
        aside, each for this router enqueued, each past the hop limit
        dropped, each other one handed to its next hop's link, or, while
        that link is paused or others wait for the same router, kept
        waiting (the oldest dropped past C{max-transient-backlog}).  Their
        records are written with one call of the event log per event,
        and the messages of one local queue enqueued in one call.
        """
        name = self._name
        beyond_reach = self._destinations.beyond_reach
        channel_towards = self._forwarding.channel_towards
        waiting_for = self._waiting
        now = None
        local: dict[str, list[Message]] = {}
        sent: list[tuple] = []
        dropped: list[tuple] = []
        for message in messages:
            if message.headers:
                if now is None:
                    now = now_ms(self._clock)
                if message.expired(now):
                    self._expired.transient(message)
                    continue
            router = message.dest_router
            if router == name:
                queued = local.get(message.dest_queue)
                if queued is None:
                    local[message.dest_queue] = [message]
                else:
                    queued.append(message)
                continue
            if beyond_reach(message):
                dropped.append((message.msg_id, "max-hops", message.origin))
                continue
            channel = channel_towards(router)
            if channel is not None and not channel.paused and router not in waiting_for:
                sent.append(forwarded(channel.peer, message))
                channel.send_transient(message)
                continue
            waiting = waiting_for[router]
            if len(waiting) >= self._max_waiting:
                oldest = waiting.popleft()
                dropped.append((oldest.msg_id, "max-backlog", oldest.origin))
            waiting.append(message)
        if sent:
            self._events.forwarded_records(sent)
        if dropped:
            self._events.dropped(dropped)
        for queue, queued in local.items():
            self._events.enqueued(queue, queued)
            self._queues.put_transient_many(queue, queued)

    def release_all(self) -> None:
        """
        Routes changed: every destination with messages waiting may have
        a route now.
        """
        for router in [router for router, waiting in self._waiting.items() if waiting]:
            self.release(router)

    def release(self, router: str) -> None:
        """
        A route to C{router} may have appeared, or its link resumed: hand
        its waiting non-persistent messages to the link, a batch per
        reactor turn, until the link pauses (new ones queue behind them, so
        order is kept).
        """
        channel = self._forwarding.channel_towards(router)
        waiting = self._waiting.get(router)
        if channel is None or not waiting:
            return
        now = now_ms(self._clock)
        sent: list[Message] = []
        for _ in range(min(TRANSIENT_BATCH, len(waiting))):
            if channel.paused:
                # The rest waits for link_resumed.
                break
            message = waiting.popleft()
            if message.headers and message.expired(now):
                self._expired.transient(message, IN_BACKLOG)
            else:
                sent.append(message)
                channel.send_transient(message)
        if sent:
            self._events.forwarded(channel.peer, sent)
        if waiting and channel.paused:
            return
        if waiting:
            self._clock.callLater(0, self.release, router)
        else:
            del self._waiting[router]

    def link_resumed(self, peer: str) -> None:
        """
        The link to C{peer} can take messages again.
        """
        for router in list(self._waiting):
            channel = self._forwarding.channel_towards(router)
            if channel is not None and channel.peer == peer:
                self.release(router)
