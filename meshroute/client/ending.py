"""
L{Ending}: the Deferreds waiting for something to end (a client's
session, one subscription), and how it ended.
"""

from twisted.internet.defer import Deferred, fail, succeed


class Ending:
    """
    Something that ends once: whoever waits is told how, before or after.

    @ivar over: it ended.
    @ivar why: the error it ended with, or None if it ended as the
        application asked.
    """

    def __init__(self) -> None:
        self.over = False
        self.why: Exception | None = None
        self._waiters: list[Deferred] = []

    def wait(self) -> Deferred:
        """
        @return: Deferred firing with None once it ended as asked, failing
            with C{why} otherwise.
        """
        if self.over:
            return succeed(None) if self.why is None else fail(self.why)
        d = Deferred()
        self._waiters.append(d)
        return d

    def end(self, why: Exception | None) -> bool:
        """
        It ended, for C{why}.  Only the first call counts.

        @return: whether this call was the first.
        """
        if self.over:
            return False
        self.over, self.why = True, why
        waiters, self._waiters = self._waiters, []
        for d in waiters:
            if why is None:
                d.callback(None)
            else:
                d.errback(why)
        return True
