"""
An MQTT connection's subscriptions and the SUBACKs and UNSUBACKs it owes
(docs/mqtt.md, "Subscriptions").

The client names a subscription by its topic filter; the served session
by a number the adapter gives it.  One SUBSCRIBE (or UNSUBSCRIBE) of
several filters is several commands of the session, each answered on its
own: the acknowledgement (L{Gathering}) is written once every one is.
"""

from dataclasses import dataclass, field


@dataclass(eq=False)
class MqttSubscription:
    """
    One topic filter the client subscribed to: the session's number, the
    QoS granted, and the name of its durable subscription (a persistent
    session's; empty otherwise).
    """

    topic_filter: str
    number: int
    qos: int
    durable: str = ""


@dataclass(eq=False)
class MqttSubscriptions:
    """
    The subscriptions of one connection, by filter and by number.
    """

    by_filter: dict = field(default_factory=dict)
    by_number: dict = field(default_factory=dict)
    _last_number: int = 0

    def add(self, topic_filter: str, qos: int, durable: str = "") -> MqttSubscription:
        """
        A new subscription of C{topic_filter}, numbered for the session.
        """
        self._last_number += 1
        subscription = MqttSubscription(topic_filter, self._last_number, qos, durable)
        self.by_filter[topic_filter] = subscription
        self.by_number[subscription.number] = subscription
        return subscription

    def remove(self, subscription: MqttSubscription) -> None:
        """
        Forget C{subscription} (ended, or refused by the router).
        """
        if self.by_filter.get(subscription.topic_filter) is subscription:
            del self.by_filter[subscription.topic_filter]
        self.by_number.pop(subscription.number, None)


@dataclass(eq=False)
class Gathering:
    """
    A SUBACK or UNSUBACK being gathered: one reason code per filter of
    its packet, in order, None until known.

    @ivar packet: the packet type of the acknowledgement (C{Suback},
        C{Unsuback}).
    @ivar packet_id: the SUBSCRIBE's or UNSUBSCRIBE's packet identifier.
    @ivar codes: the codes, None where a command is not answered yet.
    @ivar sealed: every filter's command was given (answers that come
        while they are being given do not complete it early).
    @ivar sent: the acknowledgement was written.
    """

    packet: type
    packet_id: int
    codes: list
    sealed: bool = False
    sent: bool = False

    @classmethod
    def of(cls, packet: type, packet_id: int, n: int) -> "Gathering":
        return cls(packet, packet_id, [None] * n)

    def answer(self, index: int, code: int) -> None:
        self.codes[index] = code

    def due(self) -> bool:
        """
        Whether the acknowledgement is to be written now (once).
        """
        if self.sent or not self.sealed or None in self.codes:
            return False
        self.sent = True
        return True
