"""
MQTT's reason codes (5.0 section 2.4) and the one error the codec raises.

The codec speaks in 5.0 reason codes for both versions: a refusal or an
error is a L{ReasonCode}, and the encoder writes what a 3.1.1 peer
understands instead (L{connack_return_code}, L{suback_return_code}), so
that the layers above never ask which version they answer.
"""

import enum

from meshroute.errors import MeshrouteError


class ReasonCode(enum.IntEnum):
    """
    The reason codes of MQTT 5.0 (section 2.4); below 0x80 success, from
    0x80 on failure.  Several names share a value, as in the spec.
    """

    SUCCESS = 0x00
    NORMAL_DISCONNECTION = 0x00
    GRANTED_QOS_0 = 0x00
    GRANTED_QOS_1 = 0x01
    GRANTED_QOS_2 = 0x02
    DISCONNECT_WITH_WILL_MESSAGE = 0x04
    NO_MATCHING_SUBSCRIBERS = 0x10
    NO_SUBSCRIPTION_EXISTED = 0x11
    CONTINUE_AUTHENTICATION = 0x18
    RE_AUTHENTICATE = 0x19
    UNSPECIFIED_ERROR = 0x80
    MALFORMED_PACKET = 0x81
    PROTOCOL_ERROR = 0x82
    IMPLEMENTATION_SPECIFIC_ERROR = 0x83
    UNSUPPORTED_PROTOCOL_VERSION = 0x84
    CLIENT_IDENTIFIER_NOT_VALID = 0x85
    BAD_USER_NAME_OR_PASSWORD = 0x86
    NOT_AUTHORIZED = 0x87
    SERVER_UNAVAILABLE = 0x88
    SERVER_BUSY = 0x89
    BANNED = 0x8A
    SERVER_SHUTTING_DOWN = 0x8B
    BAD_AUTHENTICATION_METHOD = 0x8C
    KEEP_ALIVE_TIMEOUT = 0x8D
    SESSION_TAKEN_OVER = 0x8E
    TOPIC_FILTER_INVALID = 0x8F
    TOPIC_NAME_INVALID = 0x90
    PACKET_IDENTIFIER_IN_USE = 0x91
    PACKET_IDENTIFIER_NOT_FOUND = 0x92
    RECEIVE_MAXIMUM_EXCEEDED = 0x93
    TOPIC_ALIAS_INVALID = 0x94
    PACKET_TOO_LARGE = 0x95
    MESSAGE_RATE_TOO_HIGH = 0x96
    QUOTA_EXCEEDED = 0x97
    ADMINISTRATIVE_ACTION = 0x98
    PAYLOAD_FORMAT_INVALID = 0x99
    RETAIN_NOT_SUPPORTED = 0x9A
    QOS_NOT_SUPPORTED = 0x9B
    USE_ANOTHER_SERVER = 0x9C
    SERVER_MOVED = 0x9D
    SHARED_SUBSCRIPTIONS_NOT_SUPPORTED = 0x9E
    CONNECTION_RATE_EXCEEDED = 0x9F
    MAXIMUM_CONNECT_TIME = 0xA0
    SUBSCRIPTION_IDENTIFIERS_NOT_SUPPORTED = 0xA1
    WILDCARD_SUBSCRIPTIONS_NOT_SUPPORTED = 0xA2


R = ReasonCode

#: The reason codes each packet may carry in 5.0 (sections 3.2.2.2,
#: 3.4.2.1, 3.5.2.1, 3.6.2.1, 3.7.2.1, 3.9.3, 3.11.3, 3.14.2.1, 3.15.2.1):
#: anything else read is a protocol error.
ALLOWED = {
    "CONNACK": frozenset({
        R.SUCCESS, R.UNSPECIFIED_ERROR, R.MALFORMED_PACKET, R.PROTOCOL_ERROR,
        R.IMPLEMENTATION_SPECIFIC_ERROR, R.UNSUPPORTED_PROTOCOL_VERSION,
        R.CLIENT_IDENTIFIER_NOT_VALID, R.BAD_USER_NAME_OR_PASSWORD, R.NOT_AUTHORIZED,
        R.SERVER_UNAVAILABLE, R.SERVER_BUSY, R.BANNED, R.BAD_AUTHENTICATION_METHOD,
        R.TOPIC_NAME_INVALID, R.PACKET_TOO_LARGE, R.QUOTA_EXCEEDED,
        R.PAYLOAD_FORMAT_INVALID, R.RETAIN_NOT_SUPPORTED, R.QOS_NOT_SUPPORTED,
        R.USE_ANOTHER_SERVER, R.SERVER_MOVED, R.CONNECTION_RATE_EXCEEDED}),
    "PUBACK": frozenset({
        R.SUCCESS, R.NO_MATCHING_SUBSCRIBERS, R.UNSPECIFIED_ERROR,
        R.IMPLEMENTATION_SPECIFIC_ERROR, R.NOT_AUTHORIZED, R.TOPIC_NAME_INVALID,
        R.PACKET_IDENTIFIER_IN_USE, R.QUOTA_EXCEEDED, R.PAYLOAD_FORMAT_INVALID}),
    "PUBREL": frozenset({R.SUCCESS, R.PACKET_IDENTIFIER_NOT_FOUND}),
    "SUBACK": frozenset({
        R.GRANTED_QOS_0, R.GRANTED_QOS_1, R.GRANTED_QOS_2, R.UNSPECIFIED_ERROR,
        R.IMPLEMENTATION_SPECIFIC_ERROR, R.NOT_AUTHORIZED, R.TOPIC_FILTER_INVALID,
        R.PACKET_IDENTIFIER_IN_USE, R.QUOTA_EXCEEDED,
        R.SHARED_SUBSCRIPTIONS_NOT_SUPPORTED,
        R.SUBSCRIPTION_IDENTIFIERS_NOT_SUPPORTED,
        R.WILDCARD_SUBSCRIPTIONS_NOT_SUPPORTED}),
    "UNSUBACK": frozenset({
        R.SUCCESS, R.NO_SUBSCRIPTION_EXISTED, R.UNSPECIFIED_ERROR,
        R.IMPLEMENTATION_SPECIFIC_ERROR, R.NOT_AUTHORIZED, R.TOPIC_FILTER_INVALID,
        R.PACKET_IDENTIFIER_IN_USE}),
    "DISCONNECT": frozenset({
        R.NORMAL_DISCONNECTION, R.DISCONNECT_WITH_WILL_MESSAGE, R.UNSPECIFIED_ERROR,
        R.MALFORMED_PACKET, R.PROTOCOL_ERROR, R.IMPLEMENTATION_SPECIFIC_ERROR,
        R.NOT_AUTHORIZED, R.SERVER_BUSY, R.SERVER_SHUTTING_DOWN,
        R.KEEP_ALIVE_TIMEOUT, R.SESSION_TAKEN_OVER, R.TOPIC_FILTER_INVALID,
        R.TOPIC_NAME_INVALID, R.RECEIVE_MAXIMUM_EXCEEDED, R.TOPIC_ALIAS_INVALID,
        R.PACKET_TOO_LARGE, R.MESSAGE_RATE_TOO_HIGH, R.QUOTA_EXCEEDED,
        R.ADMINISTRATIVE_ACTION, R.PAYLOAD_FORMAT_INVALID, R.RETAIN_NOT_SUPPORTED,
        R.QOS_NOT_SUPPORTED, R.USE_ANOTHER_SERVER, R.SERVER_MOVED,
        R.SHARED_SUBSCRIPTIONS_NOT_SUPPORTED, R.CONNECTION_RATE_EXCEEDED,
        R.MAXIMUM_CONNECT_TIME, R.SUBSCRIPTION_IDENTIFIERS_NOT_SUPPORTED,
        R.WILDCARD_SUBSCRIPTIONS_NOT_SUPPORTED}),
    "AUTH": frozenset({R.SUCCESS, R.CONTINUE_AUTHENTICATION, R.RE_AUTHENTICATE}),
}
ALLOWED["PUBREC"] = ALLOWED["PUBACK"]
ALLOWED["PUBCOMP"] = ALLOWED["PUBREL"]

#: MQTT 3.1.1's CONNACK return codes (section 3.2.2.3) for the 5.0
#: reason codes that have one; any other refusal is written as 5 (not
#: authorized) or, for a broken packet, answered by closing alone.
_CONNACK_RETURN_CODES = {
    R.SUCCESS: 0,
    R.UNSUPPORTED_PROTOCOL_VERSION: 1,
    R.CLIENT_IDENTIFIER_NOT_VALID: 2,
    R.SERVER_UNAVAILABLE: 3,
    R.SERVER_BUSY: 3,
    R.SERVER_SHUTTING_DOWN: 3,
    R.USE_ANOTHER_SERVER: 3,
    R.SERVER_MOVED: 3,
    R.CONNECTION_RATE_EXCEEDED: 3,
    R.BAD_USER_NAME_OR_PASSWORD: 4,
    R.NOT_AUTHORIZED: 5,
    R.BANNED: 5,
    R.BAD_AUTHENTICATION_METHOD: 5,
}
_REASON_CODES_OF_RETURN_CODES = {
    0: R.SUCCESS, 1: R.UNSUPPORTED_PROTOCOL_VERSION,
    2: R.CLIENT_IDENTIFIER_NOT_VALID, 3: R.SERVER_UNAVAILABLE,
    4: R.BAD_USER_NAME_OR_PASSWORD, 5: R.NOT_AUTHORIZED,
}


def connack_return_code(reason_code: int) -> int:
    """
    The MQTT 3.1.1 CONNACK return code for 5.0 reason code
    C{reason_code}: its own where 3.1.1 has one, else 5 (not
    authorized), the one refusal every 3.1.1 client understands.
    """
    return _CONNACK_RETURN_CODES.get(reason_code, 5)


def connack_reason_code(return_code: int) -> ReasonCode:
    """
    The 5.0 reason code of MQTT 3.1.1 CONNACK return code
    C{return_code} (0 to 5).

    @raise KeyError: for any other.
    """
    return _REASON_CODES_OF_RETURN_CODES[return_code]


def suback_return_code(reason_code: int) -> int:
    """
    The MQTT 3.1.1 SUBACK return code for 5.0 reason code
    C{reason_code}: the granted QoS, or 0x80 for any failure.
    """
    return reason_code if reason_code < 0x80 else 0x80


class MalformedPacket(MeshrouteError):
    """
    Bytes from an MQTT peer are not a packet the specifications allow,
    or one past a limit: the connection must close (after a DISCONNECT,
    or a CONNACK while connecting, carrying C{reason_code} for a 5.0
    peer).  The one error of the codec.

    @ivar reason_code: the 5.0 reason code to send: 0x81 malformed packet,
        0x82 protocol error, 0x84 unsupported protocol version, 0x8F
        topic filter invalid, 0x90 topic name invalid, 0x95 packet too
        large.
    @ivar reason: what is wrong, for the log and a 5.0 reason string.
    @ivar protocol_level: the protocol level of the CONNECT that was
        refused with 0x84, so that the answer is written as that client
        reads it (L{connack_return_code} for any but 5); else C{None}.
    """

    def __init__(self, reason_code: int, reason: str,
                 protocol_level: int | None = None) -> None:
        super().__init__(f"{reason} ({ReasonCode(reason_code).name.lower()})")
        self.reason_code = ReasonCode(reason_code)
        self.reason = reason
        self.protocol_level = protocol_level


def malformed(reason: str) -> MalformedPacket:
    return MalformedPacket(R.MALFORMED_PACKET, reason)


def protocol_error(reason: str) -> MalformedPacket:
    return MalformedPacket(R.PROTOCOL_ERROR, reason)
