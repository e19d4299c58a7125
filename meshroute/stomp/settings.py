"""
C{[stomp.listener]}: where STOMP clients connect, and what the router
offers and allows them; and the rules that judge its keys together
(L{errors}).  The TOML loader converts each value (the C{heart-beat}
string into L{StompListenerSettings.heartbeat_ms}).
"""

from dataclasses import dataclass

from meshroute.errors import Problem
from meshroute.sessions.listener_settings import (
    DEFAULT_PREFETCH_COUNT,
    ProtocolListenerSettings,
    problems,
)

__all__ = ["DEFAULT_HEARTBEAT_MS", "DEFAULT_PREFETCH_COUNT", "DEFAULT_WEBSOCKET_PATH",
           "StompListenerSettings", "errors"]

#: The path a WebSocket client asks for, as Artemis and RabbitMQ serve it.
DEFAULT_WEBSOCKET_PATH = "/stomp"
#: The router's heart-beat offer in CONNECTED, in ms: it can send one
#: every 10 s and wants one every 10 s.
DEFAULT_HEARTBEAT_MS = (10_000, 10_000)


@dataclass(frozen=True)
class StompListenerSettings(ProtocolListenerSettings):
    """
    The STOMP listener of one router: every protocol listener's keys
    (L{ProtocolListenerSettings}: C{ttl_override_ms} -1 lets the client's
    heart-beat decide, twice its interval, as Artemis maps it), and:

    @ivar heartbeat_ms: the router's heart-beat offer C{(cx, cy)} in ms.
    """

    websocket_path: str = DEFAULT_WEBSOCKET_PATH
    heartbeat_ms: tuple[int, int] = DEFAULT_HEARTBEAT_MS


def errors(settings: StompListenerSettings) -> list[Problem]:
    """
    The settings that cannot work, each naming its key
    (L{meshroute.sessions.listener_settings.problems}).
    """
    return problems(settings, "stomp.listener", "STOMP")
