"""
Artemis' reconnection rule for routing connectors, without time in it.

The first retry waits C{retry-interval}; each further one waits
C{retry-interval-multiplier} times longer, never more than
C{max-retry-interval}.  C{reconnect-attempts} bounds the retries in a row
(0: none, −1: forever).  A link that reaches delivery starts the count
over.

What counts as a failed attempt is a connection that did not end in a
link in delivery: a refused TCP connect, a rejected or timed-out
handshake, or a delivery link that later died (the retry after a death is
the first of a new run).

A client whose connection to its router was closed under it (EOF or
reset: the router's process is gone) makes the first retry of that run at
once (L{RetrySchedule.retry_at_once}), as Artemis' client fails over
"straight away" when the socket closes; the waits of the retries after it
are those of any run, C{retry-interval} first.
"""

from dataclasses import dataclass


@dataclass
class RetrySchedule:
    """
    Delays between reconnection attempts, in seconds.
    """

    retry_interval_ms: int
    multiplier: float
    max_retry_interval_ms: int
    reconnect_attempts: int
    failures: int = 0
    #: The run's first retry was made at once: the waits start one failure
    #: later.
    started_at_once: bool = False

    def next_delay(self) -> float | None:
        """
        Count one more failed attempt.

        @return: seconds to wait before the next attempt, or None when the
            attempts are exhausted.
        """
        if not self._count_failure():
            return None
        waits = self.failures - int(self.started_at_once)  # this one's included
        try:
            delay_ms = min(
                self.retry_interval_ms * self.multiplier ** (waits - 1),
                self.max_retry_interval_ms,
            )
        except OverflowError:
            # Retrying forever, the growth passed every float long ago
            # (2.0 ** 1024 after ~1024 failures); only the cap is left.
            delay_ms = self.max_retry_interval_ms
        return delay_ms / 1000

    def retry_at_once(self) -> float | None:
        """
        Count the failure that starts a run (the schedule was reset, or
        never used), whose retry is due at once rather than after
        C{retry-interval}: it counts against
        C{reconnect-attempts} as any other, and the retry after it waits
        C{retry-interval}, the one after that C{retry-interval} times the
        multiplier, and so on.

        @return: 0, or None when no attempt is allowed
            (C{reconnect-attempts} = 0).
        """
        if not self._count_failure():
            return None
        self.started_at_once = True
        return 0.0

    def _count_failure(self) -> bool:
        """
        Count one more failed attempt: whether another one is allowed.
        """
        self.failures += 1
        return not 0 <= self.reconnect_attempts < self.failures

    def reset(self) -> None:
        """
        A link reached delivery: the next failure is the first of a run.
        """
        self.failures = 0
        self.started_at_once = False
