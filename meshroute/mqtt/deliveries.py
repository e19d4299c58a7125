"""
The served session's deliveries to one MQTT connection, as PUBLISH
packets (docs/mqtt.md, "Subscribing"), and the client's PUBACKs.

 - B{QoS}: the subscription's, lowered to 0 for a persistent session's
   copy of a non-persistent publication (a durable subscription's copy is
   persistent exactly when its publication was); a clean session's copies
   are all held in memory, where the mesh does not keep which publication
   was persistent, so they go at the subscription's QoS.
 - B{QoS 0}: written, and acknowledged as written
   (L{meshroute.sessions.written_acks}).
 - B{QoS 1}: a packet id until its PUBACK, at most the client's receive
   maximum in flight (L{meshroute.mqtt.outbox}); a redelivery carries
   DUP.  A PUBACK is the session's C{Ack} and the credit it frees.
 - B{Maximum packet size} (5.0): a delivery larger than the client takes
   is not sent, and taken as delivered, as the specification says.
"""

from dataclasses import dataclass, field

from twisted.logger import Logger

from meshroute.expiry import now_ms
from meshroute.messages import TOPIC_HEADER
from meshroute.mqtt import packets as p
from meshroute.mqtt.messages import delivery_properties, retain_flag
from meshroute.mqtt.outbox import InFlight, Outbox
from meshroute.mqtt.topic_names import mqtt_topic
from meshroute.wire import client_frames as f

log = Logger()


@dataclass(eq=False)
class MqttDeliveries:
    """
    One connection's deliveries in MQTT's words.

    @ivar connection: the L{meshroute.mqtt.connection.MqttConnectionCore}:
        its session, its subscriptions, its version and what it writes.
    @ivar outbox: the QoS 1 deliveries in flight and waiting.
    @ivar maximum_packet_size: the largest packet the client takes (5.0;
        0: no bound but the protocol's).
    """

    connection: object = field(repr=False)
    outbox: Outbox = field(default_factory=Outbox)
    maximum_packet_size: int = 0

    def deliver(self, frame: f.Deliver) -> None:
        """
        Write the session's C{Deliver} as a PUBLISH.
        """
        connection = self.connection
        subscription = connection.subscribing.subscriptions.by_number.get(frame.subscription)
        if subscription is None:
            return
        qos = subscription.qos
        if subscription.durable:
            owner = connection.session.deliveries.owners.get(frame.delivery_id)
            qos = 1 if qos and owner is not None and owner[2] else 0
        topic = mqtt_topic(frame.headers.get(TOPIC_HEADER, ""))
        properties = (delivery_properties(frame.headers, now_ms(connection.clock))
                      if connection.v5 else {})
        retain = retain_flag(frame.headers, subscription.retain_as_published)
        if qos == 0 or self._too_large(p.Publish(topic, frame.body, 1, retain, False, 1,
                                                 properties)):
            if qos == 0:
                connection.send(p.Publish(topic, frame.body, 0, retain, False, None, properties))
            connection.written_acks.written(subscription.number, frame.delivery_id)
            return

        def make(packet_id: int):
            return p.Publish(topic, frame.body, 1, retain, frame.redelivered, packet_id,
                             properties)

        publish = self.outbox.offer(InFlight(frame.delivery_id, subscription.number), make)
        if publish is not None:
            connection.send(publish)

    def acked(self, packet: p.Puback) -> None:
        """
        The client's PUBACK: the session's C{Ack} and the credit it
        frees; the deliveries that waited for a place go.  One naming no
        delivery in flight is ignored.
        """
        connection = self.connection
        delivery, released = self.outbox.acked(packet.packet_id)
        if delivery is not None:
            session = connection.session
            session.take_ack(f.Ack(connection.next_command(), [delivery.delivery_id]))
            if connection.session is None:
                return
            session.take_credit(f.Credit(connection.next_command(), delivery.subscription, 1))
        for publish in released:
            connection.send(publish)

    def _too_large(self, publish: p.Publish) -> bool:
        limit = self.maximum_packet_size
        connection = self.connection
        if not limit or len(p.encode(publish, connection.protocol_level)) <= limit:
            return False
        log.info("MQTT client {client}: a delivery to {topic!r} is larger than its maximum "
                 "packet size ({limit} bytes); not sent", client=connection.client_id,
                 topic=publish.topic, limit=limit)
        return True
