"""
The codec beside paho-mqtt, the MQTT client most devices' Python runs:
the CONNECT, PUBLISH, SUBSCRIBE and UNSUBSCRIBE paho writes, for 3.1.1
and 5.0, are the bytes L{encode} writes for the same packets, and the
reader reads them back as those packets; and paho reads what L{encode}
writes for a server (CONNACK, SUBACK, UNSUBACK, PUBLISH, DISCONNECT) as
the packets they are.

paho builds a packet in its C{_send_*} methods and hands the bytes to
C{_packet_queue}; a subclass keeps them instead of sending them.  It
reads from its socket's C{recv}; a socket that hands over given bytes
feeds it.  No network is needed.
"""

import pytest
from paho.mqtt.client import MQTTv5, MQTTv311, Client
from paho.mqtt.enums import CallbackAPIVersion, MQTTErrorCode
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties
from paho.mqtt.subscribeoptions import SubscribeOptions

from meshroute.mqtt.packets import (
    MQTT_3_1_1,
    MQTT_5,
    Connack,
    Connect,
    Disconnect,
    PacketReader,
    Puback,
    Publish,
    ReasonCode,
    Suback,
    Subscribe,
    SubscriptionRequest,
    Unsuback,
    Unsubscribe,
    Will,
    encode,
)

PAHO_PROTOCOLS = {MQTT_3_1_1: MQTTv311, MQTT_5: MQTTv5}


class FeedingSocket:
    """What paho takes for a connected socket: it reads what is put in."""

    def __init__(self) -> None:
        self.incoming = b""

    def recv(self, size: int) -> bytes:
        if not self.incoming:
            raise BlockingIOError()
        data, self.incoming = self.incoming[:size], self.incoming[size:]
        return data

    def close(self) -> None:
        pass


class KeepingClient(Client):
    """A paho client that keeps the packets it would send."""

    def __init__(self, level: int, **options) -> None:
        super().__init__(CallbackAPIVersion.VERSION2, client_id="device-1",
                         protocol=PAHO_PROTOCOLS[level], **options)
        self.kept: list[bytes] = []
        self.socket_ = FeedingSocket()
        self._sock = self.socket_
        self.heard: list[tuple] = []
        self.on_connect = lambda _c, _u, flags, code, properties: self.heard.append(
            ("connack", flags.session_present, code.value, properties))
        self.on_subscribe = lambda _c, _u, mid, codes, properties: self.heard.append(
            ("suback", mid, [c.value for c in codes], properties))
        self.on_unsubscribe = lambda _c, _u, mid, codes, properties: self.heard.append(
            ("unsuback", mid, [c.value for c in codes], properties))
        self.on_message = lambda _c, _u, message: self.heard.append(
            ("publish", message.topic, message.payload, message.qos, message.retain,
             message.mid, getattr(message, "properties", None)))
        self.on_disconnect = lambda _c, _u, _flags, code, properties: self.heard.append(
            ("disconnect", code.value, properties))

    def receive(self, data: bytes) -> None:
        """Reads C{data} as if from the server, to its end."""
        self.socket_.incoming += data
        while self.socket_.incoming:
            assert self._packet_read() in (MQTTErrorCode.MQTT_ERR_SUCCESS,
                                           MQTTErrorCode.MQTT_ERR_AGAIN)

    def _packet_queue(self, command, packet, mid, qos, info=None):
        self.kept.append(bytes(packet))
        return MQTTErrorCode.MQTT_ERR_SUCCESS


def paho_properties(packet_type, **values) -> Properties:
    properties = Properties(packet_type)
    for name, value in values.items():
        setattr(properties, name, value)
    return properties


def read_back(level: int, data: list[bytes], connect: bytes | None = None) -> list:
    reader = PacketReader(1 << 16)
    reader.feed(connect or encode(Connect(level, "device-1", True, 30), level))
    return [packet for raw in data for packet in reader.feed(raw)]


@pytest.mark.parametrize("level", [MQTT_3_1_1, MQTT_5])
def test_a_connect_with_will_and_credentials_is_what_paho_writes(level):
    paho = KeepingClient(level, **({} if level == MQTT_5 else {"clean_session": False}))
    paho.username_pw_set("user", "secret")
    paho.will_set("devices/device-1/status", b"offline", qos=1, retain=True)
    properties = {}
    if level == MQTT_5:
        paho._connect_properties = paho_properties(
            PacketTypes.CONNECT, SessionExpiryInterval=3600,
            UserProperty=[("site", "lab"), ("rack", "7")])
        properties = {"session_expiry_interval": 3600,
                      "user_property": (("site", "lab"), ("rack", "7"))}
    paho._send_connect(30)
    ours = Connect(level, "device-1", level == MQTT_5, 30, "user", b"secret",
                   Will("devices/device-1/status", b"offline", 1, True), properties)
    [written] = paho.kept
    assert encode(ours, level) == written
    assert PacketReader(1 << 16).feed(written) == [ours]


@pytest.mark.parametrize("level", [MQTT_3_1_1, MQTT_5])
def test_a_publish_is_what_paho_writes(level):
    paho = KeepingClient(level)
    properties = {}
    paho_props = None
    if level == MQTT_5:
        paho_props = paho_properties(
            PacketTypes.PUBLISH, MessageExpiryInterval=60, ContentType="application/json",
            ResponseTopic="replies/device-1", CorrelationData=b"\x01\x02",
            UserProperty=[("k", "v")])
        properties = {"message_expiry_interval": 60, "content_type": "application/json",
                      "response_topic": "replies/device-1", "correlation_data": b"\x01\x02",
                      "user_property": (("k", "v"),)}
    paho._send_publish(7, b"sensors/eu/temp", b'{"c": 21.5}', 1, True, False, None, paho_props)
    ours = Publish("sensors/eu/temp", b'{"c": 21.5}', 1, retain=True, packet_id=7,
                   properties=properties)
    [written] = paho.kept
    assert encode(ours, level) == written
    assert read_back(level, [written]) == [ours]


@pytest.mark.parametrize("level", [MQTT_3_1_1, MQTT_5])
def test_a_subscribe_and_an_unsubscribe_are_what_paho_writes(level):
    paho = KeepingClient(level)
    if level == MQTT_5:
        requests = (SubscriptionRequest("sensors/+/temp", 1, no_local=True, retain_handling=2),
                    SubscriptionRequest("alerts/#", 0, retain_as_published=True))
        options = [SubscribeOptions(qos=1, noLocal=True, retainHandling=2),
                   SubscribeOptions(qos=0, retainAsPublished=True)]
    else:
        requests = (SubscriptionRequest("sensors/+/temp", 1), SubscriptionRequest("alerts/#", 0))
        options = [1, 0]
    paho._send_subscribe(0, [(r.topic_filter.encode(), o) for r, o in zip(requests, options)])
    paho._send_unsubscribe(0, [b"sensors/+/temp", b"alerts/#"])
    ours = [Subscribe(1, requests), Unsubscribe(2, ("sensors/+/temp", "alerts/#"))]
    assert [encode(packet, level) for packet in ours] == paho.kept
    assert read_back(level, paho.kept) == ours


def test_paho_3_1_1_reads_what_a_server_sends():
    paho = KeepingClient(MQTT_3_1_1)
    paho._send_connect(30)
    paho.receive(b"".join(encode(packet, MQTT_3_1_1) for packet in [
        Connack(True, ReasonCode.SUCCESS),
        Suback(1, (ReasonCode.GRANTED_QOS_1, ReasonCode.NOT_AUTHORIZED)),
        Unsuback(2),
        Publish("sensors/eu/temp", b"21.5", 1, retain=True, packet_id=9),
        Publish("sensors/us/temp", b"70", 0),
    ]))
    assert [event[:-1] for event in paho.heard] == [
        ("connack", True, 0), ("suback", 1, [1, 0x80]), ("unsuback", 2, []),
        ("publish", "sensors/eu/temp", b"21.5", 1, True, 9),
        ("publish", "sensors/us/temp", b"70", 0, False, 0),
    ]
    assert paho.kept[-1] == encode(Puback(9), MQTT_3_1_1)


def test_paho_3_1_1_reads_a_refusal_as_its_return_code():
    paho = KeepingClient(MQTT_3_1_1)
    paho._send_connect(30)
    paho.socket_.incoming = encode(Connack(False, ReasonCode.BAD_USER_NAME_OR_PASSWORD),
                                   MQTT_3_1_1)
    paho._packet_read()
    [(kind, present, code, _)] = paho.heard
    assert (kind, present, code) == ("connack", False, ReasonCode.BAD_USER_NAME_OR_PASSWORD)


def test_paho_5_0_reads_what_a_server_sends_with_its_properties():
    paho = KeepingClient(MQTT_5)
    paho._send_connect(30)
    paho.receive(b"".join(encode(packet, MQTT_5) for packet in [
        Connack(False, ReasonCode.SUCCESS, {
            "maximum_qos": 1, "topic_alias_maximum": 10, "receive_maximum": 100,
            "assigned_client_identifier": "auto-1", "retain_available": 1}),
        Suback(1, (ReasonCode.GRANTED_QOS_0, ReasonCode.TOPIC_FILTER_INVALID),
               {"reason_string": "a/b.c: level 2 holds a dot"}),
        Unsuback(2, (ReasonCode.NO_SUBSCRIPTION_EXISTED,)),
        Publish("sensors/eu/temp", b"21.5", 1, packet_id=9, properties={
            "user_property": (("unit", "C"), ("site", "lab")), "subscription_identifier": (3, 7),
            "content_type": "text/plain", "message_expiry_interval": 30}),
        Disconnect(ReasonCode.SERVER_SHUTTING_DOWN, {"reason_string": "restart"}),
    ]))
    connack, suback, unsuback, publish, disconnect = paho.heard
    assert connack[:3] == ("connack", False, 0)
    assert (connack[3].MaximumQoS, connack[3].TopicAliasMaximum, connack[3].ReceiveMaximum,
            connack[3].AssignedClientIdentifier) == (1, 10, 100, "auto-1")
    assert suback[:3] == ("suback", 1, [0, 0x8F])
    assert suback[3].ReasonString == "a/b.c: level 2 holds a dot"
    assert unsuback[:3] == ("unsuback", 2, [0x11])
    assert publish[:6] == ("publish", "sensors/eu/temp", b"21.5", 1, False, 9)
    assert publish[6].UserProperty == [("unit", "C"), ("site", "lab")]
    assert publish[6].SubscriptionIdentifier == [3, 7]
    assert (publish[6].ContentType, publish[6].MessageExpiryInterval) == ("text/plain", 30)
    assert disconnect[:2] == ("disconnect", ReasonCode.SERVER_SHUTTING_DOWN)
    assert disconnect[2].ReasonString == "restart"
    assert paho.kept[-1] == encode(Puback(9), MQTT_5)
