"""
The life of a client connection, whatever protocol it speaks: one Automat
machine for the connections of the native, STOMP and MQTT listeners alike,
from the client's first frame to the closed transport.

    awaiting_hello ── got_hello ──▶ vetting ──────────── accepted ────────────▶ attached ── got_goodbye ──▶ ending
                                      │                                            ▲
                                      │ authentication_needed                      │ accepted
                                      ▼                                            │
                               authenticating ── got_authenticate ──▶ deciding ────┘
                                                                       │   ▲
                                                            challenged ▼   │ got_auth_response
                                                                      proving

    every state above ── protocol_error, over_limit, ttl_expired, frame_overdue,
                         buffers_full, stopped_serving, router_stopped ──▶ closing
    awaiting_hello ── got_frame (out of turn) ──▶ closing
    vetting, deciding ── refused ──▶ closing
    awaiting_hello, authenticating, proving ── handshake_expired ──▶ closing
    attached ── taken_over, user_removed ──▶ closing
    attached, ending ── session_ended ──▶ closing
    every state above, closing ── connection_lost ──▶ gone

 - C{awaiting_hello}: awaits the client's opening frame (native C{Open},
   STOMP C{CONNECT}); any other frame is out of turn (C{bad-command}).
 - C{vetting}: within the hello's handling, the protocol's verdict on it
   (versions, TTL, whether this instance is the active one of its HA
   pair, C{max-sessions}, credentials carried in the hello): C{accepted}
   (the session attaches), C{refused}, or C{authentication_needed} (the
   hello is acceptable once the client authenticates).
 - C{authenticating}: awaits the client's choice of mechanism (native
   C{Authenticate}).
 - C{deciding}: within one authentication frame's handling, the
   exchange's verdict: C{challenged} (SCRAM's server-first was sent),
   C{accepted} (the client is a user who may have the session it asks
   for), or C{refused} (C{not-authenticated}, C{not-allowed}).
 - C{proving}: awaits the client's answer to the challenge (native
   C{AuthResponse}).
 - C{attached}: the connection carries a session (a new one, or one it
   resumed); each frame is the protocol's to serve.  Its user (or None,
   without C{[security]}) is fixed for its life; a reload that removes the
   user closes it (C{user-removed}).
 - C{ending}: the client said goodbye (STOMP's C{DISCONNECT}); awaits the
   session's C{Closed}.  Whatever the client still sends is ignored.
 - C{closing}: the connection was ended: the client was told why (a
   connection-level error), its session closed in order, or it was
   dropped (silent for its TTL, its session taken over by another
   connection, ...); awaits the transport's close.  Anything that still
   arrives is ignored.
 - C{gone}: the transport is closed.

What the machine asks of each protocol is what its core (a
L{ConnectionCore} subclass: the native L{meshroute.sessions.native_connection},
the STOMP L{meshroute.stomp.connection}, the MQTT
L{meshroute.mqtt.connection}) adds to the shared one
(L{meshroute.sessions.connection_core}): L{vet
<ConnectionCore.vet>} a hello, L{attach <ConnectionCore.attach>} its
session, L{serve <ConnectionCore.serve>} a frame of the session's
business, L{write <ConnectionCore.write>} the session's native frames in
the protocol's words (an C{Error} of command 0 is how a client is told
why its connection ends), and word what it tells a client.  The native
core also L{authenticates <ConnectionCore.authenticate>} after the hello;
STOMP's and MQTT's hellos carry their credentials.  Which frame is which input
(C{got_hello}, C{got_authenticate}, C{got_auth_response}, C{got_frame},
C{got_goodbye}) is the protocol's listener's business.

A connection-level error ends the session too (it cannot be resumed: the
client and the router disagree about it).  A connection lost any other
way leaves a resumable session C{disconnected}, to be resumed by another
connection within keep-alive.

The connection TTL and partial frames: the listener's
L{meshroute.sessions.watch.ConnectionWatch} asks every connection each
C{connection-ttl-check-interval} whether its client is still there
(L{meshroute.sessions.liveness}: silent for its TTL, C{ttl_expired}; slow
to finish a frame, C{frame_overdue}); the listener's bound of the bytes of
partial frames aborts a connection that would pass it (C{buffers_full}).
Before its hello a connection's TTL is the override, or
L{meshroute.sessions.connection_core.DEFAULT_TTL_MS}.

Limits (L{meshroute.sessions.limits}): the same check closes a connection
that has had no session for the listener's C{stage-valid-timeout}
(C{handshake_expired}: it said nothing, or never finished opening), and
C{over_limit} closes one that passed a bound (C{max-connections}, the
header bounds); a hello that would start a session beyond
C{max-sessions} is refused.  Each tells the client C{limit-reached} with
the key in its detail, and logs it.
"""

from automat import TypeMachineBuilder

from meshroute.sessions.connection_core import (
    BUFFERS_FULL,
    FRAME_TIMEOUT,
    ROUTER_STOPPED,
    TAKEN_OVER,
    TTL,
    ConnectionCore,
)
from meshroute.sessions.connection_inputs import ConnectionInputs
from meshroute.wire import client_frames as f


def _dropping(reason: str):
    """
    The behaviour that drops a connection for C{reason}.
    """

    def drop(inputs: ConnectionInputs, core: ConnectionCore) -> None:
        core.drop(reason)

    return drop


def _build_connection_machine():
    builder = TypeMachineBuilder(ConnectionInputs, ConnectionCore)
    awaiting_hello = builder.state("awaiting_hello")
    vetting = builder.state("vetting")
    authenticating = builder.state("authenticating")
    deciding = builder.state("deciding")
    proving = builder.state("proving")
    attached = builder.state("attached")
    ending = builder.state("ending")
    closing = builder.state("closing")
    gone = builder.state("gone")

    # -- opening --------------------------------------------------------------

    @awaiting_hello.upon(ConnectionInputs.got_hello).to(vetting)
    def vet(inputs: ConnectionInputs, core: ConnectionCore, frame) -> None:
        core.vet(inputs, frame)

    @awaiting_hello.upon(ConnectionInputs.got_frame).to(closing)
    def too_soon(inputs: ConnectionInputs, core: ConnectionCore, frame) -> None:
        core.fail(f.BAD_COMMAND, core.before_hello(frame))

    vetting.upon(ConnectionInputs.authentication_needed).to(authenticating).returns(None)

    @authenticating.upon(ConnectionInputs.got_authenticate).to(deciding)
    def authenticate(inputs: ConnectionInputs, core: ConnectionCore, frame) -> None:
        core.authenticate(inputs, frame)

    deciding.upon(ConnectionInputs.challenged).to(proving).returns(None)

    @proving.upon(ConnectionInputs.got_auth_response).to(deciding)
    def prove(inputs: ConnectionInputs, core: ConnectionCore, frame) -> None:
        core.prove(inputs, frame)

    for state in (vetting, deciding):

        @state.upon(ConnectionInputs.accepted).to(attached)
        def attach(inputs: ConnectionInputs, core: ConnectionCore, hello) -> None:
            core.serving = True
            core.attach(hello)

        @state.upon(ConnectionInputs.refused).to(closing)
        def refuse(inputs: ConnectionInputs, core: ConnectionCore, code: str,
                   detail: str) -> None:
            core.fail(code, detail)

    # -- attached -------------------------------------------------------------

    @attached.upon(ConnectionInputs.got_frame).loop()
    def serve(inputs: ConnectionInputs, core: ConnectionCore, frame) -> None:
        core.serve(inputs, frame)

    @attached.upon(ConnectionInputs.got_goodbye).to(ending)
    def goodbye(inputs: ConnectionInputs, core: ConnectionCore, frame) -> None:
        core.serving = False
        core.serve(inputs, frame)

    for state in (attached, ending):

        @state.upon(ConnectionInputs.session_ended).to(closing)
        def ended(inputs: ConnectionInputs, core: ConnectionCore) -> None:
            core.end()

    attached.upon(ConnectionInputs.taken_over).to(closing)(_dropping(TAKEN_OVER))

    @attached.upon(ConnectionInputs.user_removed).to(closing)
    def removed(inputs: ConnectionInputs, core: ConnectionCore) -> None:
        core.fail(f.USER_REMOVED,
                  f"user {core.authentication.user!r} was removed from the router's users")

    # -- the end, whatever the stage ------------------------------------------

    # Opening, authentication included, must end within stage-valid-timeout.
    for state in (awaiting_hello, authenticating, proving):

        @state.upon(ConnectionInputs.handshake_expired).to(closing)
        def handshake_expired(inputs: ConnectionInputs, core: ConnectionCore) -> None:
            core.fail(f.LIMIT_REACHED, f"no {core.AWAITED} within stage-valid-timeout "
                                       f"({core.settings.limits.stage_valid_timeout_ms} ms)")

    # Dropped without a word, for a reason the session is told.
    drops = ((ConnectionInputs.ttl_expired, TTL),
             (ConnectionInputs.frame_overdue, FRAME_TIMEOUT),
             (ConnectionInputs.buffers_full, BUFFERS_FULL),
             (ConnectionInputs.router_stopped, ROUTER_STOPPED))
    live = (awaiting_hello, vetting, authenticating, deciding, proving, attached, ending)
    for state in live:
        for dropped, reason in drops:
            state.upon(dropped).to(closing)(_dropping(reason))

        @state.upon(ConnectionInputs.stopped_serving).to(closing)
        def send_away(inputs: ConnectionInputs, core: ConnectionCore) -> None:
            core.fail(f.NOT_ACTIVE, core.STOPPED_SERVING)

        @state.upon(ConnectionInputs.protocol_error).to(closing)
        def protocol_error(inputs: ConnectionInputs, core: ConnectionCore, code: str,
                           detail: str) -> None:
            core.fail(code, detail)

        @state.upon(ConnectionInputs.over_limit).to(closing)
        def over_limit(inputs: ConnectionInputs, core: ConnectionCore, detail: str) -> None:
            core.fail(f.LIMIT_REACHED, detail)

    for state in (*live, closing):

        @state.upon(ConnectionInputs.connection_lost).to(gone)
        def lost(inputs: ConnectionInputs, core: ConnectionCore) -> None:
            core.finish()

    # -- what no longer matters -----------------------------------------------

    # A session that came in time; a goodbye said, after which the client
    # must not send.
    for state in (attached, ending):
        state.upon(ConnectionInputs.handshake_expired).loop().returns(None)
    for moot in (ConnectionInputs.got_frame, ConnectionInputs.got_goodbye):
        ending.upon(moot).loop().returns(None)
    # Before its session the user is not known yet (and an authentication
    # consults the new policy itself); once leaving, it no longer matters.
    for state in (awaiting_hello, authenticating, proving, ending):
        state.upon(ConnectionInputs.user_removed).loop().returns(None)
    # Once we have decided to close, whatever else arrives is moot.
    late = (ConnectionInputs.session_ended, ConnectionInputs.taken_over,
            ConnectionInputs.user_removed, ConnectionInputs.stopped_serving,
            ConnectionInputs.router_stopped, ConnectionInputs.ttl_expired,
            ConnectionInputs.frame_overdue, ConnectionInputs.buffers_full,
            ConnectionInputs.handshake_expired)
    for moot in (ConnectionInputs.got_hello, ConnectionInputs.got_authenticate,
                 ConnectionInputs.got_auth_response, ConnectionInputs.got_frame,
                 ConnectionInputs.got_goodbye, ConnectionInputs.protocol_error,
                 ConnectionInputs.over_limit, *late):
        closing.upon(moot).loop().returns(None)
    for moot in late:
        gone.upon(moot).loop().returns(None)
    return builder.build()


#: Machine factory: C{CONNECTION_MACHINE(core)} returns the inputs object.
CONNECTION_MACHINE = _build_connection_machine()
