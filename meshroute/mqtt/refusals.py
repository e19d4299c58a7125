"""
What an MQTT client is told when the router refuses its connection, a
publication or a subscription, or ends its connection (docs/mqtt.md,
"Refusals").  The served session and the connection machine speak in
the native error codes (L{meshroute.wire.client_frames}); the adapter
says each as a 5.0 reason code (L{meshroute.mqtt.reason_codes}), which
the encoder writes as the 3.1.1 return code standing for it to a 3.1.1
client.  A 3.1.1 server has no DISCONNECT: it closes.

Besides the native codes, the adapter ends connections for reasons only
MQTT has: they travel through the machine as codes of their own
(L{QOS_NOT_SUPPORTED}, L{TOPIC_ALIAS_INVALID}, L{SESSION_TAKEN_OVER}).
"""

from meshroute.mqtt.reason_codes import ReasonCode as R
from meshroute.wire import client_frames as f

#: The codes of the reasons only MQTT has to end a connection.
QOS_NOT_SUPPORTED = "qos-not-supported"
TOPIC_ALIAS_INVALID = "topic-alias-invalid"
SESSION_TAKEN_OVER = "session-taken-over"
#: A packet the codec refused: its own reason code says why
#: (L{meshroute.mqtt.reason_codes.MalformedPacket}).
MALFORMED = f.PROTOCOL_ERROR

#: code → the 5.0 reason code saying it.
_REASONS = {
    f.UNSUPPORTED_VERSION: R.UNSUPPORTED_PROTOCOL_VERSION,
    f.INVALID_ARGUMENT: R.CLIENT_IDENTIFIER_NOT_VALID,
    f.NOT_AUTHENTICATED: R.BAD_USER_NAME_OR_PASSWORD,
    f.NOT_ALLOWED: R.NOT_AUTHORIZED,
    f.USER_REMOVED: R.NOT_AUTHORIZED,
    f.NOT_ACTIVE: R.USE_ANOTHER_SERVER,
    f.LIMIT_REACHED: R.QUOTA_EXCEEDED,
    f.DISK_FULL: R.QUOTA_EXCEEDED,
    f.PROTOCOL_ERROR: R.MALFORMED_PACKET,
    f.BAD_COMMAND: R.PROTOCOL_ERROR,
    f.BAD_ADDRESS: R.TOPIC_NAME_INVALID,
    QOS_NOT_SUPPORTED: R.QOS_NOT_SUPPORTED,
    TOPIC_ALIAS_INVALID: R.TOPIC_ALIAS_INVALID,
    SESSION_TAKEN_OVER: R.SESSION_TAKEN_OVER,
}
#: Where a CONNACK says it otherwise: an instance that is not active is
#: unavailable (3.1.1: 3), a router at max-sessions busy (3.1.1: 3).
_CONNACK_REASONS = {
    f.NOT_ACTIVE: R.SERVER_UNAVAILABLE,
    f.LIMIT_REACHED: R.SERVER_BUSY,
}


def reason_code(code: str) -> R:
    """
    The reason code of a DISCONNECT, a PUBACK or a SUBACK's filter for
    C{code}.
    """
    return _REASONS.get(code, R.UNSPECIFIED_ERROR)


def connack_reason_code(code: str) -> R:
    """
    The reason code of a CONNACK refusing a CONNECT for C{code}.
    """
    return _CONNACK_REASONS.get(code) or reason_code(code)
