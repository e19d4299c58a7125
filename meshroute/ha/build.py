"""
An HA instance of a router configuration, with all its real parts: what
C{twistd meshroute} runs for a configuration with C{[ha]}.

The parts (L{HAInstance}'s own voter records in C{ha.db}, its vote
connections, its replication over C{store.db}, its replication listener)
are built here, so that the in-memory tests build the very same instance
on other endpoints and executors.
"""

import dataclasses
import os
from collections.abc import Callable

from twisted.internet.interfaces import IReactorTime
from twisted.web.server import Site

from meshroute.ha.instance import HAInstance, stage_valid_timeout_ms
from meshroute.ha.listener import replication_listener
from meshroute.ha.records import HA_DB, HARecords
from meshroute.ha.store_replication import StoreReplication
from meshroute.ha.voters import Voters, WitnessConnection, asking_witness
from meshroute.link.context import RouterContext
from meshroute.link.retry import RetrySchedule
from meshroute.link.rotation import EndpointRotation
from meshroute.link.settings import ConnectorSettings, ListenerSettings
from meshroute.router.listening import listening
from meshroute.router.settings import RouterConfig
from meshroute.store.writers import store_executor


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
        the one C{[store] writer} names, on C{clock}, by default.
    @param stop_process: ends the instance's part of the process
        (L{HAInstance}'s C{stop_process}); C{clock.stop} (the reactor's)
        by default.
    @param read_config: reads C{config}'s file again, for reloads
        (L{HAInstance}'s C{read_config}).
    @param admin_site: makes the site of its admin endpoint
        (L{HAInstance}'s C{admin_site}; L{meshroute.process} hands down the
        admin API's).
    """
    ha = config.ha
    factory = executor_factory or (
        lambda replication=None: store_executor(config.store, clock, replication=replication))
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
                                   instance.own_voter, instance.replication.server, settings,
                                   instance.pairing),
              ).setServiceParent(instance)
    return instance


def vote_connections(config: RouterConfig, clock: IReactorTime,
                     endpoints) -> Callable[[str, HAInstance], Voters]:
    """
    How an instance of C{config} reaches its voters: its own voter
    directly (L{HAInstance.own_voter}), the peer over a vote connection
    to the peer's replication listener, each witness over one to its
    routing listener; all with the mesh secret
    (C{ha.replication.password-file}), dialled again every
    heartbeat-interval while down.
    """
    ha = config.ha
    lease_timeout = ha.lease_timeout_ms / 1000

    def connection(context, router: str, endpoint: str, voter: str | None = None):
        return WitnessConnection(
            context, ConnectorSettings(ha.replication.secret, router,
                                       stage_valid_timeout_ms(config)),
            EndpointRotation([(endpoint, endpoints.client(endpoint))]),
            RetrySchedule(ha.heartbeat_interval_ms, 1.0, ha.heartbeat_interval_ms, -1),
            clock, ha.group_name, lease_timeout, voter=voter)

    def voters_for(name: str, own: HAInstance) -> Voters:
        context = RouterContext(name=config.name, clock=clock, events=own.events,
                                registry=own.registry, engine=None, group=ha.group_name)
        # The peer's connection checks that both are of one group.
        peer = connection(dataclasses.replace(context, pairing=own.pairing), config.name,
                          ha.replication.peer, own.peer_instance)
        witnesses = [connection(context, witness.router, witness.endpoint)
                     for witness in ha.witnesses]
        return Voters(clock, name, {name: asking_witness(own.own_voter, name, ha.group_name,
                                                         lease_timeout)},
                      [peer, *witnesses])

    return voters_for
