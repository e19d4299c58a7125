"""
A persistent MQTT session as the mesh keeps it (docs/mqtt.md, "Persistent
sessions"): nothing but its subscriptions, each a durable topic
subscription at its router (docs/topics.md), which collects QoS 1
copies while the client is away.

A durable subscription is named by a client id and a name of
C{[A-Za-z0-9._-]} (L{meshroute.router.topic_subscriptions.durable_queue});
MQTT's client ids and topic filters may hold any character, so both are
derived:

 - the client id is C{mqtt.ID} for an MQTT client id of letters, digits,
   C{_} and C{-} (up to 120), else C{mqtt.h.} and a hash of it (a dot
   cannot be in the first form, so they never meet);
 - the name is C{qQOS.} and a hash of the topic filter: the QoS granted
   is kept in it, for the session's resumption.
"""

import hashlib
import re

#: An MQTT client id used as it is.
_PLAIN = re.compile(r"[A-Za-z0-9_-]{1,120}\Z")
_PREFIX = "mqtt."
_HASHED = "mqtt.h."


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:40]


def durable_client_id(client_id: str) -> str:
    """
    The client id of the durable subscriptions of MQTT client C{client_id}.
    """
    if _PLAIN.match(client_id):
        return _PREFIX + client_id
    return _HASHED + _digest(client_id)


def durable_name(topic_filter: str, qos: int) -> str:
    """
    The name of the durable subscription of C{topic_filter}, granted
    C{qos}.
    """
    return f"q{qos}.{_digest(topic_filter)}"


def granted_qos(name: str) -> int:
    """
    The QoS a durable subscription named by L{durable_name} was granted.
    """
    return 1 if name.startswith("q1.") else 0
