"""
SwiftMQ's keepalive rule for a routing link in the delivery stage.

Each side keeps a counter that starts at 5, goes up by one for every
keepalive received and down by one for every keepalive sent; when it
reaches 0 the connection is closed physically.  Both sides send one
keepalive every interval, so with a live peer the counter hovers around
5, and with a silent peer it reaches 0 exactly five intervals after the
last keepalive arrived.

L{KeepaliveCounter} is the rule alone, with no time in it.  L{Keepalive}
drives it from an injected clock.
"""

from typing import Callable

from twisted.internet.interfaces import IDelayedCall, IReactorTime

#: The counter's starting value (SwiftMQ's).
INITIAL_COUNT = 5

_SLACK_S = 1e-9


class KeepaliveCounter:
    """
    The counter rule, without time.
    """

    def __init__(self, initial: int = INITIAL_COUNT) -> None:
        self.value = initial

    def received(self) -> None:
        """
        A keepalive arrived from the peer.
        """
        self.value += 1

    def sent(self) -> bool:
        """
        We sent a keepalive.

        @return: True when the counter reached 0 and the link must close.
        """
        self.value -= 1
        return self.value <= 0


class Keepalive:
    """
    Sends a keepalive every C{interval} seconds from an injected clock and
    applies the counter rule.

    Ticks keep a fixed rate from the start: tick I{n} is due at C{start +
    n × interval}, however late tick I{n}−1 ran.  Both sides must send at
    the same rate, or the slower one slowly drains the other's counter: a
    fixed delay after each (late) tick would let a busy router fall a
    little further behind every interval until its peer closes a healthy
    link.  After a stall of a whole interval or more (a frozen process),
    the missed ticks are skipped, not sent in a burst that would spend
    several units of our own counter at once.  (C{LoopingCall} means the
    same, but finds the next slot with modulo arithmetic that can fire
    twice at one instant when float rounding lands a tick just short of
    its slot; counting ticks cannot.)

    @ivar counter: the L{KeepaliveCounter}, exposed for the admin API.
    """

    def __init__(
        self,
        clock: IReactorTime,
        interval: float,
        send: Callable[[], None],
        expired: Callable[[], None],
    ) -> None:
        """
        @param send: writes one keepalive frame to the peer.
        @param expired: called once when the counter reaches 0; it closes
            the link.
        """
        self.counter = KeepaliveCounter()
        self._clock = clock
        self._send = send
        self._expired = expired
        self._interval = interval
        self._next: IDelayedCall | None = None
        self._started = 0.0
        self._ticks = 0

    def start(self) -> None:
        """
        Begin sending; the first keepalive goes out one interval from now.
        """
        self._started = self._clock.seconds()
        self._ticks = 0
        self._schedule()

    def _schedule(self) -> None:
        self._ticks += 1
        now = self._clock.seconds()
        due = self._started + self._ticks * self._interval
        if now - due >= self._interval:
            # A whole interval or more behind (a stall): skip to the next
            # slot ahead.  A tick merely late fires at once instead.
            self._ticks = int((now - self._started) / self._interval) + 1
            due = self._started + self._ticks * self._interval
        # A nanosecond early, so that float rounding of n × interval never
        # lands a slot just after the moment it is due; the phase stays put,
        # since the next slot is computed from the count, not from now.
        self._next = self._clock.callLater(max(0.0, due - now - _SLACK_S), self._tick)

    def stop(self) -> None:
        """
        Stop sending (the link is closing).  Safe to call more than once.
        """
        if self._next is not None and self._next.active():
            self._next.cancel()
        self._next = None

    def received(self) -> None:
        """
        A keepalive arrived from the peer.
        """
        self.counter.received()

    def _tick(self) -> None:
        self._next = None
        self._send()
        if self.counter.sent():
            self._expired()
        else:
            self._schedule()
