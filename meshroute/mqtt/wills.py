"""
A connection's last will (docs/mqtt.md, "Last will"): checked with its
CONNECT, published as a native publish from its client would be (QoS 1:
persistent) when the connection ends without a clean DISCONNECT, after
its delay (5.0).
"""

from twisted.logger import Logger

from meshroute.messages import TOPIC_PREFIX
from meshroute.mqtt import refusals
from meshroute.mqtt.messages import headers_of, time_to_live_ms
from meshroute.mqtt.topic_names import UnmappableTopic, mesh_topic
from meshroute.sessions.sends import submitted
from meshroute.wire import client_frames as f

log = Logger()


def refusal(will, v5: bool, guard) -> tuple[str, str] | None:
    """
    Why the CONNECT carrying C{will} is refused for it (code, detail), or
    None: a QoS the router does not serve (5.0; a 3.1.1 will of QoS 2 is
    published at QoS 1, as 3.1.1 cannot be told), a topic the mesh cannot
    name, or one the user (its L{meshroute.sessions.permissions.Guard},
    or None) may not publish to.
    """
    if will.qos > 1 and v5:
        return refusals.QOS_NOT_SUPPORTED, "a will of QoS 2: the router grants QoS 1 at most"
    try:
        address = TOPIC_PREFIX + mesh_topic(will.topic)
    except UnmappableTopic as e:
        return f.BAD_ADDRESS, f"the will's topic: {e}"
    if guard is not None and not guard.may_send(address):
        return f.NOT_ALLOWED, guard.send_refusal(address)
    return None


def delay_s(will, v5: bool, session_expiry_s: int) -> int:
    """
    How long C{will} waits (5.0's will delay interval, at most the
    session's expiry interval; 3.1.1: not at all).
    """
    if not v5:
        return 0
    return min((will.properties or {}).get("will_delay_interval", 0), session_expiry_s)


def publish(engine, clock, client_id: str, will) -> None:
    """
    Publish C{will} of MQTT client C{client_id} through C{engine}.
    """
    properties = will.properties or {}
    send = f.Send(0, TOPIC_PREFIX + mesh_topic(will.topic), headers_of(properties, will.retain),
                  will.payload, will.qos >= 1, "", time_to_live_ms(properties))
    submitted(engine, clock, send).addCallbacks(
        lambda _: log.info("MQTT client {client}: its will was published to {topic!r}",
                           client=client_id, topic=will.topic),
        lambda failure: log.failure("MQTT client {client}: publishing its will failed",
                                    failure, client=client_id))
