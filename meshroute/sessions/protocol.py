"""
The thin protocol of the client listener: bytes in, frames out, machine
inputs.

L{ClientProtocol.dataReceived} feeds a L{FrameDecoder} over
L{FROM_CLIENT}; each decoded frame becomes one input of the connection's
machine (L{meshroute.sessions.lifecycle}, with the native core of
L{meshroute.sessions.connection}), which hands commands to its session's
machine (L{meshroute.sessions.session}).  Undecodable bytes
become C{protocol_error("protocol-error")}, a frame the current state does
not accept becomes C{protocol_error("bad-command")}: either way the client
gets C{Error(0, code, detail)} and its connection is closed, and nothing
else is disturbed.

L{ClientFactory} owns what outlives one connection: the sessions, the
bound of the bytes of partial frames its connections hold together, and
the one timer that closes connections silent for their TTL, slow to
finish a frame, or without a session for C{stage-valid-timeout}.  The
bounds of what one client may take are its settings' C{limits}
(L{meshroute.sessions.limits}): a connection beyond C{max-connections} is
refused as soon as it is made, and a message beyond the header bounds
closes its connection before it reaches the session.
"""

import os
from collections.abc import Callable
from dataclasses import replace

from automat import NoTransition
from twisted.internet.interfaces import IPushProducer, IReactorTime
from twisted.internet.protocol import Factory, Protocol
from zope.interface import implementer

from meshroute.wire import client_frames as f
from meshroute.sessions.connection import NativeConnectionCore
from meshroute.sessions.lifecycle import (
    CONNECTION_MACHINE,
    MAX_BUFFERED_FRAMES,
    UNREAD,
    BufferBudget,
    ConnectionCore,
)
from meshroute.sessions.ha_view import WITHOUT_HA, HAView
from meshroute.sessions.watch import ConnectionWatch
from meshroute.sessions.session import (
    HOT_FRAMES,
    NO_EVENTS,
    OPEN,
    SessionRegistry,
    SessionSettings,
)
from meshroute.errors import WireError
from meshroute.wire.codec import FrameDecoder
from meshroute.wire.transport import send_immediately

#: Which connection machine input each frame type feeds; any other is the
#: session's business (C{got_frame}).
_INPUT_FOR_FRAME = {
    f.Open: "got_hello",
    f.Authenticate: "got_authenticate",
    f.AuthResponse: "got_auth_response",
}


@implementer(IPushProducer)
class ClientProtocol(Protocol):
    """
    Bytes ↔ frames for one client connection; all decisions are the
    machines'.  It is the producer of what the router writes to the
    client, so that the transport can tell it the client stopped reading.
    """

    def __init__(self, factory: "ClientFactory") -> None:
        self.factory = factory
        self.core: ConnectionCore | None = None
        self.machine = None

    def connectionMade(self) -> None:
        send_immediately(self.transport)
        factory = self.factory
        self.core = NativeConnectionCore.of_listener(factory, self.transport)
        self.machine = self.core.machine = CONNECTION_MACHINE(self.core)
        self._decoder = FrameDecoder(frames=f.FROM_CLIENT, max_frame_size=factory.max_frame_size)
        self.transport.registerProducer(self, True)
        factory.connection_made(self.core)
        refusal = factory.settings.limits.connection_refusal(len(factory.connections) - 1)
        if refusal is not None:
            self.machine.over_limit(refusal)

    def dataReceived(self, data: bytes) -> None:
        core = self.core
        if core.silent:
            return
        try:
            frames = self._decoder.feed(data)
        except WireError as e:
            self.machine.protocol_error(f.PROTOCOL_ERROR, str(e))
            return
        room = core.read(len(frames), self._decoder.pending)
        machine = self.machine
        headers_problem = core.settings.limits.headers_problem
        for frame in frames:
            problem = headers_problem(frame)
            if problem is not None:
                machine.over_limit(problem)
                return
            # The data path: straight to the open session (HOT_FRAMES);
            # an attached connection is one with a session.
            session = core.session
            if session is not None and session.state == OPEN:
                hot = HOT_FRAMES.get(type(frame))
                if hot is not None:
                    hot(session, frame)
                    if core.silent:
                        return
                    continue
            try:
                getattr(machine, _INPUT_FOR_FRAME.get(type(frame), "got_frame"))(frame)
            except NoTransition:
                machine.protocol_error(f.BAD_COMMAND, core.not_allowed(frame))
            if core.silent:
                return
        if not room:
            machine.buffers_full()

    def pauseProducing(self) -> None:
        """
        The transport's buffer is full: the client does not read what the
        router writes (Pongs, answers, deliveries).  Stop reading it until
        it does, rather than hold what it would make us write.
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
        self.factory.connection_gone(self.core)


class ClientFactory(Factory):
    """
    Builds the router side of each client connection of the
    C{[clients.listener]} endpoint, and keeps the sessions, which outlive
    connections.

    @param engine: the router's message engine: C{name}, C{queues} (a
        L{meshroute.queues.QueueManager}) and C{submit(address, body,
        headers, persistent, duplicate_id=...)}.
    @param clock: for every timer (default: the queue manager's clock).
    @param connection_ttl_override: overrides C{settings}'
        C{connection_ttl_override} when not -1.
    @param settings: the listener's L{SessionSettings} (defaults
        otherwise).
    @param events: where session events go (C{emit(event, **fields)});
        default: the engine's C{events}, else nowhere.
    @param max_buffered: bound of the bytes of partial frames held for all
        connections together (default L{MAX_BUFFERED_FRAMES} times
        C{max_frame_size}); at least C{max_frame_size}, so that one frame
        of the largest size always fits.
    @param ha_view: returns the router's L{HAView} now, asked at every
        C{Open}: an instance that is not active refuses it (C{not-active}),
        and version-3 clients are told the epoch and the pair's endpoints.
        Default: a router without HA (L{WITHOUT_HA}).
    @param security: the router's L{meshroute.security.policy.Security}:
        clients must authenticate (protocol version 5) as one of its
        users, and may send and consume as its permissions allow; a reload
        closes the connections of users it removes.  None: the listener
        is open, clients are anonymous.
    @param secret: what unknown users' decoy SCRAM credentials derive
        from (L{meshroute.security.scram.decoy_credentials}); default: a
        random secret of this process.
    @param verifies_certificates: the listener's TLS verifies client
        certificates against C{client-ca}, so a certificate's subject CN
        authenticates its user.
    @ivar sessions: the L{SessionRegistry} of the sessions (open,
        disconnected and closing).
    @ivar connections: the live connections' L{ConnectionCore}s.
    """

    def __init__(self, engine, clock: IReactorTime | None = None,
                 connection_ttl_override: int = -1,
                 max_frame_size: int = f.MAX_FRAME_SIZE, *,
                 settings: SessionSettings | None = None, events=None,
                 max_buffered: int | None = None,
                 ha_view: Callable[[], HAView] = lambda: WITHOUT_HA, security=None,
                 secret: bytes | None = None, verifies_certificates: bool = False) -> None:
        if max_buffered is None:
            max_buffered = MAX_BUFFERED_FRAMES * max_frame_size
        if max_buffered < max_frame_size:
            raise ValueError(f"max_buffered ({max_buffered}) must be at least max_frame_size "
                             f"({max_frame_size})")
        self.engine = engine
        self.clock = clock if clock is not None else engine.queues.clock
        self.sessions = SessionRegistry()
        # Expiry notices for this listener's sessions (a test's engine
        # may have none to give).
        notices = getattr(engine, "expiry_notices", None)
        if notices is not None:
            notices.append(self.sessions.expired_notice)
        settings = settings if settings is not None else SessionSettings()
        if connection_ttl_override != -1:
            settings = replace(settings, connection_ttl_override=connection_ttl_override)
        self.settings = settings
        self.events = events if events is not None else getattr(engine, "events", NO_EVENTS)
        self.max_frame_size = max_frame_size
        self.ha_view = ha_view
        self.budget = BufferBudget(max_buffered)
        self.security = security
        self.secret = secret if secret is not None else os.urandom(32)
        self.verifies_certificates = verifies_certificates
        if security is not None:
            security.observe(self.policy_replaced)
        self.watch = ConnectionWatch(self.clock, settings.connection_ttl_check_interval_ms)
        self.connections: dict[ConnectionCore, None] = self.watch.connections

    def buildProtocol(self, addr) -> ClientProtocol:
        return ClientProtocol(self)

    def policy_replaced(self, old, new) -> None:
        """
        A reload put C{new} in force: close the connections of the users
        it no longer has (C{user-removed}), and nothing else.
        """
        self.watch.remove_users(new)

    def describe(self) -> list[dict]:
        """
        C{GET /api/v1/sessions}.
        """
        return self.sessions.describe()

    def stop_serving(self) -> None:
        """
        The router, an HA instance's, stops serving (a hand-over, fencing,
        a stop): send every client away with C{not-active} now, so that
        it fails over at once and nothing more is submitted to a router
        whose store is about to close.
        """
        self.watch.tell_all("stopped_serving")

    # -- the connection TTL -----------------------------------------------------

    def connection_made(self, core: ConnectionCore) -> None:
        self.watch.add(core)

    def connection_gone(self, core: ConnectionCore) -> None:
        self.watch.remove(core)

    def close_connections(self) -> None:
        """
        Close every client connection without a word, as a crash would:
        the router shuts down.  Each session goes disconnected at once
        (reason C{router-stopped}), while the router's event log is still
        open.
        """
        self.watch.tell_all("router_stopped")

    @property
    def buffered(self) -> int:
        """
        The bytes of partial frames held for all connections now.
        """
        return self.budget.held
