"""
The QoS 1 PUBLISHes the router sends one MQTT connection: each takes a
packet identifier until its PUBACK, and no more are in flight than the
client's receive maximum (5.0; 65,535 for 3.1.1, the identifiers' own
bound); the rest wait here, in order, for a PUBACK to free a place.

Pure: the connection writes what L{Outbox.offer} and L{Outbox.acked}
release.
"""

from collections import deque
from dataclasses import dataclass, field

#: Packet identifiers are 1 to 65,535.
MAX_PACKET_ID = 65535


@dataclass(eq=False)
class InFlight:
    """
    One QoS 1 delivery: the session's delivery id and subscription
    number, and the PUBLISH it is (None until it has a packet id).
    """

    delivery_id: int
    subscription: int
    publish: object = None


@dataclass(eq=False)
class Outbox:
    """
    One connection's QoS 1 deliveries in flight and waiting.

    @ivar receive_maximum: the client's receive maximum.
    @ivar in_flight: packet id → L{InFlight}, sent and not yet
        acknowledged.
    @ivar waiting: deliveries beyond the receive maximum, as C{(InFlight,
        make)}: C{make(packet_id)} makes its PUBLISH.
    """

    receive_maximum: int = MAX_PACKET_ID
    in_flight: dict = field(default_factory=dict)
    waiting: deque = field(default_factory=deque)
    _last_id: int = 0

    def offer(self, delivery: InFlight, make) -> object | None:
        """
        A QoS 1 delivery to send: its PUBLISH (made by C{make(packet_id)})
        if it may go now, else None (it waits).
        """
        if self.waiting or len(self.in_flight) >= self.receive_maximum:
            self.waiting.append((delivery, make))
            return None
        return self._send(delivery, make)

    def acked(self, packet_id: int) -> tuple[InFlight | None, list]:
        """
        The client acknowledged C{packet_id}: the delivery it was (None:
        none in flight had it), and the PUBLISHes of the deliveries that
        may go now.
        """
        delivery = self.in_flight.pop(packet_id, None)
        released = []
        while self.waiting and len(self.in_flight) < self.receive_maximum:
            released.append(self._send(*self.waiting.popleft()))
        return delivery, released

    def _send(self, delivery: InFlight, make) -> object:
        packet_id = self._next_id()
        delivery.publish = make(packet_id)
        self.in_flight[packet_id] = delivery
        return delivery.publish

    def _next_id(self) -> int:
        # In use ids are skipped; at most receive_maximum (<= 65,535) are.
        packet_id = self._last_id
        while True:
            packet_id = packet_id % MAX_PACKET_ID + 1
            if packet_id not in self.in_flight:
                self._last_id = packet_id
                return packet_id
