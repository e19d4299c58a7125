"""
The codec beside paho-mqtt, the MQTT client most devices' Python runs:
the CONNECT, PUBLISH, SUBSCRIBE and UNSUBSCRIBE paho writes, for 3.1.1
and 5.0, are the bytes L{encode} writes for the same packets, and the
reader reads them back as those packets.

paho builds a packet in its C{_send_*} methods and hands the bytes to
C{_packet_queue}; a subclass keeps them instead of sending them, so no
socket is needed.
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
    Connect,
    PacketReader,
    Publish,
    Subscribe,
    SubscriptionRequest,
    Unsubscribe,
    Will,
    encode,
)

PAHO_PROTOCOLS = {MQTT_3_1_1: MQTTv311, MQTT_5: MQTTv5}


class _NoSocket:
    """What paho takes for a connected socket: it only ever closes it here."""

    def close(self) -> None:
        pass


class KeepingClient(Client):
    """A paho client that keeps the packets it would send."""

    def __init__(self, level: int, **options) -> None:
        super().__init__(CallbackAPIVersion.VERSION2, client_id="device-1",
                         protocol=PAHO_PROTOCOLS[level], **options)
        self.kept: list[bytes] = []
        self._sock = _NoSocket()

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
