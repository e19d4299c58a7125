"""
Tests for the life of a client connection (L{meshroute.sessions.lifecycle}),
the machine every client protocol shares, and for whether its client is
still there (L{meshroute.sessions.liveness}), on their own: a fake
protocol core that records what the machine asks of it, a
C{StringTransport}, a C{task.Clock}, no sockets and no served session.  Every input that ends a
connection is fed in every state it applies to (and in those it does
not); the protocols' own tests (test_served_session.py,
test_stomp_connection.py, ...) cover what their words are on the wire.
"""

from dataclasses import dataclass, field

import pytest
from automat import NoTransition
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport

from meshroute.sessions.connection_core import (
    BUFFERS_FULL,
    CLOSE_GRACE_S,
    DEFAULT_TTL_MS,
    FRAME_TIMEOUT,
    ROUTER_STOPPED,
    SENDS_IN_PROGRESS,
    TAKEN_OVER,
    TTL,
    UNREAD,
    ConnectionCore,
)
from meshroute.sessions.lifecycle import CONNECTION_MACHINE
from meshroute.sessions.limits import ClientLimits
from meshroute.sessions.liveness import PARTIAL_FRAME_TIMEOUT_S, BufferBudget
from meshroute.sessions.registry import SessionRegistry
from meshroute.sessions.sends import TOPICS_BEHIND
from meshroute.sessions.settings import SessionSettings
from meshroute.wire import client_frames as f

STAGE_VALID_TIMEOUT_MS = 3000
SETTINGS = SessionSettings(limits=ClientLimits(stage_valid_timeout_ms=STAGE_VALID_TIMEOUT_MS))

HELLO = "hello"
AUTHENTICATE = "authenticate"
AUTH_RESPONSE = "auth-response"
FRAME = "frame"
GOODBYE = "goodbye"


class RecordingSessionMachine:
    """
    The inputs a connection feeds its session's machine, recorded.
    """

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def failed(self, code: str) -> None:
        self.calls.append(("failed", code))

    def connection_lost(self, reason: str) -> None:
        self.calls.append(("connection_lost", reason))


@dataclass
class RecordingPacing:
    """
    A session's L{AnswerPacing}, recording that the connection wrote out
    what it held.
    """

    released: int = 0

    def release(self) -> None:
        self.released += 1


@dataclass(eq=False)
class FakeSession:
    session_id: str = "session-1"
    client_id: str = "client-1"
    machine: RecordingSessionMachine = field(default_factory=RecordingSessionMachine)
    connection: object = None
    flushed: int = 0
    answer_pacing: RecordingPacing = field(default_factory=RecordingPacing)

    def flush_pending(self) -> None:
        self.flushed += 1


def accept(inputs, core, frame) -> None:
    inputs.accepted(core.hello)


@dataclass(eq=False)
class FakeCore(ConnectionCore):
    """
    A protocol's core whose verdicts are the test's (C{decide}, called by
    C{vet}, C{authenticate} and C{prove}), and which records what the
    machine asks of it.
    """

    decide: object = accept
    hello: object = None
    written: list = field(default_factory=list)
    served: list = field(default_factory=list)
    attached: list = field(default_factory=list)
    silenced: int = 0

    AWAITED = "hello"
    STOPPED_SERVING = "stopped serving"

    def vet(self, inputs, hello) -> None:
        self.hello = hello
        self.decide(inputs, self, hello)

    def attach(self, hello) -> None:
        self.attached.append(hello)
        self.session = FakeSession(connection=self)

    def authenticate(self, inputs, frame) -> None:
        self.decide(inputs, self, frame)

    def prove(self, inputs, frame) -> None:
        self.decide(inputs, self, frame)

    def serve(self, inputs, frame) -> None:
        self.served.append(frame)

    def write(self, frame) -> None:
        if self.connected and not self.silent:
            self.written.append(frame)

    def not_allowed(self, frame) -> str:
        return f"{frame} not allowed"

    def before_hello(self, frame) -> str:
        return f"{frame} before the hello"

    def fell_silent(self) -> None:
        self.silenced += 1


def new_connection(clock: Clock, **more) -> FakeCore:
    transport = StringTransport()
    transport.registerProducer(object(), True)  # as a listener's protocol does
    core = FakeCore(engine=None, transport=transport, clock=clock,
                    registry=SessionRegistry(), settings=SETTINGS, **more)
    core.machine = CONNECTION_MACHINE(core)
    return core


def authentication_needed(inputs, core, frame) -> None:
    inputs.authentication_needed()


def challenged(inputs, core, frame) -> None:
    inputs.challenged()


def connection_in(state: str, clock: Clock) -> FakeCore:
    """
    A connection in C{state} (one that lasts between frames).
    """
    core = new_connection(clock)
    if state in ("authenticating", "proving"):
        core.decide = authentication_needed
        core.machine.got_hello(HELLO)
        if state == "proving":
            core.decide = challenged
            core.machine.got_authenticate(AUTHENTICATE)
    elif state in ("attached", "ending"):
        core.machine.got_hello(HELLO)
        if state == "ending":
            core.machine.got_goodbye(GOODBYE)
    else:
        assert state == "awaiting_hello"
    return core


def feed(core: FakeCore, name: str, *args) -> None:
    getattr(core.machine, name)(*args)


def feed_in(state: str, clock: Clock, name: str, *args) -> FakeCore:
    """
    A connection in C{state} fed the input C{name}.  The states that last
    within one frame's handling (C{vetting}, C{deciding}) get it from
    the verdict they await, as a protocol's core would feed it.
    """
    if state in ("vetting", "deciding"):
        core = connection_in("awaiting_hello" if state == "vetting" else "authenticating",
                             clock)
        core.decide = lambda inputs, core, frame: getattr(inputs, name)(*args)
        feed(core, "got_hello" if state == "vetting" else "got_authenticate",
             HELLO if state == "vetting" else AUTHENTICATE)
        return core
    core = connection_in(state, clock)
    feed(core, name, *args)
    return core


BETWEEN_FRAMES = ("awaiting_hello", "authenticating", "proving", "attached", "ending")
LIVE = ("awaiting_hello", "vetting", "authenticating", "deciding", "proving", "attached",
        "ending")
WITH_SESSION = ("attached", "ending")


def assert_closing(core: FakeCore) -> None:
    """
    The connection is closing: whatever arrives now is ignored, and it is
    gone once its transport is.
    """
    written, served = list(core.written), list(core.served)
    for name, args in (("got_hello", (HELLO,)), ("got_authenticate", (AUTHENTICATE,)),
                       ("got_auth_response", (AUTH_RESPONSE,)), ("got_frame", (FRAME,)),
                       ("got_goodbye", (GOODBYE,)), ("protocol_error", (f.BAD_COMMAND, "x")),
                       ("over_limit", ("x",)), *LATE):
        feed(core, name, *args)
    assert (core.written, core.served) == (written, served)
    assert_goes(core)


def assert_goes(core: FakeCore) -> None:
    feed(core, "connection_lost")
    assert not core.connected
    for name, args in LATE:
        feed(core, name, *args)
    with pytest.raises(NoTransition):
        feed(core, "got_frame", FRAME)


#: What still happens to a connection after it began closing, harmlessly.
LATE = (("session_ended", ()), ("taken_over", ()), ("user_removed", ()),
        ("stopped_serving", ()), ("router_stopped", ()), ("ttl_expired", ()),
        ("frame_overdue", ()), ("buffers_full", ()), ("handshake_expired", ()))


# -- the inputs that end a connection ---------------------------------------------

#: Inputs that drop the connection without a word, and the reason its
#: session is told.
DROPS = {"ttl_expired": TTL, "frame_overdue": FRAME_TIMEOUT, "buffers_full": BUFFERS_FULL,
         "router_stopped": ROUTER_STOPPED}

#: Inputs that tell the client why, with their arguments, and the code and
#: detail it is told.
FAILURES = {
    "protocol_error": ((f.PROTOCOL_ERROR, "not a frame"), f.PROTOCOL_ERROR, "not a frame"),
    "over_limit": (("max-connections (1)",), f.LIMIT_REACHED, "max-connections (1)"),
    "stopped_serving": ((), f.NOT_ACTIVE, "stopped serving"),
}


def assert_dropped(core: FakeCore, reason: str, session) -> None:
    assert core.transport.disconnected  # aborted
    assert core.written == [] and core.silent and core.silenced >= 1
    assert core.session is None
    if session is not None:
        assert session.machine.calls == [("connection_lost", reason)]


def assert_failed(core: FakeCore, clock: Clock, code: str, detail: str, session) -> None:
    assert core.written[-1] == f.Error(0, code, detail)
    assert core.silent and core.silenced >= 1 and core.session is None
    # Closed once what was written is flushed (the producer first), aborted
    # if that takes longer than the grace.
    assert core.transport.producer is None
    assert core.transport.disconnecting and not core.transport.disconnected
    if session is not None:
        assert session.machine.calls == [("failed", code)]
    clock.advance(CLOSE_GRACE_S)
    assert core.transport.disconnected


@pytest.mark.parametrize("state", LIVE)
@pytest.mark.parametrize("name", sorted(DROPS))
def test_a_drop_aborts_the_connection_in_every_state(state, name):
    clock = Clock()
    core = feed_in(state, clock, name)
    assert_dropped(core, DROPS[name], None)
    assert_closing(core)


@pytest.mark.parametrize("state", WITH_SESSION)
@pytest.mark.parametrize("name", sorted(DROPS))
def test_a_drop_leaves_the_session_disconnected_for_its_reason(state, name):
    clock = Clock()
    core = connection_in(state, clock)
    session = core.session
    feed(core, name)
    assert_dropped(core, DROPS[name], session)


@pytest.mark.parametrize("state", LIVE)
@pytest.mark.parametrize("name", sorted(FAILURES))
def test_a_failure_tells_the_client_and_closes_in_every_state(state, name):
    clock = Clock()
    args, code, detail = FAILURES[name]
    core = feed_in(state, clock, name, *args)
    assert_failed(core, clock, code, detail, None)
    assert_closing(core)


@pytest.mark.parametrize("state", WITH_SESSION)
@pytest.mark.parametrize("name", sorted(FAILURES))
def test_a_failure_ends_the_session_with_its_code(state, name):
    clock = Clock()
    args, code, detail = FAILURES[name]
    core = connection_in(state, clock)
    session = core.session
    feed(core, name, *args)
    assert_failed(core, clock, code, detail, session)
    # The send answers it held went out before the error.
    assert session.answer_pacing.released == 1


@pytest.mark.parametrize("state", ("awaiting_hello", "authenticating", "proving"))
def test_no_session_within_stage_valid_timeout_is_a_limit(state):
    clock = Clock()
    core = feed_in(state, clock, "handshake_expired")
    assert_failed(core, clock, f.LIMIT_REACHED,
                  f"no hello within stage-valid-timeout ({STAGE_VALID_TIMEOUT_MS} ms)", None)
    assert_closing(core)


@pytest.mark.parametrize("state", WITH_SESSION)
def test_stage_valid_timeout_no_longer_matters_once_a_session_came(state):
    clock = Clock()
    core = connection_in(state, clock)
    feed(core, "handshake_expired")
    assert core.written == [] and not core.transport.disconnecting
    assert core.session is not None


@pytest.mark.parametrize("state", ("vetting", "deciding"))
def test_stage_valid_timeout_is_not_an_input_within_a_frame(state):
    with pytest.raises(NoTransition):
        feed_in(state, Clock(), "handshake_expired")


def test_a_removed_user_closes_an_attached_connection():
    clock = Clock()
    core = connection_in("attached", clock)
    core.authentication.user = "alice"
    session = core.session
    feed(core, "user_removed")
    assert_failed(core, clock, f.USER_REMOVED,
                  "user 'alice' was removed from the router's users", session)
    assert_closing(core)


@pytest.mark.parametrize("state", ("awaiting_hello", "authenticating", "proving", "ending"))
def test_a_removed_user_is_no_matter_before_the_session_or_after_goodbye(state):
    clock = Clock()
    core = connection_in(state, clock)
    feed(core, "user_removed")
    assert core.written == [] and not core.transport.disconnecting


def test_a_session_taken_over_drops_its_old_connection():
    clock = Clock()
    core = connection_in("attached", clock)
    session = core.session
    feed(core, "taken_over")
    assert_dropped(core, TAKEN_OVER, session)
    assert_closing(core)


@pytest.mark.parametrize("state", ("awaiting_hello", "authenticating", "proving", "ending"))
def test_only_an_attached_session_is_taken_over(state):
    with pytest.raises(NoTransition):
        feed_in(state, Clock(), "taken_over")


@pytest.mark.parametrize("state", WITH_SESSION)
def test_a_session_ended_in_order_closes_without_a_word(state):
    clock = Clock()
    core = connection_in(state, clock)
    feed(core, "session_ended")
    assert core.written == [] and core.silent and core.session is None
    assert core.transport.disconnecting and core.transport.producer is None
    assert clock.getDelayedCalls() == []  # nothing to abort
    assert_closing(core)


@pytest.mark.parametrize("state", ("vetting", "deciding"))
def test_a_refusal_tells_the_client(state):
    clock = Clock()
    core = feed_in(state, clock, "refused", f.NOT_AUTHENTICATED, "authentication failed")
    assert_failed(core, clock, f.NOT_AUTHENTICATED, "authentication failed", None)
    assert core.attached == []
    assert_closing(core)


@pytest.mark.parametrize("state", LIVE)
def test_a_lost_transport_ends_the_connection_in_every_state(state):
    clock = Clock()
    core = feed_in(state, clock, "connection_lost")
    assert not core.connected and core.silenced == 1 and core.written == []
    for name, args in LATE:
        feed(core, name, *args)


@pytest.mark.parametrize("state", WITH_SESSION)
def test_a_lost_transport_leaves_the_session_disconnected(state):
    core = connection_in(state, Clock())
    session = core.session
    feed(core, "connection_lost")
    assert session.machine.calls == [("connection_lost", "connection-lost")]
    assert core.session is None


def test_a_lost_transport_stops_the_abort_of_a_closing_connection():
    clock = Clock()
    core = connection_in("attached", clock)
    feed(core, "protocol_error", f.BAD_COMMAND, "no")
    assert len(clock.getDelayedCalls()) == 1
    feed(core, "connection_lost")
    assert clock.getDelayedCalls() == []
    assert not core.transport.disconnected


# -- the frames, stage by stage -----------------------------------------------------


def test_a_hello_accepted_attaches_its_session():
    core = connection_in("awaiting_hello", Clock())
    feed(core, "got_hello", HELLO)
    assert core.attached == [HELLO] and core.session is not None
    feed(core, "got_frame", FRAME)
    assert core.served == [FRAME]


def test_an_authenticated_hello_attaches_its_session():
    core = connection_in("proving", Clock())
    core.decide = accept
    feed(core, "got_auth_response", AUTH_RESPONSE)
    assert core.attached == [HELLO]


def test_a_challenge_awaits_the_response_and_the_next_verdict():
    core = connection_in("proving", Clock())
    core.decide = challenged
    feed(core, "got_auth_response", AUTH_RESPONSE)  # another challenge
    feed(core, "got_auth_response", AUTH_RESPONSE)
    assert core.attached == []


def test_a_frame_before_the_hello_is_a_bad_command():
    clock = Clock()
    core = connection_in("awaiting_hello", clock)
    feed(core, "got_frame", FRAME)
    assert_failed(core, clock, f.BAD_COMMAND, "frame before the hello", None)
    assert core.served == []


@pytest.mark.parametrize("state, name, frame", [
    ("awaiting_hello", "got_authenticate", AUTHENTICATE),
    ("awaiting_hello", "got_auth_response", AUTH_RESPONSE),
    ("awaiting_hello", "got_goodbye", GOODBYE),
    ("authenticating", "got_hello", HELLO),
    ("authenticating", "got_auth_response", AUTH_RESPONSE),
    ("authenticating", "got_frame", FRAME),
    ("proving", "got_authenticate", AUTHENTICATE),
    ("proving", "got_frame", FRAME),
    ("attached", "got_hello", HELLO),
    ("attached", "got_authenticate", AUTHENTICATE),
    ("ending", "got_hello", HELLO),
])
def test_a_frame_out_of_its_stage_is_refused_by_the_machine(state, name, frame):
    """
    Refused before anything is done: the protocol's listener then makes
    it a C{bad-command} (C{not_allowed}).
    """
    core = connection_in(state, Clock())
    served = list(core.served)
    with pytest.raises(NoTransition):
        feed(core, name, frame)
    assert core.written == [] and core.served == served


def test_a_goodbye_is_served_and_what_follows_it_is_ignored():
    core = connection_in("attached", Clock())
    feed(core, "got_goodbye", GOODBYE)
    feed(core, "got_frame", FRAME)
    feed(core, "got_goodbye", GOODBYE)
    assert core.served == [GOODBYE]
    assert core.written == [] and not core.transport.disconnecting


# -- the TTL, partial frames, stage-valid-timeout, reading ----------------------------


def test_the_ttl_counts_from_the_last_whole_frame():
    clock = Clock()
    core = new_connection(clock)
    assert core.ttl_ms == DEFAULT_TTL_MS
    clock.advance(DEFAULT_TTL_MS / 1000 - 1)
    core.liveness.read(1, 0)
    clock.advance(DEFAULT_TTL_MS / 1000 - 1)
    assert not core.silent_too_long(clock.seconds())
    core.liveness.read(0, 10)  # bytes of a frame are not life
    clock.advance(1)
    assert core.silent_too_long(clock.seconds())


def test_before_its_hello_a_connection_has_the_override_else_the_default_ttl():
    clock = Clock()
    assert new_connection(clock).ttl_ms == DEFAULT_TTL_MS
    overridden = FakeCore(engine=None, transport=StringTransport(), clock=clock,
                          registry=SessionRegistry(),
                          settings=SessionSettings(connection_ttl_override=500))
    assert overridden.ttl_ms == 500


def test_a_ttl_of_minus_one_is_never():
    clock = Clock()
    core = new_connection(clock)
    core.ttl_ms = -1
    clock.advance(10 ** 6)
    assert not core.silent_too_long(clock.seconds())


def test_a_partial_frame_is_late_from_its_first_byte():
    clock = Clock()
    core = new_connection(clock)
    core.liveness.read(0, 10)
    clock.advance(PARTIAL_FRAME_TIMEOUT_S - 1)
    core.liveness.read(0, 20)  # the same frame, still incomplete
    assert not core.frame_late(clock.seconds())
    clock.advance(1)
    assert core.frame_late(clock.seconds())
    core.liveness.read(1, 5)  # that frame ended; the next began now
    assert not core.frame_late(clock.seconds())
    core.liveness.read(1, 0)
    clock.advance(PARTIAL_FRAME_TIMEOUT_S)
    assert not core.frame_late(clock.seconds())


@pytest.mark.parametrize("reason", [SENDS_IN_PROGRESS, TOPICS_BEHIND])
def test_a_connection_the_router_does_not_read_is_not_silent(reason):
    # The router stopped reading it (its sends, the topic fan-out): the
    # client's TTL and its partial frame wait, and count again from when
    # it is read again.
    clock = Clock()
    core = new_connection(clock)
    core.liveness.read(0, 10)
    core.pause(reason)
    assert core.transport.producerState == "paused"
    clock.advance(DEFAULT_TTL_MS / 1000 * 3)
    assert not core.silent_too_long(clock.seconds())
    assert not core.frame_late(clock.seconds())
    core.resume(reason)
    assert core.transport.producerState == "producing"
    clock.advance(PARTIAL_FRAME_TIMEOUT_S - 1)
    assert not core.frame_late(clock.seconds())
    clock.advance(1)
    assert core.frame_late(clock.seconds())
    clock.advance(DEFAULT_TTL_MS / 1000 - PARTIAL_FRAME_TIMEOUT_S - 1)
    assert not core.silent_too_long(clock.seconds())
    clock.advance(1)
    assert core.silent_too_long(clock.seconds())


def test_a_client_that_does_not_read_stays_silent_while_not_read():
    # Not read because it does not read what the router writes: its
    # silence is its own, and its TTL ends it.
    clock = Clock()
    core = new_connection(clock)
    core.pause(UNREAD)
    core.pause(TOPICS_BEHIND)
    core.resume(TOPICS_BEHIND)
    assert core.transport.producerState == "paused"
    clock.advance(DEFAULT_TTL_MS / 1000)
    assert core.silent_too_long(clock.seconds())


def test_the_partial_frames_of_a_listener_share_one_budget():
    clock = Clock()
    budget = BufferBudget(limit=100)
    first, second = new_connection(clock, budget=budget), new_connection(clock, budget=budget)
    assert first.liveness.read(0, 60)
    assert not second.liveness.read(0, 50)  # 110 held: past the bound
    assert second.liveness.read(0, 40)
    assert budget.held == 100
    feed(first, "connection_lost")  # what it held is released
    assert budget.held == 40


def test_stage_valid_timeout_counts_from_the_connection_while_it_has_no_session():
    clock = Clock()
    core = new_connection(clock)
    clock.advance(STAGE_VALID_TIMEOUT_MS / 1000 - 0.1)
    assert not core.handshake_late(clock.seconds())
    clock.advance(0.1)
    assert core.handshake_late(clock.seconds())
    feed(core, "got_hello", HELLO)
    assert not core.handshake_late(clock.seconds())


def test_reading_stops_while_any_reason_holds():
    clock = Clock()
    core = connection_in("attached", clock)
    core.pause(UNREAD)
    core.pause()
    assert core.transport.producerState == "paused" and core.unread
    core.resume(UNREAD)
    assert core.transport.producerState == "paused" and not core.unread
    assert core.session.flushed == 1  # what the session held meanwhile
    core.resume()
    assert core.transport.producerState == "producing"


def test_a_silent_connection_neither_pauses_nor_resumes_its_transport():
    core = connection_in("attached", Clock())
    feed(core, "ttl_expired")
    core.pause()
    core.resume()
    assert core.transport.producerState == "producing"


# -- serving: the attached connection's frames without Automat's transition -------------


@pytest.mark.parametrize("state", BETWEEN_FRAMES)
def test_a_connection_serves_frames_directly_only_while_attached(state):
    # The listener hands a frame straight to serve while core.serving
    # (ListenerProtocol.tell): it must say exactly what the machine's
    # state would.
    assert connection_in(state, Clock()).serving == (state == "attached")


@pytest.mark.parametrize("name, args", [("protocol_error", (f.BAD_COMMAND, "x")),
                                        ("ttl_expired", ()), ("taken_over", ()),
                                        ("session_ended", ()), ("connection_lost", ())])
def test_a_connection_leaving_attached_no_longer_serves_directly(name, args):
    assert not feed_in("attached", Clock(), name, *args).serving
