"""
Tests for L{meshroute.router.listening}: a listener's port is bound early and
accepts only once the listener is started, without sockets (a recording
port).
"""

import errno

import pytest
from twisted.internet.address import IPv4Address, IPv6Address, UNIXAddress
from twisted.internet.defer import succeed
from twisted.internet.error import CannotListenError
from twisted.internet.interfaces import IListeningPort
from twisted.internet.protocol import Factory, Protocol
from zope.interface import implementer

from support.fakes import RecordingEndpoint, RecordingPort
from meshroute.errors import ConfigError
from meshroute.router.listening import Listening


def listener(endpoint: RecordingEndpoint) -> Listening:
    return Listening(endpoint, Factory.forProtocol(Protocol), "router.toml",
                     "clients.listener.endpoint", "tcp:7002")


def test_a_bound_port_accepts_nothing_until_the_listener_starts():
    """
    C{privilegedStartService} binds the port and pauses it at once;
    C{startService} resumes it (what waited in its backlog is served
    then); C{stopService} stops listening.
    """
    endpoint = RecordingEndpoint()
    service = listener(endpoint)
    service.privilegedStartService()
    assert endpoint.port.calls == ["pause"]
    service.startService()
    assert endpoint.port.calls == ["pause", "resume"]
    service.stopService()
    assert endpoint.port.calls == ["pause", "resume", "stop"]


def test_a_listener_started_without_a_privileged_start_accepts_at_once():
    """
    Started directly (a listener added to a router that already serves),
    it binds and accepts at once: it never pauses.
    """
    endpoint = RecordingEndpoint()
    service = listener(endpoint)
    service.startService()
    assert endpoint.factory is not None
    assert "pause" not in endpoint.port.calls


def test_a_port_in_use_stops_start_up_naming_the_file_and_the_key():
    endpoint = RecordingEndpoint(error=CannotListenError(
        "", 7002, OSError(errno.EADDRINUSE, "Address already in use")))
    with pytest.raises(ConfigError) as raised:
        listener(endpoint).privilegedStartService()
    assert str(raised.value) == ("router.toml: clients.listener.endpoint: cannot listen on "
                                 "tcp:7002: address already in use")


@implementer(IListeningPort)
class UnpausablePort:
    """
    A listening port that is no L{IPushProducer} (as an endpoint plugin's
    might be).
    """

    def __init__(self) -> None:
        self.calls: list[str] = []

    def stopListening(self):
        self.calls.append("stop")
        return succeed(None)


def test_a_port_that_cannot_pause_stops_start_up_and_is_closed():
    """
    A port that could not hold connections until the router serves
    stops start-up, naming the file and the key, and is closed: it
    neither serves a router that is not ready nor closes connections
    without a word.
    """
    port = UnpausablePort()
    with pytest.raises(ConfigError) as raised:
        listener(RecordingEndpoint(port)).privilegedStartService()
    assert str(raised.value) == (
        "router.toml: clients.listener.endpoint: cannot listen on tcp:7002: its port "
        "(UnpausablePort) cannot hold connections until the router serves")
    assert port.calls == ["stop"]


class BoundPort(RecordingPort):
    """
    A recording port bound to C{host}.
    """

    def __init__(self, host) -> None:
        super().__init__()
        self.host = host

    def getHost(self):
        return self.host


@pytest.mark.parametrize("host, address, port", [
    (IPv4Address("TCP", "127.0.0.1", 6001), "127.0.0.1:6001", 6001),
    (IPv6Address("TCP", "::1", 6002), "[::1]:6002", 6002),
    (UNIXAddress(b"/run/meshroute/clients.sock"), "/run/meshroute/clients.sock", None),
    (None, None, None),
])
def test_a_listener_describes_where_its_port_is_bound(host, address, port):
    service = listener(RecordingEndpoint(BoundPort(host)))
    unbound = {"key": "clients.listener.endpoint", "endpoint": "tcp:7002", "address": None,
               "port": None}
    assert service.describe() == unbound
    service.privilegedStartService()
    assert service.describe() == unbound | {"address": address, "port": port}
