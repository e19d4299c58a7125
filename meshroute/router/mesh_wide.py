"""
Mesh-wide subscriptions: telling a subscriber when its interest has
reached every router that is reachable now (docs/topics.md), so that a
publication sent from anywhere after that is sent its way.

Every router that takes a newer interest advertisement of another router
(L{meshroute.router.topic_interest}), not an empty one, tells that
router so, with a notice
to its system queue C{$interest-held} naming the version it now holds.
The router that advertised keeps the newest version each router said it
holds; a wait for version V is over when every router reachable now
holds V or above.  The routes are asked again at each notice and every
L{RECHECK_S} while anyone waits, so a router that became unreachable
stops being waited for.  Notices are system messages (non-persistent,
never waiting for a route): one lost is made good by the next change,
and a wait that lasts C{timeout_s} fails (L{MeshWideTimeout}).
"""

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IDelayedCall, IReactorTime

from meshroute.errors import MeshrouteError
from meshroute.messages import INTEREST_HELD, Message

#: While a wait lasts, how often the routes are asked again, seconds.
RECHECK_S = 0.25
#: The header of a notice naming the version held.
VERSION = "version"


class MeshWideTimeout(MeshrouteError):
    """
    The interest did not reach every reachable router in time.
    """

    code = "timeout"


class MeshWide:
    """
    Router C{name}'s side of mesh-wide subscriptions.

    @param interest: its L{meshroute.router.topic_interest.TopicInterest}.
    @param routes: its route table (C{routes()}: the reachable routers).
    @param system: its L{meshroute.router.system_messages.SystemMessages}.
    """

    def __init__(self, name: str, interest, routes, system, clock: IReactorTime,
                 timeout_s: float = 30.0) -> None:
        self._name = name
        self._interest = interest
        self._routes = routes
        self._system = system
        self._clock = clock
        self._timeout_s = timeout_s
        self._held: dict[str, int] = {}
        self._waits: list[tuple[int, Deferred, IDelayedCall]] = []
        self._recheck: IDelayedCall | None = None
        system.serve(INTEREST_HELD, self._notice)

    def taken(self, origins) -> None:
        """
        This router took newer interest of C{origins}: tell each (not of
        an empty one: no subscription waits for its withdrawal).
        """
        now = self._clock.seconds()
        table = self._interest.table
        for origin in origins:
            if origin == self._name or not table.patterns(origin):
                continue
            version = self._interest.table.version(origin)
            self._system.send(Message(
                msg_id=f"{self._name}:held:{origin}:{version}", origin=self._name,
                dest_router=origin, dest_queue=INTEREST_HELD, body=b"",
                headers={VERSION: str(version)}, persistent=False, accepted_at=now))

    def _notice(self, message: Message) -> None:
        try:
            version = int(message.headers.get(VERSION, ""))
        except ValueError:
            return
        if version > self._held.get(message.origin, 0):
            self._held[message.origin] = version
        self._check()

    def wait(self) -> Deferred:
        """
        A Deferred firing once every router reachable now holds this
        router's interest as it is now; failing with L{MeshWideTimeout}
        after C{timeout_s}.
        """
        version = self._interest.local.version
        d = Deferred()
        timer = self._clock.callLater(self._timeout_s, self._timed_out, d, version)
        self._waits.append((version, d, timer))
        self._check()
        return d

    def missing(self, version: int) -> set[str]:
        """
        The reachable routers not known to hold C{version} of our interest.
        """
        return {router for router in self._routes.routes()
                if self._held.get(router, 0) < version}

    def _check(self) -> None:
        waiting = []
        for version, d, timer in self._waits:
            if self.missing(version):
                waiting.append((version, d, timer))
            else:
                timer.cancel()
                d.callback(None)
        self._waits = waiting
        if waiting and self._recheck is None:
            self._recheck = self._clock.callLater(RECHECK_S, self._rechecked)

    def _rechecked(self) -> None:
        self._recheck = None
        self._check()

    def _timed_out(self, d: Deferred, version: int) -> None:
        self._waits = [wait for wait in self._waits if wait[1] is not d]
        d.errback(MeshWideTimeout(
            f"after {self._timeout_s:g} s, routers {sorted(self.missing(version))} had not "
            "confirmed this router's topic interest"))

    def stop(self) -> None:
        if self._recheck is not None and self._recheck.active():
            self._recheck.cancel()
        self._recheck = None
        waits, self._waits = self._waits, []
        for _version, d, timer in waits:
            timer.cancel()
            d.errback(MeshWideTimeout("the router is stopping"))
