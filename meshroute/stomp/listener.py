"""
The STOMP listener (C{[stomp.listener]}): the thin protocol of each STOMP
connection, bytes in, frames out, machine inputs, and the factory that
owns what outlives one connection.

L{StompProtocol.dataReceived} feeds a sans-IO L{StompParser}; each frame
becomes one input of the connection's machine
(L{meshroute.sessions.lifecycle}, with the STOMP core of
L{meshroute.stomp.connection}), heart-beats only keep the connection
alive.  Bytes that are not STOMP, a frame beyond C{max-frame-size} or
with more than C{max-headers} headers (the parser's L{StompProtocolError})
close that connection with an C{ERROR} naming the problem, and nothing
else is disturbed.

L{StompFactory} shares the native listener's session registry (so the
admin API's C{/api/v1/sessions} and C{max-sessions} count both) and runs
its own L{ConnectionWatch}: the one timer closing connections silent for
their TTL, slow to finish a frame, or without a session for
C{stage-valid-timeout}; C{max-connections} refuses a connection as soon as
it is made.  Over WebSocket (L{meshroute.stomp.websocket}) the same
protocol reads and writes WebSocket messages instead of a TCP stream.
"""

from collections.abc import Callable

from automat import NoTransition
from twisted.internet.interfaces import IPushProducer, IReactorTime
from twisted.internet.protocol import Factory, Protocol
from zope.interface import implementer

from meshroute.sessions.lifecycle import (
    CONNECTION_MACHINE,
    MAX_BUFFERED_FRAMES,
    UNREAD,
    BufferBudget,
)
from meshroute.sessions.ha_view import WITHOUT_HA, HAView
from meshroute.sessions.session import NO_EVENTS, SessionRegistry, SessionSettings
from meshroute.sessions.watch import ConnectionWatch
from meshroute.stomp.connection import StompConnectionCore
from meshroute.stomp.frames import HEARTBEAT, StompLimits, StompParser, StompProtocolError
from meshroute.stomp.settings import DEFAULT_HEARTBEAT_MS, DEFAULT_PREFETCH_COUNT
from meshroute.wire import client_frames as f
from meshroute.wire.transport import send_immediately

#: Which machine input each client command feeds; any other is the
#: session's business (C{got_frame}).
_INPUT_FOR_COMMAND = {
    "CONNECT": "got_hello",
    "STOMP": "got_hello",
    "DISCONNECT": "got_goodbye",
}


@implementer(IPushProducer)
class StompProtocol(Protocol):
    """
    Bytes ↔ STOMP frames for one connection; all decisions are the
    machines'.  The producer of what the router writes, so that a client
    that does not read stops being read.
    """

    def __init__(self, factory: "StompFactory") -> None:
        self.factory = factory
        self.core: StompConnectionCore | None = None
        self.machine = None

    def connectionMade(self) -> None:
        send_immediately(self.transport)
        factory = self.factory
        self.core = StompConnectionCore.of_listener(
            factory, self.transport,
            prefetch_count=factory.prefetch_count, heartbeat_ms=factory.heartbeat_ms)
        self.machine = self.core.machine = CONNECTION_MACHINE(self.core)
        self._parser = StompParser(factory.limits)
        self.transport.registerProducer(self, True)
        factory.watch.add(self.core)
        refusal = factory.settings.limits.connection_refusal(len(factory.watch.connections) - 1)
        if refusal is not None:
            self.machine.over_limit(refusal)

    def dataReceived(self, data: bytes) -> None:
        core = self.core
        if core.silent:
            return
        parser = self._parser
        try:
            frames = parser.feed(data)
        except StompProtocolError as e:
            self.machine.protocol_error(f.PROTOCOL_ERROR, e.reason)
            return
        room = core.read(len(frames), parser.buffered)
        machine = self.machine
        for frame in frames:
            if frame is HEARTBEAT:
                continue
            try:
                getattr(machine, _INPUT_FOR_COMMAND.get(frame.command, "got_frame"))(frame)
            except NoTransition:
                machine.protocol_error(f.BAD_COMMAND, core.not_allowed(frame))
            if core.silent:
                return
            if core.stomp_version:
                parser.version = core.stomp_version
        if not room:
            machine.buffers_full()

    def pauseProducing(self) -> None:
        self.core.pause(UNREAD)

    def resumeProducing(self) -> None:
        self.core.resume(UNREAD)

    def stopProducing(self) -> None:
        """
        The transport is going away; C{connectionLost} follows.
        """

    def connectionLost(self, reason=None) -> None:
        self.machine.connection_lost()
        self.factory.watch.remove(self.core)


class StompFactory(Factory):
    """
    Builds the router side of each connection of the C{[stomp.listener]}
    endpoints (TCP or TLS, and WebSocket).

    @param engine: the router's message engine.
    @param clock: for every timer.
    @param settings: the sessions' L{SessionSettings}: the listener's
        limits and C{connection-ttl-override}.
    @param sessions: the registry the sessions join (the native
        listener's, so that both are counted and shown together).
    @param prefetch_count: a SUBSCRIBE's credit when it names none.
    @param heartbeat_ms: the router's heart-beat offer C{(cx, cy)}.
    @param ha_view: returns the router's L{HAView} now, asked at every
        CONNECT: an instance that is not active refuses it.
    @param security: the router's L{meshroute.security.policy.Security},
        or None: the listener is open.
    @param secret: what unknown users' decoy credentials derive from.
    @param verifies_certificates: the listener's TLS verifies client
        certificates against C{client-ca}: a CONNECT without C{login}
        over a verified certificate is its subject CN's user.
    """

    def __init__(self, engine, clock: IReactorTime, settings: SessionSettings, *,
                 sessions: SessionRegistry | None = None,
                 prefetch_count: int = DEFAULT_PREFETCH_COUNT,
                 heartbeat_ms: tuple[int, int] = DEFAULT_HEARTBEAT_MS, events=None,
                 ha_view: Callable[[], HAView] = lambda: WITHOUT_HA, security=None,
                 secret: bytes = b"", verifies_certificates: bool = False) -> None:
        self.engine = engine
        self.clock = clock
        self.settings = settings
        self.sessions = sessions if sessions is not None else SessionRegistry()
        self.prefetch_count = prefetch_count
        self.heartbeat_ms = heartbeat_ms
        self.limits = StompLimits.from_client_limits(settings.limits)
        self.events = events if events is not None else getattr(engine, "events", NO_EVENTS)
        self.ha_view = ha_view
        self.security = security
        self.secret = secret
        self.verifies_certificates = verifies_certificates
        self.budget = BufferBudget(MAX_BUFFERED_FRAMES * settings.limits.max_frame_size)
        self.watch = ConnectionWatch(clock, settings.connection_ttl_check_interval_ms)
        if security is not None:
            security.observe(lambda old, new: self.watch.remove_users(new))

    def buildProtocol(self, addr) -> StompProtocol:
        return StompProtocol(self)

    def stop_serving(self) -> None:
        """
        The router, an HA instance's, stops serving: send every client
        away (C{ERROR} "not active").
        """
        self.watch.tell_all("stopped_serving")

    def close_connections(self) -> None:
        """
        The router shuts down: close every connection without a word, as
        a crash would.
        """
        self.watch.tell_all("router_stopped")
