"""
Helpers shared by the client API's tests: reading a fired Deferred,
keeping the clients a test makes from being reported as forgotten, and
clients connected to a router's client factory in memory.
"""

import pytest
from twisted.internet.defer import Deferred, succeed
from twisted.test import iosim

from meshroute.client import Client, connect_endpoint
from meshroute.sessions.protocol import ClientFactory


def result_of(d: Deferred):
    """
    The result of a fired Deferred (raising its failure), leaving the
    result in place.
    """
    results = []

    def keep(result):
        results.append(result)
        return result

    d.addBoth(keep)
    assert results, "the Deferred has not fired"
    result = results[0]
    if hasattr(result, "raiseException"):
        d.addErrback(lambda failure: None)
        result.raiseException()
    return result


def failure_of(d: Deferred):
    """
    The exception a fired Deferred failed with (the failure is handled).
    """
    results = []
    d.addBoth(results.append)
    assert results, "the Deferred has not fired"
    assert hasattr(results[0], "raiseException"), f"succeeded with {results[0]!r}"
    return results[0].value


@pytest.fixture(autouse=True)
def kept_clients(monkeypatch):
    """
    Every client a test makes, kept until the end of the test and then
    made unable to warn: clients a test leaves open are not forgotten ones
    (which would fail their calls in whichever later test the garbage
    collector runs).  The forgotten-client tests empty this list.
    """
    made = []
    original = Client.__init__

    def init(self, core):
        original(self, core)
        made.append(self)

    monkeypatch.setattr(Client, "__init__", init)
    yield made
    for client in made:
        client._finalizer.detach()


class MemoryEndpoint:
    """
    A client endpoint whose connections reach a L{ClientFactory} through
    iosim; C{pump} moves the bytes of the latest connection, C{pumps}
    those of all.
    """

    def __init__(self, server_factory, clock) -> None:
        self._server_factory = server_factory
        self._clock = clock
        self.pump: iosim.IOPump | None = None
        self.pumps: list[iosim.IOPump] = []
        self.server = None

    def connect(self, factory):
        client = factory.buildProtocol(None)
        self.server = self._server_factory.buildProtocol(None)
        self.pump = iosim.connect(
            self.server, iosim.makeFakeServer(self.server),
            client, iosim.makeFakeClient(client),
            greet=False, clock=self._clock,
        )
        self.pumps.append(self.pump)
        return succeed(client)


class Harness:
    """
    Clients of the meshroute client API connected to a real
    L{ClientFactory} (made with C{factory_options}) through iosim.
    """

    def __init__(self, engine, clock, **factory_options) -> None:
        self.engine = engine
        self.clock = clock
        self.factory = ClientFactory(engine, clock, **factory_options)
        self.endpoint = MemoryEndpoint(self.factory, clock)

    def connect(self, client_id="tester", **options):
        d = connect_endpoint(self.clock, self.endpoint, client_id=client_id, **options)
        self.flush()
        return result_of(d)

    def flush(self) -> None:
        while any([pump.flush() for pump in self.endpoint.pumps]):
            pass

    def connect_for_cli(self, reactor, endpoint_string, options=None, **overrides):
        """
        A stand-in for L{meshroute.client.connect} that the commands call.
        """
        d = connect_endpoint(self.clock, self.endpoint, options, **overrides)
        self.flush()
        return d
