"""
Message expiry: a send may carry a time to live, and a message whose time
ran out before it was delivered is never delivered.

The expiry travels with the message as header
L{meshroute.messages.EXPIRES_HEADER} (absolute wall-clock epoch
milliseconds, set by the origin router when it accepts the send), so it
survives the store and crosses links of every protocol version.  Each
router checks it where a message could move on:

 - at hand-over to a consumer (L{meshroute.router.queues.QueueManager}), and
   when a resumed session would write what it held while disconnected;
 - on arrival over a link, and before a backlog message is sent on one:
   a router that finds it expired does not forward it;
 - and, for messages nobody is about to take, by the L{ExpirySweep}: on a
   timer, a bounded batch of expired entries in queues without consumers
   and in the backlog, in one store call.

An expired message goes to the local queue
L{meshroute.messages.EXPIRED_QUEUE} (its address in header
C{x-original-address}), with a C{message.expired} event; a persistent one
is stored there, a non-persistent one waits there in memory.  When its
sender asked (L{meshroute.messages.NOTIFY_EXPIRY_HEADER}), the router it
expired at sends the sender's session a notice, through the mesh when that
session is at another router (L{meshroute.router.expired.ExpiredMessages.expired}).
"""

from typing import Callable

from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.logger import Logger

from meshroute import events as event_names
from meshroute.messages import EXPIRED_QUEUE, Message

log = Logger()

#: Where a message expired, as C{message.expired} says: in a local queue
#: (at hand-over or by the sweep), in the backlog or an outbox (before it
#: was forwarded), on arrival over a link, or in a client session's queue.
IN_QUEUE = "queue"
IN_BACKLOG = "backlog"
IN_TRANSIT = "transit"
IN_SESSION = "session"

#: Default interval of the expiry sweep, seconds.
SWEEP_INTERVAL_S = 1.0
#: Default most entries one sweep moves (one store transaction).
SWEEP_BATCH = 1000


def now_ms(clock: IReactorTime) -> int:
    """
    C{clock}'s time in epoch milliseconds, what expiries are compared to.
    """
    return int(clock.seconds() * 1000)


def expires_at(clock: IReactorTime, ttl_ms: int) -> int:
    """
    The expiry of a message accepted now with time to live C{ttl_ms}
    (epoch milliseconds; 0 for a C{ttl_ms} of 0: never).
    """
    return now_ms(clock) + ttl_ms if ttl_ms > 0 else 0


def expiring_sends(items: list, clock: IReactorTime, session_id: str) -> list:
    """
    The items of a client's SendBatch as L{meshroute.router.engine.MessageEngine.
    submit_many} takes them: one that carries a time to live (C{[...,
    ttl_ms, notify_expiry]}, client protocol version 6) with its expiry
    and the sending session instead (C{(..., expires_ms, notify_expiry,
    session_id)}); the others as they are (a batch without any is
    returned unchanged).
    """
    if all(len(item) == 5 for item in items):
        return items
    now = now_ms(clock)
    return [
        item if len(item) == 5 else
        (*item[:5], now + item[5] if item[5] > 0 else 0, item[6], session_id)
        for item in items
    ]


def set_aside(message: Message, router: str) -> Message:
    """
    C{message} as it waits in C{router}'s L{EXPIRED_QUEUE}: its address in
    header C{x-original-address} (as a dead-lettered message's).
    """
    return Message(
        msg_id=message.msg_id, origin=message.origin, dest_router=router,
        dest_queue=EXPIRED_QUEUE, body=message.body,
        headers={**message.headers,
                 "x-original-address": f"{message.dest_queue}@{message.dest_router}"},
        hops=message.hops, persistent=message.persistent, accepted_at=message.accepted_at,
    )


def emit_expired(events, message: Message, where: str) -> None:
    """
    The C{message.expired} event of C{message} (as it was addressed),
    which expired C{where} (L{IN_QUEUE}, ...).
    """
    events.emit(event_names.MESSAGE_EXPIRED, msg_id=message.msg_id, origin=message.origin,
                dest=f"{message.dest_queue}@{message.dest_router}", where=where,
                expires_ms=message.expires_ms, persistent=message.persistent)


class ExpirySweep:
    """
    Sets aside expired messages that nothing is about to look at: every
    C{interval_s}, at most C{batch} persistent entries from queues without
    consumers and from the backlog (one store call,
    L{meshroute.interfaces.IMessageStore.sweep_expired}), and the
    expired non-persistent messages waiting in queues without consumers
    (L{meshroute.router.queues.QueueManager.sweep_transient}).  A full batch is
    followed by another at the next reactor turn rather than after the
    interval, so a large expired backlog drains in bounded steps.

    @param expired: called with each persistent message moved (as it was
        addressed) once the move is durable.
    @param store_stopped: the errors the store fails a call with once it
        closed (the store's layer is above this module's).
    """

    def __init__(self, clock: IReactorTime, store, queues, expired: Callable[[Message], None],
                 interval_s: float = SWEEP_INTERVAL_S, batch: int = SWEEP_BATCH,
                 store_stopped: tuple[type[Exception], ...] = ()) -> None:
        self._clock = clock
        # What the store fails a sweep with when it closed first (its
        # executor stops on the reactor's shutdown while the router still
        # closes its links): not a failure of the sweep.
        self._store_stopped = store_stopped
        self._store = store
        self._queues = queues
        self._expired = expired
        self._interval_s = interval_s
        self._batch = batch
        self._call: IDelayedCall | None = None
        self._sweeping = False
        self._stopped = True

    def start(self) -> None:
        self._stopped = False
        self._schedule(self._interval_s)

    def stop(self) -> None:
        self._stopped = True
        if self._call is not None and self._call.active():
            self._call.cancel()
        self._call = None

    def _schedule(self, delay: float) -> None:
        if not self._stopped:
            self._call = self._clock.callLater(delay, self.sweep)

    def sweep(self) -> None:
        """
        One tick: sweep now (the timer's call; tests call it too).
        """
        self._call = None
        if self._sweeping:
            return
        now = now_ms(self._clock)
        self._queues.sweep_transient(now)
        self._sweeping = True
        d = self._store.sweep_expired(now, self._queues.busy(), self._batch)
        d.addCallbacks(self._swept, self._failed)

    def _swept(self, moved: list) -> None:
        self._sweeping = False
        for message in moved:
            self._expired(message)
        if moved:
            self._queues.notify(EXPIRED_QUEUE)
        self._schedule(0 if len(moved) >= self._batch else self._interval_s)

    def _failed(self, failure) -> None:
        self._sweeping = False
        if self._store_stopped and failure.check(*self._store_stopped):
            log.info("sweeping expired messages: not done, the store closed")
            return
        log.failure("sweeping expired messages", failure)
        self._schedule(self._interval_s)
