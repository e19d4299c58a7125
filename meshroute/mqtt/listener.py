"""
The MQTT listener (C{[mqtt.listener]}): the thin protocol of each MQTT
connection, bytes in, packets out, machine inputs, and the factory that
owns what outlives one connection.

L{MqttProtocol} feeds a sans-IO L{PacketReader}; each packet becomes one
input of the connection's machine (L{meshroute.sessions.lifecycle}, with
the MQTT core of L{meshroute.mqtt.connection}): CONNECT the hello,
DISCONNECT the goodbye, any other the session's business.  Bytes that are
not MQTT, or a packet beyond C{max-frame-size} (the reader's
L{MalformedPacket}) close that connection, logged (5.0: DISCONNECT with
the packet's reason code first), and nothing else is disturbed.  The rest
(the producer, the buffers, packets out of turn) is every listener's
(L{meshroute.sessions.listener}).

L{MqttFactory} shares the native listener's session registry (so the
admin API's C{/api/v1/sessions} and C{max-sessions} count every
protocol's), keeps the router's MQTT client ids
(L{meshroute.mqtt.clients}) and runs its own
L{meshroute.sessions.watch.ConnectionWatch}.  Over WebSocket (subprotocol
C{mqtt}, binary messages: L{MQTT_SUBPROTOCOLS}) the same protocol reads
and writes WebSocket messages instead of a TCP stream.
"""

from twisted.internet.interfaces import IReactorTime

from meshroute.mqtt.clients import MqttClients
from meshroute.mqtt.connection import MqttConnectionCore
from meshroute.mqtt.packets import (
    MQTT_3_1_1,
    MQTT_5,
    Connect,
    Disconnect,
    MalformedPacket,
    PacketReader,
)
from meshroute.mqtt.settings import MqttListenerSettings
from meshroute.sessions.listener import ListenerFactory, ListenerProtocol
from meshroute.sessions.settings import SessionSettings

#: The WebSocket subprotocols of MQTT: C{mqtt} (3.1.1 and 5.0), and
#: C{mqttv3.1}, which some older clients offer; neither names a version
#: (CONNECT does).
MQTT_SUBPROTOCOLS = {"mqtt": None, "mqttv3.1": None}

#: Which machine input each packet type feeds; any other is the session's
#: business (C{got_frame}).
_INPUT_FOR_PACKET = {Connect: "got_hello", Disconnect: "got_goodbye"}


class MqttProtocol(ListenerProtocol):
    """
    MQTT packets ↔ bytes for one connection.
    """

    decode_error = MalformedPacket

    def __init__(self, factory: "MqttFactory") -> None:
        super().__init__(factory)
        self.decoder = PacketReader(factory.settings.limits.max_frame_size)

    def new_core(self) -> MqttConnectionCore:
        factory = self.factory
        listener = factory.listener
        return MqttConnectionCore.of_listener(
            factory, self.transport, clients=factory.clients,
            prefetch_count=listener.prefetch_count,
            topic_alias_maximum=listener.topic_alias_maximum, mesh_wide=listener.mesh_wide)

    def frame_received(self, packet) -> None:
        self.tell(_INPUT_FOR_PACKET.get(type(packet), "got_frame"), packet)

    def decode_failed(self, error: MalformedPacket) -> None:
        core = self.core
        core.malformed_reason = error.reason_code
        if error.protocol_level is not None:
            # A CONNECT of a level not served: its CONNACK is written as
            # that client reads it (3.1's as 3.1.1's).
            core.protocol_level = MQTT_5 if error.protocol_level == MQTT_5 else MQTT_3_1_1
        super().decode_failed(error)


class MqttFactory(ListenerFactory):
    """
    Builds the router side of each connection of the C{[mqtt.listener]}
    endpoints (TCP or TLS, and WebSocket).

    @param settings: the sessions' L{SessionSettings}: the listener's
        limits and C{connection-ttl-override}.
    @param listener: the C{[mqtt.listener]} settings (its MQTT keys).
    @param options: every listener's (L{ListenerFactory}): the C{sessions}
        they join, C{ha_view}, C{security}, C{secret},
        C{verifies_certificates}, ...
    @ivar clients: the router's MQTT client ids (L{MqttClients}).
    """

    protocol = MqttProtocol

    def __init__(self, engine, clock: IReactorTime, settings: SessionSettings,
                 listener: MqttListenerSettings, **options) -> None:
        super().__init__(engine, clock, settings, **options)
        self.listener = listener
        self.clients = MqttClients(clock)

    def stop_serving(self) -> None:
        super().stop_serving()
        self.clients.stop()

    def close_connections(self) -> None:
        super().close_connections()
        self.clients.stop()
