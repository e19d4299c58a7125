"""
The thin protocol of the client listener: bytes in, frames out, session
machine inputs.

L{ClientProtocol.dataReceived} feeds a L{FrameDecoder} over
L{FROM_CLIENT}; each decoded frame becomes one input of the session's
machine (L{meshroute.clients.session}).  Undecodable bytes become
C{protocol_error("protocol-error")}, a frame the session's state does not
accept becomes C{protocol_error("bad-command")}: either way the client
gets C{Error(0, code, detail)} and its connection is closed, and nothing
else is disturbed.
"""

from automat import NoTransition
from twisted.internet.interfaces import IReactorTime
from twisted.internet.protocol import Factory, Protocol

from meshroute.clients import frames as f
from meshroute.clients.session import (
    SESSION_MACHINE,
    SessionCore,
    SessionRegistry,
    SessionSettings,
)
from meshroute.errors import WireError
from meshroute.wire.codec import FrameDecoder

#: Which machine input each frame type feeds.
_INPUT_FOR_FRAME = {
    f.Open: "got_open",
    f.Send: "got_send",
    f.Subscribe: "got_subscribe",
    f.Unsubscribe: "got_unsubscribe",
    f.Credit: "got_credit",
    f.Ack: "got_ack",
    f.Ping: "got_ping",
    f.Pong: "got_pong",
    f.Close: "got_close",
}


class ClientProtocol(Protocol):
    """
    Bytes ↔ frames for one client connection; all decisions are the
    session machine's.
    """

    def __init__(self, engine, clock: IReactorTime, registry: SessionRegistry,
                 settings: SessionSettings, max_frame_size: int = f.MAX_FRAME_SIZE) -> None:
        self._engine = engine
        self._clock = clock
        self._registry = registry
        self._settings = settings
        self._max_frame_size = max_frame_size
        self.core: SessionCore | None = None
        self.machine = None

    def connectionMade(self) -> None:
        self.core = SessionCore(
            engine=self._engine, transport=self.transport, clock=self._clock,
            registry=self._registry, settings=self._settings,
        )
        self.machine = self.core.machine = SESSION_MACHINE(self.core)
        self._decoder = FrameDecoder(frames=f.FROM_CLIENT, max_frame_size=self._max_frame_size)

    def dataReceived(self, data: bytes) -> None:
        if self.core.silent:
            return
        try:
            frames = self._decoder.feed(data)
        except WireError as e:
            self.machine.protocol_error(f.PROTOCOL_ERROR, str(e))
            return
        machine = self.machine
        for frame in frames:
            try:
                getattr(machine, _INPUT_FOR_FRAME[type(frame)])(frame)
            except NoTransition:
                machine.protocol_error(
                    f.BAD_COMMAND, f"{type(frame).__name__} is not allowed in this session state"
                )
            if self.core.silent:
                return

    def connectionLost(self, reason=None) -> None:
        self.machine.connection_lost()


class ClientFactory(Factory):
    """
    Builds the router side of each client connection of the
    C{[clients.listener]} endpoint.

    @param engine: the router's message engine: C{name}, C{queues} (a
        L{meshroute.queues.QueueManager}) and C{submit(address, body,
        headers, persistent)}.
    @param clock: for the close grace timer (default: the queue manager's
        clock).
    @ivar sessions: the L{SessionRegistry} of the live sessions.
    """

    def __init__(self, engine, clock: IReactorTime | None = None,
                 connection_ttl_override: int = -1,
                 max_frame_size: int = f.MAX_FRAME_SIZE) -> None:
        self.engine = engine
        self.clock = clock if clock is not None else engine.queues.clock
        self.sessions = SessionRegistry()
        self.settings = SessionSettings(connection_ttl_override=connection_ttl_override)
        self.max_frame_size = max_frame_size

    def buildProtocol(self, addr) -> ClientProtocol:
        protocol = ClientProtocol(self.engine, self.clock, self.sessions, self.settings,
                                  self.max_frame_size)
        protocol.factory = self
        return protocol
