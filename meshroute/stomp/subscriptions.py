"""
A STOMP connection's subscriptions (docs/stomp.md, "SUBSCRIBE headers",
"MESSAGE headers"): the client names each by its own id, the served
session by a number the adapter gives it; each has an ack mode, which
says what an C{ACK} or C{NACK} covers and what its C{MESSAGE} frames
carry:

 - C{auto}: the router acknowledges each message once written (the
   adapter's C{ack:auto} acknowledgements); C{MESSAGE} has no C{ack}.
 - C{client}: an C{ACK} covers the message it names and every earlier
   one of the subscription not yet acknowledged.
 - C{client-individual}: an C{ACK} covers the one message it names.

STOMP 1.2 names a message by its C{ack} header (the session's delivery
id); 1.1 and 1.0 by its C{message-id}, which the subscriptions remember
until it is acknowledged (L{meshroute.stomp.versions}).

A C{MESSAGE} names the subscription's C{destination}; one of a topic
subscription names the topic its publication was sent to
(C{/topic/prices.eu.gbp} for a subscription to C{/topic/prices.#}), as a
STOMP client of a broker expects: the headers that carry it through the
mesh (C{x-topic}, and C{x-publication}, the publication's id, which the
C{message-id} of each copy starts with) are the mesh's, not written.
"""

from dataclasses import dataclass, field

from meshroute.messages import EXPIRES_HEADER, PUBLICATION_HEADER, TOPIC_HEADER
from meshroute.stomp.destinations import topic_destination
from meshroute.stomp.frames import StompFrame
from meshroute.stomp.topic_options import TopicOptions
from meshroute.stomp.versions import StompVersion
from meshroute.wire import client_frames as f

#: The three C{ack} modes of SUBSCRIBE.
AUTO = "auto"
CLIENT = "client"
CLIENT_INDIVIDUAL = "client-individual"
ACK_MODES = (AUTO, CLIENT, CLIENT_INDIVIDUAL)

#: The MESSAGE headers the router sets; a message header of the same name
#: is not written (STOMP reads the first of repeated headers).
MESSAGE_HEADERS = frozenset({"subscription", "message-id", "destination", "ack",
                             "redelivered", "expires", "content-length"})
#: And those not written in a topic subscription's: C{destination} says it.
TOPIC_MESSAGE_HEADERS = MESSAGE_HEADERS | {TOPIC_HEADER, PUBLICATION_HEADER}


@dataclass(eq=False)
class StompSubscription:
    """
    One SUBSCRIBE: the client's id and destination, its ack mode, and the
    number the served session knows it by; a topic subscription's shape
    (L{TopicOptions}), None for a queue's.
    """

    id: str
    number: int
    destination: str
    ack: str
    prefetch: int
    topic: TopicOptions | None = None


@dataclass(eq=False)
class StompSubscriptions:
    """
    The subscriptions of one STOMP connection.

    @ivar by_id: the client's id → its subscription.
    @ivar by_number: the served session's number → its subscription.
    @ivar message_ids: (STOMP 1.1 and 1.0) message id → the session's delivery id,
        for the messages not yet acknowledged.
    """

    by_id: dict = field(default_factory=dict)
    by_number: dict = field(default_factory=dict)
    message_ids: dict = field(default_factory=dict)
    _last_number: int = 0

    def add(self, subscription_id: str, destination: str, ack: str, prefetch: int,
            topic: TopicOptions | None = None) -> StompSubscription:
        """
        A new subscription, numbered for the session: to a queue, or
        (C{topic}) to topics.
        """
        self._last_number += 1
        subscription = StompSubscription(subscription_id, self._last_number, destination,
                                         ack, prefetch, topic)
        self.by_id[subscription_id] = subscription
        self.by_number[subscription.number] = subscription
        return subscription

    def remove(self, subscription_id: str) -> StompSubscription | None:
        """
        Forget the subscription the client names C{subscription_id}, if
        it has one.
        """
        subscription = self.by_id.pop(subscription_id, None)
        if subscription is not None:
            self.by_number.pop(subscription.number, None)
        return subscription

    def message(self, subscription: StompSubscription, frame: f.Deliver,
                version: StompVersion) -> StompFrame:
        """
        The C{MESSAGE} of C{frame}, a delivery to C{subscription}, on a
        connection speaking C{version}.
        """
        destination, hidden = subscription.destination, MESSAGE_HEADERS
        if subscription.topic is not None:
            hidden = TOPIC_MESSAGE_HEADERS
            topic = frame.headers.get(TOPIC_HEADER)
            if topic:
                destination = topic_destination(topic)
        headers = [("subscription", subscription.id), ("message-id", frame.msg_id),
                   ("destination", destination)]
        if subscription.ack != AUTO:
            headers.append(("ack", str(frame.delivery_id)))
            if version.ack_header == "message-id":
                self.message_ids[frame.msg_id] = frame.delivery_id
        if frame.redelivered:
            headers.append(("redelivered", "true"))
        expires = frame.headers.get(EXPIRES_HEADER)
        if expires is not None:
            headers.append(("expires", expires))
        headers.extend((name, value) for name, value in frame.headers.items()
                       if name not in hidden)
        return StompFrame("MESSAGE", tuple(headers), frame.body)

    def covered(self, delivery_id: int | None,
                deliveries) -> tuple[StompSubscription | None, list[int]]:
        """
        The subscription and the session delivery ids an ACK or NACK
        naming C{delivery_id} covers: that one, and on a C{client}
        subscription every earlier one not yet acknowledged.  An id the
        session's L{meshroute.sessions.deliveries.Deliveries} does not
        hold (acknowledged already, or given back) covers nothing.
        """
        owner = deliveries.owners.get(delivery_id) if delivery_id is not None else None
        if owner is None:
            return None, []
        subscription = self.by_number.get(owner[0])
        if subscription is None:
            return None, []
        if subscription.ack == CLIENT:
            ids = deliveries.unacknowledged_through(subscription.number, delivery_id)
        else:
            ids = [delivery_id]
        if self.message_ids:
            done = set(ids)
            for msg_id in [m for m, d in self.message_ids.items() if d in done]:
                del self.message_ids[msg_id]
        return subscription, ids
