"""
MQTT's packets as data: one frozen dataclass per control packet, the
same fields in both versions (3.1.1 and 5.0), and the protocol levels.
What 3.1.1 lacks (properties, most reason codes) is empty or 0 there.
L{meshroute.mqtt.packets} reads and writes them, and is where the rest
of meshroute takes them from.
"""

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import ClassVar

#: The protocol levels a CONNECT names: 3.1 (refused), 3.1.1 and 5.0.
MQTT_3_1, MQTT_3_1_1, MQTT_5 = 3, 4, 5
#: The protocol name of each level's CONNECT.
PROTOCOL_NAMES = {MQTT_3_1: "MQIsdp", MQTT_3_1_1: "MQTT", MQTT_5: "MQTT"}
#: The levels this codec reads and writes.
SUPPORTED_LEVELS = (MQTT_3_1_1, MQTT_5)


def _properties():
    """A packet's 5.0 properties: empty unless given."""
    return field(default_factory=dict)


@dataclass(frozen=True)
class Will:
    """
    A CONNECT's last will: published for the client when its session
    ends abnormally (section 3.1.2.5).
    """

    topic: str
    payload: bytes
    qos: int
    retain: bool
    properties: Mapping = _properties()


@dataclass(frozen=True)
class Connect:
    """
    The first packet of a client (section 3.1).  C{clean_start} is
    3.1.1's clean session flag; C{password} is bytes (binary data in
    5.0, and so written by every 3.1.1 client).
    """

    TYPE: ClassVar[int] = 1
    protocol_level: int
    client_id: str
    clean_start: bool
    keep_alive: int
    username: str | None = None
    password: bytes | None = None
    will: Will | None = None
    properties: Mapping = _properties()


@dataclass(frozen=True)
class Connack:
    """
    The server's answer to a CONNECT (section 3.2); C{reason_code} a
    5.0 reason code in both versions.
    """

    TYPE: ClassVar[int] = 2
    session_present: bool
    reason_code: int
    properties: Mapping = _properties()


@dataclass(frozen=True)
class Publish:
    """
    A message on a topic, either way (section 3.3).  C{packet_id} is set
    exactly when C{qos} is 1 or 2; C{topic} is empty when a 5.0 topic
    alias stands for it.
    """

    TYPE: ClassVar[int] = 3
    topic: str
    payload: bytes
    qos: int
    retain: bool = False
    dup: bool = False
    packet_id: int | None = None
    properties: Mapping = _properties()


@dataclass(frozen=True)
class Puback:
    """The answer to a QoS 1 PUBLISH (section 3.4)."""

    TYPE: ClassVar[int] = 4
    packet_id: int
    reason_code: int = 0
    properties: Mapping = _properties()


@dataclass(frozen=True)
class Pubrec:
    """The first answer to a QoS 2 PUBLISH (section 3.5)."""

    TYPE: ClassVar[int] = 5
    packet_id: int
    reason_code: int = 0
    properties: Mapping = _properties()


@dataclass(frozen=True)
class Pubrel:
    """The answer to a PUBREC (section 3.6)."""

    TYPE: ClassVar[int] = 6
    packet_id: int
    reason_code: int = 0
    properties: Mapping = _properties()


@dataclass(frozen=True)
class Pubcomp:
    """The answer to a PUBREL, QoS 2's last (section 3.7)."""

    TYPE: ClassVar[int] = 7
    packet_id: int
    reason_code: int = 0
    properties: Mapping = _properties()


@dataclass(frozen=True)
class SubscriptionRequest:
    """
    One topic filter of a SUBSCRIBE and its options (section 3.8.3.1);
    the last three are 5.0's, false and 0 in 3.1.1.
    """

    topic_filter: str
    qos: int
    no_local: bool = False
    retain_as_published: bool = False
    retain_handling: int = 0


@dataclass(frozen=True)
class Subscribe:
    """A client's subscriptions, at least one (section 3.8)."""

    TYPE: ClassVar[int] = 8
    packet_id: int
    requests: tuple[SubscriptionRequest, ...]
    properties: Mapping = _properties()


@dataclass(frozen=True)
class Suback:
    """
    The answer to a SUBSCRIBE: a reason code per request, in order
    (section 3.9): the granted QoS, or a failure.
    """

    TYPE: ClassVar[int] = 9
    packet_id: int
    reason_codes: tuple[int, ...]
    properties: Mapping = _properties()


@dataclass(frozen=True)
class Unsubscribe:
    """A client's unsubscriptions, at least one (section 3.10)."""

    TYPE: ClassVar[int] = 10
    packet_id: int
    topic_filters: tuple[str, ...]
    properties: Mapping = _properties()


@dataclass(frozen=True)
class Unsuback:
    """
    The answer to an UNSUBSCRIBE (section 3.11): 5.0's reason code per
    filter; none in 3.1.1.
    """

    TYPE: ClassVar[int] = 11
    packet_id: int
    reason_codes: tuple[int, ...] = ()
    properties: Mapping = _properties()


@dataclass(frozen=True)
class Pingreq:
    """A client's keep-alive (section 3.12)."""

    TYPE: ClassVar[int] = 12


@dataclass(frozen=True)
class Pingresp:
    """The answer to a PINGREQ (section 3.13)."""

    TYPE: ClassVar[int] = 13


@dataclass(frozen=True)
class Disconnect:
    """
    The end of a connection, from a client (both versions) or a server
    (5.0 only) (section 3.14).
    """

    TYPE: ClassVar[int] = 14
    reason_code: int = 0
    properties: Mapping = _properties()


@dataclass(frozen=True)
class Auth:
    """A step of 5.0's enhanced authentication (section 3.15)."""

    TYPE: ClassVar[int] = 15
    reason_code: int = 0
    properties: Mapping = _properties()
