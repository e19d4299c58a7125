"""
The TCP ports of a shared-store instance's router, bound for the whole
life of the instance rather than of each active period.

A waiting instance holds its routing, client, STOMP and MQTT ports bound and
listening but accepts nothing: a client that fails over to it (at once,
when its connection to the live closed) or a neighbour that dials it
waits in the kernel's listen backlog, its first bytes unread, and is
served as soon as this instance takes the store, within a
C{lock-poll-interval} of the live's death and the store's open time,
instead of being refused and coming back a C{retry-interval} later.
Each active period's router adopts a duplicate of the bound socket
(stopping the router closes only the duplicate).  A port that is not plain TCP (C{ssl:}, C{unix:}) is bound
by each active period's router as usual.
"""

import os
import re
import socket

from twisted.internet.endpoints import AdoptedStreamServerEndpoint
from twisted.internet.interfaces import IStreamServerEndpoint
from zope.interface import implementer

from meshroute.errors import ConfigError
from meshroute.router.settings import RouterConfig, serving_endpoints

#: Where an endpoint string's arguments end (a colon may be escaped: "\\:").
_UNESCAPED_COLON = re.compile(r"(?<!\\):")


def _tcp_address(description: str) -> tuple[str, int, int] | None:
    """
    (interface, port, backlog) of a C{tcp:}/C{tcp6:} server endpoint
    string; None for another kind.
    """
    parts = [part.replace("\\:", ":") for part in _UNESCAPED_COLON.split(description)]
    if parts[0] not in ("tcp", "tcp6"):
        return None
    positional = [part for part in parts[1:] if "=" not in part]
    named = dict(part.split("=", 1) for part in parts[1:] if "=" in part)
    default_interface = "::" if parts[0] == "tcp6" else ""
    return (named.get("interface", default_interface),
            int(named.get("port", positional[0] if positional else "0")),
            int(named.get("backlog", "50")))


@implementer(IStreamServerEndpoint)
class _HeldEndpoint:
    """
    A held socket as a server endpoint: each C{listen} adopts a duplicate
    of it (adopting closes what it was given), so that it stays bound for
    the next active period.
    """

    def __init__(self, reactor, held: socket.socket) -> None:
        self._reactor = reactor
        self._held = held

    def listen(self, factory):
        return AdoptedStreamServerEndpoint(self._reactor, os.dup(self._held.fileno()),
                                           self._held.family).listen(factory)


class HeldPorts:
    """
    The endpoints (C{server}, C{client}) of a shared-store instance's
    routers: C{endpoints}' own, except the TCP listeners of C{config},
    which are sockets bound by L{bind} and adopted by each router.
    """

    def __init__(self, endpoints, reactor, config: RouterConfig) -> None:
        self._endpoints = endpoints
        self._reactor = reactor
        self._config = config
        self._sockets: dict[str, socket.socket] = {}

    def bind(self) -> None:
        """
        Bind and listen on every TCP listener's port.

        @raise ConfigError: naming the file and the listener's key, for a
            port that cannot be bound.
        """
        for key, description in serving_endpoints(self._config):
            address = _tcp_address(description)
            if address is None or description in self._sockets:
                continue
            interface, port, backlog = address
            family = socket.AF_INET6 if ":" in interface else socket.AF_INET
            held = socket.socket(family, socket.SOCK_STREAM)
            try:
                held.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                held.bind((interface, port))
                held.listen(backlog)
                held.setblocking(False)
            except OSError as e:
                held.close()
                self.close()
                raise ConfigError(self._config.path, key,
                                  f"cannot listen on {description!r}: "
                                  f"{(e.strerror or str(e)).lower()}") from None
            self._sockets[description] = held

    def server(self, description: str):
        held = self._sockets.get(description)
        if held is None:
            return self._endpoints.server(description)
        return _HeldEndpoint(self._reactor, held)

    def client(self, description: str):
        return self._endpoints.client(description)

    def close(self) -> None:
        """
        Close the held sockets: a connection still waiting in a backlog is
        reset, an error its client sees.
        """
        for held in self._sockets.values():
            held.close()
        self._sockets.clear()
