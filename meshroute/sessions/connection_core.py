"""
The data of one client connection and the I/O the connection machine's
behaviours perform (L{meshroute.sessions.lifecycle}), whatever the
protocol: L{ConnectionCore}, which each protocol's core subclasses (the
native L{meshroute.sessions.native_connection}, the STOMP
L{meshroute.stomp.connection}, the MQTT L{meshroute.mqtt.connection}).

It holds what every protocol shares: reading and pausing a connection for
the router's reasons or the client's, the TTL, partial-frame and
stage-valid-timeout checks the listener's watch asks, the hello's serving
refusals, the session it makes (for the client its authentication,
L{meshroute.sessions.authentication}, found), and the ways a connection
ends (a connection-level error told to the client, an orderly end, a
drop without a word).  The order in which these may happen is the
machine's, not this module's.
"""

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field

from twisted.internet.interfaces import IDelayedCall, IReactorTime, ITransport
from twisted.logger import Logger

from meshroute.sessions.authentication import ClientAuthentication
from meshroute.sessions.connection_inputs import ConnectionInputs
from meshroute.sessions.ha_view import WITHOUT_HA, HAView
from meshroute.sessions.liveness import PARTIAL_FRAME_TIMEOUT_S, BufferBudget, Liveness
from meshroute.sessions.registry import SessionRegistry
from meshroute.sessions.sends import TOPICS_BEHIND
from meshroute.sessions.served import NO_EVENTS, SERVED_SESSION_MACHINE, ServedSession
from meshroute.sessions.settings import SessionSettings
from meshroute.wire import client_frames as f
from meshroute.wire.transport import flush_now, peer_address

log = Logger()

#: How long a connection closed for an error may take to flush its last
#: frame before it is aborted.
CLOSE_GRACE_S = 5.0

#: The TTL of a connection that has not sent its hello yet (unless the
#: router overrides every TTL): Artemis' default client TTL.
DEFAULT_TTL_MS = 60000

#: Why a connection was dropped (the C{reason} of C{session.disconnected}).
TTL = "ttl"
TAKEN_OVER = "taken-over"
FRAME_TIMEOUT = "frame-timeout"
BUFFERS_FULL = "buffers-full"
ROUTER_STOPPED = "router-stopped"

#: Why the router stops reading a connection (L{ConnectionCore.pause}).
SENDS_IN_PROGRESS = "sends-in-progress"
UNREAD = "unread"
#: The reasons that are the router's own: while one holds, the client's
#: silence is not the client's (its TTL and partial frame wait).
ROUTER_HELD = frozenset((SENDS_IN_PROGRESS, TOPICS_BEHIND))


@dataclass(eq=False)
class ConnectionCore(ABC):
    """
    The data of one client connection and the I/O its behaviours perform,
    whatever its protocol: a protocol's core adds what its frames need and
    the methods the machine asks of it
    (L{meshroute.sessions.lifecycle}'s docstring).

    @ivar ttl_ms: the TTL in force (-1: never).
    @ivar budget: the listener's bound of the bytes of partial frames.
    @ivar liveness: when the client was last heard, and the partial frame
        it is sending (L{Liveness}).
    @ivar session: the session attached, once the hello was accepted.
    @ivar version: the native protocol version the served session sees.
    @ivar ha_view: returns the router's L{HAView} now.
    @ivar view: the L{HAView} the hello was vetted with (what its Opened
        tells).
    @ivar security: the router's L{meshroute.security.policy.Security},
        or None: clients are not authenticated.
    @ivar secret: what unknown users' decoy credentials derive from.
    @ivar verifies_certificates: the listener verifies TLS client
        certificates against C{client-ca}: a certificate's subject CN
        names a user (C{EXTERNAL}).
    @ivar authentication: who the client is and how it proves it
        (L{ClientAuthentication}, made from C{security}, C{secret} and
        C{verifies_certificates}).
    @ivar last_command: the last command id an adapter that numbers the
        session's commands itself (STOMP, MQTT: their clients do not) gave.
    @ivar silent: the connection's last frame was written (or it was
        dropped): it writes and reads nothing more.
    @ivar serving: the machine is C{attached}: a frame of the session's
        business goes straight to L{serve}, not through Automat's
        transition that only loops to it (set by the behaviours entering
        and leaving C{attached}, and on falling silent).
    @ivar read_sends: the Sends of the frames read from the client's last
        chunk of bytes, not yet handed to the session (L{take_send}).
    """

    engine: object
    transport: ITransport
    clock: IReactorTime
    registry: SessionRegistry
    settings: SessionSettings
    events: object = NO_EVENTS
    budget: BufferBudget = field(default_factory=BufferBudget)
    ha_view: Callable[[], HAView] = lambda: WITHOUT_HA
    view: HAView = WITHOUT_HA
    security: object = None
    secret: bytes = field(default=b"", repr=False)
    verifies_certificates: bool = False
    machine: ConnectionInputs | None = None
    session: ServedSession | None = None
    version: int = 0
    ttl_ms: int = DEFAULT_TTL_MS
    last_command: int = 0
    liveness: Liveness = field(init=False)
    authentication: ClientAuthentication = field(init=False)
    connected: bool = True
    silent: bool = False
    serving: bool = False
    read_sends: list = field(default_factory=list)
    _abort_call: IDelayedCall | None = None
    _paused_for: set = field(default_factory=set)

    #: What a connection must reach within stage-valid-timeout, as its
    #: refusal names it (C{no session within ...}).
    AWAITED = "session"

    #: What a client is told (code C{not-active}) when its hello reaches an
    #: instance that is not the active one of its HA pair, and when its
    #: router instance stops serving.
    INACTIVE = ("this router instance is not the active instance of its pair; try another "
                "endpoint")
    STOPPED_SERVING = ("this router instance stopped serving: the other instance of its "
                       "pair takes over")

    #: How the log names a client of the protocol.
    LOG_NAME = "client"

    @classmethod
    def of_listener(cls, factory, transport: ITransport, **more) -> "ConnectionCore":
        """
        The core of a new connection to C{factory}'s listener (a
        L{meshroute.sessions.listener.ListenerFactory}): what every
        listener gives its connections (the engine, the sessions, the
        settings, the security), and C{more} of a protocol's.
        """
        return cls(
            engine=factory.engine, transport=transport, clock=factory.clock,
            registry=factory.sessions, settings=factory.settings, events=factory.events,
            budget=factory.budget, ha_view=factory.ha_view, security=factory.security,
            secret=factory.secret, verifies_certificates=factory.verifies_certificates,
            **more,
        )

    def __post_init__(self) -> None:
        self.liveness = Liveness(self.clock, self.budget)
        self.authentication = ClientAuthentication(self.transport, self.events, self.security,
                                                   self.secret, self.verifies_certificates,
                                                   self.LOG_NAME)
        if self.settings.connection_ttl_override != -1:
            self.ttl_ms = self.settings.connection_ttl_override

    # -- what each protocol's core provides -------------------------------------

    @abstractmethod
    def vet(self, inputs: ConnectionInputs, hello) -> None:
        """
        Decide on the client's hello: C{inputs.accepted(hello)},
        C{inputs.refused(code, detail)}, or (a protocol that authenticates
        after it) C{inputs.authentication_needed()}.
        """

    @abstractmethod
    def attach(self, hello) -> None:
        """
        Attach the session the accepted C{hello} asks for: a new one, or
        one resumed.
        """

    def authenticate(self, inputs: ConnectionInputs, frame) -> None:
        """
        Start the mechanism the client chose: C{inputs.challenged()},
        C{inputs.accepted(hello)} or C{inputs.refused(code, detail)}.
        Only a protocol that authenticates after its hello (native) feeds
        C{got_authenticate}.
        """
        raise NotImplementedError(f"{type(self).__name__} authenticates in its hello")

    def prove(self, inputs: ConnectionInputs, frame) -> None:
        """
        Check the client's answer to the challenge: C{inputs.accepted(hello)}
        or C{inputs.refused(code, detail)}, as L{authenticate} does.
        """
        raise NotImplementedError(f"{type(self).__name__} authenticates in its hello")

    @abstractmethod
    def serve(self, inputs: ConnectionInputs, frame) -> None:
        """
        Carry out a frame of the session's business (or its goodbye).
        """

    @abstractmethod
    def write(self, frame) -> None:
        """
        Tell the client C{frame}, a native frame of the served session
        (L{meshroute.wire.client_frames}), in the protocol's words; an
        C{Error} of command 0 says why the connection ends.  Nothing is
        written once the connection is gone or L{silent}.
        """

    def flush(self) -> None:
        """
        Hand what was written to the client to the kernel now
        (L{flush_now}): the session does once it has written the
        deliveries its turn gathered.
        """
        if self.connected and not self.silent:
            flush_now(self.transport)

    @abstractmethod
    def not_allowed(self, frame) -> str:
        """
        The detail of the C{bad-command} that ends a connection sent
        C{frame} when its stage does not allow it.
        """

    def before_hello(self, frame) -> str:
        """
        The detail of the C{bad-command} that ends a connection sent
        C{frame} before its hello.
        """
        return self.not_allowed(frame)

    def fell_silent(self) -> None:
        """
        The connection writes nothing more (its last frame was written,
        it was dropped, or it is gone): stop what the protocol writes on
        its own.
        """

    def next_command(self) -> int:
        """
        The id of the next command an adapter gives its session (the
        native client numbers its own).
        """
        self.last_command += 1
        return self.last_command

    # -- reading ----------------------------------------------------------------

    def pause(self, reason: str = SENDS_IN_PROGRESS) -> None:
        """
        Stop reading, for C{reason}: too many sends in progress
        (L{SENDS_IN_PROGRESS}), the client does not read what the
        router writes (L{UNREAD}: the transport's buffer is full), or it
        publishes while the topic fan-out is behind
        (L{meshroute.sessions.sends.TOPICS_BEHIND}).
        """
        if not self._paused_for and self.connected and not self.silent:
            self.transport.pauseProducing()
        self._paused_for.add(reason)

    def resume(self, reason: str = SENDS_IN_PROGRESS) -> None:
        """
        C{reason} to stop reading is gone: read again unless another holds;
        when it was a full transport, the session writes what its own
        queue held meanwhile.
        """
        held = self.held_by_router
        self._paused_for.discard(reason)
        if held and not self.held_by_router:
            # Heard as of now: the time the router did not read is not the
            # client's silence.
            self.liveness.heard_again()
        if not self._paused_for and self.connected and not self.silent:
            self.transport.resumeProducing()
        session = self.session
        if reason == UNREAD and session is not None and session.connection is self:
            session.flush_pending()

    @property
    def held_by_router(self) -> bool:
        "The router does not read the connection for a reason of its own (L{ROUTER_HELD})."
        return not ROUTER_HELD.isdisjoint(self._paused_for)

    @property
    def unread(self) -> bool:
        "The transport's buffer is full: the client does not read what we write."
        return UNREAD in self._paused_for

    # -- the TTL, partial frames, stage-valid-timeout ---------------------------

    def silent_too_long(self, now: float) -> bool:
        """
        Whether the client has sent no whole frame for the connection's
        TTL (never while the router holds it: L{held_by_router}).
        """
        return not self.held_by_router and self.liveness.silent_for(self.ttl_ms, now)

    def frame_late(self, now: float) -> bool:
        """
        Whether the frame the client is sending began more than
        L{PARTIAL_FRAME_TIMEOUT_S} ago (never while the router holds it).
        """
        return not self.held_by_router and self.liveness.frame_late(now)

    def handshake_late(self, now: float) -> bool:
        """
        Whether the connection has been without a session for the
        listener's C{stage-valid-timeout}.
        """
        timeout_s = self.settings.limits.stage_valid_timeout_ms / 1000
        return self.session is None and self.liveness.older_than(timeout_s, now)

    # -- opening ----------------------------------------------------------------

    def serving_refusal(self, resuming: bool = False) -> tuple[str, str] | None:
        """
        The refusal (code, detail) of a hello this router cannot serve
        now, or None: it is not the active instance of its HA pair
        (C{not-active}), or C{max-sessions} is reached (unless the hello
        resumes a session).  The HA view asked is the one the hello is
        vetted with (its Opened tells it).
        """
        self.view = self.ha_view()
        if not self.view.active:
            return f.NOT_ACTIVE, self.INACTIVE
        if not resuming:
            refusal = self.settings.limits.session_refusal(len(self.registry.sessions))
            if refusal is not None:
                return f.LIMIT_REACHED, refusal
        return None

    def new_session(self, **more) -> ServedSession:
        """
        A new session for this connection's user, with its permission
        checks, and C{more} of the protocol's (L{ServedSession}'s fields);
        the caller starts it.
        """
        session = ServedSession(engine=self.engine, clock=self.clock, registry=self.registry,
                                settings=self.settings, events=self.events,
                                user=self.authentication.user, **more)
        session.guard = self.authentication.guard(self.engine.name)
        session.machine = SERVED_SESSION_MACHINE(session)
        self.session = session
        return session

    def opened(self, session_id: str, router: str, ttl_ms: int, reattached: bool,
               last_command_id: int) -> f.Opened:
        """
        The Opened of this connection's version: from version 3 on, with
        the epoch and the pair's endpoints the hello was vetted with.
        """
        if self.version < f.TOPOLOGY_VERSION:
            return f.Opened(self.version, session_id, router, ttl_ms, reattached,
                            last_command_id)
        return f.OpenedWithTopology(self.version, session_id, router, ttl_ms, reattached,
                                    last_command_id, self.view.epoch, list(self.view.endpoints))

    # -- sends ------------------------------------------------------------------

    def take_send(self, send: f.Send) -> None:
        """
        The session's C{send}, made of a client frame (an MQTT PUBLISH, a
        STOMP SEND), held until the frames of its chunk of bytes are read
        (L{flush_sends}): consecutive sends make one batch, one store
        call.  Anything else the core does flushes them first.
        """
        self.read_sends.append(send)

    def flush_sends(self) -> None:
        """
        Hand the sends held (L{take_send}) to the session, together
        (L{ServedSession.take_sends}).
        """
        sends = self.read_sends
        if sends:
            self.read_sends = []
            if self.session is not None:
                self.session.take_sends(sends)

    # -- closing ----------------------------------------------------------------

    def fail(self, code: str, detail: str) -> None:
        """
        End the connection for a connection-level error: tell the client,
        flush, and abort if the flush takes too long.  The session ends
        with it.
        """
        self.flush_sends()
        session, self.session = self.session, None
        if session is not None:
            # What it answered goes out before the error that ends it.
            session.answer_pacing.release()
        # Refusing clients while another instance is active is the normal
        # course of a pair, not a problem to warn of.
        say = log.info if code == f.NOT_ACTIVE else log.warn
        say("client session {session} ({client}) from {address}: {code}: {detail}",
            session=session.session_id if session is not None else "-",
            client=session.client_id or "-" if session is not None else "-",
            address=peer_address(self.transport), code=code, detail=detail)
        self.write(f.Error(0, code, detail))
        self._fall_silent()
        if session is not None:
            session.machine.failed(code)
        self._close()
        self._abort_call = self.clock.callLater(CLOSE_GRACE_S, self.transport.abortConnection)

    def end(self) -> None:
        """
        The session closed in order (Closed was written): close.
        """
        self.session = None
        self._fall_silent()
        self._close()

    def _close(self) -> None:
        """
        Close after what was written is flushed.  The protocol is the
        producer of what the router writes (so that a client that does not
        read stops being read); a transport closes only once its producer
        is unregistered.
        """
        self.transport.unregisterProducer()
        self.transport.loseConnection()

    def drop(self, reason: str) -> None:
        """
        Abort the connection without a word (the client is silent, or it
        moved to another connection); its session goes disconnected now,
        whatever the transport does next.
        """
        self.flush_sends()
        session, self.session = self.session, None
        self._fall_silent()
        what = session.session_id if session is not None else "-"
        if reason == TTL:
            log.info("client connection silent for its TTL ({ttl} ms); closing it (session "
                     "{session})", ttl=self.ttl_ms, session=what)
        elif reason == FRAME_TIMEOUT:
            log.warn("client connection took more than {timeout:g} s to send one frame "
                     "({held} bytes of it so far); closing it (session {session})",
                     timeout=PARTIAL_FRAME_TIMEOUT_S, held=self.liveness.buffered, session=what)
        elif reason == BUFFERS_FULL:
            log.warn("client connection holds {held} bytes of a partial frame, and the "
                     "listener's partial frames would pass {limit} bytes; closing it "
                     "(session {session})", held=self.liveness.buffered,
                     limit=self.budget.limit, session=what)
        if session is not None:
            session.machine.connection_lost(reason)
        self.transport.abortConnection()

    def finish(self) -> None:
        """
        The transport is closed: the session (if still attached) goes
        disconnected.
        """
        self.connected = False
        self.serving = False
        self.fell_silent()
        self.liveness.release()
        session, self.session = self.session, None
        if session is not None:
            session.machine.connection_lost("connection-lost")
        if self._abort_call is not None and self._abort_call.active():
            self._abort_call.cancel()

    def _fall_silent(self) -> None:
        self.silent = True
        self.serving = False
        self.fell_silent()
