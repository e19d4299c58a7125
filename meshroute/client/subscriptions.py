"""
Consumers: L{Subscription} and the L{ReceivedMessage}s it delivers.

A subscription talks to the session's deliveries
(L{meshroute.client.deliveries}), never to the L{meshroute.client.Client}
object: the session is what the connection keeps alive, and it must not
keep the application's client object alive, or a forgotten client could
never be collected and warned about.
"""

from dataclasses import dataclass, field
from typing import Callable

from twisted.internet.defer import Deferred, succeed
from twisted.logger import Logger

from meshroute.client.ending import Ending

log = Logger()


@dataclass(eq=False)
class ReceivedMessage:
    """
    One message delivered to a subscription.

    @ivar delivery_id: the router's id of this delivery (per session).
    @ivar redelivered: it was delivered before and not acknowledged.
    """

    msg_id: str
    queue: str
    origin: str
    headers: dict
    body: bytes
    redelivered: bool
    delivery_id: int
    _subscription: "Subscription" = field(repr=False)
    _generation: int = field(default=0, repr=False)
    _acked: bool = field(default=False, repr=False)

    def ack(self) -> None:
        """
        Done with this message: the router deletes it.  Batched with the
        other acknowledgements of this reactor turn; acknowledging twice,
        after the subscription ended, or after the session was recreated
        (the message then comes back, flagged redelivered) does nothing.
        """
        if not self._acked:
            self._acked = True
            self._subscription._acked(self)

    def ack_through(self) -> None:
        """
        Done with this message and every message of its subscription
        delivered before it and not yet acknowledged: a cumulative
        acknowledgement, one small frame for any number of messages (with
        a version-4 router; an older one gets their ids).  The same rules
        as L{ack} otherwise.
        """
        if not self._acked:
            self._subscription._acked_through(self)


class Subscription:
    """
    A consumer of one queue, made by L{meshroute.client.Client.subscribe}.
    When the session is recreated after a failure, the client subscribes
    again with the same number and prefetch, every time; if the router
    refuses, the subscription ends and L{when_ended} says why.

    @ivar queue: the queue consumed.
    @ivar number: its id in the session.
    @ivar prefetch: most messages held unacknowledged at once.
    @ivar max_messages: total deliveries wanted (None: no limit); no credit
        is granted beyond it.
    @ivar received: messages delivered so far.
    @ivar active: delivering (not cancelled, session not ended).
    @ivar confirmed: the router confirmed it once: the application holds
        it, and every recreation of the session makes it again until it is
        cancelled or refused.
    """

    def __init__(self, deliveries, number: int, queue: str,
                 on_message: Callable[[ReceivedMessage], None], prefetch: int,
                 max_messages: int | None) -> None:
        self._deliveries = deliveries
        self.number = number
        self.queue = queue
        self.prefetch = prefetch
        self.max_messages = max_messages
        self._on_message = on_message
        self.received = 0
        self.active = True
        self.confirmed = False
        self._granted = self.initial_credit()
        self._ending = Ending()
        # Delivered and not acknowledged, in delivery order (at most
        # prefetch of them): what ack_through covers.
        self._unacked: dict[int, ReceivedMessage] = {}

    def initial_credit(self) -> int:
        """
        The credit of a Subscribe: C{prefetch}, bounded by what is left of
        C{max_messages}.
        """
        if self.max_messages is None:
            return self.prefetch
        return max(0, min(self.prefetch, self.max_messages - self.received))

    def restart(self) -> int:
        """
        The session was recreated: what was delivered and not acknowledged
        is void, the credit starts over.

        @return: the credit of the new Subscribe.
        """
        credit = self.initial_credit()
        self._granted = self.received + credit
        self._unacked.clear()
        return credit

    def cancel(self) -> Deferred:
        """
        Stop consuming.  Messages not acknowledged go back to the queue.
        Fires once the router confirmed (or at once if the session is
        gone anyway).
        """
        if not self.active:
            return succeed(None)
        self.active = False
        return self._deliveries.unsubscribe(self)

    def when_ended(self) -> Deferred:
        """
        @return: Deferred firing with None once the subscription ended by
            L{cancel} or the client's close; failing with
            L{meshroute.client.SubscribeError} if the router refused to
            make it again after the session was recreated, or with the
            session's error if the session ended otherwise (the client
            gave up reconnecting).
        """
        return self._ending.wait()

    def _finish(self, why: Exception | None) -> None:
        """
        The subscription is over, for C{why} (None: as the application
        asked).  Only the first call counts.
        """
        self.active = False
        self._ending.end(why)

    def _delivered(self, delivery_id: int, msg_id: str, origin: str, headers: dict,
                   body: bytes, redelivered: bool, generation: int) -> None:
        self.received += 1
        message = ReceivedMessage(msg_id, self.queue, origin, headers, body, redelivered,
                                  delivery_id, self, generation)
        self._unacked[delivery_id] = message
        try:
            self._on_message(message)
        except Exception:
            log.failure("on_message of the subscription to {queue} failed", queue=self.queue)

    def _acked(self, message: ReceivedMessage) -> None:
        if not self.active or message._generation != self._deliveries.generation:
            return
        self._unacked.pop(message.delivery_id, None)
        self._deliveries.ack(self, message.delivery_id, self._credit_for(1))

    def _acked_through(self, message: ReceivedMessage) -> None:
        if not self.active or message._generation != self._deliveries.generation:
            return
        unacked, through = self._unacked, message.delivery_id
        covered = []
        for delivery_id in unacked:
            if delivery_id > through:
                break
            covered.append(delivery_id)
        for delivery_id in covered:
            unacked.pop(delivery_id)._acked = True
        self._deliveries.ack_through(self, through, covered, self._credit_for(len(covered)))

    def _credit_for(self, acknowledged: int) -> int:
        """
        The credit C{acknowledged} messages give back: one each, bounded by
        what is left of C{max_messages}.
        """
        credit = acknowledged
        if self.max_messages is not None:
            credit = max(0, min(acknowledged, self.max_messages - self._granted))
        self._granted += credit
        return credit
