"""
The client's keepalive, for one connection at a time: a traffic timer (as
magic-wormhole's TrafficTimer) that pings and runs the failure check.  (The
routing link's keepalive is another rule: L{meshroute.link}.)

Three rules, each measured from the last traffic in one direction:

- I{ping to stay alive}: nothing sent for a third of the TTL in force →
  send a Ping (the router closes a connection that sent nothing for its
  TTL);
- I{probe}: nothing received for two thirds of
  C{client-failure-check-period} → send a Ping, once per silence, so a live
  but idle router answers (with a Pong) before the check below;
- I{failure check}: nothing received for C{client-failure-check-period} →
  the connection failed.

One delayed call at the earliest deadline does all three; traffic only
records the time, so it costs nothing per frame.
"""

from typing import Callable

from twisted.internet.interfaces import IDelayedCall, IReactorTime

#: Slack for float arithmetic: a deadline this close to now is due.
_EPSILON = 1e-9


class TrafficTimer:
    """
    Pings and the failure check of one connection, timed from its traffic.

    @param ping: called to send a Ping (which counts as sent traffic).
    @param silent: called once when the failure check fires; the timer is
        stopped by then.
    """

    def __init__(self, clock: IReactorTime, ping: Callable[[], None],
                 silent: Callable[[float], None]) -> None:
        self._clock = clock
        self._ping = ping
        self._silent = silent
        self._call: IDelayedCall | None = None
        self._ping_after: float | None = None
        self._probe_after: float | None = None
        self._fail_after: float | None = None
        self.last_sent = 0.0
        self.last_received = 0.0
        self._probed = False
        self._running = False

    def start(self, ttl_ms: int, check_period_ms: int) -> None:
        """
        A connection began: time both directions from now.
        """
        self.stop()
        self._ping_after = ttl_ms / 3000 if ttl_ms > 0 else None
        if check_period_ms > 0:
            self._fail_after = check_period_ms / 1000
            self._probe_after = check_period_ms * 2 / 3000
        else:
            self._fail_after = self._probe_after = None
        now = self._clock.seconds()
        self.last_sent = self.last_received = now
        self._probed = False
        self._running = True
        self._schedule(now)

    def stop(self) -> None:
        """
        The connection ended (or its failure was declared).
        """
        self._running = False
        if self._call is not None and self._call.active():
            self._call.cancel()
        self._call = None

    def sent(self) -> None:
        """
        Something was written to the connection.
        """
        self.last_sent = self._clock.seconds()

    def received(self) -> None:
        """
        Something arrived from the connection.
        """
        self.last_received = self._clock.seconds()
        self._probed = False

    def _deadlines(self):
        if self._ping_after is not None:
            yield self.last_sent + self._ping_after
        if self._probe_after is not None and not self._probed:
            yield self.last_received + self._probe_after
        if self._fail_after is not None:
            yield self.last_received + self._fail_after

    def _schedule(self, now: float) -> None:
        deadline = min(self._deadlines(), default=None)
        if deadline is not None:
            self._call = self._clock.callLater(max(0.0, deadline - now), self._due)

    def _due(self) -> None:
        self._call = None
        now = self._clock.seconds() + _EPSILON
        if self._fail_after is not None and self.last_received + self._fail_after <= now:
            self._running = False
            self._silent(self._clock.seconds() - self.last_received)
            return
        probe = (self._probe_after is not None and not self._probed
                 and self.last_received + self._probe_after <= now)
        keep = self._ping_after is not None and self.last_sent + self._ping_after <= now
        if probe or keep:
            if probe:
                self._probed = True
            self._ping()
            self.sent()
        if self._running and self._call is None:
            self._schedule(self._clock.seconds())
