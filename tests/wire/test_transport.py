"""
L{flush_now}: what a turn wrote leaves for the kernel at once, over real
loopback sockets (the reactor's own buffering is what is under test), and
is left to the reactor where writing now would be wrong.
"""

import pytest_twisted
from twisted.internet import defer, reactor, task
from twisted.internet.endpoints import clientFromString, connectProtocol, serverFromString
from twisted.internet.interfaces import IPushProducer
from twisted.internet.protocol import Factory, Protocol
from twisted.internet.testing import StringTransport
from zope.interface import implementer

from meshroute.wire.transport import flush_now
from support.certificates import make_ca, make_server_cert


class Received(Protocol):
    """
    The far end: keeps what it reads; C{arrived(n)} fires once it holds
    C{n} bytes, C{lost} once the connection is gone.
    """

    def __init__(self, greeting: bytes = b"") -> None:
        self.data = b""
        self.greeting = greeting
        self.lost = defer.Deferred()
        self._waiting: list[tuple[int, defer.Deferred]] = []

    def connectionMade(self) -> None:
        if self.greeting:
            self.transport.write(self.greeting)

    def dataReceived(self, data: bytes) -> None:
        self.data += data
        for n, d in [w for w in self._waiting if len(self.data) >= w[0]]:
            self._waiting.remove((n, d))
            d.callback(self.data)

    def arrived(self, n: int) -> defer.Deferred:
        if len(self.data) >= n:
            return defer.succeed(self.data)
        d = defer.Deferred()
        self._waiting.append((n, d))
        return d

    def connectionLost(self, reason) -> None:
        self.lost.callback(None)


async def connected_pair(server_description: str, client_description: str,
                         greeting: bytes = b""):
    """
    A listening port and a client connected to it: (client protocol,
    server protocol, port).
    """
    servers: list[Received] = []

    def made() -> Received:
        servers.append(Received(greeting))
        return servers[-1]

    port = await serverFromString(reactor, server_description).listen(Factory.forProtocol(made))
    client = Received()
    await connectProtocol(
        clientFromString(reactor, client_description.format(port=port.getHost().port)), client)
    while not servers:
        await task.deferLater(reactor, 0, lambda: None)
    return client, servers[0], port


def tcp_pair():
    "A client and a listener over TCP on 127.0.0.1 (L{connected_pair})."
    return connected_pair("tcp:0:interface=127.0.0.1", "tcp:127.0.0.1:{port}")


async def closed(client: Received, port) -> None:
    client.transport.loseConnection()
    await client.lost
    await port.stopListening()


@pytest_twisted.ensureDeferred
async def test_what_was_written_leaves_before_the_reactor_polls_again():
    client, server, port = await tcp_pair()
    transport = client.transport
    transport.write(b"a frame")
    # The reactor would write it on its next poll...
    assert transport in reactor.getWriters()
    flush_now(transport)
    # ...but the kernel has it already: nothing is left for that poll.
    assert transport not in reactor.getWriters()
    assert await server.arrived(7) == b"a frame"
    await closed(client, port)


@pytest_twisted.ensureDeferred
async def test_a_closing_transport_is_left_to_the_reactor_and_loses_nothing():
    client, server, port = await tcp_pair()
    transport = client.transport
    transport.write(b"last words")
    transport.loseConnection()
    flush_now(transport)
    # The reactor writes the buffer and then closes the connection: had
    # the flush written it, nothing would have closed it.
    assert transport in reactor.getWriters()
    await server.lost
    assert server.data == b"last words"
    await client.lost
    await port.stopListening()


@implementer(IPushProducer)
class Paused:
    resumed = 0

    def pauseProducing(self) -> None:
        pass

    def resumeProducing(self) -> None:
        self.resumed += 1

    def stopProducing(self) -> None:
        pass


@pytest_twisted.ensureDeferred
async def test_a_transport_whose_producer_is_paused_is_left_to_the_reactor():
    client, server, port = await tcp_pair()
    transport = client.transport
    producer = Paused()
    transport.registerProducer(producer, True)
    transport.write(b"x" * (transport.bufferSize + 1))
    assert transport.producerPaused
    flush_now(transport)
    # Resuming the producer is the reactor's, outside the caller's turn.
    assert producer.resumed == 0
    assert transport in reactor.getWriters()
    await server.arrived(transport.bufferSize + 1)
    transport.unregisterProducer()
    await closed(client, port)


def test_a_transport_without_a_socket_is_left_as_it_is():
    transport = StringTransport()
    transport.write(b"a frame")
    flush_now(transport)
    assert transport.value() == b"a frame"


@pytest_twisted.ensureDeferred
async def test_tls_is_left_to_its_layer_and_loses_nothing(tmp_path):
    ca_key, ca_cert = make_ca(tmp_path / "ca", "test CA")
    key, cert = make_server_cert(tmp_path, ca_key, ca_cert)
    client, server, port = await connected_pair(
        f"ssl:0:interface=127.0.0.1:privateKey={key}:certKey={cert}",
        f"ssl:127.0.0.1:{{port}}:caCertsDir={tmp_path / 'ca'}:hostname=localhost",
        greeting=b"hello")
    await client.arrived(5)  # the handshake is done
    client.transport.write(b"a frame")
    flush_now(client.transport)
    assert await server.arrived(7) == b"a frame"
    await closed(client, port)
