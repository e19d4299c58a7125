"""
The router an HA instance runs while it is active, and the turns of
C{store.db}.

C{store.db} has one holder at a time: the instance's replica while it
does not serve (filled by the follower while it follows the active), and
the router of an active period while it serves, a L{RouterService} built
afresh for each period (routing listener, connectors, client listener,
deliveries) with its period's epoch, its store's commits passing through
the replication side's gate.  Each change of holder waits for the one
before it: the replica is closed only once the follower stopped, the
router starts only once the replica is closed, the replica opens again
only once the router stopped.
"""

import dataclasses
from collections.abc import Callable

from twisted.application.service import MultiService
from twisted.internet import defer
from twisted.internet.interfaces import IReactorTime

from meshroute.ha.own_voter import OwnVoter
from meshroute.router.service import HostedParts, RouterService
from meshroute.router.settings import RouterConfig
from meshroute.sessions.ha_view import HAView


class ActiveRouter:
    """
    The router of the instance whose service is C{parent}, and who holds
    its C{store.db}.

    @param replication: the instance's L{meshroute.ha.instance.ReplicationSide}.
    @param host: what the instance lends each router it runs.
    @param own_voter: the instance's voter, which answers other groups
        from the serving router's store.
    @param read_config: reads the configuration's file again, for each
        router (L{RouterService}'s C{read_config}).

    @ivar router: the L{RouterService} while the instance serves, else None.
    """

    def __init__(self, parent: MultiService, config: RouterConfig, clock: IReactorTime,
                 endpoints, replication, host: HostedParts, own_voter: OwnVoter,
                 read_config: Callable[[], RouterConfig] | None) -> None:
        self._parent = parent
        self._config = config
        self._clock = clock
        self._endpoints = endpoints
        self._replication = replication
        self._host = host
        self._own_voter = own_voter
        self._read_config = read_config
        self.router: RouterService | None = None
        self._turn: defer.Deferred = defer.succeed(None)

    def _then(self, step: Callable[[], object]) -> None:
        self._turn.addCallback(lambda _: step())

    # -- the replica's turns ----------------------------------------------------

    def follow(self, caught_up: Callable[[], None], heard: Callable[[], None]) -> None:
        """
        Replicate from the active into the replica, once it is the
        replica's turn.
        """
        self._then(lambda: self._replication.follow(caught_up, heard))

    def stop_following(self) -> None:
        self._then(self._replication.stop_following)

    # -- the router's turns -----------------------------------------------------

    def serve(self, start: Callable[[], None]) -> None:
        """
        Stop following and close the replica, then C{start} (which may
        find that the instance no longer serves meanwhile, and start
        nothing).
        """
        self._then(self._replication.stop_following)
        self._then(self._replication.close_replica)
        self._then(start)

    def start(self, epoch: int, executor, ha_view: Callable[[], HAView]) -> None:
        """
        Run this active period's router on C{store.db} with C{executor},
        its links and route advertisements carrying C{epoch}, the epoch it
        started serving in (a later epoch of the same active period, to
        run alone or replicated again, is newer still than any earlier
        active's); C{ha_view} is what its client listener tells clients.
        """
        self.router = RouterService(dataclasses.replace(self._config, admin=None), self._clock,
                                    self._endpoints, executor=executor, host=self._host,
                                    epoch=epoch, ha_view=ha_view,
                                    read_config=self._read_config)
        self._own_voter.serve(self.router.store)
        self.router.setServiceParent(self._parent)

    def stop_serving(self) -> None:
        """
        Stop the router, then open the replica again.
        """
        self._then(self._stop_router)
        self._then(self._replication.open_replica)

    def close(self) -> defer.Deferred:
        """
        Stop following or serving, and close the replica; fires when all
        is done.
        """
        self._then(self._replication.stop_following)
        self._then(self._stop_router)
        self._then(self._replication.close_replica)
        return self._turn

    def _stop_router(self) -> defer.Deferred | None:
        router, self.router = self.router, None
        if router is not None:
            self._own_voter.stop_serving()
            return defer.maybeDeferred(router.disownServiceParent)
        return None
