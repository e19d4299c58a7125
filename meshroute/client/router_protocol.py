"""
The client's thin Twisted protocol over one connection to a router: bytes
in, frames out, machine inputs.  (The router's side of the same protocol
is L{meshroute.sessions}.)

A session outlives its connections, so each connection gets a new
L{RouterProtocol}; only the one its
L{meshroute.client.router_connection.RouterConnection} has attached speaks
for the session.  A connection it has let go (failed, timed out,
replaced) may still deliver bytes or its C{connectionLost}: they are
ignored.
"""

from automat import NoTransition
from twisted.internet.protocol import Protocol

from meshroute.client.errors import CONNECTION_LOST, SessionError
from meshroute.wire import client_frames as f
from meshroute.errors import WireError
from meshroute.wire.codec import FrameDecoder
from meshroute.wire.transport import send_immediately

#: Which machine input each router frame feeds (Error and Opened split
#: further below).
_INPUT_FOR_FRAME = {
    f.Opened: "got_opened",
    f.OpenedWithTopology: "got_opened",
    f.Confirm: "got_confirm",
    f.Error: "got_error",
    f.Deliver: "got_deliver",
    f.Confirmed: "got_confirmed",
    f.DeliverBatch: "got_deliver_batch",
    f.Processed: "got_processed",
    f.Ping: "got_ping",
    f.Pong: "got_pong",
    f.Closed: "got_closed",
    f.Mechanisms: "got_mechanisms",
    f.Challenge: "got_challenge",
    f.Authenticated: "got_authenticated",
    f.Expired: "got_expired",
    f.Recovered: "got_recovered",
}


class RouterProtocol(Protocol):
    """
    Bytes ↔ frames for one connection of a session; every decision is the
    session machine's (L{meshroute.client.session_machine}).

    @param connection: the session's L{RouterConnection}: its C{protocol}
        (the one attached), C{traffic}, C{machine}, C{stale} and C{broken}.
    """

    def __init__(self, connection, max_frame_size: int) -> None:
        self._connection = connection
        self._decoder = FrameDecoder(frames=f.FROM_ROUTER, max_frame_size=max_frame_size)

    def connectionMade(self) -> None:
        send_immediately(self.transport)

    def dataReceived(self, data: bytes) -> None:
        connection = self._connection
        if connection.protocol is not self:
            return
        connection.traffic.received()
        try:
            frames = self._decoder.feed(data)
        except WireError as e:
            connection.broken(str(e))
            return
        machine = connection.machine
        for frame in frames:
            if connection.protocol is not self:
                return
            if type(frame) is f.Error and frame.command_id == 0:
                name = "got_not_active" if frame.code == f.NOT_ACTIVE else "got_refusal"
            elif isinstance(frame, f.Opened) and connection.stale(frame):
                name = "got_stale_opened"
            else:
                name = _INPUT_FOR_FRAME[type(frame)]
            try:
                getattr(machine, name)(frame)
            except NoTransition:
                connection.broken(f"unexpected {type(frame).__name__} now")

    def connectionLost(self, reason=None) -> None:
        connection = self._connection
        if connection.protocol is self:
            why = reason.getErrorMessage() if reason is not None else "connection closed"
            connection.machine.connection_closed(SessionError(CONNECTION_LOST, why))
