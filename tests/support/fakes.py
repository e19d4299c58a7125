"""
Recording stand-ins for the parts a test is not about.
"""

from twisted.internet.defer import fail, succeed
from twisted.internet.interfaces import IListeningPort, IPushProducer
from zope.interface import implementer

from meshroute.interfaces import ILinkChannel, ILinkEngine
from meshroute.wire.frames import Recovery


@implementer(ILinkChannel)
class RecordingChannel:
    """
    A delivery-stage channel that remembers what its link told it.
    """

    def __init__(self, peer: str, send) -> None:
        self.peer = peer
        self.send = send
        self.recovered_at: int | None = None
        self.frames: list = []
        self.is_closed = False
        self.paused = False
        # What the admin API reads of a channel.
        self.in_flight = self.sent = self.received = 0

    def recovered(self, frame) -> None:
        self.recovered_at = frame.last_received

    def transferred(self, frame) -> None:
        self.frames.append(frame)

    acknowledged = fast_transferred = routes = transferred
    transferred_batch = fast_transferred_batch = transferred

    def pause(self) -> None:
        self.paused = True

    def resume(self) -> None:
        self.paused = False

    def closed(self) -> None:
        self.is_closed = True


@implementer(ILinkEngine)
class RecordingEngine:
    """
    A message engine for link tests: fixed recovery points, recording
    channels.
    """

    def __init__(self, received: dict[str, int] | None = None) -> None:
        self.received = dict(received or {})
        self.channels: dict[str, RecordingChannel] = {}

    def last_received(self, peer: str) -> int:
        return self.received.get(peer, 0)

    def recovery(self, peer: str) -> Recovery:
        return Recovery(self.last_received(peer))

    def link_up(self, peer: str, send, fail, emit, version: int) -> RecordingChannel:
        channel = self.channels[peer] = RecordingChannel(peer, send)
        return channel

    def reported_by(self, peer: str) -> int | None:
        """
        What C{peer} reported in its last recovery stage, if it got there.
        """
        channel = self.channels.get(peer)
        return channel.recovered_at if channel else None


@implementer(IListeningPort, IPushProducer)
class RecordingPort:
    """
    A listening port that remembers whether it was paused (accepting
    nothing), resumed or stopped, in order: C{calls}.
    """

    def __init__(self) -> None:
        self.calls: list[str] = []

    def pauseProducing(self) -> None:
        self.calls.append("pause")

    def resumeProducing(self) -> None:
        self.calls.append("resume")

    def stopProducing(self) -> None:
        self.stopListening()

    def startListening(self) -> None:
        pass

    def stopListening(self):
        self.calls.append("stop")
        return succeed(None)

    def getHost(self):
        return None


class RecordingEndpoint:
    """
    A server endpoint whose C{listen} binds C{port} at once, or fails
    with C{error}.
    """

    def __init__(self, port=None, error: Exception | None = None) -> None:
        self.port = port if port is not None else RecordingPort()
        self.error = error
        self.factory = None

    def listen(self, factory):
        if self.error is not None:
            return fail(self.error)
        self.factory = factory
        return succeed(self.port)


class RecordingEndpoints:
    """
    A router's C{endpoints}: each server endpoint string is a
    L{RecordingEndpoint}, kept in C{servers}.
    """

    def __init__(self) -> None:
        self.servers: dict[str, RecordingEndpoint] = {}

    def server(self, description: str) -> RecordingEndpoint:
        return self.servers.setdefault(description, RecordingEndpoint())

    def client(self, description: str):
        raise AssertionError(f"no client endpoint expected: {description}")
