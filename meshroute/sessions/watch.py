"""
The live connections of one client listener, native, STOMP or MQTT, and
the one timer that watches them all.

Every connection a listener serves answers the same three questions
(C{handshake_late}, C{silent_too_long}, C{frame_late}) and takes the same
machine inputs (C{handshake_expired}, C{ttl_expired}, C{frame_overdue},
C{router_stopped}, C{stopped_serving}, C{user_removed}), whatever protocol
it speaks: so one L{ConnectionWatch} runs the TTL check for each
listener, every C{connection-ttl-check-interval}, while it has
connections, and tells them all when the router stops, hands over, or
reloads its users.
"""

from twisted.internet.interfaces import IReactorTime
from twisted.internet.task import LoopingCall


class ConnectionWatch:
    """
    One listener's connections (their cores), in the order they were made
    (a dict, not a set: what is done to all of them happens in one order,
    run after run, so a seeded simulation replays event for event).

    @ivar connections: the live connections' cores.
    """

    def __init__(self, clock: IReactorTime, check_interval_ms: int) -> None:
        self.clock = clock
        self.check_interval_ms = check_interval_ms
        self.connections: dict = {}
        self._check: LoopingCall | None = None

    def add(self, core) -> None:
        self.connections[core] = None
        if self._check is None:
            check = self._check = LoopingCall(self.check)
            check.clock = self.clock
            check.start(self.check_interval_ms / 1000, now=False)

    def remove(self, core) -> None:
        self.connections.pop(core, None)
        if not self.connections and self._check is not None:
            check, self._check = self._check, None
            if check.running:
                check.stop()

    def check(self) -> None:
        """
        Close every connection that has had no session for
        C{stage-valid-timeout}, sent no whole frame for its TTL, or is
        sending one frame for longer than its partial-frame timeout.
        """
        now = self.clock.seconds()
        for core in list(self.connections):
            if core.handshake_late(now):
                core.machine.handshake_expired()
            elif core.silent_too_long(now):
                core.machine.ttl_expired()
            elif core.frame_late(now):
                core.machine.frame_overdue()

    def tell_all(self, what: str) -> None:
        """
        Feed the machine input C{what} (C{router_stopped},
        C{stopped_serving}) to every connection.
        """
        for core in list(self.connections):
            getattr(core.machine, what)()

    def remove_users(self, policy) -> None:
        """
        A reload put C{policy} in force: close the connections of the
        users it no longer has (C{user_removed}), and nothing else.
        """
        for core in list(self.connections):
            if not core.authentication.still_allowed(policy):
                core.machine.user_removed()
