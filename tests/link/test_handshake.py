"""
One end of a routing link at a time, driven by a test that plays the peer.

Each test builds a L{LinkProtocol} with the real factories over a
L{StringTransport}, with a L{Clock} for time, a real L{LinkRegistry},
a recording engine (L{fakes.RecordingEngine}) and L{EventLog}.  The test is the remote router: it
writes encoded frames into C{dataReceived}, decodes what the link wrote,
and moves time by hand.  No sockets, no reactor, no sleeping.

How a close is observed:

  - the transport: C{loseConnection} sets C{disconnecting};
    C{abortConnection} sets C{disconnected} as well;
  - the event log: a C{link.closed} record with its C{reason}, emitted when
    the connection is gone, which the test simulates by calling
    C{connectionLost} itself (L{PeerSide.complete_close}).

Sections: fixtures and the L{PeerSide} helpers; happy paths; stage timers;
rejections by the listener; rejections seen by the connector; keepalive;
bad input; shutdown; the registry.
"""

import struct

import msgpack
import pytest

from meshroute import events
from meshroute.link import auth, handshake, reasons, stages
from meshroute.wire.codec import DEFAULT_MAX_FRAME_SIZE, encode
from meshroute.wire.frames import (
    CHALLENGE_SIZE,
    Ack,
    Authenticate,
    Authenticated,
    FastTransfer,
    FastTransferBatch,
    Hello,
    Keepalive,
    Recovery,
    Reject,
    Transfer,
    TransferBatch,
    Welcome,
)
from support.link_peer import (  # noqa: F401 (router: a fixture)
    LOCAL,
    REMOTE,
    SECRET,
    STAGE_TIMEOUT_MS,
    KEEPALIVE_MS,
    EPSILON,
    STAGE_TIMEOUT,
    REJECT_DELAY,
    KEEPALIVE,
    Router,
    _Probe,
    router,
    PeerSide,
    ConnectorPeer,
    ListenerPeer,
    peer_for,
)

# -- happy paths ---------------------------------------------------------


def test_listener_happy_path(router):
    peer = router.listener()
    assert peer.stages() == ["connect"]
    assert peer.written() == []  # the connector speaks first

    peer.hello()
    (welcome,) = peer.expect(Welcome)
    assert welcome.version == 2
    assert welcome.router == LOCAL
    assert welcome.keepalive_interval_ms == KEEPALIVE_MS
    assert len(welcome.challenge) == CHALLENGE_SIZE
    peer.welcome = welcome
    assert not router.holds(REMOTE)  # not before the peer proved the secret

    peer.authenticate()
    assert router.holds(REMOTE)
    authenticated, recovery = peer.expect(Authenticated, Recovery)
    assert authenticated.proof == peer.expected_listener_proof()
    assert recovery == Recovery(router.engine.last_received(REMOTE))
    assert recovery.last_received == 0

    peer.send(Recovery(17))
    assert peer.stages() == ["connect", "authentication", "recovery", "delivery"]
    assert all(r["peer"] == REMOTE for r in peer.events(events.LINK_STAGE)[1:])
    assert all(r["direction"] == "listener" for r in peer.events(events.LINK_STAGE))
    (delivery,) = [r for r in peer.events(events.LINK_STAGE) if r["stage"] == "delivery"]
    assert delivery["keepalive_interval_ms"] == KEEPALIVE_MS

    described = peer.link.describe()
    assert described["stage"] == "delivery"
    assert described["peer"] == REMOTE
    assert described["direction"] == "listener"
    assert described["peer_last_received"] == 17
    assert described["keepalive_interval_ms"] == KEEPALIVE_MS
    assert described["keepalive_counter"] == 5
    assert router.engine.reported_by(REMOTE) == 17
    assert router.holds(REMOTE)
    assert router.registry.links() == [peer.link]
    assert peer.how_closed == "open"
    assert router.events(events.LINK_REJECTED) == []


def test_listener_accepts_frames_split_across_reads(router):
    """
    TCP may cut frames anywhere: feeding the handshake one byte at a time
    reaches the same place.
    """
    peer = router.listener()
    data = encode(Hello([2], REMOTE))
    for i in range(len(data)):
        peer.protocol.dataReceived(data[i : i + 1])
    (peer.welcome,) = peer.expect(Welcome)
    data = encode(Authenticate(peer.proof(), peer.challenge)) + encode(Recovery(3))
    for i in range(len(data)):
        peer.protocol.dataReceived(data[i : i + 1])
    peer.expect(Authenticated, Recovery)
    assert peer.core.stage == stages.DELIVERY
    assert peer.core.peer_last_received == 3


@pytest.mark.parametrize(
    "ours, theirs, chosen",
    [
        ((1,), [1, 99], 1),
        ((1,), [99, 1], 1),
        ((1, 2), [1], 1),
        ((1, 2), [1, 2, 3], 2),
        ((1, 2), [2], 2),
    ],
)
def test_listener_welcomes_with_newest_common_version(router, monkeypatch, ours, theirs, chosen):
    monkeypatch.setattr(handshake, "SUPPORTED_VERSIONS", ours)
    peer = router.listener()
    peer.hello(versions=theirs)
    (welcome,) = peer.expect(Welcome)
    assert welcome.version == chosen
    assert peer.core.version == chosen


def test_connector_happy_path(router):
    peer = router.connector()
    (hello,) = peer.expect(Hello)
    assert hello == Hello([2, 3, 4], LOCAL)
    assert peer.stages() == ["connect"]

    authenticate = peer.welcome_answered(keepalive_ms=200)
    assert len(authenticate.challenge) == CHALLENGE_SIZE
    assert authenticate.proof == peer.expected_connector_proof()
    assert not router.holds(REMOTE)  # not before the listener proved the secret

    peer.authenticated()
    assert router.holds(REMOTE)
    (recovery,) = peer.expect(Recovery)
    assert recovery.last_received == router.engine.last_received(REMOTE) == 0
    assert peer.deliveries == []

    peer.send(Recovery(42))
    assert peer.stages() == ["connect", "authentication", "recovery", "delivery"]
    assert all(r["direction"] == "connector" for r in peer.events(events.LINK_STAGE))
    assert peer.deliveries == [1]
    described = peer.link.describe()
    assert described["stage"] == "delivery"
    assert described["peer_last_received"] == 42
    assert router.engine.reported_by(REMOTE) == 42

    # The connector adopts the listener's keepalive interval.
    assert described["keepalive_interval_ms"] == 200
    peer.advance(0.2 - EPSILON)
    assert peer.written() == []
    peer.advance(EPSILON)
    assert peer.written() == [Keepalive()]
    assert peer.how_closed == "open"


def test_connector_handles_authenticated_and_recovery_in_one_read(router):
    """
    The listener writes Authenticated and Recovery back to back; they often
    arrive together.
    """
    peer = router.connector()
    peer.expect(Hello)
    peer.welcome_answered()
    peer.send(Authenticated(peer.proof()), Recovery(5))
    peer.expect(Recovery)
    assert peer.core.stage == stages.DELIVERY
    assert peer.core.peer_last_received == 5


# -- stage timers --------------------------------------------------------


STAGES = ["connect", "authentication", "recovery"]


def _listener_step(peer: ConnectorPeer, into: str) -> None:
    """
    Answer what the listener waits for, moving it into stage C{into}.
    """
    if into == "authentication":
        peer.hello_welcomed()
    elif into == "recovery":
        peer.authenticate()
        peer.expect(Authenticated, Recovery)


def _connector_step(peer: ListenerPeer, into: str) -> None:
    """
    Answer what the connector waits for, moving it into stage C{into}.
    """
    if into == "authentication":
        peer.welcome_answered()
    elif into == "recovery":
        peer.authenticated()
        peer.expect(Recovery)


def _drive(peer: PeerSide, stage: str, pause: float = 0.0) -> None:
    """
    Take a fresh link to C{stage}, spending C{pause} seconds in each
    earlier stage.
    """
    if isinstance(peer, ListenerPeer):
        peer.expect(Hello)
        step = _connector_step
    else:
        step = _listener_step
    for into in STAGES[1 : STAGES.index(stage) + 1]:
        peer.advance(pause)
        step(peer, into)
    assert peer.core.stage == stage


@pytest.mark.parametrize("stage", STAGES)
@pytest.mark.parametrize("direction", ["listener", "connector"])
def test_stage_timer_closes_at_exactly_stage_valid_timeout(router, direction, stage):
    """
    Each stage restarts the timer: time spent in earlier stages (2 s each
    here) does not count against the current one.
    """
    peer = peer_for(router, direction)
    _drive(peer, stage, pause=2.0)
    entered = router.clock.seconds()

    peer.advance(STAGE_TIMEOUT - EPSILON)
    assert peer.how_closed == "open"
    peer.advance(EPSILON)
    assert router.clock.seconds() == entered + STAGE_TIMEOUT

    record = peer.assert_closed(reasons.STAGE_TIMEOUT, "abort")
    assert record["stage"] == stage
    assert record["time"] == entered + STAGE_TIMEOUT
    assert peer.written() == []  # no Reject, no farewell: just dropped


def test_silent_tcp_peer_is_dropped_after_stage_valid_timeout(router):
    peer = router.listener()
    peer.advance(STAGE_TIMEOUT - EPSILON)
    assert peer.how_closed == "open"
    peer.advance(EPSILON)
    record = peer.assert_closed(reasons.STAGE_TIMEOUT, "abort")
    assert record["stage"] == "connect"
    assert record["peer"] is None
    assert record["last_heard"] is None
    assert router.registry.links() == []


@pytest.mark.parametrize("direction", ["listener", "connector"])
def test_no_stage_timer_in_delivery(router, direction):
    peer = peer_for(router, direction)
    peer.to_delivery()
    for _ in range(int(4 * STAGE_TIMEOUT / KEEPALIVE)):
        peer.send(Keepalive())
        peer.advance(KEEPALIVE)
    assert peer.how_closed == "open"
    assert peer.core.stage == stages.DELIVERY
    (pending,) = router.clock.getDelayedCalls()  # the next keepalive, nothing else
    assert pending.getTime() == pytest.approx(router.clock.seconds() + KEEPALIVE, abs=1e-6)
    peer.complete_close()
    assert peer.closed_record()["reason"] == reasons.PEER_CLOSED


@pytest.mark.parametrize("direction", ["listener", "connector"])
def test_a_full_transport_pauses_the_delivery_channel(router, direction):
    """
    The link protocol is its transport's streaming producer: a pause or a
    resume of the transport reaches the delivery stage's channel.
    """
    peer = peer_for(router, direction)
    assert peer.transport.producer is peer.protocol
    assert peer.transport.streaming
    peer.protocol.pauseProducing()  # before delivery: nothing to pause
    peer.protocol.resumeProducing()
    peer.to_delivery()
    channel = router.engine.channels[REMOTE]
    peer.protocol.pauseProducing()
    assert channel.paused
    peer.protocol.resumeProducing()
    assert not channel.paused


def test_no_stage_timer_while_waiting_to_disconnect_a_rejected_peer(router):
    """
    After a Reject only reject-disconnect-delay counts, even when it is
    longer than stage-valid-timeout.
    """
    peer = router.listener(reject_disconnect_delay_ms=2 * STAGE_TIMEOUT_MS)
    peer.hello(router=LOCAL)
    peer.expect(Reject)
    peer.advance(2 * STAGE_TIMEOUT - EPSILON)
    assert peer.how_closed == "open"
    peer.advance(EPSILON)
    peer.assert_closed(reasons.REJECTED, "lose")


# -- rejections by the listener ------------------------------------------


def _pretend_claimed(router: Router) -> None:
    assert router.registry.claim(REMOTE, _Probe(REMOTE))


REJECTIONS = [
    pytest.param({}, {"router": LOCAL}, None, reasons.OWN_NAME, id="own-name"),
    pytest.param({}, {}, _pretend_claimed, reasons.NAME_IN_USE, id="name-in-use"),
    pytest.param({}, {"versions": [99]}, None, reasons.VERSION, id="version"),
    pytest.param({}, {"versions": []}, None, reasons.VERSION, id="no-versions"),
    pytest.param(
        {"allowed_routers": frozenset({"router-c"})}, {}, None, reasons.NOT_ALLOWED,
        id="not-allowed",
    ),
    pytest.param({}, {"router": "bad name!"}, None, reasons.NOT_ALLOWED, id="malformed-name"),
    pytest.param({}, {"router": ""}, None, reasons.NOT_ALLOWED, id="empty-name"),
    pytest.param({}, {"router": "x" * 65}, None, reasons.NOT_ALLOWED, id="long-name"),
]


@pytest.mark.parametrize("settings, hello, setup, code", REJECTIONS)
def test_listener_rejects_hello(router, settings, hello, setup, code):
    if setup is not None:
        setup(router)
    peer = router.listener(**settings)
    peer.advance(0.5)  # the delay counts from the Reject, not the connection
    peer.hello(**hello)

    (reject,) = peer.expect(Reject)
    assert reject.code == code
    assert reject.detail
    (rejected,) = peer.events(events.LINK_REJECTED)
    assert rejected["code"] == code
    assert rejected["by"] == "local"
    assert rejected["direction"] == "listener"

    peer.advance(REJECT_DELAY - EPSILON)
    assert peer.how_closed == "open"
    peer.advance(EPSILON)
    record = peer.assert_closed(reasons.REJECTED, "lose")
    assert record["time"] == 0.5 + REJECT_DELAY
    assert record["stage"] == "connect"
    assert record["detail"] == code
    assert peer.stages() == ["connect"]
    assert peer.written() == []


def test_listener_rejects_wrong_proof(router):
    peer = router.listener()
    peer.hello_welcomed()
    peer.advance(0.5)
    peer.authenticate(secret=b"not the shared secret")

    (reject,) = peer.expect(Reject)
    assert reject.code == reasons.AUTH_FAILED
    (rejected,) = peer.events(events.LINK_REJECTED)
    assert (rejected["code"], rejected["by"], rejected["peer"]) == (
        reasons.AUTH_FAILED, "local", REMOTE,
    )
    peer.advance(REJECT_DELAY - EPSILON)
    assert peer.how_closed == "open"
    peer.advance(EPSILON)
    record = peer.assert_closed(reasons.REJECTED, "lose")
    assert record["stage"] == "authentication"
    assert record["time"] == 0.5 + REJECT_DELAY
    assert record["detail"] == reasons.AUTH_FAILED
    assert not router.holds(REMOTE)  # the failed link gave the name back


def test_listener_rejects_proof_replayed_for_another_name(router):
    """
    A proof is bound to the names: one valid for router-c does not let
    its holder in as router-b.
    """
    peer = router.listener()
    peer.hello_welcomed()
    stolen = auth.proof(SECRET, "connector", "router-c", LOCAL, peer.challenge,
                        peer.welcome.challenge)
    peer.send(Authenticate(stolen, peer.challenge))
    (reject,) = peer.expect(Reject)
    assert reject.code == reasons.AUTH_FAILED


def test_rejected_listener_ignores_further_frames(router):
    peer = router.listener()
    peer.hello(router=LOCAL)
    peer.expect(Reject)
    peer.send(Hello([2], REMOTE), Keepalive())
    peer.protocol.dataReceived(b"\xff\xff\xff\xff garbage")
    assert peer.written() == []
    assert peer.how_closed == "open"
    peer.advance(REJECT_DELAY)
    peer.assert_closed(reasons.REJECTED, "lose")


def test_rejected_peer_that_leaves_first_is_still_recorded_as_rejected(router):
    """
    A connector closes as soon as it reads the Reject, usually before the
    listener's reject-disconnect-delay runs out.
    """
    peer = router.listener()
    peer.hello(router=LOCAL)
    peer.expect(Reject)
    peer.complete_close()
    record = peer.closed_record()
    assert record["reason"] == reasons.REJECTED
    assert peer.how_closed == "open"  # the peer closed, not us
    peer.advance(REJECT_DELAY)  # the cancelled delay does nothing
    assert len(peer.events(events.LINK_CLOSED)) == 1


# -- rejections seen by the connector ------------------------------------


@pytest.mark.parametrize("stage", ["connect", "authentication"])
def test_connector_rejected_by_listener(router, stage):
    peer = router.connector()
    peer.expect(Hello)
    code = reasons.NAME_IN_USE if stage == "connect" else reasons.AUTH_FAILED
    if stage == "authentication":
        peer.welcome_answered()
    peer.send(Reject(code, "go away"))

    (rejected,) = peer.events(events.LINK_REJECTED)
    assert (rejected["code"], rejected["detail"], rejected["by"]) == (code, "go away", "peer")
    assert peer.written() == []  # no Reject back
    record = peer.assert_closed(reasons.REJECTED, "lose")
    assert record["detail"] == code
    assert record["stage"] == stage
    assert peer.deliveries == []
    assert not router.holds(REMOTE)


@pytest.mark.parametrize(
    "welcome, code",
    [
        pytest.param({"router": "router-z"}, reasons.UNEXPECTED_PEER, id="unexpected-peer"),
        pytest.param({"version": 99}, reasons.VERSION, id="version"),
    ],
)
def test_connector_refuses_welcome(router, welcome, code):
    peer = router.connector()
    peer.expect(Hello)
    peer.welcome(**welcome)

    (reject,) = peer.expect(Reject)
    assert reject.code == code
    (rejected,) = peer.events(events.LINK_REJECTED)
    assert (rejected["code"], rejected["by"]) == (code, "local")
    record = peer.assert_closed(reasons.REJECTED, "lose")  # at once, no delay
    assert record["detail"] == code
    assert record["stage"] == "connect"
    assert not router.holds(REMOTE)
    assert not router.holds("router-z")


def test_connector_refuses_when_name_in_use(router):
    _pretend_claimed(router)
    peer = router.connector()
    peer.expect(Hello)
    peer.welcome()
    (reject,) = peer.expect(Reject)
    assert reject.code == reasons.NAME_IN_USE
    peer.assert_closed(reasons.REJECTED, "lose")
    assert router.holds(REMOTE)  # still the other link's


def test_connector_refuses_wrong_listener_proof(router):
    peer = router.connector()
    peer.expect(Hello)
    peer.welcome_answered()
    peer.authenticated(secret=b"not the shared secret")

    (reject,) = peer.expect(Reject)
    assert reject.code == reasons.AUTH_FAILED
    (rejected,) = peer.events(events.LINK_REJECTED)
    assert (rejected["code"], rejected["by"]) == (reasons.AUTH_FAILED, "local")
    record = peer.assert_closed(reasons.REJECTED, "lose")
    assert record["stage"] == "authentication"
    assert peer.deliveries == []


def test_connector_refuses_reflected_connector_proof(router):
    """
    A listener that only echoes the connector's own proof back has not
    shown it knows the secret.
    """
    peer = router.connector()
    peer.expect(Hello)
    authenticate = peer.welcome_answered()
    peer.send(Authenticated(authenticate.proof))
    (reject,) = peer.expect(Reject)
    assert reject.code == reasons.AUTH_FAILED


# -- keepalive -----------------------------------------------------------


@pytest.mark.parametrize("interval_ms", [KEEPALIVE_MS, 200])
@pytest.mark.parametrize("direction", ["listener", "connector"])
def test_silent_peer_closed_at_exactly_five_keepalive_intervals(router, direction, interval_ms):
    if direction == "listener":
        peer = router.listener(keepalive_interval_ms=interval_ms)
        peer.to_delivery()
    else:
        peer = router.connector()
        peer.to_delivery(keepalive_ms=interval_ms)
    interval = interval_ms / 1000
    start = router.clock.seconds()

    for n in range(1, 5):
        peer.advance(interval)
        assert peer.written() == [Keepalive()]
        assert peer.link.describe()["keepalive_counter"] == 5 - n
    peer.advance(interval - EPSILON)
    assert peer.how_closed == "open"
    peer.advance(EPSILON)
    assert peer.written() == [Keepalive()]  # the fifth, then the close
    assert router.clock.seconds() == pytest.approx(start + 5 * interval)

    record = peer.assert_closed(reasons.KEEPALIVE, "abort")
    assert record["stage"] == "delivery"
    assert record["keepalive_interval_ms"] == interval_ms
    assert record["last_heard"] == start
    peer.advance(10 * interval)
    assert peer.written() == []  # the loop stopped


@pytest.mark.parametrize("direction", ["listener", "connector"])
def test_live_peer_keeps_link_up_for_100_intervals(router, direction):
    peer = peer_for(router, direction)
    peer.to_delivery()
    for _ in range(100):
        peer.send(Keepalive())
        peer.advance(KEEPALIVE)
        assert peer.written() == [Keepalive()]
        assert peer.link.describe()["keepalive_counter"] == 5
    assert peer.how_closed == "open"
    assert peer.core.last_heard == router.clock.seconds() - KEEPALIVE
    assert router.events(events.LINK_CLOSED) == []


def test_keepalive_counter_in_describe(router):
    peer = router.listener()
    assert peer.link.describe()["keepalive_counter"] is None  # not in delivery yet
    peer.to_delivery()
    assert peer.link.describe()["keepalive_counter"] == 5
    peer.send(Keepalive(), Keepalive())
    assert peer.link.describe()["keepalive_counter"] == 7
    peer.advance(KEEPALIVE)
    assert peer.link.describe()["keepalive_counter"] == 6
    assert peer.link.describe()["last_heard"] == 0.0


def test_keepalive_starts_only_in_delivery(router):
    peer = router.listener()
    peer.hello_welcomed()
    peer.advance(STAGE_TIMEOUT - EPSILON)
    assert peer.written() == []  # no keepalives before delivery


# -- bad input -----------------------------------------------------------


def _length(n: int) -> bytes:
    return struct.pack(">I", n)


GARBAGE = [
    pytest.param(_length(4) + b"\xc1\xc1\xc1\xc1", id="undecodable-body"),
    pytest.param(_length(3) + b"abc", id="trailing-data"),
    pytest.param(_length(DEFAULT_MAX_FRAME_SIZE + 1), id="oversized-length"),
    pytest.param(b"\xff\xff\xff\xff", id="huge-length"),
    pytest.param(_length(0), id="empty-frame"),
    pytest.param(_length(1) + msgpack.packb(7), id="body-not-an-array"),
    pytest.param(_length(2) + msgpack.packb([42]), id="unknown-frame-type"),
    pytest.param(b"GET / HTTP/1.1\r\n\r\n", id="http"),
]


@pytest.mark.parametrize("data", GARBAGE)
@pytest.mark.parametrize("direction", ["listener", "connector"])
def test_garbage_is_a_protocol_error(router, direction, data):
    peer = peer_for(router, direction)
    peer.written()
    peer.protocol.dataReceived(data)
    assert peer.written() == []
    record = peer.assert_closed(reasons.PROTOCOL_ERROR, "abort")
    assert record["stage"] == "connect"


def test_garbage_in_delivery_is_a_protocol_error(router):
    peer = router.listener()
    peer.to_delivery()
    peer.protocol.dataReceived(_length(DEFAULT_MAX_FRAME_SIZE + 1))
    record = peer.assert_closed(reasons.PROTOCOL_ERROR, "abort")
    assert record["stage"] == "delivery"
    assert not router.holds(REMOTE)


def test_a_protocol_error_log_names_the_remote_address(router, request):
    from twisted.logger import formatEvent, globalLogPublisher

    logged = []
    globalLogPublisher.addObserver(logged.append)
    request.addfinalizer(lambda: globalLogPublisher.removeObserver(logged.append))
    peer = router.listener()
    peer.protocol.dataReceived(b"GET / HTTP/1.1\r\n\r\n")
    peer.assert_closed(reasons.PROTOCOL_ERROR, "abort")
    [line] = [formatEvent(e) for e in logged if "protocol error" in e.get("log_format", "")]
    address = peer.transport.getPeer()
    assert f"from {address.host}:{address.port}" in line


def _drive_in(peer: PeerSide, stage: str) -> None:
    """
    Take a fresh link to C{stage}, delivery included.
    """
    if stage == "delivery":
        peer.to_delivery()
    else:
        _drive(peer, stage)


#: A message as transfer frames carry it.
ITEM = ["router-b:ab:1", REMOTE, LOCAL, "q", 1, 2.5, {}, b"body"]

OUT_OF_STAGE = [
    # (direction, stage, frame)
    ("listener", "connect", Keepalive()),
    ("listener", "connect", Recovery(0)),
    ("listener", "connect", Authenticate(b"p" * 32, b"c" * 32)),
    ("listener", "connect", Welcome(2, REMOTE, 1000, b"c" * 32)),
    ("listener", "authentication", Hello([2], REMOTE)),
    ("listener", "authentication", Recovery(0)),
    ("listener", "authentication", Keepalive()),
    ("listener", "recovery", Authenticate(b"p" * 32, b"c" * 32)),
    ("listener", "recovery", Keepalive()),
    ("listener", "delivery", Hello([2], REMOTE)),
    ("listener", "delivery", Recovery(0)),
    ("listener", "delivery", Reject("own-name", "late")),
    ("connector", "connect", Keepalive()),
    ("connector", "connect", Hello([2], REMOTE)),
    ("connector", "connect", Authenticated(b"p" * 32)),
    ("connector", "authentication", Welcome(2, REMOTE, 1000, b"c" * 32)),
    ("connector", "authentication", Recovery(0)),
    ("connector", "recovery", Authenticated(b"p" * 32)),
    ("connector", "delivery", Welcome(2, REMOTE, 1000, b"c" * 32)),
    ("connector", "delivery", Recovery(0)),
    ("listener", "recovery", TransferBatch(1, [ITEM, ITEM])),
    ("listener", "authentication", Transfer(1, *ITEM)),
    ("connector", "recovery", FastTransferBatch([ITEM, ITEM])),
    ("connector", "recovery", Ack(1)),
]


@pytest.mark.parametrize(
    "direction, stage, frame",
    [pytest.param(*case, id=f"{case[0]}-{case[1]}-{type(case[2]).__name__}")
     for case in OUT_OF_STAGE],
)
def test_frame_out_of_stage_is_a_protocol_error(router, direction, stage, frame):
    peer = peer_for(router, direction)
    _drive_in(peer, stage)
    peer.written()
    before = peer.link.describe()

    peer.send(frame)
    assert peer.written() == []
    assert peer.link.describe() == before  # the frame changed nothing
    record = peer.assert_closed(reasons.PROTOCOL_ERROR, "abort")
    assert record["stage"] == stage
    assert type(frame).__name__ in record["detail"]


def test_frames_after_an_out_of_stage_frame_are_ignored(router):
    peer = router.listener()
    peer.send(Keepalive(), Hello([2], REMOTE))
    assert peer.written() == []  # no Welcome for the Hello behind the bad frame
    assert not router.holds(REMOTE)
    peer.assert_closed(reasons.PROTOCOL_ERROR, "abort")


ILL_TYPED = [
    # (direction, stage, frame body)
    ("listener", "connect", [Hello.TYPE, [2], 5]),
    ("listener", "connect", [Hello.TYPE, ["1"], REMOTE]),
    ("listener", "connect", [Hello.TYPE, [True], REMOTE]),
    ("listener", "connect", [Hello.TYPE, 1, REMOTE]),
    ("listener", "connect", [Hello.TYPE, [2]]),
    ("listener", "connect", [Hello.TYPE, [2], REMOTE, "extra"]),
    ("listener", "authentication", [Authenticate.TYPE, "proof", b"c" * 32]),
    ("listener", "authentication", [Authenticate.TYPE, b"p" * 32, b"short"]),
    ("listener", "recovery", [Recovery.TYPE, "0"]),
    ("listener", "recovery", [Recovery.TYPE, 1.5]),
    ("connector", "connect", [Welcome.TYPE, 2, REMOTE, True, b"c" * 32]),
    ("connector", "connect", [Welcome.TYPE, 2, REMOTE, 0, b"c" * 32]),
    ("connector", "connect", [Welcome.TYPE, 2, REMOTE, 1000, b"c" * 31]),
    ("connector", "connect", [Welcome.TYPE, "1", REMOTE, 1000, b"c" * 32]),
    ("connector", "authentication", [Authenticated.TYPE, "proof"]),
    ("connector", "connect", [Reject.TYPE, 3, "detail"]),
]


@pytest.mark.parametrize(
    "direction, stage, body",
    [pytest.param(*case, id=f"{case[0]}-{case[1]}-{i}") for i, case in enumerate(ILL_TYPED)],
)
def test_wrong_field_types_are_a_protocol_error(router, direction, stage, body):
    peer = peer_for(router, direction)
    _drive_in(peer, stage)
    peer.written()
    peer.send_raw(body)
    assert peer.written() == []
    record = peer.assert_closed(reasons.PROTOCOL_ERROR, "abort")
    assert record["stage"] == stage
    assert router.events(events.LINK_REJECTED) == []
    assert peer.core.keepalive is None


@pytest.mark.parametrize("direction", ["listener", "connector"])
def test_truncated_frame_then_connection_lost(router, direction):
    peer = peer_for(router, direction)
    peer.written()
    peer.protocol.dataReceived(encode(Welcome(2, REMOTE, 1000, b"c" * 32))[:-3])
    assert peer.how_closed == "open"  # waiting for the rest
    peer.complete_close()
    record = peer.closed_record()
    assert record["reason"] == reasons.PROTOCOL_ERROR
    assert record["detail"] == "truncated frame"
    assert peer.how_closed == "open"  # the peer went away; we aborted nothing


@pytest.mark.parametrize("direction", ["listener", "connector"])
def test_peer_closing_cleanly_is_peer_closed(router, direction):
    peer = peer_for(router, direction)
    peer.to_delivery()
    peer.complete_close()
    assert peer.closed_record()["reason"] == reasons.PEER_CLOSED
    assert not router.holds(REMOTE)
    peer.advance(10 * KEEPALIVE)
    assert peer.written() == []  # keepalive stopped with the connection


def test_broken_link_leaves_other_links_alone(router):
    broken = router.listener()
    healthy = router.listener()
    healthy.hello_welcomed()

    broken.protocol.dataReceived(b"\x00\x00\x00\x02\xc1\xc1")
    broken.assert_closed(reasons.PROTOCOL_ERROR, "abort")

    healthy.authenticate()
    healthy.expect(Authenticated, Recovery)
    healthy.send(Recovery(0))
    assert healthy.core.stage == stages.DELIVERY
    assert healthy.how_closed == "open"
    assert router.registry.links() == [healthy.link]
    assert router.holds(REMOTE)
    assert healthy.events(events.LINK_CLOSED) == []


# -- shutdown ------------------------------------------------------------


@pytest.mark.parametrize("stage", ["connect", "authentication", "recovery", "delivery"])
@pytest.mark.parametrize("direction", ["listener", "connector"])
def test_shutdown(router, direction, stage):
    peer = peer_for(router, direction)
    _drive_in(peer, stage)
    peer.written()
    peer.link.shutdown()
    assert peer.written() == []
    record = peer.assert_closed(reasons.SHUTDOWN, "lose")
    assert record["stage"] == stage
    peer.advance(2 * STAGE_TIMEOUT, step=KEEPALIVE)
    assert peer.written() == []
    assert len(peer.events(events.LINK_CLOSED)) == 1


def test_shutdown_while_waiting_to_disconnect_a_rejected_peer(router):
    """
    Shutdown closes at once, but the refusal stays the reason the link ended.
    """
    peer = router.listener()
    peer.hello(router=LOCAL)
    peer.expect(Reject)
    peer.link.shutdown()
    record = peer.assert_closed(reasons.REJECTED, "lose")
    assert record["detail"] == reasons.OWN_NAME


def test_close_all_fires_when_every_link_is_gone(router):
    first, second = router.listener(), router.connector()
    first.to_delivery()
    done = router.registry.close_all()
    assert (first.how_closed, second.how_closed) == ("lose", "lose")
    fired = []
    done.addCallback(fired.append)
    first.complete_close()
    assert fired == []
    second.complete_close()
    assert len(fired) == 1
    assert router.registry.links() == []
    assert {r["reason"] for r in router.events(events.LINK_CLOSED)} == {reasons.SHUTDOWN}


# -- the registry --------------------------------------------------------


def test_name_is_connected_only_once_and_released_on_close(router):
    first = router.listener()
    first.to_delivery()

    second = router.listener()
    second.hello()
    (reject,) = second.expect(Reject)
    assert reject.code == reasons.NAME_IN_USE
    second.advance(REJECT_DELAY)
    second.assert_closed(reasons.REJECTED, "lose")
    assert router.holds(REMOTE)  # the rejected link did not release it
    assert first.how_closed == "open"

    first.complete_close()
    assert first.closed_record()["reason"] == reasons.PEER_CLOSED
    assert not router.holds(REMOTE)

    third = router.listener()
    third.to_delivery()
    assert router.registry.links() == [third.link]


def test_name_is_claimed_only_once_authenticated(router):
    """
    A connection that has only said Hello holds nothing, so a client that
    does not know the secret cannot squat a router's name.  The first link
    to authenticate claims the name; one authenticating later is refused,
    and once the first is gone the name is free again.
    """
    squatter = router.listener()
    squatter.hello_welcomed()
    assert not router.holds(REMOTE)

    first = router.listener()
    first.to_delivery()
    assert router.holds(REMOTE)

    squatter.authenticate()
    assert squatter.expect(Reject)[0].code == reasons.NAME_IN_USE
    assert router.registry.is_claimed(REMOTE)

    late = router.listener()
    late.hello()
    assert late.expect(Reject)[0].code == reasons.NAME_IN_USE  # refused early

    first.link.shutdown()
    first.assert_closed(reasons.SHUTDOWN, "lose")
    assert not router.holds(REMOTE)
    again = router.listener()
    again.to_delivery()
    assert router.holds(REMOTE)


def test_connector_releases_name_on_close(router):
    first = router.connector()
    first.to_delivery()
    assert router.holds(REMOTE)
    first.link.shutdown()
    first.assert_closed(reasons.SHUTDOWN, "lose")
    assert not router.holds(REMOTE)

    second = router.connector()
    second.to_delivery()
    assert second.deliveries == [1]


# -- delivery's data frames ---------------------------------------------------------


class _InputsSeen:
    """
    Stands in front of a link's machine and records the inputs it is fed.
    """

    def __init__(self, machine) -> None:
        self._machine = machine
        self.inputs: list[str] = []

    def __getattr__(self, name: str):
        self.inputs.append(name)
        return getattr(self._machine, name)


def _to_delivery_at(peer: ConnectorPeer, versions) -> None:
    peer.hello(versions=versions)
    (peer.welcome,) = peer.expect(Welcome)
    peer.authenticate()
    peer.expect(Authenticated, Recovery)
    peer.send(Recovery(0))
    assert peer.core.stage == stages.DELIVERY


DATA_FRAMES = [Transfer(1, *ITEM), TransferBatch(2, [ITEM, ITEM]), Ack(0),
               FastTransfer(*ITEM), FastTransferBatch([ITEM, ITEM])]


def test_delivery_data_frames_go_to_the_channel_without_the_machine(router):
    """
    In delivery (version 4) every data frame reaches the channel, and
    counts as hearing the peer, without a machine input; the machine
    still takes the others (a keepalive).
    """
    peer = router.listener()
    _to_delivery_at(peer, (2, 3, 4))
    assert peer.core.version == 4
    seen = peer.link.machine = _InputsSeen(peer.link.machine)
    peer.advance(0.5)
    peer.send(*DATA_FRAMES)
    assert router.engine.channels[REMOTE].frames == DATA_FRAMES
    assert peer.core.last_heard == peer.clock.seconds()
    assert seen.inputs == []
    peer.send(Keepalive())
    assert seen.inputs == ["got_keepalive"]


def test_batch_frames_on_a_version_3_link_are_a_protocol_error(router):
    peer = router.listener()
    _to_delivery_at(peer, (2, 3))
    assert peer.core.version == 3
    peer.send(Transfer(1, *ITEM), TransferBatch(2, [ITEM, ITEM]), Ack(0))
    assert router.engine.channels[REMOTE].frames == [Transfer(1, *ITEM)]
    record = peer.assert_closed(reasons.PROTOCOL_ERROR, "abort")
    assert "TransferBatch frame not expected at version 3" in record["detail"]


def test_data_frames_after_the_link_left_delivery_are_moot(router):
    """
    Once the machine has left delivery (here: the store failed), data
    frames no longer reach the channel.
    """
    peer = router.listener()
    _to_delivery_at(peer, (2, 3, 4))
    peer.link.machine.store_failed("disk full")
    peer.send(*DATA_FRAMES)
    assert router.engine.channels[REMOTE].frames == []
    peer.assert_closed(reasons.STORE_FAILED, "abort")
