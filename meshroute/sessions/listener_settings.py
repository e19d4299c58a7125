"""
What every protocol listener beside the native one (C{[stomp.listener]},
C{[mqtt.listener]}) is configured with, and the rules that judge those
keys together (L{problems}): its endpoints and WebSocket endpoints, the
connection TTL override, the TLS client CA, what one client may take
(the C{[clients.listener]} limits of the same names), and the credit of
a subscription.  A protocol's settings extend L{ProtocolListenerSettings}
with its own keys.
"""

import re
from dataclasses import dataclass

from meshroute.errors import Problem
from meshroute.sessions.limits import ClientLimits
from meshroute.sessions.tls import client_ca_problem

#: Deliveries a subscription may hold unacknowledged when the client
#: names no bound: a bound keeps one slow consumer from holding a whole
#: queue.
DEFAULT_PREFETCH_COUNT = 100
#: A WebSocket resource path: absolute, no query or fragment.
_WEBSOCKET_PATH = re.compile(r"/[A-Za-z0-9._~!$&'()*+,;=:@/%-]*")


@dataclass(frozen=True)
class ProtocolListenerSettings:
    """
    One protocol listener of a router.

    @ivar endpoint: its server endpoint strings (C{tcp:} or C{ssl:}; a
        one-item tuple when the file gives a single string; several, e.g.
        IPv4 and IPv6, serve the same clients alike).
    @ivar websocket: the server endpoint strings where the protocol is
        served over WebSocket (empty: nowhere).
    @ivar websocket_path: the HTTP path of the WebSocket resource.
    @ivar ttl_override_ms: the connection TTL every connection gets, or
        -1: the client's keep-alive (or heart-beat) decides.
    @ivar client_ca: the PEM file of the CA whose client certificates
        authenticate users on an C{ssl:} endpoint, or None.
    @ivar limits: what one client may take, the C{[clients.listener]}
        keys of the same names.
    @ivar prefetch_count: the deliveries a subscription may hold
        unacknowledged when the client names no bound.
    """

    endpoint: tuple[str, ...]
    websocket: tuple[str, ...] = ()
    websocket_path: str = "/"
    ttl_override_ms: int = -1
    client_ca: str | None = None
    limits: ClientLimits = ClientLimits()
    prefetch_count: int = DEFAULT_PREFETCH_COUNT


def problems(settings: ProtocolListenerSettings, prefix: str, protocol: str) -> list[Problem]:
    """
    The settings that cannot work, each naming its key under C{prefix}
    (C{"stomp.listener"}): a WebSocket endpoint that is a C{protocol}
    endpoint too, a WebSocket path that is not an absolute URL path, a
    C{client-ca} no endpoint can use, a C{prefetch-count} no
    subscription could take.
    """
    found: list[Problem] = []
    for websocket in settings.websocket:
        if websocket in settings.endpoint:
            found.append(Problem(f"{prefix}.websocket",
                                 f"{websocket!r} is already a {protocol} endpoint"))
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
