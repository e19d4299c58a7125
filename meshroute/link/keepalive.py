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

from twisted.internet.interfaces import IReactorTime
from twisted.internet.task import LoopingCall

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
        self._send = send
        self._expired = expired
        self._interval = interval
        self._loop = LoopingCall(self._tick)
        self._loop.clock = clock

    def start(self) -> None:
        """
        Begin sending; the first keepalive goes out one interval from now.
        """
        self._loop.start(self._interval, now=False)

    def stop(self) -> None:
        """
        Stop sending (the link is closing).  Safe to call more than once.
        """
        if self._loop.running:
            self._loop.stop()

    def received(self) -> None:
        """
        A keepalive arrived from the peer.
        """
        self.counter.received()

    def _tick(self) -> None:
        self._send()
        if self.counter.sent():
            self.stop()
            self._expired()
