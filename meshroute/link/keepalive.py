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

    Each tick schedules the next one C{interval} later.  (C{LoopingCall}
    would keep a fixed phase, but its modulo arithmetic can fire twice at
    nearly the same instant when float rounding lands a tick just short of
    its slot, and a double tick here is a lost unit of the peer's grace.)

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

    def start(self) -> None:
        """
        Begin sending; the first keepalive goes out one interval from now.
        """
        self._next = self._clock.callLater(self._interval, self._tick)

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
            self._next = self._clock.callLater(self._interval, self._tick)
