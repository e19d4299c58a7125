"""
An MQTT client's end of a router's MQTT connection without sockets
(L{MqttEnd}, over a C{StringTransport}, speaking with the codec of
L{meshroute.mqtt.packets}), and the factory it connects to, over the real
engine and store run inline (L{support.stomp_ends.auto_engine}): what the
tests of L{meshroute.mqtt.connection} drive connections with.
"""

from dataclasses import replace

from twisted.internet.testing import StringTransport

from meshroute.mqtt import packets as p
from meshroute.mqtt.listener import MqttFactory
from meshroute.mqtt.settings import MqttListenerSettings
from meshroute.sessions.settings import SessionSettings

SETTINGS = SessionSettings(connection_ttl_check_interval_ms=500)


def make_factory(engine, clock, listener: MqttListenerSettings | None = None,
                 **options) -> MqttFactory:
    settings = replace(SETTINGS, **options.pop("settings", {}))
    listener = listener or MqttListenerSettings(endpoint=("tcp:0",), mesh_wide=False)
    return MqttFactory(engine, clock, settings, listener, **options)


def settle(clock) -> None:
    """
    Run the turns that take a publication, fan it out and deliver it.
    """
    for _ in range(6):
        clock.advance(0)


class MqttEnd:
    """
    An MQTT client's end of one connection, driven packet by packet.
    """

    def __init__(self, factory, level: int = p.MQTT_5) -> None:
        self.level = level
        self.protocol = factory.buildProtocol(None)
        self.transport = StringTransport()
        self.protocol.makeConnection(self.transport)
        self._reader = p.PacketReader(1 << 24, level, peer="server")
        self._unread: list = []

    def send(self, *packets) -> None:
        for packet in packets:
            self.protocol.dataReceived(p.encode(packet, self.level))

    def send_together(self, *packets) -> None:
        "C{packets} in one chunk of bytes: the router reads them at once."
        self.protocol.dataReceived(b"".join(p.encode(packet, self.level) for packet in packets))

    def received(self) -> list:
        data = self.transport.value()
        self.transport.clear()
        packets, self._unread = self._unread + self._reader.feed(data), []
        return packets

    def connect(self, client_id: str = "device-1", clean: bool = True, keep_alive: int = 60,
                **more) -> p.Connack:
        """
        CONNECT, and the CONNACK it got (whatever it says); what came after
        it is left for L{received}.
        """
        self.send(p.Connect(self.level, client_id, clean, keep_alive, **more))
        connack, *self._unread = self.received()
        assert isinstance(connack, p.Connack), connack
        return connack

    def subscribe(self, *filters: tuple[str, int], packet_id: int = 1) -> None:
        self.send(p.Subscribe(packet_id, tuple(p.SubscriptionRequest(topic_filter, qos)
                                               for topic_filter, qos in filters)))

    @property
    def closed(self) -> bool:
        return self.transport.disconnecting or self.transport.disconnected

    def lose(self) -> None:
        self.protocol.connectionLost(None)
