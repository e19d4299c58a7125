"""
STOMP over WebSocket (L{meshroute.stomp.websocket}): a stream protocol
served on a real listening port on 127.0.0.1, reached with autobahn's
Twisted WebSocket client, as a browser would reach it.
"""

import pytest
import pytest_twisted
from autobahn.twisted.websocket import WebSocketClientFactory, WebSocketClientProtocol
from twisted.internet import reactor
from twisted.internet.defer import Deferred
from twisted.internet.endpoints import clientFromString, serverFromString
from twisted.internet.error import ConnectionDone, ConnectionLost
from twisted.internet.interfaces import IPushProducer, ITransport
from twisted.internet.protocol import Factory, Protocol
from zope.interface.verify import verifyObject

from meshroute.mqtt.listener import MQTT_SUBPROTOCOLS
from meshroute.stomp.websocket import websocket_factory

#: Generous for a loaded machine: every wait ends as soon as its event
#: happens, the deadline only stops a test that would hang.
DEADLINE_S = 30


def within_deadline(d: Deferred) -> Deferred:
    return d.addTimeout(DEADLINE_S, reactor)


class Stream(Protocol):
    """
    The stream protocol served: it keeps what it reads, answers C{echo:X}
    with C{X}, closes on C{close}, and records how it ended.
    """

    def connectionMade(self):
        self.factory.made.append(self)
        made, self.factory.another = self.factory.another, Deferred()
        made.callback(self)
        self.received = b""
        self.lost = Deferred()
        self.data = Deferred()
        self.transport.registerProducer(self, True)

    def dataReceived(self, data):
        self.received += data
        if self.received.startswith(b"echo:") and self.received.endswith(b"\0"):
            self.transport.write(self.received[5:-1])
            self.received = b""
        elif self.received == b"close":
            self.transport.loseConnection()
            self.transport.write(b"after the close")
        d, self.data = self.data, Deferred()
        d.callback(data)

    def connectionLost(self, reason):
        self.reason = reason
        self.lost.callback(None)

    def pauseProducing(self):
        pass

    def resumeProducing(self):
        pass

    def stopProducing(self):
        pass


class StreamFactory(Factory):
    protocol = Stream

    def __init__(self):
        self.made: list[Stream] = []
        self.another = Deferred()


class Browser(WebSocketClientProtocol):
    """
    The WebSocket client: it keeps each message with its kind, and
    records its opening and its close.
    """

    def onConnect(self, response):
        self.factory.subprotocol = response.protocol

    def onOpen(self):
        self.factory.opened.callback(self)

    def onMessage(self, payload, isBinary):
        self.factory.messages.append((payload, isBinary))
        d, self.factory.message = self.factory.message, Deferred()
        d.callback(None)

    def onClose(self, wasClean, code, reason):
        if not self.factory.opened.called:
            self.factory.opened.errback(ConnectionError(reason))
        self.factory.closed.callback((wasClean, code, reason))


@pytest.fixture
def served():
    """
    The listening port serving a L{StreamFactory} over WebSocket at
    C{/stomp}, and that factory.
    """
    streams = StreamFactory()
    port = pytest_twisted.blockon(serverFromString(reactor, "tcp:0:interface=127.0.0.1").listen(
        websocket_factory(streams, "ws://127.0.0.1/stomp", reactor)))
    yield port, streams
    pytest_twisted.blockon(port.stopListening())


async def browse(port, protocols, path="/stomp") -> WebSocketClientFactory:
    """
    Open a WebSocket to C{port} at C{path} offering C{protocols}; return
    the client factory once the connection is open or refused.
    """
    number = port.getHost().port
    factory = WebSocketClientFactory(f"ws://127.0.0.1:{number}{path}", protocols=protocols,
                                     reactor=reactor)
    factory.protocol = Browser
    # autobahn's timers round down to whole seconds: its 1 s defaults
    # could end a close handshake at once on a loaded machine.
    factory.setProtocolOptions(closeHandshakeTimeout=DEADLINE_S,
                               serverConnectionDropTimeout=DEADLINE_S)
    factory.opened, factory.closed, factory.message = Deferred(), Deferred(), Deferred()
    factory.messages = []
    factory.subprotocol = None
    factory.client = await clientFromString(reactor, f"tcp:127.0.0.1:{number}").connect(factory)
    return factory


async def stream_of(streams: StreamFactory, index: int = 0) -> Stream:
    """
    The stream protocol of the C{index}th connection, once it is made (the
    client sees its WebSocket open before the server side's stream is
    connected).
    """
    while len(streams.made) <= index:
        await within_deadline(streams.another)
    return streams.made[index]


async def connected(served, protocols=("v12.stomp",)):
    """
    A WebSocket open on C{served} offering C{protocols}: the client
    factory, the client protocol, and the server side's stream.
    """
    port, streams = served
    index = len(streams.made)
    browser = await browse(port, list(protocols))
    client = await within_deadline(browser.opened)
    return browser, client, await stream_of(streams, index)


async def message(browser: WebSocketClientFactory, count: int):
    while len(browser.messages) < count:
        await within_deadline(browser.message)
    return browser.messages[count - 1]


@pytest.mark.parametrize("offered, chosen, version", [
    (["v10.stomp", "v11.stomp", "v12.stomp"], "v12.stomp", "1.2"),
    (["v11.stomp"], "v11.stomp", "1.1"),
    (["v10.stomp", "v11.stomp"], "v11.stomp", "1.1"),
    (["v10.stomp"], "v10.stomp", "1.0"),
    ([], None, None),
])
@pytest_twisted.ensureDeferred
async def test_the_highest_stomp_subprotocol_offered_is_chosen(served, offered, chosen, version):
    browser, client, stream = await connected(served, offered)
    assert browser.subprotocol == chosen
    assert stream.transport.subprotocol == chosen
    assert stream.transport.protocol_version == version
    peer = stream.transport.getPeer()
    assert (peer.host, peer.port) == ("127.0.0.1", client.transport.getHost().port)
    assert stream.transport.getHost().port == served[0].getHost().port
    assert stream.transport.getPeerCertificate() is None
    assert verifyObject(ITransport, stream.transport)
    assert verifyObject(IPushProducer, stream.transport)
    client.sendClose()
    await within_deadline(browser.closed)
    await within_deadline(stream.lost)
    assert stream.reason.check(ConnectionDone)


@pytest.mark.parametrize("offered, path, status", [
    (["mqtt", "v13.stomp"], "/stomp", "406"),
    (["v12.stomp"], "/elsewhere", "404"),
])
@pytest_twisted.ensureDeferred
async def test_an_unknown_subprotocol_or_path_is_refused(served, offered, path, status):
    port, streams = served
    browser = await browse(port, offered, path)
    with pytest.raises(ConnectionError) as refused:
        await within_deadline(browser.opened)
    assert status in str(refused.value)
    assert streams.made == []


@pytest_twisted.ensureDeferred
async def test_messages_are_stream_bytes_and_writes_are_messages(served):
    browser, client, stream = await connected(served)
    # A frame split over two messages, text then binary, is one stream.
    client.sendMessage(b"echo:SEND\ndestination:/queue/a\n\n", isBinary=False)
    client.sendMessage(b"hello\0", isBinary=True)
    assert await message(browser, 1) == (b"SEND\ndestination:/queue/a\n\nhello", False)
    # Bytes that are not UTF-8 go out as a binary message.
    client.sendMessage(b"echo:\xff\x00\xfe\0", isBinary=True)
    assert await message(browser, 2) == (b"\xff\x00\xfe", True)
    stream.transport.writeSequence([b"MESSAGE\n", b"\n", b"x\0"])
    assert await message(browser, 3) == (b"MESSAGE\n\nx\0", False)
    client.sendClose()
    await within_deadline(stream.lost)


@pytest_twisted.ensureDeferred
async def test_a_text_message_that_is_not_utf8_closes_only_its_connection(served):
    _, client, stream = await connected(served)
    other_browser, other_client, other = await connected(served)
    assert other is not stream
    client.sendMessage(b"SEND\n\n\xff\0", isBinary=False)
    await within_deadline(stream.lost)
    assert stream.reason.check(ConnectionLost)
    assert stream.received == b""
    other_client.sendMessage(b"echo:still served\0")
    assert await message(other_browser, 1) == (b"still served", False)
    other_client.sendClose()
    await within_deadline(other_browser.closed)


@pytest_twisted.ensureDeferred
async def test_without_a_subprotocol_writes_are_binary(served):
    browser, client, stream = await connected(served, [])
    client.sendMessage(b"echo:text\0", isBinary=False)
    assert await message(browser, 1) == (b"text", True)
    client.sendClose()
    await within_deadline(stream.lost)


@pytest_twisted.ensureDeferred
async def test_lose_connection_closes_the_websocket_after_what_was_written(served):
    browser, client, stream = await connected(served)
    stream.transport.write(b"ERROR\nmessage:bye\n\n\0")
    client.sendMessage(b"close")
    was_clean, code, _ = await within_deadline(browser.closed)
    assert (was_clean, code) == (True, 1000)
    # Written before the close: delivered; after it: dropped.
    assert browser.messages == [(b"ERROR\nmessage:bye\n\n\0", False)]
    await within_deadline(stream.lost)
    assert stream.reason.check(ConnectionDone)
    assert stream.transport.disconnecting


@pytest_twisted.ensureDeferred
async def test_a_lost_tcp_connection_reaches_the_stream_as_connection_lost(served):
    browser, client, stream = await connected(served)
    client.transport.abortConnection()
    await within_deadline(stream.lost)
    assert stream.reason.check(ConnectionLost)


@pytest_twisted.ensureDeferred
async def test_abort_connection_drops_the_tcp_connection(served):
    browser, _, stream = await connected(served)
    stream.transport.abortConnection()
    was_clean, _, _ = await within_deadline(browser.closed)
    assert not was_clean
    await within_deadline(stream.lost)
    assert stream.reason.check(ConnectionLost)


@pytest_twisted.ensureDeferred
async def test_the_stream_pauses_reading_and_produces_for_the_tcp_connection(served):
    browser, client, stream = await connected(served)
    tcp = stream.transport._websocket.transport
    assert tcp.producer is stream
    stream.transport.pauseProducing()
    assert tcp not in reactor.getReaders()
    client.sendMessage(b"while paused")
    stream.transport.resumeProducing()
    assert tcp in reactor.getReaders()
    while stream.received != b"while paused":
        await within_deadline(stream.data)
    client.sendClose()
    await within_deadline(stream.lost)
    assert tcp.producer is None


def test_listening_starts_and_stops_the_stream_factory():
    streams = StreamFactory()
    factory = websocket_factory(streams, "ws://127.0.0.1/stomp", reactor)
    factory.doStart()
    assert streams.numPorts == 1
    factory.doStop()
    assert streams.numPorts == 0


@pytest_twisted.ensureDeferred
async def test_mqtt_s_subprotocol_and_binary_messages():
    # The MQTT listener's WebSocket (meshroute.mqtt.listener): subprotocol
    # mqtt, every message binary, STOMP's subprotocols refused.
    streams = StreamFactory()
    port = await serverFromString(reactor, "tcp:0:interface=127.0.0.1").listen(
        websocket_factory(streams, "ws://127.0.0.1/mqtt", reactor,
                          subprotocols=MQTT_SUBPROTOCOLS, text=False))
    try:
        browser = await browse(port, ["mqtt"], "/mqtt")
        client = await within_deadline(browser.opened)
        stream = await stream_of(streams)
        assert browser.subprotocol == "mqtt" and stream.transport.protocol_version is None
        client.sendMessage(b"echo:\x10\x00\0", isBinary=True)
        assert await message(browser, 1) == (b"\x10\x00", True)
        client.sendClose()
        await within_deadline(stream.lost)
        refused = await browse(port, ["v12.stomp"], "/mqtt")
        with pytest.raises(ConnectionError) as why:
            await within_deadline(refused.opened)
        assert "406" in str(why.value)
    finally:
        await port.stopListening()
