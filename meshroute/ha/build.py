"""
An HA instance of a router configuration, with all its real parts: what
C{twistd meshroute} runs for a configuration with C{[ha]}.

The parts (L{HAInstance}'s own voter records in C{ha.db}, its vote
connections, its replication over C{store.db}, its replication listener)
are built here, so that the in-memory tests build the very same instance
on other endpoints and executors.
"""

import os
from collections.abc import Callable

from twisted.internet.interfaces import IReactorTime
from twisted.web.server import Site

from meshroute.ha.instance import HAInstance, stage_valid_timeout_ms, vote_connections
from meshroute.ha.listener import replication_listener
from meshroute.ha.records import HA_DB, HARecords
from meshroute.ha.replication import StoreReplication
from meshroute.link.handshake import ListenerSettings
from meshroute.router.service import listening
from meshroute.router.settings import RouterConfig
from meshroute.store import ThreadedExecutor


def build_instance(config: RouterConfig, clock: IReactorTime, endpoints,
                   executor_factory=None, stop_process=None,
                   read_config: Callable[[], RouterConfig] | None = None,
                   admin_site: Callable[..., Site] | None = None) -> HAInstance:
    """
    The HA instance of C{config} (which has C{[ha]}).

    @param endpoints: turns endpoint strings into endpoints
        (L{meshroute.router.service.StringEndpoints} on a real reactor).
    @param executor_factory: makes an unstarted store executor, given its
        C{replication} (None for C{ha.db} and the replica): a
        L{ThreadedExecutor} on C{clock} by default.
    @param stop_process: ends the process; C{clock.stop} (the reactor's)
        by default.
    @param read_config: reads C{config}'s file again, for reloads
        (L{HAInstance}'s C{read_config}).
    @param admin_site: makes the site of its admin endpoint
        (L{HAInstance}'s C{admin_site}; L{meshroute.tap} hands down the
        admin API's).
    """
    ha = config.ha
    factory = executor_factory or (
        lambda replication=None: ThreadedExecutor(clock, replication=replication))
    records = HARecords(os.path.join(config.data_dir, HA_DB), factory())
    instance = HAInstance(
        config, clock, endpoints, records, vote_connections(config, clock, endpoints),
        lambda instance: StoreReplication(clock, config, endpoints, instance.events,
                                          instance.registry, factory),
        stop_process or clock.stop, read_config, admin_site)
    # The peer reaches this instance's voter and, while it is active, its
    # store's changes here; keepalives each heartbeat-interval tell each
    # side that the other is alive.
    settings = ListenerSettings(
        secret=ha.replication.secret,
        keepalive_interval_ms=ha.heartbeat_interval_ms,
        stage_valid_timeout_ms=stage_valid_timeout_ms(config),
        reject_disconnect_delay_ms=(config.listener.reject_disconnect_delay_ms
                                    if config.listener is not None else 5000),
    )
    listening(endpoints, config, "ha.replication.listener", ha.replication.listener,
              replication_listener(config.name, clock, instance.events, instance.registry,
                                   instance, instance.replication.server, settings,
                                   instance.pairing),
              ).setServiceParent(instance)
    return instance
