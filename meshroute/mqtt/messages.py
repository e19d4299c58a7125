"""
An MQTT application message as a native message and back (docs/mqtt.md,
"Messages"):

 - the payload is the body, byte for byte;
 - QoS 1 is a persistent message (durable at its origin before PUBACK),
   QoS 0 a non-persistent one; a delivery's QoS is the lower of its
   subscription's and its message's (persistent: 1);
 - MQTT 5's user properties are the message's headers (name → value; a
   name repeated keeps its first value), its content type the header
   C{content-type}, its message expiry interval the message's time to
   live (whole seconds; a delivery carries what is left of it, rounded
   up);
 - the mesh's own headers (C{x-topic}, C{x-publication}, C{x-expires-ms})
   are not user properties: the topic is the PUBLISH's topic name.
"""

from meshroute.messages import EXPIRES_HEADER, PUBLICATION_HEADER, TOPIC_HEADER, expires_ms

#: The header carrying MQTT 5's content type (as STOMP's C{content-type}).
CONTENT_TYPE = "content-type"
#: The mesh's headers, never user properties.
MESH_HEADERS = frozenset({TOPIC_HEADER, PUBLICATION_HEADER, EXPIRES_HEADER})


def headers_of(properties: dict) -> dict[str, str]:
    """
    The native headers of a PUBLISH's (5.0) C{properties}.
    """
    headers: dict[str, str] = {}
    for name, value in properties.get("user_property", ()):
        if name not in MESH_HEADERS:
            headers.setdefault(name, value)
    content_type = properties.get("content_type")
    if content_type is not None:
        headers[CONTENT_TYPE] = content_type
    return headers


def time_to_live_ms(properties: dict) -> int:
    """
    The native time to live of a PUBLISH's (5.0) C{properties}: its
    message expiry interval, 0 (never) without one.
    """
    interval = properties.get("message_expiry_interval")
    return interval * 1000 if interval else 0


def delivery_properties(headers: dict, now_ms: int) -> dict:
    """
    The (5.0) PUBLISH properties of a delivered message's C{headers},
    C{now_ms} (epoch milliseconds) being when it is written.
    """
    properties: dict = {}
    users = tuple((name, value) for name, value in headers.items()
                  if name not in MESH_HEADERS and name != CONTENT_TYPE)
    if users:
        properties["user_property"] = users
    content_type = headers.get(CONTENT_TYPE)
    if content_type is not None:
        properties["content_type"] = content_type
    expires = expires_ms(headers)
    if expires:
        properties["message_expiry_interval"] = max(1, -(-(expires - now_ms) // 1000))
    return properties
