"""
Tests for L{meshroute.link.retry}: Artemis' reconnection delays, as a
pure schedule with no time in it.
"""

import pytest

from meshroute.link.retry import RetrySchedule


def schedule(interval=1000, multiplier=2.0, maximum=16000, attempts=-1) -> RetrySchedule:
    return RetrySchedule(
        retry_interval_ms=interval,
        multiplier=multiplier,
        max_retry_interval_ms=maximum,
        reconnect_attempts=attempts,
    )


def test_exponential_backoff_capped():
    s = schedule(1000, 2.0, 16000)
    assert [s.next_delay() for _ in range(6)] == [1.0, 2.0, 4.0, 8.0, 16.0, 16.0]


def test_stays_at_the_cap():
    s = schedule(1000, 2.0, 16000)
    delays = [s.next_delay() for _ in range(200)]
    assert delays[4:] == [16.0] * 196


def test_cap_between_steps():
    s = schedule(1000, 2.0, 5000)
    assert [s.next_delay() for _ in range(5)] == [1.0, 2.0, 4.0, 5.0, 5.0]


def test_fractional_multiplier():
    s = schedule(1000, 1.5, 60000)
    assert [s.next_delay() for _ in range(4)] == [1.0, 1.5, 2.25, 3.375]


def test_multiplier_one_is_constant():
    s = schedule(2500, 1.0, 16000)
    assert [s.next_delay() for _ in range(10)] == [2.5] * 10


def test_milliseconds_become_seconds():
    s = schedule(250, 1.0, 1000)
    assert s.next_delay() == 0.25


def test_zero_attempts_gives_up_at_once():
    s = schedule(attempts=0)
    assert s.next_delay() is None


def test_three_attempts():
    s = schedule(attempts=3)
    assert [s.next_delay() for _ in range(5)] == [1.0, 2.0, 4.0, None, None]


def test_one_attempt():
    s = schedule(attempts=1)
    assert [s.next_delay() for _ in range(2)] == [1.0, None]


def test_minus_one_never_gives_up():
    s = schedule(attempts=-1)
    delays = [s.next_delay() for _ in range(1000)]
    assert None not in delays
    assert delays[-1] == 16.0


@pytest.mark.parametrize("multiplier", [2.0, 1.5, 10.0])
def test_retrying_forever_does_not_overflow(multiplier):
    """
    With reconnect-attempts -1 the failure count grows without bound
    (2.0 ** 1024 is past the largest float); the delay stays at the cap.
    """
    s = schedule(1000, multiplier, 16000, attempts=-1)
    delays = [s.next_delay() for _ in range(3000)]
    assert delays[-1] == 16.0
    assert set(delays[20:]) == {16.0}


def test_reset_starts_over():
    s = schedule(attempts=3)
    assert [s.next_delay() for _ in range(3)] == [1.0, 2.0, 4.0]
    s.reset()
    assert s.failures == 0
    assert [s.next_delay() for _ in range(4)] == [1.0, 2.0, 4.0, None]


def test_reset_after_exhaustion():
    s = schedule(attempts=0)
    assert s.next_delay() is None
    s.reset()
    assert s.next_delay() is None


def test_failures_are_counted():
    s = schedule(attempts=2)
    s.next_delay()
    s.next_delay()
    assert s.failures == 2
    assert s.next_delay() is None
    assert s.failures == 3


@pytest.mark.parametrize("attempts", [0, 1, 2, 5, 10])
def test_number_of_delays_equals_attempts(attempts):
    s = schedule(attempts=attempts)
    delays = []
    while (d := s.next_delay()) is not None:
        delays.append(d)
    assert len(delays) == attempts


def test_a_run_started_at_once_then_waits_as_any_run():
    """
    A client's connection closed under it: the run's first retry is at
    once, and the waits after it are those of any run.
    """
    s = schedule(1000, 2.0, 16000)
    assert s.retry_at_once() == 0.0
    assert [s.next_delay() for _ in range(6)] == [1.0, 2.0, 4.0, 8.0, 16.0, 16.0]


def test_a_retry_at_once_counts_against_the_attempts():
    assert schedule(attempts=0).retry_at_once() is None
    s = schedule(attempts=2)
    assert [s.retry_at_once(), s.next_delay(), s.next_delay()] == [0.0, 1.0, None]


def test_reset_forgets_the_run_started_at_once():
    s = schedule(1000, 2.0, 16000)
    s.retry_at_once()
    s.next_delay()
    s.reset()
    assert [s.next_delay(), s.next_delay()] == [1.0, 2.0]
