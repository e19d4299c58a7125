"""
Tests for L{meshroute.link.keepalive}: SwiftMQ's counter rule on its own,
and driven by a L{task.Clock}.

The rule promises that a silent peer is declared dead exactly five
intervals after the keepalives start (or after the last one it sent), and
that a peer keeping pace is never declared dead.
"""

import pytest
from twisted.internet.task import Clock

from meshroute.link.keepalive import INITIAL_COUNT, Keepalive, KeepaliveCounter

EPSILON = 1e-6


class Recorder:
    """
    A L{Keepalive} on a L{Clock} that records when it sent and expired.
    """

    def __init__(self, interval: float) -> None:
        self.clock = Clock()
        self.interval = interval
        self.sent: list[float] = []
        self.expired: list[float] = []
        self.keepalive = Keepalive(
            self.clock,
            interval,
            send=lambda: self.sent.append(self.clock.seconds()),
            expired=lambda: self.expired.append(self.clock.seconds()),
        )

    def intervals(self, n: int) -> None:
        """
        Advance the clock by C{n} intervals, one interval at a time.
        """
        self.clock.pump([self.interval] * n)


# -- the counter alone ----------------------------------------------------------


def test_counter_starts_at_5():
    assert INITIAL_COUNT == 5
    assert KeepaliveCounter().value == 5


def test_counter_received_adds_one():
    counter = KeepaliveCounter()
    counter.received()
    assert counter.value == 6
    counter.received()
    assert counter.value == 7


def test_counter_sent_subtracts_one():
    counter = KeepaliveCounter()
    assert counter.sent() is False
    assert counter.value == 4


def test_counter_sent_true_exactly_at_zero():
    counter = KeepaliveCounter()
    results = [counter.sent() for _ in range(5)]
    assert results == [False, False, False, False, True]
    assert counter.value == 0


def test_counter_received_postpones_zero():
    counter = KeepaliveCounter()
    counter.received()
    results = [counter.sent() for _ in range(6)]
    assert results == [False] * 5 + [True]


def test_counter_balanced_traffic_never_reaches_zero():
    counter = KeepaliveCounter()
    for _ in range(1000):
        assert counter.sent() is False
        counter.received()
    assert counter.value == 5


def test_counter_custom_initial():
    counter = KeepaliveCounter(initial=1)
    assert counter.sent() is True


# -- driven by a clock ------------------------------------------------------------


def test_nothing_sent_at_start():
    r = Recorder(1.0)
    r.keepalive.start()
    assert r.sent == []
    r.clock.advance(1.0 - EPSILON)
    assert r.sent == []


def test_first_send_one_interval_after_start():
    r = Recorder(1.0)
    r.clock.advance(10)
    r.keepalive.start()
    r.intervals(1)
    assert r.sent == [11.0]
    assert r.keepalive.counter.value == 4


def test_sends_once_per_interval():
    r = Recorder(1.0)
    r.keepalive.start()
    r.intervals(3)
    assert r.sent == [1.0, 2.0, 3.0]
    assert r.keepalive.counter.value == 2


@pytest.mark.parametrize("interval", [1.0, 0.2, 30.0])
def test_silent_peer_expires_exactly_at_five_intervals(interval):
    r = Recorder(interval)
    r.keepalive.start()
    r.intervals(4)
    r.clock.advance(interval - EPSILON)
    assert r.expired == []
    assert len(r.sent) == 4
    r.clock.advance(EPSILON)
    assert r.expired == [pytest.approx(5 * interval)]
    assert len(r.sent) == 5
    assert r.keepalive.counter.value == 0


def test_silent_peer_expires_once_and_sending_stops():
    r = Recorder(1.0)
    r.keepalive.start()
    r.intervals(5)
    assert r.expired == [5.0]
    r.intervals(100)
    assert r.expired == [5.0]
    assert r.sent == [1.0, 2.0, 3.0, 4.0, 5.0]
    assert r.clock.getDelayedCalls() == []


def test_stop_after_expiry_is_harmless():
    r = Recorder(1.0)
    r.keepalive.start()
    r.intervals(5)
    r.keepalive.stop()
    assert r.expired == [5.0]


@pytest.mark.parametrize("interval", [1.0, 0.2])
def test_peer_keeping_pace_stays_alive_for_1000_intervals(interval):
    r = Recorder(interval)
    r.keepalive.start()
    for _ in range(1000):
        r.intervals(1)
        r.keepalive.received()
    assert r.expired == []
    assert len(r.sent) == 1000
    assert r.keepalive.counter.value == 5


def test_peer_going_silent_expires_five_intervals_after_it_stopped():
    r = Recorder(1.0)
    r.keepalive.start()
    for _ in range(10):
        r.intervals(1)
        r.keepalive.received()
    r.intervals(4)
    assert r.expired == []
    r.intervals(1)
    assert r.expired == [15.0]


def test_stop_stops_sending():
    r = Recorder(1.0)
    r.keepalive.start()
    r.intervals(2)
    r.keepalive.stop()
    r.intervals(20)
    assert r.sent == [1.0, 2.0]
    assert r.expired == []
    assert r.clock.getDelayedCalls() == []


def test_stop_is_idempotent():
    r = Recorder(1.0)
    r.keepalive.start()
    r.keepalive.stop()
    r.keepalive.stop()
    r.intervals(10)
    assert r.sent == []
    assert r.expired == []


def test_stop_before_start_is_harmless():
    r = Recorder(1.0)
    r.keepalive.stop()
    assert r.clock.getDelayedCalls() == []


def test_interval_of_200_ms():
    r = Recorder(0.2)
    r.keepalive.start()
    r.clock.advance(0.2 - EPSILON)
    assert r.sent == []
    r.clock.advance(EPSILON)
    assert len(r.sent) == 1
    r.intervals(3)
    assert r.sent == pytest.approx([0.2, 0.4, 0.6, 0.8])
    assert r.expired == []
    r.intervals(1)
    assert r.expired == [pytest.approx(1.0)]


def test_late_ticks_keep_the_rate():
    """
    A busy reactor runs each tick a little late; the next tick is still
    due on its slot, so over time we send exactly one keepalive per
    interval, as a punctual peer does, and its counter does not drain.
    """
    r = Recorder(1.0)
    r.keepalive.counter.value = 1000  # a generous peer: this test is about the rate
    r.keepalive.start()
    for _ in range(100):
        r.clock.advance(1.3)  # the reactor only gets round to timers every 1.3 s...
    # ...yet after 130 s about 130 keepalives went out (a fixed delay after
    # each late tick would have sent 100).
    assert 129 <= len(r.sent) <= 130


def test_a_stall_skips_missed_ticks_instead_of_bursting():
    r = Recorder(1.0)
    r.keepalive.start()
    r.clock.advance(1.0)
    assert len(r.sent) == 1
    r.clock.advance(3.5)  # frozen for 3.5 intervals
    assert len(r.sent) == 2  # one late tick, not three
    r.clock.advance(0.5)  # back on the original phase: t = 5.0
    assert len(r.sent) == 3
