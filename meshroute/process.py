"""
What one meshroute process runs: the router of its configuration file
(a router, or an instance of an HA pair) and, beside it, the HA instances
that file hosts (C{[[ha.colocated]]}, docs/ha.md "Colocated backups"),
as Artemis colocates a backup server in the JVM of another live server.

Every instance is built from its own configuration by L{instance_service},
the one place that chooses what runs for a configuration, and keeps its
own listeners, data-dir, event log and admin endpoint; they share the
reactor, its thread pool and the process.  What belongs to the process
(signals, C{gc.freeze}, twistd's log) stays in L{meshroute.tap}, once.
"""

import functools
from collections.abc import Callable

from twisted.application.service import MultiService, Service
from twisted.internet import defer
from twisted.logger import Logger

from meshroute.admin.api import admin_site
from meshroute.config import load_config
from meshroute.ha.build import build_instance
from meshroute.ha.shared_store import SharedStoreInstance
from meshroute.harules.settings import SHARED_STORE
from meshroute.router.service import RouterService, StringEndpoints
from meshroute.router.settings import RouterConfig

log = Logger()


def instance_service(config: RouterConfig, reactor, endpoints,
                     stop_instance: Callable[[], None]) -> Service:
    """
    The service of one configuration: a L{RouterService}, or for a
    configuration with C{[ha]} an instance of an HA pair
    (L{meshroute.ha.instance.HAInstance}, or with C{policy =
    "shared-store"} L{meshroute.ha.shared_store.SharedStoreInstance}),
    which runs the router only while it is the active one.  Each answers
    C{reload_security()}.

    @param endpoints: turns endpoint strings into endpoints
        (L{StringEndpoints} on C{reactor}).
    @param stop_instance: ends this instance's part of the process, when
        it ends by itself (its store cannot be opened; a backup that
        handed its router back with C{restart-backup = false}).
    @raise ConfigError: what only building shows (the users file, the
        data-dir), naming the file and the key.
    """
    # A reload (SIGHUP, the admin API) reads the file with this loader.
    read_config = functools.partial(load_config, config.path, reactor)
    if config.ha is None:
        return RouterService(config, reactor, endpoints, read_config=read_config,
                             admin_site=admin_site, stop_process=stop_instance)
    if config.ha.policy == SHARED_STORE:
        return SharedStoreInstance(config, reactor, endpoints, stop_instance,
                                   read_config=read_config, admin_site=admin_site)
    return build_instance(config, reactor, endpoints, stop_process=stop_instance,
                          read_config=read_config, admin_site=admin_site)


class ProcessService(MultiService):
    """
    The instances of one process: C{config}'s router and one per
    configuration in C{config.colocated}, each built by C{build}.

    An instance that ends by itself ends alone: it leaves this service
    and the others go on (a colocated backup that stops does not take
    the live router beside it); the reactor stops with the last one.

    @param build: L{instance_service}'s signature; tests give another.
    """

    def __init__(self, config: RouterConfig, reactor, endpoints=None,
                 build: Callable[..., Service] = instance_service) -> None:
        super().__init__()
        self._reactor = reactor
        endpoints = endpoints if endpoints is not None else StringEndpoints(reactor)
        for each in (config, *config.colocated):
            self._add(build, each, endpoints)

    def _add(self, build, config: RouterConfig, endpoints) -> None:
        instance = build(config, self._reactor, endpoints, lambda: self._ended(instance, config))
        instance.setServiceParent(self)

    def reload_security(self) -> bool:
        """
        SIGHUP: every instance reads its C{[security]} and users file
        again; whether any put a new policy in force.
        """
        reloaded = [instance.reload_security() for instance in self]
        return any(reloaded)

    def _ended(self, instance: Service, config: RouterConfig) -> None:
        """
        C{instance} ended by itself: stop it and let it go; stop the
        reactor when no instance is left.  (Nothing to do once the
        process stops anyway, or for an instance already gone.)
        """
        if not self.running or instance.parent is not self:
            return
        log.info("{path}: its instance ends; {left} left in this process", path=config.path,
                 left=len(self.services) - 1)
        stopping = defer.maybeDeferred(instance.disownServiceParent)
        stopping.addErrback(lambda failure: log.failure(
            "{path}: its instance did not stop cleanly", failure, path=config.path))
        stopping.addCallback(lambda _: self._stop_when_empty())

    def _stop_when_empty(self) -> None:
        if self.running and not self.services:
            self._reactor.stop()
