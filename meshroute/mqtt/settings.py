"""
C{[mqtt.listener]}: where MQTT clients connect, and what the router
offers and allows them (docs/mqtt.md, "The listener"); and the rules
that judge its keys together (L{errors}).
"""

from dataclasses import dataclass

from meshroute.errors import Problem
from meshroute.sessions.listener_settings import ProtocolListenerSettings, problems

#: The path an MQTT client over WebSocket asks for, as Mosquitto, EMQX
#: and HiveMQ serve it.
DEFAULT_WEBSOCKET_PATH = "/mqtt"
#: The topic aliases (MQTT 5) a client may set on one connection: each
#: holds a topic name for the connection's life, so they are bounded.
DEFAULT_TOPIC_ALIAS_MAXIMUM = 16
#: The most topic aliases a listener may allow (the property's range).
MAX_TOPIC_ALIAS_MAXIMUM = 65535


@dataclass(frozen=True)
class MqttListenerSettings(ProtocolListenerSettings):
    """
    The MQTT listener of one router: every protocol listener's keys
    (L{ProtocolListenerSettings}: C{ttl_override_ms} -1 lets the
    client's keep-alive decide, 1.5 times it as the specifications say;
    C{prefetch_count} is a subscription's credit, beside the client's
    receive maximum), and:

    @ivar topic_alias_maximum: the topic aliases an MQTT 5 client may set
        (0: none).
    @ivar mesh_wide: a SUBACK waits until the subscription's interest
        reached every router reachable now, so that what is published
        anywhere after it is the subscriber's (docs/topics.md).
    """

    websocket_path: str = DEFAULT_WEBSOCKET_PATH
    topic_alias_maximum: int = DEFAULT_TOPIC_ALIAS_MAXIMUM
    mesh_wide: bool = True


def errors(settings: MqttListenerSettings) -> list[Problem]:
    """
    The settings that cannot work, each naming its key
    (L{meshroute.sessions.listener_settings.problems}).
    """
    return problems(settings, "mqtt.listener", "MQTT")
