"""
Whether a client's send is taken now, or refused at once with nothing
stored: refused when the router's disk has less free space than its
C{min-free-disk} (L{DiskFull}, whatever the destination:
L{meshroute.store.disk_space} says why), when no router of its
destination's name was ever heard of in the mesh (L{UnknownRouter}), or
when that router's backlog is at its bound (L{BacklogFull}:
C{max-backlog} persistent messages waiting in the store,
C{max-transient-backlog} non-persistent ones in memory).

The persistent backlog counts the sends submitted to the store and not
yet accepted too (L{Admission.accepting}): a burst of sends must not get
past the bound because none of it is committed yet.  So every persistent
send for another router is counted in when it is submitted and out when
its store call ended, whatever the outcome.  Acceptance
(L{meshroute.router.acceptance}) asks and counts here; this module only
decides, so that the bound reads in one place.
"""

from collections import defaultdict

from meshroute.errors import DiskFull, MeshrouteError


class UnknownRouter(MeshrouteError):
    """
    No router of that name has ever been heard of in the mesh.
    """

    code = "unknown-router"


class BacklogFull(MeshrouteError):
    """
    The destination's backlog reached its bound (C{max-backlog}).
    """

    code = "backlog-full"


class _Roomy:
    """
    A disk never low: for an engine made without one to watch.
    """

    low = False


_ROOMY = _Roomy()


class Admission:
    """
    Router C{name}'s admission of clients' sends.

    @param routes: what routers the mesh has heard of (C{known(router)}).
    @param store: the router's store, whose C{backlog_depth(router)} is
        the persistent messages waiting for a router.
    @param transient: L{meshroute.router.transient.TransientPath}, which
        bounds the non-persistent messages waiting for a router.
    @param disk: L{meshroute.store.disk_space.DiskSpace} of the store's
        disk (C{low}, C{describe()}); None: never low.
    @ivar max_backlog: persistent messages that may wait (in the store, or
        on their way into it) for one destination router.
    """

    def __init__(self, name: str, routes, store, transient, max_backlog: int,
                 disk=None) -> None:
        self._name = name
        #: The disk whose C{low} refuses every send.
        self.disk = disk if disk is not None else _ROOMY
        self._routes = routes
        self._store = store
        self._transient = transient
        self.max_backlog = max_backlog
        self._accepting: dict[str, int] = defaultdict(int)

    def refusal(self, router: str, persistent: bool) -> MeshrouteError | None:
        """
        Why a send to C{router} would be refused now, if it would: the
        disk is low, no router of that name is known, or its backlog is at
        its bound.  Non-persistent sends too are refused while the disk
        is low: their records in the event log take the room that drains
        the store.
        """
        if self.disk.low:
            return DiskFull(self.disk.describe())
        if router == self._name:
            return None
        if not self._routes.known(router):
            return UnknownRouter(f"no router named {router!r} is known in the mesh")
        if persistent:
            waiting = self._store.backlog_depth(router) + self._accepting[router]
            if waiting >= self.max_backlog:
                return BacklogFull(f"{waiting} messages already wait for {router} (max-backlog)")
        else:
            if self._transient.full(router):
                return BacklogFull(f"{self._transient.waiting(router)} non-persistent messages "
                                   f"already wait for {router}")
        return None

    def accepting(self, router: str) -> int:
        """
        Persistent messages for C{router} submitted to the store and not
        yet accepted (they join its backlog when they are).
        """
        return self._accepting.get(router, 0)

    def submitted(self, router: str) -> None:
        "A persistent send for C{router}, another router, went to the store."
        self._accepting[router] += 1

    def ended(self, router: str) -> None:
        """
        The store call of a persistent send for C{router} ended: it is in
        the backlog now, or was not stored.
        """
        self._accepting[router] -= 1
