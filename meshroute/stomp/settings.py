"""
C{[stomp.listener]}: where STOMP clients connect, and what the router
offers and allows them; and the rules that judge its keys together
(L{errors}).  The TOML loader converts each value (the C{heart-beat}
string into L{StompListenerSettings.heartbeat_ms}).
"""

import re
from dataclasses import dataclass

from meshroute.errors import Problem
from meshroute.sessions.limits import ClientLimits
from meshroute.sessions.tls import client_ca_problem

#: The path a WebSocket client asks for, as Artemis and RabbitMQ serve it.
DEFAULT_WEBSOCKET_PATH = "/stomp"
#: Deliveries a subscription may hold unacknowledged when its SUBSCRIBE
#: has no C{prefetch-count} header: the specification sets none, and a
#: bound keeps one slow consumer from holding a whole queue.
DEFAULT_PREFETCH_COUNT = 100
#: The router's heart-beat offer in CONNECTED, in ms: it can send one
#: every 10 s and wants one every 10 s.
DEFAULT_HEARTBEAT_MS = (10_000, 10_000)
#: A WebSocket resource path: absolute, no query or fragment.
_WEBSOCKET_PATH = re.compile(r"/[A-Za-z0-9._~!$&'()*+,;=:@/%-]*")


@dataclass(frozen=True)
class StompListenerSettings:
    """
    The STOMP listener of one router.

    @ivar endpoint: the server endpoint strings of the STOMP listener
        (C{tcp:} or C{ssl:}; a one-item tuple when the file gives a single
        string; several, e.g. IPv4 and IPv6, serve the same clients alike).
    @ivar websocket: the server endpoint strings where STOMP over
        WebSocket is served (empty: nowhere).
    @ivar websocket_path: the HTTP path of the WebSocket resource.
    @ivar ttl_override_ms: the connection TTL every STOMP connection gets,
        or -1: the client's heart-beat decides (twice its interval, as
        Artemis maps it).
    @ivar client_ca: the PEM file of the CA whose client certificates
        authenticate users on an C{ssl:} endpoint, or None.
    @ivar limits: what one client may take, the C{[clients.listener]}
        keys of the same names.
    @ivar prefetch_count: a subscription's prefetch when its SUBSCRIBE
        names none.
    @ivar heartbeat_ms: the router's heart-beat offer C{(cx, cy)} in ms.
    """

    endpoint: tuple[str, ...]
    websocket: tuple[str, ...] = ()
    websocket_path: str = DEFAULT_WEBSOCKET_PATH
    ttl_override_ms: int = -1
    client_ca: str | None = None
    limits: ClientLimits = ClientLimits()
    prefetch_count: int = DEFAULT_PREFETCH_COUNT
    heartbeat_ms: tuple[int, int] = DEFAULT_HEARTBEAT_MS


def errors(settings: StompListenerSettings) -> list[Problem]:
    """
    The settings that cannot work, each naming its key: a WebSocket
    endpoint that is a STOMP endpoint too, a WebSocket path that is
    not an absolute URL path, a C{client-ca} neither endpoint can use, a
    C{prefetch-count} no subscription could take.
    """
    prefix = "stomp.listener"
    found: list[Problem] = []
    for websocket in settings.websocket:
        if websocket in settings.endpoint:
            found.append(Problem(f"{prefix}.websocket",
                                 f"{websocket!r} is already a STOMP endpoint"))
    if not _WEBSOCKET_PATH.fullmatch(settings.websocket_path):
        found.append(Problem(f"{prefix}.websocket-path",
                             f"{settings.websocket_path!r} is not an absolute URL path "
                             "(like \"/stomp\", without query or fragment)"))
    if settings.client_ca is not None:
        problem = client_ca_problem(settings.client_ca,
                                    [*settings.endpoint, *settings.websocket])
        if problem is not None:
            found.append(Problem(f"{prefix}.client-ca", problem))
    if settings.prefetch_count > settings.limits.max_unacknowledged:
        found.append(Problem(f"{prefix}.prefetch-count",
                             f"{settings.prefetch_count} is more than max-unacknowledged "
                             f"{settings.limits.max_unacknowledged}: no subscription could "
                             "take it"))
    return found
