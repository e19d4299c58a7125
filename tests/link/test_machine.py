"""
The link's machines (L{meshroute.link.machine}), one end of a link at a
time, driven by a test that plays the peer: the stages in order, the
stage timers, the keepalive, frames that are not valid in a stage, and
shutdown.

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

Sections: happy paths; stage timers; keepalive; bad input; shutdown.  The
handshake's checks are tested in L{test_handshake}, the link's protocol
(bytes in, backpressure, delivery's data frames) in L{test_link}.
"""

import pytest

from meshroute import events
from meshroute.link import reasons, stages
from meshroute.wire.frames import (
    CHALLENGE_SIZE,
    SUPPORTED_VERSIONS,
    Ack,
    Authenticate,
    Authenticated,
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
    STAGE_TIMEOUT_MS,
    KEEPALIVE_MS,
    EPSILON,
    STAGE_TIMEOUT,
    KEEPALIVE,
    router,
    PeerSide,
    ConnectorPeer,
    ListenerPeer,
    ITEM,
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


def test_connector_happy_path(router):
    peer = router.connector()
    (hello,) = peer.expect(Hello)
    assert hello == Hello(list(SUPPORTED_VERSIONS), LOCAL)
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
def test_peer_closing_cleanly_is_peer_closed(router, direction):
    peer = peer_for(router, direction)
    peer.to_delivery()
    peer.complete_close()
    assert peer.closed_record()["reason"] == reasons.PEER_CLOSED
    assert not router.holds(REMOTE)
    peer.advance(10 * KEEPALIVE)
    assert peer.written() == []  # keepalive stopped with the connection


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
