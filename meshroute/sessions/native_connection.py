"""
The router's side of one native client connection: what its frames mean
to the connection machine every client protocol shares
(L{meshroute.sessions.lifecycle}), whose stages it goes through as the
native protocol has them (docs/client-protocol.md, "Stages"):

 - C{Open} is the hello (C{awaiting_hello} → C{vetting}): its versions and
   TTL are checked, and whether this instance is the active one of its
   HA pair (its L{HAView}; else C{not-active}), and C{max-sessions}.  A
   router with users (C{[security]}) refuses versions before 5
   (C{authentication-required}) and offers L{f.Mechanisms}: the
   authentication follows.
 - C{Authenticate} (C{authenticating} → C{deciding}): EXTERNAL (the
   verified TLS client certificate's CN) decides at once, SCRAM sends a
   C{Challenge}; C{AuthResponse} (C{proving} → C{deciding}) is SCRAM's
   client-final.  The verdict is the user (C{Authenticated}, then the
   session attaches), or a refusal (C{not-authenticated}, the same answer
   for an unknown user, a wrong password and a certificate naming nobody;
   or C{not-allowed}, for a session of another user).
 - Attached, command and C{Received} frames are inputs of the session's
   machine (L{meshroute.sessions.served}); one its state does not allow
   is a C{bad-command}, and so is a frame of topics (version 8) on an
   older connection.  C{Ping} is answered here.
 - The frames the core writes are native already: they go out as they
   are, C{Error(0, code, detail)} included.

The session of an C{Open} naming a resumable session is resumed, taken
from its old connection if need be (a client whose network changed:
C{taken_over}).
"""

from dataclasses import dataclass

from automat import NoTransition

from meshroute.security.scram import MECHANISM as SCRAM, ScramError, ScramServer
from meshroute.sessions.connection_core import ConnectionCore
from meshroute.sessions.connection_inputs import ConnectionInputs
from meshroute.sessions.permissions import RESUME, denied
from meshroute.wire import client_frames as f
from meshroute.wire.codec import encode

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
    f.Prepare: "got_prepare",
    f.CommitXid: "got_commit_xid",
    f.RollbackXid: "got_rollback_xid",
    f.Recover: "got_recover",
    f.SubscribeTopic: "got_subscribe_topic",
}


def _version_needed(frame) -> int:
    """
    The protocol version C{frame} needs that the session does not check
    itself: version 8's topic frames (a C{SubscribeTopic}, an
    C{Unsubscribe} that forgets), which a STOMP session, a version-2
    connection to the session, makes too.  (Versions 2, 4 and 7 are the
    session's to check: no other protocol makes their frames.)
    """
    if type(frame) is f.SubscribeTopic and frame.retained != "none":
        return f.RETAINED_VERSION
    if type(frame) is f.SubscribeTopic or (type(frame) is f.Unsubscribe and frame.forget):
        return f.TOPICS_VERSION
    return 1


@dataclass(eq=False)
class NativeConnectionCore(ConnectionCore):
    """
    One native client connection: the lifecycle's data and I/O, and the
    opening exchange of the native protocol.

    @ivar _open: the Open kept while the client authenticates.
    @ivar _scram: the SCRAM exchange in progress.
    """

    _open: f.Open | None = None
    _scram: ScramServer | None = None

    # -- output ---------------------------------------------------------------

    def write(self, frame) -> None:
        if self.connected and not self.silent:
            self.transport.write(encode(frame))

    def not_allowed(self, frame) -> str:
        return f"{type(frame).__name__} is not allowed in this session state"

    # -- opening ----------------------------------------------------------------

    def vet(self, inputs: ConnectionInputs, frame: f.Open) -> None:
        verdict = self.vet_open(frame)
        if verdict is not None:
            inputs.refused(*verdict)
        elif self.security is None:
            inputs.accepted(frame)
        else:
            self.offer_mechanisms(frame)
            inputs.authentication_needed()

    def vet_open(self, frame: f.Open) -> tuple[str, str] | None:
        """
        The refusal of C{frame} (code, detail), or None: it is acceptable
        (the connection's version and TTL are then its).
        """
        common = set(frame.versions) & set(f.SUPPORTED_VERSIONS)
        if not common:
            return f.UNSUPPORTED_VERSION, f"this router speaks {list(f.SUPPORTED_VERSIONS)}"
        if frame.ttl_ms < -1:
            return f.BAD_COMMAND, "ttl_ms must be -1 (never) or at least 0"
        if frame.answered_up_to < 0 or frame.delivered_up_to < 0:
            return f.BAD_COMMAND, "answered_up_to and delivered_up_to must not be negative"
        refusal = self.serving_refusal(
            resuming=bool(frame.session_id and self.registry.resumable(frame.session_id)))
        if refusal is not None:
            return refusal
        self.version = max(common)
        if self.security is not None and self.version < f.AUTH_VERSION:
            return f.AUTHENTICATION_REQUIRED, (
                f"this router authenticates its clients: client protocol version "
                f"{f.AUTH_VERSION} or later is needed")
        override = self.settings.connection_ttl_override
        self.ttl_ms = frame.ttl_ms if override == -1 else override
        return None

    def offer_mechanisms(self, frame: f.Open) -> None:
        """
        Keep the Open until the client has authenticated, and tell it how
        it may.
        """
        self._open = frame
        offered = [SCRAM]
        if self.authentication.certificate_user() is not None:
            offered.insert(0, f.EXTERNAL)
        self.write(f.Mechanisms(offered))

    def authenticate(self, inputs: ConnectionInputs, frame: f.Authenticate) -> None:
        """
        Start the mechanism the client chose: EXTERNAL decides at once,
        SCRAM challenges.
        """
        if frame.mechanism == f.EXTERNAL:
            user = self.authentication.certificate_user()
            if user is None:
                self.authentication.not_authenticated(inputs, "",
                                                      "no verified client certificate")
            else:
                self.identified(inputs, user, f.EXTERNAL, b"")
            return
        if frame.mechanism != SCRAM:
            self.authentication.not_authenticated(
                inputs, "", f"mechanism {frame.mechanism!r} not offered")
            return
        self._scram = ScramServer(self.security.policy.credentials, self.secret)
        try:
            challenge = self._scram.first(frame.data)
        except ScramError as e:
            self.authentication.not_authenticated(inputs, self._scram.user or "", str(e))
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
            self.authentication.not_authenticated(inputs, scram.user, str(e))
            return
        self.identified(inputs, scram.user, SCRAM, final)

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
        self.authentication.authenticated(user, mechanism)
        self.write(f.Authenticated(user, proof))
        inputs.accepted(frame)

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
        self.new_session().start(self, frame)

    # -- attached ---------------------------------------------------------------

    def serve(self, inputs: ConnectionInputs, frame) -> None:
        """
        Feed a command or Received to the session's machine (one its state
        does not allow is a C{bad-command}); answer a Ping.
        """
        kind = type(frame)
        if kind is f.Ping:
            self.write(f.Pong(frame.n))
        elif (needed := _version_needed(frame)) > self.version:
            what = "an Unsubscribe that forgets" if kind is f.Unsubscribe else kind.__name__
            inputs.protocol_error(f.BAD_COMMAND, f"{what} needs protocol version {needed}; "
                                  f"this connection speaks {self.version}")
        elif kind is not f.Pong:
            try:
                getattr(self.session.machine, _SESSION_INPUT[kind])(frame)
            except NoTransition:
                inputs.protocol_error(f.BAD_COMMAND, self.not_allowed(frame))
