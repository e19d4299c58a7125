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

    def next_delay(self) -> float | None:
        """
        Count one more failed attempt.

        @return: seconds to wait before the next attempt, or None when the
            attempts are exhausted.
        """
        self.failures += 1
        if 0 <= self.reconnect_attempts < self.failures:
            return None
        try:
            delay_ms = min(
                self.retry_interval_ms * self.multiplier ** (self.failures - 1),
                self.max_retry_interval_ms,
            )
        except OverflowError:
            # Retrying forever, the growth passed every float long ago
            # (2.0 ** 1024 after ~1024 failures); only the cap is left.
            delay_ms = self.max_retry_interval_ms
        return delay_ms / 1000

    def reset(self) -> None:
        """
        A link reached delivery: the next failure is the first of a run.
        """
        self.failures = 0
