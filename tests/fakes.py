"""
Recording stand-ins for the parts a test is not about.
"""

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
