"""
The Twisted plumbing every client listener shares, native or STOMP: the
thin protocol of one connection (bytes in, frames out, machine inputs)
and the factory that owns what outlives one connection.

L{ListenerProtocol} builds its connection's core (a protocol's
L{meshroute.sessions.connection_core.ConnectionCore}) and machine, registers
itself as the producer of what the router writes (a client that does not
read stops being read: L{UNREAD}), feeds its decoder, accounts the bytes
of the partial frame it holds against the listener's L{BufferBudget}, and
turns each decoded frame into one machine input; the sends among the
frames of one read go to the session together once they are all read
(L{ConnectionCore.flush_sends}: one store call for them all).  Bytes that are not a
frame become C{protocol_error("protocol-error")}, a frame the stage does
not allow C{protocol_error("bad-command")}: either way the client is told
why and its connection closed, and nothing else is disturbed.  A
protocol's subclass says how its bytes decode and which input each frame
is.

L{ListenerFactory} keeps the sessions the connections join, the bound of
the bytes of partial frames its connections hold together, and the one
L{ConnectionWatch} that closes connections silent for their TTL, slow to
finish a frame, or without a session for C{stage-valid-timeout}; it
tells them all when the router stops, hands over, or reloads its users.
A connection beyond C{max-connections} is refused as soon as it is made.
"""

from abc import ABCMeta, abstractmethod
from collections.abc import Callable

from automat import NoTransition
from twisted.internet.interfaces import IPushProducer, IReactorTime
from twisted.internet.protocol import Factory, Protocol
from zope.interface import implementer

from meshroute.sessions.connection_core import UNREAD, ConnectionCore
from meshroute.sessions.lifecycle import CONNECTION_MACHINE
from meshroute.sessions.ha_view import WITHOUT_HA, HAView
from meshroute.sessions.liveness import MAX_BUFFERED_FRAMES, BufferBudget
from meshroute.sessions.registry import SessionRegistry
from meshroute.sessions.served import NO_EVENTS
from meshroute.sessions.settings import SessionSettings
from meshroute.sessions.watch import ConnectionWatch
from meshroute.wire import client_frames as f
from meshroute.wire.transport import send_immediately


@implementer(IPushProducer)
class ListenerProtocol(Protocol, metaclass=ABCMeta):
    """
    Bytes ↔ frames for one client connection; all decisions are the
    machines'.  It is the producer of what the router writes to the
    client, so that the transport can tell it the client stopped reading.

    @cvar decode_error: what the protocol's decoder raises for bytes that
        are not a frame (or pass its limits).
    @ivar decoder: the protocol's sans-IO decoder: C{feed(data)} returns
        the frames C{data} completes, C{pending} counts the bytes of the
        next frame it holds.
    """

    decode_error: type[Exception]

    def __init__(self, factory: "ListenerFactory") -> None:
        self.factory = factory
        self.core: ConnectionCore | None = None
        self.machine = None

    @abstractmethod
    def new_core(self) -> ConnectionCore:
        "The core of this connection (C{self.transport}'s)."

    @abstractmethod
    def frame_received(self, frame) -> None:
        "Feed C{frame} to the connection (L{tell}, mostly)."

    def tell(self, name: str, frame) -> None:
        """
        Feed C{frame} to the machine input C{name}; one the connection's
        stage does not allow is a C{bad-command}.  While the connection is
        attached (L{ConnectionCore.serving}), a frame of the session's
        business goes straight to the core's C{serve}, as the machine's
        transition would take it.
        """
        core = self.core
        if core.serving and name == "got_frame":
            core.serve(self.machine, frame)
            return
        try:
            getattr(self.machine, name)(frame)
        except NoTransition:
            self.machine.protocol_error(f.BAD_COMMAND, self.core.not_allowed(frame))

    def connectionMade(self) -> None:
        send_immediately(self.transport)
        factory = self.factory
        self.core = self.new_core()
        self.machine = self.core.machine = CONNECTION_MACHINE(self.core)
        self.transport.registerProducer(self, True)
        factory.watch.add(self.core)
        refusal = factory.settings.limits.connection_refusal(len(factory.connections) - 1)
        if refusal is not None:
            self.machine.over_limit(refusal)

    def dataReceived(self, data: bytes) -> None:
        core = self.core
        if core.silent:
            return
        try:
            frames = self.decoder.feed(data)
        except self.decode_error as e:
            self.decode_failed(e)
            return
        room = core.liveness.read(len(frames), self.decoder.pending)
        for frame in frames:
            self.frame_received(frame)
            if core.silent:
                return
        core.flush_sends()
        if not room:
            self.machine.buffers_full()

    def decode_failed(self, error: Exception) -> None:
        """
        The decoder refused the client's bytes (C{error}, a
        L{decode_error}): the connection ends, C{protocol-error}.
        """
        self.machine.protocol_error(f.PROTOCOL_ERROR, str(error))

    def pauseProducing(self) -> None:
        """
        The transport's buffer is full: the client does not read what the
        router writes (answers, deliveries).  Stop reading it until it
        does, rather than hold what it would make us write.
        """
        self.core.pause(UNREAD)

    def resumeProducing(self) -> None:
        """
        The transport's buffer has drained.
        """
        self.core.resume(UNREAD)

    def stopProducing(self) -> None:
        """
        The transport is going away; C{connectionLost} follows.
        """

    def connectionLost(self, reason=None) -> None:
        self.machine.connection_lost()
        self.factory.watch.remove(self.core)


class ListenerFactory(Factory):
    """
    What one client listener's connections share, and outlives them.

    @param engine: the router's message engine.
    @param clock: for every timer.
    @param settings: the listener's L{SessionSettings}: its limits,
        C{connection-ttl-override} and C{connection-ttl-check-interval}.
    @param sessions: the L{SessionRegistry} the sessions join (default: a
        registry of its own; a protocol listener of a router joins the
        native listener's, so that every protocol's sessions are counted
        and shown together).
    @param events: where session events go (C{emit(event, **fields)});
        default: the engine's C{events}, else nowhere.
    @param max_buffered: the bound of the bytes of partial frames held for
        all connections together (default: L{MAX_BUFFERED_FRAMES} frames
        of C{max-frame-size}).
    @param ha_view: returns the router's L{meshroute.sessions.ha_view.HAView}
        now, asked at every hello: an instance that is not active refuses
        it (C{not-active}).
    @param security: the router's L{meshroute.security.policy.Security}:
        clients must authenticate as one of its users, and may send and
        consume as its permissions allow; a reload closes the connections
        of users it removes.  None: the listener is open, clients are
        anonymous.
    @param secret: what unknown users' decoy credentials derive from
        (L{meshroute.security.scram.decoy_credentials}).
    @param verifies_certificates: the listener's TLS verifies client
        certificates against C{client-ca}, so a certificate's subject CN
        authenticates its user.
    @ivar watch: the L{ConnectionWatch} of the live connections.
    """

    protocol: type[ListenerProtocol]

    def __init__(self, engine, clock: IReactorTime, settings: SessionSettings, *,
                 sessions: SessionRegistry | None = None, events=None,
                 max_buffered: int | None = None,
                 ha_view: Callable[[], HAView] = lambda: WITHOUT_HA, security=None,
                 secret: bytes = b"", verifies_certificates: bool = False) -> None:
        if max_buffered is None:
            max_buffered = MAX_BUFFERED_FRAMES * settings.limits.max_frame_size
        self.engine = engine
        self.clock = clock
        self.settings = settings
        self.sessions = sessions if sessions is not None else SessionRegistry()
        self.events = events if events is not None else getattr(engine, "events", NO_EVENTS)
        self.budget = BufferBudget(max_buffered)
        self.ha_view = ha_view
        self.security = security
        self.secret = secret
        self.verifies_certificates = verifies_certificates
        self.watch = ConnectionWatch(clock, settings.connection_ttl_check_interval_ms)
        if security is not None:
            security.observe(self.policy_replaced)

    def buildProtocol(self, addr) -> ListenerProtocol:
        return self.protocol(self)

    @property
    def connections(self) -> dict:
        "The live connections' cores."
        return self.watch.connections

    @property
    def buffered(self) -> int:
        "The bytes of partial frames held for all connections now."
        return self.budget.held

    def policy_replaced(self, old, new) -> None:
        """
        A reload put C{new} in force: close the connections of the users
        it no longer has (C{user-removed}), and nothing else.
        """
        self.watch.remove_users(new)

    def stop_serving(self) -> None:
        """
        The router, an HA instance's, stops serving (a hand-over, fencing,
        a stop): send every client away with C{not-active} now, so that
        it fails over at once and nothing more is submitted to a router
        whose store is about to close.
        """
        self.watch.tell_all("stopped_serving")

    def close_connections(self) -> None:
        """
        Close every client connection without a word, as a crash would:
        the router shuts down.  Each session goes disconnected at once
        (reason C{router-stopped}), while the router's event log is still
        open.
        """
        self.watch.tell_all("router_stopped")
