"""
One client connection to a router's client listener, driven frame by
frame over a C{StringTransport}: what the router-side tests speak with.
"""

from meshroute.wire import client_frames as f

from client_fakes import ClientEnd


class Connection(ClientEnd):
    """
    One client connection to the router side, driven frame by frame.
    """

    def __init__(self, factory) -> None:
        super().__init__(factory)
        self._unread: list = []

    def received(self) -> list:
        frames, self._unread = self._unread + super().received(), []
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

    @property
    def closed(self) -> bool:
        return self.transport.disconnecting

    @property
    def aborted(self) -> bool:
        return self.transport.disconnected
