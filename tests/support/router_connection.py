"""
One client connection to a router's client listener, driven frame by
frame over a C{StringTransport} (or the transport given): what the
router-side tests speak with, and what they pick out of the frames it
wrote (L{only}, L{deliveries}).  The router they speak to is in
L{fake_router}.
"""

from twisted.internet.testing import StringTransport

from meshroute.wire import client_frames as f
from meshroute.wire.codec import FrameDecoder, encode


class Connection:
    """
    A client's end of one connection to a client factory.
    """

    def __init__(self, factory, transport=None) -> None:
        self.factory = factory
        self.protocol = factory.buildProtocol(None)
        self.transport = transport if transport is not None else StringTransport()
        self.protocol.makeConnection(self.transport)
        self._decoder = FrameDecoder(frames=f.FROM_ROUTER)
        self._unread: list = []

    def send(self, *frames) -> None:
        self.protocol.dataReceived(b"".join(encode(frame) for frame in frames))

    def received(self) -> list:
        """
        Every frame the router wrote and the test has not read yet.
        """
        data = self.transport.value()
        self.transport.clear()
        frames, self._unread = self._unread + self._decoder.feed(data), []
        return frames

    def expect(self):
        """
        The router's next frame (the others are kept for L{received}).
        """
        frames = self.received()
        assert frames, "the router sent nothing"
        self._unread = frames[1:]
        return frames[0]

    def open(self, session_id: str = "", answered_up_to: int = 0, delivered_up_to: int = 0,
             ttl_ms: int = 60000, client_id: str = "c") -> f.Opened:
        """
        Open (or resume); what the router sent after Opened is in
        C{self.after_open}.
        """
        self.send(f.Open([1], client_id, session_id, ttl_ms, answered_up_to, delivered_up_to))
        frames = self.received()
        assert isinstance(frames[0], f.Opened), frames
        self.after_open = frames[1:]
        return frames[0]

    def lose(self) -> None:
        self.protocol.connectionLost(None)

    @property
    def closed(self) -> bool:
        return self.transport.disconnecting

    @property
    def aborted(self) -> bool:
        return self.transport.disconnected


def only(frames, kind) -> list:
    """
    The frames of type C{kind} among C{frames}.
    """
    return [frame for frame in frames if isinstance(frame, kind)]


def deliveries(frames) -> list[f.Deliver]:
    return only(frames, f.Deliver)


def every_delivery(frames) -> list[f.Deliver]:
    """
    The deliveries among C{frames}, those of a version-4 connection's
    C{DeliverBatch} frames each as the C{Deliver} it stands for.
    """
    found = []
    for frame in frames:
        if isinstance(frame, f.Deliver):
            found.append(frame)
        elif isinstance(frame, f.DeliverBatch):
            found.extend(f.Deliver(item[0], frame.subscription, *item[1:])
                         for item in frame.deliveries)
    return found
