"""
Consumers: L{Subscription} (of a queue), L{TopicSubscription} (of the
publications matching a topic pattern), and the L{ReceivedMessage}s
they deliver.

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
from meshroute.messages import TOPIC_HEADER, TOPIC_PREFIX
from meshroute.topics.retained import RETAINED_HEADER
from meshroute.wire import client_frames as f

log = Logger()


@dataclass(eq=False)
class ReceivedMessage:
    """
    One message delivered to a subscription.

    @ivar queue: what its subscription consumes: a queue's name, or
        C{topic:PATTERN} for a topic subscription's.
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
        other acknowledgements gathered (C{ack_delay_ms}); acknowledging twice,
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

    @property
    def topic(self) -> str | None:
        """
        The topic it was published to (None: it was sent to a queue).
        """
        return self.headers.get(TOPIC_HEADER)

    @property
    def retained(self) -> bool:
        """
        Whether it is a retained message given because its subscription
        was made (MQTT's RETAIN flag on delivery), not a live copy.
        """
        return self.headers.get(RETAINED_HEADER) == "true"


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

    def subscribe_frame(self, credit: int) -> tuple[type, tuple]:
        """
        The frame that makes it, with C{credit}: its type and its fields
        after the command id.
        """
        return f.Subscribe, (self.number, self.queue, credit)

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
        return self._stop(False)

    def _stop(self, forget: bool) -> Deferred:
        if not self.active:
            return succeed(None)
        self.active = False
        return self._deliveries.unsubscribe(self, forget)

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


class TopicSubscription(Subscription):
    """
    A consumer of the publications whose topic matches C{pattern}, made
    by L{meshroute.client.Client.subscribe_topic}: consumed as a queue
    subscription is (C{prefetch}, acknowledgements, made again when the
    session is recreated), its messages' L{ReceivedMessage.topic} the
    topic each was published to.

    @ivar pattern: the topic pattern.
    @ivar durable: the durable subscription's name ("" for a non-durable
        one).
    @ivar client_id: the client id naming the durable subscription.
    @ivar shared: a shared durable subscription.
    @ivar mesh_wide: it was confirmed once its interest reached every
        router reachable then.
    @ivar retained: the retained messages it asked for as it was made
        (C{none}, C{all}, C{if-new}).
    @ivar forgetting: L{unsubscribe} was asked to forget it.
    """

    def __init__(self, deliveries, number: int, pattern: str,
                 on_message: Callable[[ReceivedMessage], None], prefetch: int,
                 max_messages: int | None, durable: str, client_id: str, shared: bool,
                 mesh_wide: bool, retained: str = "none") -> None:
        super().__init__(deliveries, number, TOPIC_PREFIX + pattern, on_message, prefetch,
                         max_messages)
        self.retained = retained
        self.pattern = pattern
        self.durable = durable
        self.client_id = client_id
        self.shared = shared
        self.mesh_wide = mesh_wide
        self.forgetting = False

    def subscribe_frame(self, credit: int) -> tuple[type, tuple]:
        # Made again after a recreation (once confirmed), it need not
        # wait for the mesh, nor be given the retained messages again:
        # the application holds it already.
        confirmed = self.confirmed
        return f.SubscribeTopic, (self.number, self.pattern, credit, self.durable,
                                  self.client_id, self.shared,
                                  self.mesh_wide and not confirmed,
                                  "none" if confirmed else self.retained)

    def unsubscribe(self, forget: bool = False) -> Deferred:
        """
        Stop consuming.  Messages not acknowledged go back to the
        subscription.  A durable subscription keeps collecting for its
        next consumer, unless C{forget}: then it ends for good, and what
        it holds is deleted (a shared one only once its other consumers
        are gone, else this fails with code C{subscription-in-use} and
        it carries on with them).  A non-durable one ends either way.

        @return: Deferred firing once the router confirmed (at once if
            the session is gone, or it was unsubscribed already).
        """
        if forget and self.active:
            self.forgetting = True
        return self._stop(forget)


def checked_durable(durable: str | None, client_id: str | None, shared: bool,
                    default_client_id: str | None) -> tuple[str, str]:
    """
    A topic subscription's C{(durable name, client id)} as its frame
    carries them (C{("", "")} for a non-durable one).  A durable one's
    client id is C{client_id}, else the client's configured one,
    C{default_client_id}: never the per-process default, under which a
    durable subscription would collect for a client that never comes
    back.

    @raise TypeError: C{durable} or C{client_id} is not a string.
    @raise ValueError: a durable subscription without a client id, or a
        shared subscription that is not durable.
    """
    for what, value in (("durable", durable), ("client_id", client_id)):
        if value is not None and type(value) is not str:
            raise TypeError(f"{what} must be a string, not {type(value).__name__}")
    if not durable:
        if shared:
            raise ValueError("only a durable subscription is shared: name it (durable=...)")
        return "", ""
    client_id = client_id or default_client_id
    if not client_id:
        raise ValueError("a durable subscription is named by a client id too: pass client_id, "
                         "or give the client one (ClientOptions(client_id=...))")
    return durable, client_id
