"""
Tests for L{meshroute.link.connector}: the reconnecting routing connector.

A L{task.Clock} and a fake client endpoint stand in for the reactor: every
connection attempt is recorded with the clock time it was made, and the
test decides whether it is refused or connected (to a L{StringTransport},
where the test plays the listener's side of the handshake).  This shows
that attempts follow the L{RetrySchedule}, that exhaustion is logged,
recorded in the event log and final, and that only a link that reaches
delivery starts the schedule over.
"""

import pytest
from twisted.internet.task import Clock

from meshroute.events import EventLog, read_events
from meshroute.link import auth
from meshroute.events import CONNECTOR_EXHAUSTED
from meshroute.link.connector import ConnectorService
from meshroute.link.context import RouterContext
from meshroute.link.settings import ConnectorSettings
from meshroute.link.stages import DELIVERY
from support.fakes import RecordingEngine
from meshroute.link.registry import LinkRegistry
from meshroute.link.retry import RetrySchedule
from meshroute.link.rotation import EndpointRotation
from meshroute.wire.frames import (
    SUPPORTED_VERSIONS,
    Authenticate,
    Authenticated,
    Hello,
    Keepalive,
    Recovery,
    Reject,
    Welcome,
)
from support.connector_testing import (
    SECRET,
    OWN,
    PEER,
    LISTENER_CHALLENGE,
    STAGE_TIMEOUT_MS,
    Attempt,
    FakeEndpoint,
)

class Harness:
    """
    A L{ConnectorService} with its clock, endpoint, schedule and event log.
    """

    def __init__(self, tmp_path, interval=1000, multiplier=2.0, maximum=4000, attempts=-1):
        self.clock = Clock()
        self.data_dir = str(tmp_path)
        self.events = EventLog(self.data_dir, OWN, self.clock)
        self.context = RouterContext(
            name=OWN,
            clock=self.clock,
            events=self.events,
            registry=LinkRegistry(),
            engine=RecordingEngine(),
        )
        self.settings = ConnectorSettings(
            secret=SECRET, expected_peer=PEER, stage_valid_timeout_ms=STAGE_TIMEOUT_MS
        )
        self.endpoint = FakeEndpoint(self.clock)
        self.schedule = RetrySchedule(interval, multiplier, maximum, attempts)
        self.service = ConnectorService(
            self.context, self.settings, EndpointRotation([("fake", self.endpoint)]),
            self.schedule, self.clock
        )

    def run_refusing(self, until: float, step: float = 0.5) -> None:
        """
        Advance the clock to C{until} in steps, refusing every attempt.
        """
        self._refuse_pending()
        while self.clock.seconds() < until:
            self.clock.advance(step)
            self._refuse_pending()

    def _refuse_pending(self) -> None:
        for attempt in self.endpoint.attempts:
            if attempt.pending:
                attempt.refuse()
                # Run what the refusal scheduled for "now" (giving up).
                self.clock.advance(0)

    def recorded(self, event: str) -> list[dict]:
        self.context.events.flush()
        return [r for r in read_events(self.data_dir) if r["event"] == event]


@pytest.fixture
def harness(tmp_path):
    h = Harness(tmp_path)
    yield h
    h.events.close()


def make(tmp_path, request, **kw) -> Harness:
    h = Harness(tmp_path, **kw)
    request.addfinalizer(h.events.close)
    return h


def reach_delivery(attempt: Attempt) -> None:
    """
    Play the listener's side of a good handshake on a connected attempt.
    """
    assert attempt.sent() == [Hello(list(SUPPORTED_VERSIONS), OWN)]
    attempt.write(Welcome(2, PEER, 1000, LISTENER_CHALLENGE))
    [authenticate] = attempt.sent()
    assert isinstance(authenticate, Authenticate)
    connector_challenge = authenticate.challenge
    assert authenticate.proof == auth.proof(
        SECRET, "connector", OWN, PEER, connector_challenge, LISTENER_CHALLENGE
    )
    attempt.write(
        Authenticated(
            auth.proof(SECRET, "listener", OWN, PEER, connector_challenge, LISTENER_CHALLENGE)
        )
    )
    assert attempt.sent() == [Recovery(0)]
    attempt.write(Recovery(0))
    assert attempt.protocol.link.core.stage == DELIVERY


def exhausted_errors(observe_errors) -> list[dict]:
    return observe_errors.take(
        lambda e: "reconnect-attempts" in e.get("log_format", "") and e.get("peer") == PEER
    )


# -- timing ---------------------------------------------------------------------


def test_first_attempt_at_start(harness):
    assert harness.endpoint.attempts == []
    harness.service.startService()
    assert harness.endpoint.times == [0.0]


def test_attempts_follow_the_schedule(harness):
    """
    retry 1000 ms × 2.0, capped at 4000 ms: delays 1, 2, 4, 4 s.
    """
    harness.service.startService()
    harness.run_refusing(until=11.5)
    assert harness.endpoint.times == [0.0, 1.0, 3.0, 7.0, 11.0]
    harness.run_refusing(until=23.5)
    assert harness.endpoint.times == [0.0, 1.0, 3.0, 7.0, 11.0, 15.0, 19.0, 23.0]
    assert harness.service.exhausted is False


def test_no_attempt_before_the_delay(harness):
    harness.service.startService()
    harness.endpoint.last.refuse()
    harness.clock.advance(0.999)
    assert harness.endpoint.times == [0.0]
    harness.clock.advance(0.001)
    assert harness.endpoint.times == [0.0, 1.0]


def test_constant_delay(tmp_path, request):
    h = make(tmp_path, request, interval=2500, multiplier=1.0, maximum=2500)
    h.service.startService()
    h.run_refusing(until=10.0)
    assert h.endpoint.times == [0.0, 2.5, 5.0, 7.5, 10.0]


# -- exhaustion -----------------------------------------------------------------


def test_gives_up_after_reconnect_attempts(tmp_path, request, observe_errors):
    h = make(tmp_path, request, attempts=2)
    h.service.startService()
    h.run_refusing(until=3.0)
    # The initial attempt and two retries.
    assert h.endpoint.times == [0.0, 1.0, 3.0]
    assert h.service.exhausted is True

    [error] = exhausted_errors(observe_errors)
    assert error["attempts"] == 2
    [record] = h.recorded(CONNECTOR_EXHAUSTED)
    assert record == {
        "time": 3.0,
        "router": OWN,
        "event": "connector.exhausted",
        "peer": PEER,
        "attempts": 2,
    }

    h.run_refusing(until=100_000, step=500)
    assert h.endpoint.times == [0.0, 1.0, 3.0]
    assert h.clock.getDelayedCalls() == []
    assert len(h.recorded(CONNECTOR_EXHAUSTED)) == 1
    assert exhausted_errors(observe_errors) == []


def test_zero_reconnect_attempts_means_no_retry(tmp_path, request, observe_errors):
    h = make(tmp_path, request, attempts=0)
    h.service.startService()
    h.run_refusing(until=0.0)
    assert h.endpoint.times == [0.0]
    assert h.service.exhausted is True
    [error] = exhausted_errors(observe_errors)
    assert error["attempts"] == 0
    [record] = h.recorded(CONNECTOR_EXHAUSTED)
    assert (record["time"], record["peer"], record["attempts"]) == (0.0, PEER, 0)

    h.run_refusing(until=10_000, step=100)
    assert h.endpoint.times == [0.0]
    assert h.clock.getDelayedCalls() == []


def test_unlimited_attempts_never_give_up(tmp_path, request):
    h = make(tmp_path, request, attempts=-1)
    h.service.startService()
    h.run_refusing(until=4000, step=1)
    assert h.endpoint.times == [0.0, 1.0, 3.0, *range(7, 4001, 4)]
    assert h.service.exhausted is False
    assert h.recorded(CONNECTOR_EXHAUSTED) == []


def test_stop_after_exhaustion(tmp_path, request, observe_errors):
    h = make(tmp_path, request, attempts=0)
    h.service.startService()
    h.run_refusing(until=0.0)
    exhausted_errors(observe_errors)
    d = h.service.stopService()
    assert d.called
    assert h.service.running == 0


def test_stop_just_as_attempts_run_out(tmp_path, request):
    """
    An operator's stop that lands between the last refusal and the
    give-up is a stop, not an exhaustion: nothing is logged or recorded.
    """
    h = make(tmp_path, request, attempts=0)
    h.service.startService()
    h.endpoint.last.refuse()
    d = h.service.stopService()
    assert d.called
    h.clock.advance(0)
    assert h.service.exhausted is False
    assert h.recorded(CONNECTOR_EXHAUSTED) == []
    assert h.clock.getDelayedCalls() == []


def test_restart_just_as_attempts_run_out_keeps_running(tmp_path, request):
    """
    A stop and start in the same turn as the last refusal: the restarted
    connector is not stopped by the stale give-up.
    """
    h = make(tmp_path, request, attempts=0)
    h.service.startService()
    h.endpoint.last.refuse()
    h.service.stopService()
    h.service.startService()
    assert h.endpoint.times == [0.0, 0.0]
    h.clock.advance(0)
    assert h.service.exhausted is False
    # The new attempt is alive: connecting it works.
    h.endpoint.last.connect()
    reach_delivery(h.endpoint.last)


def test_restart_after_exhaustion_tries_again(tmp_path, request, observe_errors):
    h = make(tmp_path, request, attempts=1)
    h.service.startService()
    h.run_refusing(until=1.0)
    assert h.endpoint.times == [0.0, 1.0]
    assert len(exhausted_errors(observe_errors)) == 1
    h.service.stopService()

    h.clock.advance(50)
    h.service.startService()
    assert h.service.exhausted is False
    h.run_refusing(until=60)
    assert h.endpoint.times == [0.0, 1.0, 51.0, 52.0]
    assert len(exhausted_errors(observe_errors)) == 1
    assert len(h.recorded(CONNECTOR_EXHAUSTED)) == 2


# -- what resets the schedule -------------------------------------------------


def test_delivery_resets_the_schedule(harness):
    harness.service.startService()
    harness.run_refusing(until=1.0)
    assert harness.endpoint.times == [0.0, 1.0]
    assert harness.schedule.failures == 2

    harness.clock.advance(2.0)
    attempt = harness.endpoint.last
    assert attempt.time == 3.0
    attempt.connect()
    reach_delivery(attempt)
    assert harness.schedule.failures == 0

    harness.clock.advance(0.5)
    attempt.drop()
    # The first retry interval again (1 s), not the next one (4 s).
    harness.clock.advance(0.999)
    assert harness.endpoint.times == [0.0, 1.0, 3.0]
    harness.clock.advance(0.001)
    assert harness.endpoint.times == [0.0, 1.0, 3.0, 4.5]

    # ... and the run grows from there: refused → 2 s.
    harness.endpoint.last.refuse()
    harness.clock.advance(2.0)
    assert harness.endpoint.times == [0.0, 1.0, 3.0, 4.5, 6.5]


def test_delivery_survives_keepalives_then_drop(harness):
    """
    A long-lived delivery link (keepalives flowing both ways) that dies
    is followed by a first-interval retry.
    """
    harness.service.startService()
    harness.run_refusing(until=3.0)  # failures at 0, 1, 3
    harness.clock.advance(4.0)
    attempt = harness.endpoint.last
    assert attempt.time == 7.0
    attempt.connect()
    reach_delivery(attempt)
    for _ in range(100):
        harness.clock.advance(1.0)
        assert attempt.sent() == [Keepalive()]
        attempt.write(Keepalive())
    assert harness.endpoint.times[-1] == 7.0
    attempt.drop()
    harness.clock.advance(1.0)
    assert harness.endpoint.times[-1] == 108.0


def test_tcp_connect_without_delivery_is_a_failure(harness):
    """
    A connection that drops before delivery does not reset the schedule:
    the connector counts failed links, not failed TCP connects.
    """
    harness.service.startService()
    first = harness.endpoint.last
    first.connect()
    assert first.sent() == [Hello(list(SUPPORTED_VERSIONS), OWN)]
    harness.clock.advance(0.5)
    first.drop()
    harness.clock.advance(1.0)
    assert harness.endpoint.times == [0.0, 1.5]

    second = harness.endpoint.last
    second.connect()
    second.write(Welcome(2, PEER, 1000, LISTENER_CHALLENGE))
    second.drop()  # in authentication
    harness.clock.advance(1.999)
    assert harness.endpoint.times == [0.0, 1.5]
    harness.clock.advance(0.001)
    assert harness.endpoint.times == [0.0, 1.5, 3.5]
    assert harness.schedule.failures == 2


def test_rejected_handshake_is_a_failure(harness):
    harness.service.startService()
    attempt = harness.endpoint.last
    attempt.connect()
    attempt.sent()
    attempt.write(Reject("not-allowed", "router-a is not in allowed-routers"))
    assert attempt.transport.disconnecting
    attempt.drop()
    harness.clock.advance(1.0)
    assert harness.endpoint.times == [0.0, 1.0]

    attempt = harness.endpoint.last
    attempt.connect()
    attempt.sent()
    attempt.write(Welcome(2, PEER, 1000, LISTENER_CHALLENGE))
    attempt.sent()
    attempt.write(Authenticated(b"\x00" * 32))  # wrong proof
    assert attempt.sent() == [Reject("auth-failed", "listener's proof is wrong: the shared secrets differ")]
    attempt.drop()
    harness.clock.advance(2.0)
    assert harness.endpoint.times == [0.0, 1.0, 3.0]
    assert harness.schedule.failures == 2


def test_stage_timeout_is_a_failure(harness):
    harness.service.startService()
    attempt = harness.endpoint.last
    attempt.connect()
    harness.clock.advance(STAGE_TIMEOUT_MS / 1000)
    assert attempt.transport.disconnecting
    attempt.drop()
    harness.clock.advance(1.0)
    assert harness.endpoint.times == [0.0, 61.0]
    assert harness.schedule.failures == 1


# -- stopping -------------------------------------------------------------------


def test_stop_while_waiting(harness):
    harness.service.startService()
    harness.run_refusing(until=1.0)
    d = harness.service.stopService()
    assert d.called
    harness.run_refusing(until=1000, step=10)
    assert harness.endpoint.times == [0.0, 1.0]
    assert harness.clock.getDelayedCalls() == []


def test_stop_while_connecting(harness):
    harness.service.startService()
    attempt = harness.endpoint.last
    d = harness.service.stopService()
    # ClientService cancels the pending attempt.
    assert attempt.deferred.called
    assert d.called
    harness.run_refusing(until=1000, step=10)
    assert harness.endpoint.times == [0.0]
    assert harness.clock.getDelayedCalls() == []


def test_stop_while_in_delivery(harness):
    harness.service.startService()
    attempt = harness.endpoint.last
    attempt.connect()
    reach_delivery(attempt)
    d = harness.service.stopService()
    assert attempt.transport.disconnecting
    assert not d.called
    attempt.drop()
    assert d.called
    harness.run_refusing(until=1000, step=10)
    assert harness.endpoint.times == [0.0]
    assert harness.clock.getDelayedCalls() == []


def test_start_resets_the_schedule(harness):
    harness.service.startService()
    harness.run_refusing(until=3.0)
    assert harness.schedule.failures == 3
    harness.service.stopService()
    harness.clock.advance(100)
    harness.service.startService()
    assert harness.schedule.failures == 0
    harness.run_refusing(until=104.0)
    assert harness.endpoint.times == [0.0, 1.0, 3.0, 103.0, 104.0]


# -- what it logs ---------------------------------------------------------------


def test_retries_are_logged_with_peer_endpoint_attempt_and_delay(tmp_path, request):
    """
    Each retry is logged once, naming the peer, the endpoint as configured
    and the real count of failed attempts in a row (ClientService's own
    line named an endpoint object and, since a TCP connection that fails
    its handshake resets its count, always said "retry 1").
    """
    from twisted.logger import formatEvent, globalLogPublisher

    logged = []
    globalLogPublisher.addObserver(logged.append)
    request.addfinalizer(lambda: globalLogPublisher.removeObserver(logged.append))
    h = make(tmp_path, request)
    h.service = ConnectorService(h.context, h.settings,
                                 EndpointRotation([("tcp:127.0.0.1:7002", h.endpoint)]),
                                 h.schedule, h.clock)
    h.service.startService()
    for _ in range(3):
        h.endpoint.last.connect()
        h.endpoint.last.drop()  # in the handshake: a failed link, a made TCP connection
        h.clock.advance(h.schedule.max_retry_interval_ms / 1000)
    lines = [formatEvent(e) for e in logged if "retry" in e.get("log_format", "").lower()]
    assert lines == [
        f"connector to {PEER} at tcp:127.0.0.1:7002: attempt {n} failed; "
        f"retrying in {delay} s"
        for n, delay in ((1, 1.0), (2, 2.0), (3, 4.0))
    ]
    h.service.stopService()


# -- several endpoints --------------------------------------------------------------


class PairHarness(Harness):
    """
    A connector whose C{endpoint} is a list of two (the two instances of a
    pair, or a router at two addresses): retry 1 s × 2, at most 4 s.
    """

    def __init__(self, tmp_path, **kw):
        super().__init__(tmp_path, **kw)
        self.first, self.second = FakeEndpoint(self.clock), FakeEndpoint(self.clock)
        self.service = ConnectorService(
            self.context, self.settings,
            EndpointRotation([("tcp:127.0.0.1:7002", self.first),
                              ("tcp:127.0.0.1:7102", self.second)]),
            self.schedule, self.clock)

    def tried(self) -> list[tuple[str, float]]:
        """
        Every attempt so far, in order: which endpoint, and when.
        """
        attempts = [("first", a.time, a) for a in self.first.attempts]
        attempts += [("second", a.time, a) for a in self.second.attempts]
        return [(name, time) for name, time, _ in sorted(attempts, key=lambda t: t[1])]

    def _refuse_pending(self) -> None:
        while pending := [a for a in self.first.attempts + self.second.attempts if a.pending]:
            pending[0].refuse()
            self.clock.advance(0)


@pytest.fixture
def pair(tmp_path):
    h = PairHarness(tmp_path)
    yield h
    h.events.close()


def test_first_endpoint_refused_second_used(pair):
    """
    The first endpoint refuses: the second is tried at once (same round),
    and the link made through it says so (admin API, link.stage event).
    """
    pair.service.startService()
    pair.first.last.refuse()
    pair.clock.advance(0)
    assert pair.tried() == [("first", 0.0), ("second", 0.0)]
    attempt = pair.second.last
    attempt.connect()
    reach_delivery(attempt)
    described = attempt.protocol.link.describe()
    assert (described["endpoint"], described["stage"]) == ("tcp:127.0.0.1:7102", DELIVERY)
    [connect] = [r for r in pair.recorded("link.stage") if r["stage"] == "connect"]
    assert connect["endpoint"] == "tcp:127.0.0.1:7102"


def test_backoff_comes_between_rounds(pair):
    """
    The retry schedule counts rounds over the list: both endpoints at
    once, then 1 s, 2 s, 4 s, 4 s between rounds.
    """
    pair.service.startService()
    pair.run_refusing(until=11.5)
    assert pair.tried() == [(name, time) for time in (0.0, 1.0, 3.0, 7.0, 11.0)
                            for name in ("first", "second")]


def test_reconnect_attempts_count_rounds(tmp_path, request, observe_errors):
    """
    reconnect-attempts = 1: the first round and one more, then it gives up.
    """
    h = PairHarness(tmp_path, attempts=1)
    request.addfinalizer(h.events.close)
    h.service.startService()
    h.run_refusing(until=10.0)
    assert h.tried() == [("first", 0.0), ("second", 0.0), ("first", 1.0), ("second", 1.0)]
    assert h.service.exhausted
    assert len(exhausted_errors(observe_errors)) == 1


def test_after_the_link_drops_rotation_continues(pair):
    """
    A link through the second endpoint dies: after the first retry
    interval (as with one endpoint) a round starts at the first endpoint,
    the one after it; refused there, the second is tried at once, and the
    backoff then comes between rounds again.
    """
    pair.service.startService()
    pair.first.last.refuse()
    pair.clock.advance(0)
    attempt = pair.second.last
    attempt.connect()
    reach_delivery(attempt)
    pair.clock.advance(5.0)
    attempt.drop()
    pair.clock.advance(0.999)
    assert len(pair.tried()) == 2
    pair.clock.advance(0.001)
    assert pair.tried()[2:] == [("first", 6.0)]
    pair.first.last.refuse()
    pair.clock.advance(0)
    assert pair.tried()[2:] == [("first", 6.0), ("second", 6.0)]
    pair.second.last.refuse()
    pair.clock.advance(2.0)
    assert pair.tried()[2:] == [("first", 6.0), ("second", 6.0), ("first", 8.0)]
    # The first endpoint is back: the link now goes through it.
    again = pair.first.last
    again.connect()
    reach_delivery(again)
    assert again.protocol.link.describe()["endpoint"] == "tcp:127.0.0.1:7002"


def test_no_reconnect_attempts_means_no_other_endpoint(tmp_path, request, observe_errors):
    """
    reconnect-attempts = 0: a link that dies is not followed by any
    attempt, at the other endpoint either (Artemis: no reconnection, no
    failover).
    """
    h = PairHarness(tmp_path, attempts=0)
    request.addfinalizer(h.events.close)
    h.service.startService()
    h.first.last.connect()
    reach_delivery(h.first.last)
    h.first.last.drop()
    h.clock.advance(100)
    assert h.tried() == [("first", 0.0)]
    assert h.service.exhausted
    assert len(exhausted_errors(observe_errors)) == 1


def test_each_attempt_is_logged_with_its_endpoint(tmp_path, request):
    from twisted.logger import formatEvent, globalLogPublisher

    logged = []
    globalLogPublisher.addObserver(logged.append)
    request.addfinalizer(lambda: globalLogPublisher.removeObserver(logged.append))
    h = PairHarness(tmp_path)
    request.addfinalizer(h.events.close)
    h.service.startService()
    h.first.last.refuse()
    h.clock.advance(0)
    h.second.last.refuse()
    h.clock.advance(1.0)
    h.first.last.refuse()
    h.clock.advance(0)
    h.second.last.connect()
    reach_delivery(h.second.last)
    lines = [formatEvent(e) for e in logged if e.get("peer") == PEER]
    assert lines == [
        f"connector to {PEER} at tcp:127.0.0.1:7002: attempt failed; "
        "trying tcp:127.0.0.1:7102 now",
        f"connector to {PEER}: round 1 failed (last at tcp:127.0.0.1:7102); "
        "retrying from tcp:127.0.0.1:7002 in 1.0 s",
        f"connector to {PEER} at tcp:127.0.0.1:7002: attempt failed; "
        "trying tcp:127.0.0.1:7102 now",
        f"link {h.second.last.protocol.link.core.link_id} to {PEER} "
        "(connector through tcp:127.0.0.1:7102) in delivery, keepalive 1000 ms",
    ]
    h.service.stopService()
