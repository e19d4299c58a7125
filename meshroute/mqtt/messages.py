"""
An MQTT application message as a native message and back (docs/mqtt.md,
"Publishing"):

 - the payload is the body, byte for byte;
 - QoS 1 is a persistent message (durable at its origin before PUBACK),
   QoS 0 a non-persistent one (a delivery's QoS: L{meshroute.mqtt.deliveries});
 - MQTT 5's user properties are the message's headers (name → value; a
   name repeated keeps its first value), its content type the header
   C{content-type}, its message expiry interval the message's time to
   live (whole seconds; a delivery carries what is left of it, rounded
   up), its response topic the header C{mqtt-response-topic} and its
   correlation data the header C{mqtt-correlation-data} (base64, as
   headers are text), so a request/response exchange crosses the mesh;
 - the RETAIN flag of a PUBLISH is the header C{x-retain: true}, the
   mesh's retained messages (docs/topics.md, "Retained messages"); a
   delivery's RETAIN flag is set on a copy given because its
   subscription was made (header C{x-retained}) and, for a 5.0
   subscription with retain-as-published, on a live copy of a retained
   publication (MQTT 5.0 section 3.3.1.3; 3.1.1 clears it on live copies);
 - the mesh's own headers (C{x-topic}, C{x-publication}, C{x-expires-ms},
   C{x-retain}, C{x-retained}) are not user properties: the topic is the
   PUBLISH's topic name.
"""

import base64
import binascii

from meshroute.messages import EXPIRES_HEADER, PUBLICATION_HEADER, TOPIC_HEADER, expires_ms
from meshroute.mqtt.topic_syntax import topic_name_problem
from meshroute.topics.retained import RETAIN_HEADER, RETAINED_HEADER, wants_retain

#: The header carrying MQTT 5's content type (as STOMP's C{content-type}).
CONTENT_TYPE = "content-type"
#: The headers carrying MQTT 5's response topic and correlation data.
RESPONSE_TOPIC = "mqtt-response-topic"
CORRELATION_DATA = "mqtt-correlation-data"
#: The mesh's headers, never user properties.
MESH_HEADERS = frozenset({TOPIC_HEADER, PUBLICATION_HEADER, EXPIRES_HEADER, RETAIN_HEADER,
                          RETAINED_HEADER})


def headers_of(properties: dict, retain: bool = False) -> dict[str, str]:
    """
    The native headers of a PUBLISH (or a will) with (5.0) C{properties}
    and the RETAIN flag C{retain}.
    """
    headers: dict[str, str] = {RETAIN_HEADER: "true"} if retain else {}
    for name, value in properties.get("user_property", ()):
        if name not in MESH_HEADERS:
            headers.setdefault(name, value)
    content_type = properties.get("content_type")
    if content_type is not None:
        headers[CONTENT_TYPE] = content_type
    response_topic = properties.get("response_topic")
    if response_topic is not None:
        headers[RESPONSE_TOPIC] = response_topic
    correlation_data = properties.get("correlation_data")
    if correlation_data is not None:
        headers[CORRELATION_DATA] = base64.b64encode(correlation_data).decode("ascii")
    return headers


def retain_flag(headers: dict, retain_as_published: bool) -> bool:
    """
    The RETAIN flag of a delivery with C{headers} to a subscription
    with C{retain_as_published} (5.0; always false in 3.1.1).
    """
    if headers.get(RETAINED_HEADER) == "true":
        return True
    return retain_as_published and wants_retain(headers)


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
    C{now_ms} (epoch milliseconds) being when it is written.  A response
    topic or correlation data header that is not one (a wildcard in the
    topic, data not base64) is a user property like any other header.
    """
    properties: dict = {}
    users = []
    for name, value in headers.items():
        if name in MESH_HEADERS:
            continue
        if name == CONTENT_TYPE:
            properties["content_type"] = value
        elif name == RESPONSE_TOPIC and topic_name_problem(value) is None:
            properties["response_topic"] = value
        elif name == CORRELATION_DATA and _base64(value) is not None:
            properties["correlation_data"] = _base64(value)
        else:
            users.append((name, value))
    if users:
        properties["user_property"] = tuple(users)
    expires = expires_ms(headers)
    if expires:
        properties["message_expiry_interval"] = max(1, -(-(expires - now_ms) // 1000))
    return properties


def _base64(text: str) -> bytes | None:
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        return None
