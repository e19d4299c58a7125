"""
Tests for L{meshroute.router.queue_rates}: rates over a sliding window of
samples, on a L{Clock}.
"""

from twisted.internet.task import Clock

from meshroute.router.queue_rates import QueueRates


def test_rates_are_the_growth_over_the_window():
    clock = Clock()
    rates = QueueRates(clock, window_s=4, interval_s=1)
    assert rates.rates() == {}
    rates.start()
    for _ in range(4):
        rates.entered("q", 10)
        rates.left("q", 5)
        clock.advance(1)
    assert rates.rates() == {"q": (10.0, 5.0)}
    # The window slides: the first second's traffic drops out of it.
    rates.entered("q", 2)
    clock.advance(1)
    assert rates.rates() == {"q": (32 / 4, 15 / 4)}
    rates.stop()


def test_an_idle_queue_is_forgotten_after_a_window():
    clock = Clock()
    rates = QueueRates(clock, window_s=2, interval_s=1)
    rates.start()
    rates.entered("old", 3)
    clock.advance(1)
    assert set(rates.rates()) == {"old"}
    clock.pump([1, 1, 1])
    assert rates.rates() == {} and rates._counts == {}
    # Counting again after being forgotten starts from nothing.
    rates.entered("old", 1)
    clock.advance(1)
    assert rates.rates() == {"old": (1 / 2, 0.0)}
    rates.stop()
