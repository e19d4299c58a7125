"""
A router the test scripts frame by frame, for the client's own tests: each
connection attempt of the client waits in L{ScriptedEndpoint.attempts}
until the test accepts it (a L{RouterEnd} over a C{StringTransport}) or
refuses it.  No router code runs: the test says what the router sends and
reads what the client wrote.
"""

from twisted.internet.defer import Deferred
from twisted.internet.error import ConnectionDone, ConnectionRefusedError
from twisted.internet.testing import StringTransport
from twisted.python.failure import Failure

from meshroute.wire import client_frames as f
from meshroute.wire.codec import FrameDecoder, encode

ROUTER = "router-a"
SESSION = "5" * 32


class RouterEnd:
    """
    The router's end of one client connection.

    @ivar transport: the client's C{StringTransport}.
    @ivar protocol: the client's protocol.
    """

    def __init__(self, protocol) -> None:
        self.protocol = protocol
        self.transport = StringTransport()
        self._decoder = FrameDecoder(frames=f.FROM_CLIENT)
        self._read: list = []
        protocol.makeConnection(self.transport)

    def frames(self) -> list:
        """
        Every frame the client wrote since the last call.
        """
        data = self.transport.value()
        self.transport.clear()
        return self._decoder.feed(data)

    def of(self, cls) -> list:
        """
        The frames of type C{cls} the client wrote since the last call (the
        others are dropped).
        """
        return [frame for frame in self.frames() if type(frame) is cls]

    def send(self, *frames) -> None:
        """
        The router writes C{frames}.
        """
        self.protocol.dataReceived(b"".join(encode(frame) for frame in frames))

    def open(self, session_id: str = SESSION, reattached: bool = False, last_command_id: int = 0,
             ttl_ms: int | None = None) -> f.Open:
        """
        Read the client's Open and answer Opened (with the client's TTL
        unless C{ttl_ms} overrides it).

        @return: the Open.
        """
        (frame,) = self.frames()
        assert type(frame) is f.Open, frame
        ttl_ms = frame.ttl_ms if ttl_ms is None else ttl_ms
        self.send(f.Opened(1, session_id, ROUTER, ttl_ms, reattached, last_command_id))
        return frame

    def lose(self, why: str = "cut") -> None:
        """
        The connection is lost.
        """
        self.transport.disconnected = True
        self.protocol.connectionLost(Failure(ConnectionDone(why)))

    @property
    def aborted(self) -> bool:
        "The client let this connection go."
        return self.transport.disconnected or self.transport.disconnecting


class Attempt:
    """
    One connection attempt of the client, waiting for the test's verdict.
    """

    def __init__(self, factory) -> None:
        self.factory = factory
        self.deferred = Deferred()

    def accept(self) -> RouterEnd:
        end = RouterEnd(self.factory.buildProtocol(None))
        self.deferred.callback(end.protocol)
        return end

    def refuse(self) -> None:
        self.deferred.errback(Failure(ConnectionRefusedError("nobody there")))


class ScriptedEndpoint:
    """
    A client endpoint whose attempts the test settles.
    """

    def __init__(self) -> None:
        self.attempts: list[Attempt] = []

    def connect(self, factory):
        attempt = Attempt(factory)
        self.attempts.append(attempt)
        return attempt.deferred

    def accept(self) -> RouterEnd:
        """
        Accept the latest attempt.
        """
        return self.attempts[-1].accept()

    def refuse(self) -> None:
        """
        Refuse the latest attempt.
        """
        self.attempts[-1].refuse()
