"""
An MQTT connection's subscriptions and the SUBACKs and UNSUBACKs it owes
(docs/mqtt.md, "Subscribing"; L{MqttSubscribing}).

The client names a subscription by its topic filter; the served session
by a number the adapter gives it.  One SUBSCRIBE (or UNSUBSCRIBE) of
several filters is several commands of the session, each answered on its
own: the acknowledgement (L{Gathering}) is written once every one is.

A persistent session's subscriptions are durable topic subscriptions
(L{meshroute.mqtt.persistence}); when the session is resumed, each is
consumed again, granted the QoS its name keeps.
"""

from dataclasses import dataclass, field

from twisted.logger import Logger

from meshroute.mqtt import packets as p
from meshroute.mqtt import refusals
from meshroute.mqtt.persistence import durable_name, granted_qos
from meshroute.mqtt.reason_codes import ReasonCode as R
from meshroute.mqtt.topic_names import UnmappableTopic, mesh_pattern, mqtt_filter
from meshroute.mqtt.topic_syntax import shared_subscription
from meshroute.topics.patterns import format_words
from meshroute.topics.retained import ALL, IF_NEW, NONE
from meshroute.wire import client_frames as f

log = Logger()

#: The retained messages a subscription is given as it is made, by its
#: retain handling (5.0; a 3.1.1 SUBSCRIBE reads as 0: every match): 0
#: every match, 1 only if the subscription is new (a persistent
#: session's durable subscription that exists gets none), 2 none.
RETAIN_HANDLING = {0: ALL, 1: IF_NEW, 2: NONE}


@dataclass(eq=False)
class MqttSubscription:
    """
    One topic filter the client subscribed to: the session's number, the
    QoS granted, the name of its durable subscription (a persistent
    session's; empty otherwise), and whether its live copies keep the
    RETAIN flag they were published with (5.0's retain-as-published).
    """

    topic_filter: str
    number: int
    qos: int
    durable: str = ""
    retain_as_published: bool = False


@dataclass(eq=False)
class MqttSubscriptions:
    """
    The subscriptions of one connection, by filter and by number.
    """

    by_filter: dict = field(default_factory=dict)
    by_number: dict = field(default_factory=dict)
    _last_number: int = 0

    def add(self, topic_filter: str, qos: int, durable: str = "",
            retain_as_published: bool = False) -> MqttSubscription:
        """
        A new subscription of C{topic_filter}, numbered for the session.
        """
        self._last_number += 1
        subscription = MqttSubscription(topic_filter, self._last_number, qos, durable,
                                        retain_as_published)
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


@dataclass(eq=False)
class MqttSubscribing:
    """
    SUBSCRIBE and UNSUBSCRIBE as the session's topic subscriptions, and
    the answers that make their acknowledgements.

    @ivar connection: the L{meshroute.mqtt.connection.MqttConnectionCore}:
        its session, its client, its listener's settings, what it writes.
    @ivar subscriptions: the connection's subscriptions.
    """

    connection: object = field(repr=False)
    subscriptions: MqttSubscriptions = field(default_factory=MqttSubscriptions)
    _gathering: dict = field(default_factory=dict)
    _resuming: set = field(default_factory=set)

    def subscribe(self, packet: p.Subscribe) -> None:
        """
        One topic subscription per filter (durable in a persistent
        session), granted QoS 1 at most; a filter subscribed already
        keeps its subscription (another QoS replaces it).
        """
        connection = self.connection
        acknowledgement = Gathering.of(p.Suback, packet.packet_id, len(packet.requests))
        if "subscription_identifier" in (packet.properties or {}):
            # Not served (the CONNACK said so): every filter is refused.
            for index in range(len(packet.requests)):
                acknowledgement.answer(index, R.SUBSCRIPTION_IDENTIFIERS_NOT_SUPPORTED)
            acknowledgement.sealed = True
            self._acknowledge(acknowledgement)
            return
        for index, request in enumerate(packet.requests):
            topic_filter, qos = request.topic_filter, min(request.qos, 1)
            refusal = None
            try:
                pattern = mesh_pattern(topic_filter)
            except UnmappableTopic:
                refusal = R.TOPIC_FILTER_INVALID
            if shared_subscription(topic_filter):
                refusal = R.SHARED_SUBSCRIPTIONS_NOT_SUPPORTED
            if refusal is not None:
                acknowledgement.answer(index, refusal)
                continue
            existing = self.subscriptions.by_filter.get(topic_filter)
            if existing is not None and existing.qos == qos:
                acknowledgement.answer(index, qos)
                continue
            if existing is not None:
                self._end(existing)
            durable = durable_name(topic_filter, qos) if connection.persistent else ""
            subscription = self.subscriptions.add(topic_filter, qos, durable,
                                                  request.retain_as_published)
            command_id = connection.next_command()
            self._gathering[command_id] = (acknowledgement, index, qos, subscription)
            connection.session.take_subscribe_topic(f.SubscribeTopic(
                command_id, subscription.number, pattern, connection.prefetch_count, durable,
                connection.durable_client if durable else "", False, connection.mesh_wide,
                RETAIN_HANDLING[request.retain_handling]))
            if connection.session is None:
                return
        acknowledgement.sealed = True
        self._acknowledge(acknowledgement)

    def unsubscribe(self, packet: p.Unsubscribe) -> None:
        """
        End each filter's subscription (a durable one forgotten).
        """
        filters = packet.topic_filters
        acknowledgement = Gathering.of(p.Unsuback, packet.packet_id, len(filters))
        for index, topic_filter in enumerate(filters):
            subscription = self.subscriptions.by_filter.get(topic_filter)
            if subscription is None:
                acknowledgement.answer(index, R.NO_SUBSCRIPTION_EXISTED)
                continue
            self._end(subscription, (acknowledgement, index, R.SUCCESS, None))
            if self.connection.session is None:
                return
        acknowledgement.sealed = True
        self._acknowledge(acknowledgement)

    def resume(self) -> None:
        """
        A resumed session: its durable subscriptions are consumed again,
        each granted the QoS its name keeps.
        """
        connection = self.connection
        durable = connection.durable_client
        for sub in list(connection.engine.topics.durable.values()):
            if sub.client_id != durable:
                continue
            pattern = format_words(sub.pattern)
            subscription = self.subscriptions.add(mqtt_filter(pattern), granted_qos(sub.name),
                                                  sub.name)
            command_id = connection.next_command()
            self._resuming.add(command_id)
            connection.session.take_subscribe_topic(f.SubscribeTopic(
                command_id, subscription.number, pattern, connection.prefetch_count, sub.name,
                durable, False, False))
            if connection.session is None:
                return

    def answered(self, command_id: int, error: f.Error | None) -> bool:
        """
        The session answered command C{command_id} (C{error} None: it
        confirmed it): whether it was one of these.
        """
        gathering = self._gathering.pop(command_id, None)
        if gathering is not None:
            acknowledgement, index, granted, subscription = gathering
            if error is not None:
                granted = refusals.reason_code(error.code)
                if subscription is not None:
                    self.subscriptions.remove(subscription)
            acknowledgement.answer(index, granted)
            self._acknowledge(acknowledgement)
            return True
        if command_id not in self._resuming:
            return False
        self._resuming.discard(command_id)
        if error is not None:
            log.warn("MQTT client {client}: a subscription of its persistent session could "
                     "not be resumed: {code}: {detail}", client=self.connection.client_id,
                     code=error.code, detail=error.detail)
        return True

    def _end(self, subscription: MqttSubscription, gathering: tuple | None = None) -> None:
        """
        End C{subscription}: a durable one is forgotten.
        """
        connection = self.connection
        self.subscriptions.remove(subscription)
        command_id = connection.next_command()
        if gathering is not None:
            self._gathering[command_id] = gathering
        connection.session.take_unsubscribe(f.Unsubscribe(command_id, subscription.number,
                                                          bool(subscription.durable)))

    def _acknowledge(self, acknowledgement: Gathering) -> None:
        if acknowledgement.due():
            self.connection.send(acknowledgement.packet(
                acknowledgement.packet_id, tuple(acknowledgement.codes), {}))
