"""
The router's side of one client connection, as an Automat machine.

    awaiting_open ── Open ──▶ vetting_open ────────────────────────▶ attached ──▶ closing ──▶ gone
          │                        │                                  ▲  │           ▲
          │                        └─(users)─▶ authenticating         │  │           │
          │                                      │ Authenticate       │  │           │
          │                                      ▼                    │  │           │
          │                                    deciding ──────────────┘  │           │
          │                                      │  ▲ AuthResponse       │           │
          │                             Challenge▼  │                    │           │
          │                                    proving                   │           │
          └─────────────── error, not-authenticated, not-allowed ────────┴───────────┘

 - C{awaiting_open}: only C{Open} is allowed.
 - C{vetting_open}: checking the Open's versions and TTL, and whether this
   instance is the active one of its HA pair (its L{HAView}; else
   C{not-active}).  A router with users (C{[security]}) refuses versions
   before 5 (C{authentication-required}) and offers L{f.Mechanisms}.
 - C{authenticating}: only C{Authenticate} is allowed.
 - C{deciding}: within one frame's handling, the exchange's verdict:
   a C{Challenge} (SCRAM's server-first), the user (C{Authenticated},
   then the session attaches), or a refusal (C{not-authenticated}; or
   C{not-allowed}, for a session of another user).
 - C{proving}: only C{AuthResponse} (SCRAM's client-final) is allowed.
 - C{attached}: the connection carries a session (a new one, or one it
   resumed); command and C{Received} frames are inputs of the session's
   machine (L{meshroute.sessions.session}), C{Ping} is answered here.  Its
   user (or None, without C{[security]}) is fixed for its life; a reload
   that removes the user closes it (C{user-removed}).
 - C{closing}: an C{Error(0, …)} or C{Closed} was sent, or the connection
   was dropped (silent for its TTL, or its session was taken over by
   another connection); anything that still arrives is ignored.
 - C{gone}: the transport is closed.

A connection-level error ends the session too (it cannot be resumed: the
client and the router disagree about it).  A connection lost any other
way leaves its session C{disconnected}, to be resumed by another
connection within keep-alive.

The connection TTL: the L{meshroute.sessions.protocol.ClientFactory} asks
every connection each C{connection-ttl-check-interval} whether it has
been silent (no whole frame) for its TTL; one that has is aborted
(C{ttl_expired}).  Bytes of a frame not yet complete are not life: a
client trickling a frame byte by byte is as silent as one sending nothing.
Before C{Open} a connection's TTL is the override, or L{DEFAULT_TTL_MS}.

Partial frames: the same check aborts a connection whose current frame
began more than L{PARTIAL_FRAME_TIMEOUT_S} ago and is still incomplete
(C{frame_overdue}), whatever its TTL (even -1).  The bytes of partial
frames held for all connections of a listener are bounded (a
L{BufferBudget}, by default L{MAX_BUFFERED_FRAMES} frames of the largest
size); a connection whose partial frame would pass the bound is aborted
(C{buffers_full}).  Either way the session stays resumable, as after a
TTL expiry, and the reason is logged.

Limits (L{meshroute.sessions.limits}): the same check closes a connection
that has had no session for the listener's C{stage-valid-timeout}
(C{handshake_expired}: it said nothing, or never finished opening), and
C{over_limit} closes one that passed a bound (C{max-connections}, the
header bounds); an Open that would start a session beyond
C{max-sessions} is refused.  Each sends C{Error(0, "limit-reached")} with
the key in its detail, and logs it.
"""

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from automat import NoTransition, TypeMachineBuilder
from cryptography.x509.oid import NameOID
from twisted.internet.interfaces import IDelayedCall, IReactorTime, ITransport
from twisted.logger import Logger

from meshroute.wire import client_frames as f
from meshroute.sessions.ha_view import WITHOUT_HA, HAView
from meshroute.sessions.permissions import CONNECT, RESUME, Guard, denied
from meshroute.sessions.session import (
    NO_EVENTS,
    SESSION_MACHINE,
    SessionCore,
    SessionRegistry,
    SessionSettings,
)
from meshroute import events as event_names
from meshroute.security.scram import MECHANISM as SCRAM, ScramError, ScramServer
from meshroute.wire.codec import encode
from meshroute.wire.transport import peer_address

log = Logger()

#: How long a connection closed for an error may take to flush the Error
#: frame before it is aborted.
CLOSE_GRACE_S = 5.0

#: The TTL of a connection that has not sent Open yet (unless the router
#: overrides every TTL): Artemis' default client TTL.
DEFAULT_TTL_MS = 60000

#: How long a client may take to send one frame, from its first byte to
#: its last: 4 MiB at 1 Mbit/s takes 34 s.
PARTIAL_FRAME_TIMEOUT_S = 60.0

#: The default bound of the bytes of partial frames a listener holds for
#: all its connections together, in frames of the largest size.
MAX_BUFFERED_FRAMES = 8

#: Why a connection was dropped, besides C{ttl} and C{taken-over} (the
#: C{reason} of C{session.disconnected}).
FRAME_TIMEOUT = "frame-timeout"
BUFFERS_FULL = "buffers-full"
ROUTER_STOPPED = "router-stopped"

#: Why the router stops reading a connection (L{ConnectionCore.pause}).
SENDS_IN_PROGRESS = "sends-in-progress"
UNREAD = "unread"

#: The detail of every C{not-authenticated} refusal: the same for an
#: unknown user, a wrong password and a certificate naming nobody.
_NOT_AUTHENTICATED = "authentication failed"

#: Slack when comparing silence with a TTL, so that float clocks never
#: close a connection a hair before its TTL nor miss the check that
#: reaches it.
_EPSILON_S = 1e-6

#: Which session machine input each session frame feeds.
_SESSION_INPUT = {
    f.Send: "got_send",
    f.Subscribe: "got_subscribe",
    f.Unsubscribe: "got_unsubscribe",
    f.Credit: "got_credit",
    f.Ack: "got_ack",
    f.Close: "got_close",
    f.Received: "got_received",
    f.Begin: "got_begin",
    f.Commit: "got_commit",
    f.Rollback: "got_rollback",
    f.SendBatch: "got_send_batch",
    f.AckThrough: "got_ack_through",
}


class ConnectionInputs(Protocol):
    """
    Everything that can happen to a client connection.
    """

    def got_open(self, frame: f.Open) -> None:
        "The client asked for a session."

    def accepted(self, frame: f.Open) -> None:
        "The Open being vetted, C{frame}, is acceptable."

    def refused(self, code: str, detail: str) -> None:
        "The Open being vetted, or the authentication, is not; C{code} says why."

    def authentication_needed(self, frame: f.Open) -> None:
        "The Open being vetted is acceptable once the client authenticates."

    def got_authenticate(self, frame: f.Authenticate) -> None:
        "The client chose a mechanism."

    def challenged(self) -> None:
        "The mechanism needs the client's response (a Challenge was sent)."

    def got_auth_response(self, frame: f.AuthResponse) -> None:
        "The client answered the Challenge."

    def authenticated(self, frame: f.Open) -> None:
        "The client is a user, who may have the session C{frame} asks for."

    def user_removed(self) -> None:
        "A reload removed the connection's user."

    def got_session_frame(self, frame) -> None:
        "A command or a Received: the session's business."

    def got_ping(self, frame: f.Ping) -> None:
        "The client checks that we are alive."

    def got_pong(self, frame: f.Pong) -> None:
        "The client answered a ping."

    def protocol_error(self, code: str, detail: str) -> None:
        """
        The client sent bytes that are not a frame (C{protocol-error}) or a
        frame not allowed now (C{bad-command}).
        """

    def session_ended(self) -> None:
        "The session sent Closed: the connection's work is done."

    def taken_over(self) -> None:
        "Another connection resumed this connection's session."

    def stopped_serving(self) -> None:
        "The router, an HA instance's, stops serving: another instance takes over."

    def ttl_expired(self) -> None:
        "The client sent no whole frame for the connection's TTL."

    def frame_overdue(self) -> None:
        "The client began a frame longer than PARTIAL_FRAME_TIMEOUT_S ago and has not finished it."

    def handshake_expired(self) -> None:
        "The connection has had no session for the listener's stage-valid-timeout."

    def over_limit(self, detail: str) -> None:
        """
        The client passed a bound of its listener
        (L{meshroute.sessions.limits}): too many connections, or headers
        beyond the bounds.
        """

    def buffers_full(self) -> None:
        "The partial frame the client is sending would pass the listener's buffer bound."

    def router_stopped(self) -> None:
        """
        The router shuts down: the client must go elsewhere, not wait for
        answers that will never come.  (An HA instance's router that stops
        being the active one sends its clients away instead:
        C{stopped_serving}.)
        """

    def connection_lost(self) -> None:
        "The transport is closed."


@dataclass(eq=False)
class BufferBudget:
    """
    The bytes of partial frames one listener holds for all its connections,
    and their bound.

    @ivar limit: the bound, at least one frame of the largest size.
    @ivar held: bytes held now.
    """

    limit: int = MAX_BUFFERED_FRAMES * f.MAX_FRAME_SIZE
    held: int = 0


@dataclass(eq=False)
class ConnectionCore:
    """
    The data of one client connection and the I/O its behaviours perform.

    @ivar ttl_ms: the TTL in force (-1: never).
    @ivar last_heard: when the client last sent a whole frame (clock
        seconds).
    @ivar partial_since: when the frame the client is sending began, while
        it is incomplete.
    @ivar buffered: the bytes of that frame held, counted in C{budget}.
    @ivar made: when the connection was made (clock seconds).
    @ivar session: the session attached, once Open was accepted.
    @ivar ha_view: returns the router's L{HAView} now.
    @ivar view: the L{HAView} the Open was vetted with (what its Opened
        tells).
    @ivar security: the router's L{meshroute.security.policy.Security},
        or None: clients are not authenticated.
    @ivar secret: what unknown users' decoy SCRAM credentials derive from.
    @ivar verifies_certificates: the listener verifies TLS client
        certificates against C{client-ca}: a certificate's subject CN
        names a user (C{EXTERNAL}).
    @ivar user: who the client is, once authenticated (fixed for the
        connection's life); C{mechanism}, how it proved it.
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
    user: str | None = None
    mechanism: str = ""
    machine: ConnectionInputs | None = None
    session: SessionCore | None = None
    version: int = 0
    ttl_ms: int = DEFAULT_TTL_MS
    made: float = 0.0
    last_heard: float = 0.0
    partial_since: float | None = None
    buffered: int = 0
    connected: bool = True
    silent: bool = False
    _abort_call: IDelayedCall | None = None
    _paused_for: set = field(default_factory=set)
    _open: f.Open | None = None
    _scram: ScramServer | None = None

    @classmethod
    def of_listener(cls, factory, transport: ITransport, **more) -> "ConnectionCore":
        """
        The core of a new connection to C{factory}'s listener, native or
        STOMP: what every listener gives its connections (the engine, the
        sessions, the settings, the security), and C{more} of a subclass's.
        """
        return cls(
            engine=factory.engine, transport=transport, clock=factory.clock,
            registry=factory.sessions, settings=factory.settings, events=factory.events,
            budget=factory.budget, ha_view=factory.ha_view, security=factory.security,
            secret=factory.secret, verifies_certificates=factory.verifies_certificates,
            **more,
        )

    def __post_init__(self) -> None:
        self.made = self.last_heard = self.clock.seconds()
        if self.settings.connection_ttl_override != -1:
            self.ttl_ms = self.settings.connection_ttl_override

    # -- output ---------------------------------------------------------------

    def write(self, frame) -> None:
        """
        Send C{frame}, unless the connection is gone or its last frame
        (Closed, or a connection-level Error) was sent.
        """
        if self.connected and not self.silent:
            self.transport.write(encode(frame))

    def pause(self, reason: str = SENDS_IN_PROGRESS) -> None:
        """
        Stop reading, for C{reason}: too many sends in progress
        (L{SENDS_IN_PROGRESS}), or the client does not read what the
        router writes (L{UNREAD}: the transport's buffer is full).
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
        self._paused_for.discard(reason)
        if not self._paused_for and self.connected and not self.silent:
            self.transport.resumeProducing()
        session = self.session
        if reason == UNREAD and session is not None and session.connection is self:
            session.flush_pending()

    @property
    def unread(self) -> bool:
        "The transport's buffer is full: the client does not read what we write."
        return UNREAD in self._paused_for

    # -- the TTL ----------------------------------------------------------------

    def read(self, whole_frames: int, pending: int) -> bool:
        """
        The client's bytes were decoded into C{whole_frames} frames, and
        C{pending} bytes of the next frame are held.

        @return: whether the listener's buffers have room for them.
        """
        now = self.clock.seconds()
        if whole_frames:
            self.last_heard = now
        if not pending:
            self.partial_since = None
        elif whole_frames or self.partial_since is None:
            self.partial_since = now
        return self._hold(pending)

    def _hold(self, pending: int) -> bool:
        budget = self.budget
        budget.held += pending - self.buffered
        self.buffered = pending
        return budget.held <= budget.limit

    def silent_too_long(self, now: float) -> bool:
        """
        Whether the client has sent no whole frame for the connection's TTL.
        """
        return self.ttl_ms != -1 and now - self.last_heard >= self.ttl_ms / 1000 - _EPSILON_S

    def frame_late(self, now: float) -> bool:
        """
        Whether the frame the client is sending began more than
        L{PARTIAL_FRAME_TIMEOUT_S} ago.
        """
        return (self.partial_since is not None
                and now - self.partial_since >= PARTIAL_FRAME_TIMEOUT_S - _EPSILON_S)

    def handshake_late(self, now: float) -> bool:
        """
        Whether the connection has been without a session for the
        listener's C{stage-valid-timeout}.
        """
        timeout_s = self.settings.limits.stage_valid_timeout_ms / 1000
        return self.session is None and now - self.made >= timeout_s - _EPSILON_S

    # -- opening ----------------------------------------------------------------

    def vet_open(self, frame: f.Open) -> tuple[str, str] | None:
        common = set(frame.versions) & set(f.SUPPORTED_VERSIONS)
        if not common:
            return f.UNSUPPORTED_VERSION, f"this router speaks {list(f.SUPPORTED_VERSIONS)}"
        if frame.ttl_ms < -1:
            return f.BAD_COMMAND, "ttl_ms must be -1 (never) or at least 0"
        if frame.answered_up_to < 0 or frame.delivered_up_to < 0:
            return f.BAD_COMMAND, "answered_up_to and delivered_up_to must not be negative"
        self.view = self.ha_view()
        if not self.view.active:
            return f.NOT_ACTIVE, ("this router instance is not the active instance of its "
                                  "pair; try another endpoint")
        if not (frame.session_id and self.registry.resumable(frame.session_id)):
            refusal = self.settings.limits.session_refusal(len(self.registry.sessions))
            if refusal is not None:
                return f.LIMIT_REACHED, refusal
        self.version = max(common)
        if self.security is not None and self.version < f.AUTH_VERSION:
            return f.AUTHENTICATION_REQUIRED, (
                f"this router authenticates its clients: client protocol version "
                f"{f.AUTH_VERSION} or later is needed")
        override = self.settings.connection_ttl_override
        self.ttl_ms = frame.ttl_ms if override == -1 else override
        return None

    def opened(self, session_id: str, router: str, ttl_ms: int, reattached: bool,
               last_command_id: int) -> f.Opened:
        """
        The Opened of this connection's version: from version 3 on, with
        the epoch and the pair's endpoints the Open was vetted with.
        """
        if self.version < f.TOPOLOGY_VERSION:
            return f.Opened(self.version, session_id, router, ttl_ms, reattached,
                            last_command_id)
        return f.OpenedWithTopology(self.version, session_id, router, ttl_ms, reattached,
                                    last_command_id, self.view.epoch, list(self.view.endpoints))

    # -- authenticating ---------------------------------------------------------

    def certificate_user(self) -> str | None:
        """
        The user the client's verified TLS certificate names (its subject
        CN), or None.
        """
        if not self.verifies_certificates:
            return None
        certificate = getattr(self.transport, "getPeerCertificate", lambda: None)()
        if certificate is None:
            return None
        names = certificate.to_cryptography().subject.get_attributes_for_oid(
            NameOID.COMMON_NAME)
        if not names:
            return None
        return str(names[0].value) or None

    def offer_mechanisms(self, frame: f.Open) -> None:
        """
        Keep the Open until the client has authenticated, and tell it how
        it may.
        """
        self._open = frame
        offered = [SCRAM]
        if self.certificate_user() is not None:
            offered.insert(0, f.EXTERNAL)
        self.write(f.Mechanisms(offered))

    def authenticate(self, inputs: ConnectionInputs, frame: f.Authenticate) -> None:
        """
        Start the mechanism the client chose: EXTERNAL decides at once,
        SCRAM challenges.
        """
        if frame.mechanism == f.EXTERNAL:
            user = self.certificate_user()
            if user is None:
                self.not_authenticated(inputs, "", "no verified client certificate")
            else:
                self.identified(inputs, user, f.EXTERNAL, b"")
            return
        if frame.mechanism != SCRAM:
            self.not_authenticated(inputs, "", f"mechanism {frame.mechanism!r} not offered")
            return
        self._scram = ScramServer(self.security.policy.credentials, self.secret)
        try:
            challenge = self._scram.first(frame.data)
        except ScramError as e:
            self.not_authenticated(inputs, self._scram.user or "", str(e))
            return
        self.write(f.Challenge(challenge))
        inputs.challenged()

    def prove(self, inputs: ConnectionInputs, frame: f.AuthResponse) -> None:
        """
        Check the client's SCRAM proof.  An unknown user fails here, as a
        wrong password does.
        """
        scram, self._scram = self._scram, None
        try:
            final = scram.final(frame.data)
        except ScramError as e:
            self.not_authenticated(inputs, scram.user, str(e))
            return
        self.identified(inputs, scram.user, SCRAM, final)

    def not_authenticated(self, inputs: ConnectionInputs, user: str, why: str) -> None:
        """
        Refuse the client, with one answer whatever the reason.
        """
        denied(self.events, user, CONNECT, peer_address(self.transport), why)
        inputs.refused(f.NOT_AUTHENTICATED, _NOT_AUTHENTICATED)

    def identified(self, inputs: ConnectionInputs, user: str, mechanism: str,
                   proof: bytes) -> None:
        """
        The client is C{user}: tell it (with the router's proof), unless
        the session it asks for belongs to another user.
        """
        frame, self._open = self._open, None
        wanted = self.registry.resumable(frame.session_id) if frame.session_id else None
        if wanted is not None and wanted.user != user:
            denied(self.events, user, RESUME, frame.session_id, "the session is another user's")
            inputs.refused(f.NOT_ALLOWED, f"session {frame.session_id} is another user's")
            return
        self.user, self.mechanism = user, mechanism
        self.events.emit(event_names.SECURITY_AUTHENTICATED, user=user, mechanism=mechanism)
        log.info("client from {address} authenticated as {user!r} ({mechanism})",
                 address=peer_address(self.transport), user=user, mechanism=mechanism)
        self.write(f.Authenticated(user, proof))
        inputs.authenticated(frame)

    def still_allowed(self, policy) -> bool:
        """
        Whether the connection's user is still a user under C{policy}: in
        its users file (a password user), or named by a permission (a
        certificate user).
        """
        if self.user is None:
            return True
        if self.mechanism == f.EXTERNAL:
            return policy.names(self.user)
        return policy.credentials(self.user) is not None

    def attach(self, frame: f.Open) -> None:
        """
        Resume the session the client asks for if it can be, taking it
        from its old connection if need be (a client whose network
        changed); otherwise start a new one (the session may end in
        being taken over, if it had stopped being resumable).
        """
        session = self.registry.resumable(frame.session_id) if frame.session_id else None
        if session is not None:
            if session.connection is not None:
                session.connection.machine.taken_over()
            self.session = session
            if session.machine.resumed(self, frame):
                return
        session = SessionCore(engine=self.engine, clock=self.clock, registry=self.registry,
                              settings=self.settings, events=self.events, user=self.user)
        if self.user is not None:
            session.guard = Guard(self.security, self.user, self.engine.name, self.events)
        session.machine = SESSION_MACHINE(session)
        self.session = session
        session.start(self, frame)

    # -- attached ---------------------------------------------------------------

    def forward(self, inputs: ConnectionInputs, frame) -> None:
        """
        Feed a command or Received to the session's machine; one its state
        does not allow is a C{bad-command}.
        """
        try:
            getattr(self.session.machine, _SESSION_INPUT[type(frame)])(frame)
        except NoTransition:
            inputs.protocol_error(
                f.BAD_COMMAND, f"{type(frame).__name__} is not allowed in this session state"
            )

    def pong(self, frame: f.Ping) -> None:
        self.write(f.Pong(frame.n))

    # -- closing ----------------------------------------------------------------

    def fail(self, code: str, detail: str) -> None:
        """
        End the connection for a connection-level error: tell the client,
        flush, and abort if the flush takes too long.  The session ends
        with it.
        """
        session, self.session = self.session, None
        # Refusing clients while another instance is active is the normal
        # course of a pair, not a problem to warn of.
        say = log.info if code == f.NOT_ACTIVE else log.warn
        say("client session {session} ({client}) from {address}: {code}: {detail}",
            session=session.session_id if session is not None else "-",
            client=session.client_id or "-" if session is not None else "-",
            address=peer_address(self.transport), code=code, detail=detail)
        self.write(f.Error(0, code, detail))
        self.silent = True
        if session is not None:
            session.machine.failed(code)
        self._close()
        self._abort_call = self.clock.callLater(CLOSE_GRACE_S, self.transport.abortConnection)

    def end(self) -> None:
        """
        The session closed in order (Closed was written): close.
        """
        self.session = None
        self.silent = True
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
        session, self.session = self.session, None
        self.silent = True
        what = session.session_id if session is not None else "-"
        if reason == "ttl":
            log.info("client connection silent for its TTL ({ttl} ms); closing it (session "
                     "{session})", ttl=self.ttl_ms, session=what)
        elif reason == FRAME_TIMEOUT:
            log.warn("client connection took more than {timeout:g} s to send one frame "
                     "({held} bytes of it so far); closing it (session {session})",
                     timeout=PARTIAL_FRAME_TIMEOUT_S, held=self.buffered, session=what)
        elif reason == BUFFERS_FULL:
            log.warn("client connection holds {held} bytes of a partial frame, and the "
                     "listener's partial frames would pass {limit} bytes; closing it "
                     "(session {session})", held=self.buffered, limit=self.budget.limit,
                     session=what)
        if session is not None:
            session.machine.connection_lost(reason)
        self.transport.abortConnection()

    def finish(self) -> None:
        """
        The transport is closed: the session (if still attached) goes
        disconnected.
        """
        self.connected = False
        self._hold(0)
        session, self.session = self.session, None
        if session is not None:
            session.machine.connection_lost("connection-lost")
        if self._abort_call is not None and self._abort_call.active():
            self._abort_call.cancel()


def _build_connection_machine():
    builder = TypeMachineBuilder(ConnectionInputs, ConnectionCore)
    awaiting_open = builder.state("awaiting_open")
    vetting_open = builder.state("vetting_open")
    authenticating = builder.state("authenticating")
    deciding = builder.state("deciding")
    proving = builder.state("proving")
    attached = builder.state("attached")
    closing = builder.state("closing")
    gone = builder.state("gone")

    @awaiting_open.upon(ConnectionInputs.got_open).to(vetting_open)
    def check_open(inputs: ConnectionInputs, core: ConnectionCore, frame: f.Open) -> None:
        verdict = core.vet_open(frame)
        if verdict is not None:
            inputs.refused(*verdict)
        elif core.security is None:
            inputs.accepted(frame)
        else:
            inputs.authentication_needed(frame)

    @vetting_open.upon(ConnectionInputs.accepted).to(attached)
    def attach(inputs: ConnectionInputs, core: ConnectionCore, frame: f.Open) -> None:
        core.attach(frame)

    @vetting_open.upon(ConnectionInputs.authentication_needed).to(authenticating)
    def offer(inputs: ConnectionInputs, core: ConnectionCore, frame: f.Open) -> None:
        core.offer_mechanisms(frame)

    @authenticating.upon(ConnectionInputs.got_authenticate).to(deciding)
    def authenticate(inputs: ConnectionInputs, core: ConnectionCore,
                     frame: f.Authenticate) -> None:
        core.authenticate(inputs, frame)

    @deciding.upon(ConnectionInputs.challenged).to(proving)
    def challenged(inputs: ConnectionInputs, core: ConnectionCore) -> None:
        pass

    @proving.upon(ConnectionInputs.got_auth_response).to(deciding)
    def prove(inputs: ConnectionInputs, core: ConnectionCore, frame: f.AuthResponse) -> None:
        core.prove(inputs, frame)

    @deciding.upon(ConnectionInputs.authenticated).to(attached)
    def attach_user(inputs: ConnectionInputs, core: ConnectionCore, frame: f.Open) -> None:
        core.attach(frame)

    for state in (vetting_open, deciding):

        @state.upon(ConnectionInputs.refused).to(closing)
        def refuse(inputs: ConnectionInputs, core: ConnectionCore, code: str,
                   detail: str) -> None:
            core.fail(code, detail)

    @attached.upon(ConnectionInputs.user_removed).to(closing)
    def removed(inputs: ConnectionInputs, core: ConnectionCore) -> None:
        core.fail(f.USER_REMOVED, f"user {core.user!r} was removed from the router's users")

    @attached.upon(ConnectionInputs.got_session_frame).loop()
    def forward(inputs: ConnectionInputs, core: ConnectionCore, frame) -> None:
        core.forward(inputs, frame)

    @attached.upon(ConnectionInputs.got_ping).loop()
    def ping(inputs: ConnectionInputs, core: ConnectionCore, frame: f.Ping) -> None:
        core.pong(frame)

    @attached.upon(ConnectionInputs.got_pong).loop()
    def pong(inputs: ConnectionInputs, core: ConnectionCore, frame: f.Pong) -> None:
        pass

    @attached.upon(ConnectionInputs.session_ended).to(closing)
    def ended(inputs: ConnectionInputs, core: ConnectionCore) -> None:
        core.end()

    @attached.upon(ConnectionInputs.taken_over).to(closing)
    def taken_over(inputs: ConnectionInputs, core: ConnectionCore) -> None:
        core.drop("taken-over")

    # Every state a frame can leave the connection in (deciding lasts
    # within one frame's handling).
    waiting = (awaiting_open, authenticating, proving, attached)
    for state in waiting:

        @state.upon(ConnectionInputs.ttl_expired).to(closing)
        def silent(inputs: ConnectionInputs, core: ConnectionCore) -> None:
            core.drop("ttl")

        @state.upon(ConnectionInputs.frame_overdue).to(closing)
        def overdue(inputs: ConnectionInputs, core: ConnectionCore) -> None:
            core.drop(FRAME_TIMEOUT)

        @state.upon(ConnectionInputs.buffers_full).to(closing)
        def full(inputs: ConnectionInputs, core: ConnectionCore) -> None:
            core.drop(BUFFERS_FULL)

        @state.upon(ConnectionInputs.router_stopped).to(closing)
        def stopped(inputs: ConnectionInputs, core: ConnectionCore) -> None:
            core.drop(ROUTER_STOPPED)

    # Opening, authentication included, must end within stage-valid-timeout.
    for state in (awaiting_open, authenticating, proving):

        @state.upon(ConnectionInputs.handshake_expired).to(closing)
        def handshake_expired(inputs: ConnectionInputs, core: ConnectionCore) -> None:
            core.fail(f.LIMIT_REACHED, "no session within stage-valid-timeout "
                                       f"({core.settings.limits.stage_valid_timeout_ms} ms)")

    for state in (vetting_open, *waiting):

        @state.upon(ConnectionInputs.stopped_serving).to(closing)
        def send_away(inputs: ConnectionInputs, core: ConnectionCore) -> None:
            core.fail(f.NOT_ACTIVE, "this router instance stopped serving: the other "
                                    "instance of its pair takes over")

    for state in (vetting_open, *waiting):

        @state.upon(ConnectionInputs.protocol_error).to(closing)
        def protocol_error(inputs: ConnectionInputs, core: ConnectionCore, code: str,
                           detail: str) -> None:
            core.fail(code, detail)

        @state.upon(ConnectionInputs.over_limit).to(closing)
        def over_limit(inputs: ConnectionInputs, core: ConnectionCore, detail: str) -> None:
            core.fail(f.LIMIT_REACHED, detail)

    for state in (vetting_open, *waiting, closing):

        @state.upon(ConnectionInputs.connection_lost).to(gone)
        def lost(inputs: ConnectionInputs, core: ConnectionCore) -> None:
            core.finish()

    # Once we have decided to close, whatever else arrives is moot.
    late = (ConnectionInputs.ttl_expired, ConnectionInputs.frame_overdue,
            ConnectionInputs.buffers_full, ConnectionInputs.router_stopped,
            ConnectionInputs.handshake_expired)
    for moot in (ConnectionInputs.got_open, ConnectionInputs.got_session_frame,
                 ConnectionInputs.got_ping, ConnectionInputs.got_pong,
                 ConnectionInputs.got_authenticate, ConnectionInputs.got_auth_response,
                 ConnectionInputs.protocol_error, ConnectionInputs.over_limit,
                 ConnectionInputs.session_ended, ConnectionInputs.taken_over,
                 ConnectionInputs.stopped_serving, ConnectionInputs.user_removed, *late):
        closing.upon(moot).loop().returns(None)
    for moot in (ConnectionInputs.session_ended, ConnectionInputs.taken_over,
                 ConnectionInputs.stopped_serving, ConnectionInputs.user_removed, *late):
        gone.upon(moot).loop().returns(None)
    # A reload during an authentication: the user is not known yet, and
    # the exchange itself consults the new policy.
    for state in (awaiting_open, authenticating, proving):
        state.upon(ConnectionInputs.user_removed).loop().returns(None)
    return builder.build()


#: Machine factory: C{CONNECTION_MACHINE(core)} returns the inputs object.
CONNECTION_MACHINE = _build_connection_machine()
