"""
One listener of a router: its port is bound early, and it accepts
connections only once the listener is started.

twistd binds ports in C{privilegedStartService}, so that a port in use
stops start-up with a clear error before anything runs, and starts
services afterwards; a router starts its listeners only once its store is
open (L{meshroute.router.service.RouterService}), since what a connection asks
first (a link's recovery point, a session) needs the store.  In between,
the port is bound but paused: a client that connects meanwhile waits in
the kernel's listen backlog, its first bytes unread, and is served as
soon as the listener starts.  It is never accepted and closed without a
word (a STOMP client would see no C{CONNECTED} and no C{ERROR}).

Stopping is as before: a router that stops (at shutdown, or at the end
of an HA instance's active period) answers or drops its connections as
its listeners decide (C{not-active} from an HA instance) and closes its
ports, so that a later connection is refused, and one still waiting in a
backlog (a router that stops before it ever served) is reset by the
kernel: an error the client sees, never an accepted connection closed
without a word.

Where each port is bound is reported (L{Listening.describe}, the admin
API's C{GET /api/v1/router} C{listeners}): the address the OS gave it,
which says which port a C{tcp:0} endpoint got, and shows each of a
listener's endpoints (IPv4 and IPv6, say) apart.

A port pauses through L{IPushProducer}: every port of the reactor (TCP,
TLS, UNIX and adopted sockets, and so the WebSocket listener's, which is
a TCP or TLS port) provides it, C{pauseProducing} stopping accepting
(C{stopReading}) and C{resumeProducing} accepting again.  A port that
cannot pause (an endpoint plugin's) stops start-up, naming its key,
rather than serve a router that is not ready, or close connections
without a word.
"""

from twisted.application.internet import StreamServerEndpointService
from twisted.internet.address import IPv4Address, IPv6Address, UNIXAddress
from twisted.internet.error import CannotListenError
from twisted.internet.interfaces import IPushProducer

from meshroute.errors import ConfigError


class Listening(StreamServerEndpointService):
    """
    A listener of a router, at C{description}, the value of C{key} in the
    configuration file C{path}.  A port that cannot be bound (or cannot
    pause) fails start-up (as C{twisted.application.strports.service}
    does) with a L{ConfigError} naming the file and the key, instead of a
    traceback.

    From C{privilegedStartService} (which binds the port) to
    C{startService}, the port accepts nothing; a service started without
    C{privilegedStartService} binds and accepts at once.
    """

    def __init__(self, endpoint, factory, path: str, key: str, description: str) -> None:
        super().__init__(endpoint, factory)
        self._raiseSynchronously = True
        self._path = path
        self._key = key
        self._description = description
        self._port = None

    def describe(self) -> dict:
        """
        C{{"key", "endpoint", "address", "port"}}: the configuration key and
        endpoint string of this listener, and where its port is bound
        (C{"127.0.0.1:6001"}, C{"[::1]:6001"}, a UNIX socket's path, and
        the TCP port number; None before it is bound, or for a port that
        does not say).
        """
        host = self._port.getHost() if self._port is not None else None
        return {"key": self._key, "endpoint": self._description,
                "address": _bound_address(host),
                "port": host.port if isinstance(host, (IPv4Address, IPv6Address)) else None}

    def privilegedStartService(self) -> None:
        try:
            super().privilegedStartService()
        except CannotListenError as e:
            reason = e.socketError.strerror if isinstance(e.socketError, OSError) else None
            raise self._error(f"{(reason or str(e.socketError)).lower()}") from None
        unpausable: list = []
        self._waitingForPort.addCallback(self._hold, unpausable)
        if unpausable:
            raise self._error(f"its port ({type(unpausable[0]).__name__}) cannot hold "
                              "connections until the router serves")

    def _hold(self, port, unpausable: list):
        """
        The port is bound: it accepts nothing until C{startService}.
        """
        if not IPushProducer.providedBy(port):
            unpausable.append(port)
            port.stopListening()
            return None
        if not self.running:
            port.pauseProducing()
        self._port = port
        return port

    def startService(self) -> None:
        super().startService()
        self._waitingForPort.addCallback(_accept)

    def _error(self, reason: str) -> ConfigError:
        return ConfigError(self._path, self._key,
                           f"cannot listen on {self._description}: {reason}")


def _bound_address(host) -> str | None:
    """
    A bound port's address as an operator writes it: C{HOST:PORT},
    C{[HOST]:PORT} for IPv6, or a UNIX socket's path; None for another
    kind.
    """
    if isinstance(host, IPv4Address):
        return f"{host.host}:{host.port}"
    if isinstance(host, IPv6Address):
        return f"[{host.host}]:{host.port}"
    if isinstance(host, UNIXAddress) and host.name is not None:
        name = host.name
        return name.decode(errors="replace") if isinstance(name, bytes) else name
    return None


def _accept(port):
    """
    Accept connections on C{port} (from its backlog first).
    """
    if port is not None:
        port.resumeProducing()
    return port


def listening(endpoints, config, key: str, description: str, factory) -> Listening:
    """
    The service of one listener at C{description}, the value of C{key} in
    C{config}'s file (a L{meshroute.router.settings.RouterConfig}).
    """
    return Listening(endpoints.server(description), factory, config.path, key, description)
