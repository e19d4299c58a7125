"""
A fake client endpoint for the routing connector (L{FakeEndpoint}):
every connection attempt is recorded with its clock time, and the test
refuses or connects it (L{Attempt}).
"""

from twisted.internet.address import IPv4Address
from twisted.internet.defer import Deferred
from twisted.internet.error import ConnectionDone, ConnectionRefusedError
from twisted.internet.interfaces import IStreamClientEndpoint
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport
from twisted.python.failure import Failure
from zope.interface import implementer
from meshroute.wire.codec import FrameDecoder, encode
from meshroute.wire.frames import CHALLENGE_SIZE


SECRET = b"s3cret-mesh-password"
OWN = "router-a"
PEER = "router-b"
LISTENER_CHALLENGE = b"L" * CHALLENGE_SIZE
STAGE_TIMEOUT_MS = 60_000


class Attempt:
    """
    One call to L{FakeEndpoint.connect}, which the test resolves.
    """

    def __init__(self, time: float, factory) -> None:
        self.time = time
        self.factory = factory
        self.deferred: Deferred = Deferred()
        self.protocol = None
        self.transport: StringTransport | None = None
        self._decoder = FrameDecoder()

    @property
    def pending(self) -> bool:
        return not self.deferred.called

    def refuse(self) -> None:
        self.deferred.errback(ConnectionRefusedError("fake endpoint refused"))

    def connect(self):
        """
        Succeed: build the protocol, connect it to a L{StringTransport}.
        """
        self.protocol = self.factory.buildProtocol(IPv4Address("TCP", "127.0.0.1", 7001))
        self.transport = StringTransport()
        self.protocol.makeConnection(self.transport)
        self.deferred.callback(self.protocol)
        return self.protocol

    def sent(self) -> list:
        """
        The frames the connector wrote since the last call.
        """
        frames = self._decoder.feed(self.transport.value())
        self.transport.clear()
        return frames

    def write(self, frame) -> None:
        """
        Deliver C{frame} from the (pretend) listener.
        """
        self.protocol.dataReceived(encode(frame))

    def drop(self) -> None:
        """
        The connection is gone.
        """
        self.protocol.connectionLost(Failure(ConnectionDone("dropped by test")))


@implementer(IStreamClientEndpoint)
class FakeEndpoint:
    """
    An endpoint whose C{connect} returns a L{Deferred} the test controls.
    """

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self.attempts: list[Attempt] = []

    def connect(self, protocolFactory) -> Deferred:
        attempt = Attempt(self._clock.seconds(), protocolFactory)
        self.attempts.append(attempt)
        return attempt.deferred

    @property
    def times(self) -> list[float]:
        return [a.time for a in self.attempts]

    @property
    def last(self) -> Attempt:
        return self.attempts[-1]
