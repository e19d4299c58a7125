"""
STOMP over WebSocket, for browsers: any stream protocol (the STOMP
listener's, the MQTT listener's) served over autobahn's Twisted
WebSocket, the field's standard, so a listener speaks the same bytes over
TCP and WebSocket.  What is STOMP's below (its subprotocols, text
messages) is a parameter of L{websocket_factory}: MQTT's subprotocol is
C{mqtt}, and its messages binary (L{meshroute.mqtt.listener}).

autobahn's own C{WrappingWebSocketServerFactory} does not fit: it
negotiates its C{binary} and C{base64} subprotocols and reads every text
message as base64, where STOMP clients (C{@stomp/stompjs}) offer
C{v12.stomp}, C{v11.stomp} and C{v10.stomp} and send frames as text; and it holds each
message whole before the stream sees a byte.  Here:

 - B{Subprotocol}: the highest version the client offers, C{v12.stomp},
   then C{v11.stomp}, then C{v10.stomp}.  A client offering only others is refused (HTTP 406,
   naming ours) rather than answered without one, which RFC 6455 allows
   but leaves the client to fail with no reason.  A client offering none is
   served: tools other than browsers seldom offer one, and STOMP
   negotiates its version in CONNECT anyway.
 - B{Version}: the transport's C{protocol_version} is the subprotocol's
   version (C{"1.2"}, C{"1.1"}, C{"1.0"}, or None without a subprotocol).  The
   version spoken is still the one CONNECT's C{accept-version} and
   CONNECTED's C{version} settle; a listener picks the highest both
   accept, not above C{protocol_version} when there is one.
 - B{Reading}: every WebSocket message, text or binary, is bytes of the
   stream, passed to C{dataReceived} as they arrive rather than once the
   message is whole: the stream's parser bounds what is held (its frame
   limits), so no WebSocket message size is imposed, and a frame may span
   messages or a message hold several frames.
 - B{Writing}: each write is one message: a text message when the
   subprotocol is a STOMP one and the bytes are UTF-8, else binary (an
   MQTT listener's are always binary, as MQTT over WebSocket asks).
   Writes after the close began are dropped, as TCP transports drop them.
 - B{Closing}: C{loseConnection} starts the WebSocket closing handshake
   (code 1000) after what was written, and the client has every client
   connection's C{CLOSE_GRACE_S} to answer it before the TCP connection is
   aborted (autobahn's default, 1 s rounded down to a whole second by its
   timers, could abort it at once, losing a last ERROR frame not yet
   read); C{abortConnection} drops the TCP connection.  C{connectionLost}
   reaches the stream once, with C{ConnectionDone} after a clean close,
   else C{ConnectionLost}.
 - B{Flow control and peer}: the transport's C{pauseProducing} and
   C{resumeProducing} stop and resume reading the TCP connection, and a
   producer the stream registers is registered with it; C{getPeer},
   C{getHost} and (over TLS) C{getPeerCertificate} are the TCP
   connection's.
 - B{Path}: only the URL's path is served; any other is refused (404).
"""

from autobahn.twisted.websocket import WebSocketServerFactory, WebSocketServerProtocol
from autobahn.websocket.types import ConnectionDeny
from twisted.internet.error import ConnectionDone, ConnectionLost
from twisted.internet.interfaces import IPushProducer, ITransport
from twisted.python.failure import Failure
from zope.interface import implementer

from meshroute.sessions.connection_core import CLOSE_GRACE_S

#: The STOMP subprotocols, in the order of preference, with the STOMP
#: version each names.
SUBPROTOCOLS = {"v12.stomp": "1.2", "v11.stomp": "1.1", "v10.stomp": "1.0"}


def websocket_factory(stream_factory, url: str, reactor, subprotocols: dict = SUBPROTOCOLS,
                      text: bool = True) -> WebSocketServerFactory:
    """
    A WebSocket server factory serving the protocols of C{stream_factory}
    (any Twisted protocol factory: each gets a L{WebSocketStreamTransport})
    at C{url}, to listen on with any server endpoint.

    @param url: the WebSocket URL clients use, C{ws://HOST:PORT/PATH} (or
        C{wss://} behind TLS); its path is the one served.
    @param reactor: the reactor autobahn's timers use.
    @param subprotocols: the subprotocols served, in the order of
        preference, each with the protocol version it names (or None).
    @param text: whether writes that are UTF-8 go as text messages once a
        subprotocol was negotiated (else every message is binary).
    """
    return _StreamWebSocketFactory(stream_factory, url, reactor, subprotocols, text)


@implementer(ITransport, IPushProducer)
class WebSocketStreamTransport:
    """
    The transport a stream protocol served over WebSocket writes to.

    @ivar subprotocol: the negotiated subprotocol (C{"v12.stomp"},
        C{"v11.stomp"}, C{"v10.stomp"}, C{"mqtt"}), or None.
    @ivar protocol_version: the version the subprotocol names, or None.
    @ivar disconnecting: whether C{loseConnection} or C{abortConnection}
        was called, as on TCP transports.
    """

    def __init__(self, websocket: "_StreamWebSocketProtocol", subprotocol: str | None) -> None:
        self._websocket = websocket
        self.subprotocol = subprotocol
        self.protocol_version = websocket.factory.subprotocols.get(subprotocol)
        self._text = websocket.factory.text and subprotocol is not None
        self.disconnecting = False

    def write(self, data: bytes) -> None:
        websocket = self._websocket
        if websocket.state != websocket.STATE_OPEN or not data:
            return
        text = self._text
        if text:
            try:
                data.decode("utf-8")
            except UnicodeDecodeError:
                text = False
        websocket.sendMessage(data, isBinary=not text)

    def writeSequence(self, data) -> None:
        self.write(b"".join(data))

    def loseConnection(self) -> None:
        self.disconnecting = True
        self._websocket.sendClose(code=self._websocket.CLOSE_STATUS_CODE_NORMAL)

    def abortConnection(self) -> None:
        self.disconnecting = True
        self._websocket.dropConnection(abort=True)

    def getPeer(self):
        return self._websocket.transport.getPeer()

    def getHost(self):
        return self._websocket.transport.getHost()

    def getPeerCertificate(self):
        """
        The client's TLS certificate, or None (no TLS, or none presented).
        """
        peer_certificate = getattr(self._websocket.transport, "getPeerCertificate", None)
        return peer_certificate() if peer_certificate is not None else None

    def registerProducer(self, producer, streaming) -> None:
        self._websocket.transport.registerProducer(producer, streaming)

    def unregisterProducer(self) -> None:
        self._websocket.transport.unregisterProducer()

    def pauseProducing(self) -> None:
        self._websocket.transport.pauseProducing()

    def resumeProducing(self) -> None:
        self._websocket.transport.resumeProducing()

    def stopProducing(self) -> None:
        self.abortConnection()


class _StreamWebSocketProtocol(WebSocketServerProtocol):
    """
    One WebSocket connection carrying one stream protocol, made once the
    opening handshake succeeds.
    """

    _subprotocol: str | None = None
    _stream = None

    def onConnect(self, request):
        if request.path != self.factory.path:
            raise ConnectionDeny(ConnectionDeny.NOT_FOUND,
                                 f"no WebSocket resource at {request.path}")
        if not request.protocols:
            return None
        served = self.factory.subprotocols
        for subprotocol in served:
            if subprotocol in request.protocols:
                self._subprotocol = subprotocol
                return subprotocol
        raise ConnectionDeny(
            ConnectionDeny.NOT_ACCEPTABLE,
            f"this server speaks the WebSocket subprotocols {', '.join(served)}")

    def onOpen(self) -> None:
        stream = self.factory.stream_factory.buildProtocol(self.transport.getPeer())
        if stream is None:
            self.sendClose(code=self.CLOSE_STATUS_CODE_NORMAL)
            return
        self._stream = stream
        stream.makeConnection(WebSocketStreamTransport(self, self._subprotocol))

    # The frame-level hooks (autobahn's IWebSocketChannel): data goes to
    # the stream as it arrives, and nothing is gathered into messages.

    def onMessageFrameData(self, payload: bytes) -> None:
        if self._stream is not None and self.state == self.STATE_OPEN:
            self._stream.dataReceived(payload)

    def onMessageFrameEnd(self) -> None:
        pass

    def onMessageEnd(self) -> None:
        pass

    def onClose(self, wasClean: bool, code, reason) -> None:
        stream, self._stream = self._stream, None
        if stream is None:
            return
        if wasClean:
            stream.connectionLost(Failure(ConnectionDone("the WebSocket was closed")))
        else:
            stream.connectionLost(Failure(ConnectionLost(
                f"the WebSocket was lost: {self.wasNotCleanReason or reason or code}")))


class _StreamWebSocketFactory(WebSocketServerFactory):
    """
    The factory of L{websocket_factory}: starts and stops the stream
    factory with itself, as a listening port would.
    """

    protocol = _StreamWebSocketProtocol

    def __init__(self, stream_factory, url: str, reactor, subprotocols: dict,
                 text: bool) -> None:
        super().__init__(url, protocols=list(subprotocols), reactor=reactor)
        self.stream_factory = stream_factory
        self.subprotocols = subprotocols
        self.text = text
        # No HTML status page for a plain HTTP GET: this port serves a
        # stream protocol.
        self.setProtocolOptions(webStatus=False, closeHandshakeTimeout=CLOSE_GRACE_S)

    def startFactory(self) -> None:
        self.stream_factory.doStart()

    def stopFactory(self) -> None:
        self.stream_factory.doStop()
