"""
How fast messages enter and leave each local queue, for the admin API.

Two counters per queue, kept in memory: messages enqueued (by a client,
arriving over a link, dead-lettered here) and messages consumed
(acknowledged).  Every L{SAMPLE_INTERVAL_S} a copy of the counters is
kept, the last L{RATE_WINDOW_S} worth of copies; a rate is the growth of
a counter since the oldest copy, divided by the time since it.  So a rate
answers "per second, over the last ten seconds" at the cost of one
addition per message and one copy of the counters per second, and a
question never touches the store.

A queue whose counters did not move for a whole window is forgotten (its
rates are zero): queue names come and go, and the counters must not grow
with every name ever used.
"""

from collections import deque

from twisted.internet.interfaces import IReactorTime
from twisted.internet.task import LoopingCall

#: The window rates are taken over, in seconds.
RATE_WINDOW_S = 10.0

#: How often the counters are copied, in seconds.
SAMPLE_INTERVAL_S = 1.0


class QueueRates:
    """
    Messages in and out of each local queue per second, over the last
    C{window_s} seconds.

    @param clock: samples are taken on it (L{start}), and it dates them.
    """

    def __init__(self, clock: IReactorTime, window_s: float = RATE_WINDOW_S,
                 interval_s: float = SAMPLE_INTERVAL_S) -> None:
        self._clock = clock
        self._interval_s = interval_s
        # queue -> [entered, left]
        self._counts: dict[str, list[int]] = {}
        self._samples: deque[tuple[float, dict[str, tuple[int, int]]]] = deque(
            maxlen=round(window_s / interval_s) + 1)
        self._sampler = LoopingCall(self.sample)
        self._sampler.clock = clock

    def entered(self, queue: str, n: int = 1) -> None:
        """
        C{n} messages were enqueued in C{queue}.
        """
        counts = self._counts.get(queue)
        if counts is None:
            counts = self._counts[queue] = [0, 0]
        counts[0] += n

    def left(self, queue: str, n: int = 1) -> None:
        """
        C{n} messages of C{queue} were consumed.
        """
        counts = self._counts.get(queue)
        if counts is None:
            counts = self._counts[queue] = [0, 0]
        counts[1] += n

    def start(self) -> None:
        """
        Take a sample now and every C{interval_s} from now on.
        """
        if not self._sampler.running:
            self._sampler.start(self._interval_s, now=True)

    def stop(self) -> None:
        if self._sampler.running:
            self._sampler.stop()

    def sample(self) -> None:
        """
        Keep a copy of the counters (the oldest copy goes once the window
        is full), after forgetting the queues whose counters have not
        moved since the oldest one.
        """
        samples = self._samples
        if len(samples) == samples.maxlen:
            oldest = samples[0][1]
            idle = [queue for queue, counts in self._counts.items()
                    if oldest.get(queue) == tuple(counts)]
            for queue in idle:
                del self._counts[queue]
                for _, sample in samples:
                    sample.pop(queue, None)
        samples.append((self._clock.seconds(),
                        {queue: tuple(counts) for queue, counts in self._counts.items()}))

    def rates(self) -> dict[str, tuple[float, float]]:
        """
        C{{queue: (in, out)}} in messages per second since the oldest
        sample, for every queue whose counters moved within the window;
        empty before the first sample.
        """
        if not self._samples:
            return {}
        then, oldest = self._samples[0]
        span = self._clock.seconds() - then
        rates = {}
        for queue, (entered, left) in self._counts.items():
            before_in, before_out = oldest.get(queue, (0, 0))
            if (entered, left) == (before_in, before_out):
                continue
            rates[queue] = ((entered - before_in) / span if span > 0 else 0.0,
                            (left - before_out) / span if span > 0 else 0.0)
        return rates
