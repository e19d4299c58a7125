"""
The settings of one router: its name, its data-dir, the C{[routing]}
limits of its message engine, and each component's own settings,
composed; and the rules that judge them (L{errors}, L{warnings}).

Each component defines its settings and the rules for their combination
beside its code (L{meshroute.link.settings},
L{meshroute.sessions.settings}, L{meshroute.store.settings},
L{meshroute.router.admin_settings}, L{meshroute.security.settings},
L{meshroute.stomp.settings}, L{meshroute.harules.settings},
L{meshroute.events.RotationSettings}).  L{RouterConfig} gathers them for
the router (L{meshroute.router.service.RouterService}) or its HA instance; L{errors}
and L{warnings} ask each component, and judge what spans components,
and what spans the instances one process runs (L{colocation_errors}:
C{[[ha.colocated]]}).  The TOML loader (the composition layer) builds a L{RouterConfig} from a file,
and reports what these find naming the file; nothing here reads one.
"""

import os
from dataclasses import dataclass

from meshroute.router import admin_settings as admin_settings
from meshroute.router.admin_settings import AdminConfig
from meshroute.errors import Problem
from meshroute.events import RotationSettings
from meshroute.harules import settings as ha_settings
from meshroute.harules.settings import HASettings
from meshroute.link import settings as link_settings
from meshroute.link.settings import ConnectorConfig, ListenerConfig
from meshroute.security.settings import SecurityConfig
from meshroute.sessions import settings as session_settings
from meshroute.sessions.settings import (
    ClientListenerConfig,
    ClientQueueConfig,
    ClientReconnectConfig,
)
from meshroute.mqtt import settings as mqtt_settings
from meshroute.mqtt.settings import MqttListenerSettings
from meshroute.stomp import settings as stomp_settings
from meshroute.stomp.settings import StompListenerSettings
from meshroute.store.settings import StoreConfig
from meshroute.router.early_accepts import DEFAULT_EARLY_ACCEPT_HOLD_MS
from meshroute.topics.backlog import DEFAULT_HOLD_AT


@dataclass(frozen=True)
class RoutingConfig:
    """
    The scalar keys of C{[routing]}: how far and how long messages travel
    (the message engine's limits, L{meshroute.router.engine.MessageEngine}).

    @ivar max_hops: links a message may cross before it is dead-lettered.
    @ivar max_backlog: persistent messages that may wait (in the store) for
        one destination router; past it, producers get an error.
    @ivar max_transient_backlog: non-persistent messages that may wait (in
        memory) for one destination router.
    @ivar reroute_delay_ms: how long a closed link keeps its unacknowledged
        messages for its own recovery before they may take another route.
    @ivar early_accept_hold_ms: how long the origin of a send that left
        before its commit holds its accept for the next hop's
        acknowledgement, which spares writing it
        (L{meshroute.router.early_accepts}); 0: written at once.
    @ivar max_retained: retained topic messages the router keeps
        (docs/topics.md, "Retained messages"), and C{max_retained_bytes}
        of their bodies in all: past either, one for a new topic is
        refused.
    @ivar hold_publishers_at: publications waiting in C{$topic} at which
        the router stops reading its topic publishers' connections, until
        half as many wait (L{meshroute.topics.backlog}).
    """

    max_hops: int = 16
    max_backlog: int = 100_000
    max_transient_backlog: int = 10_000
    reroute_delay_ms: int = 5000
    early_accept_hold_ms: int = DEFAULT_EARLY_ACCEPT_HOLD_MS
    max_retained: int = 10_000
    max_retained_bytes: int = 64 * 1024 * 1024
    hold_publishers_at: int = DEFAULT_HOLD_AT


@dataclass(frozen=True)
class RouterConfig:
    """
    A whole router configuration; C{path} is the file it was loaded from.

    @ivar colocated: the configurations of the HA instances its process
        runs beside this router (C{[[ha.colocated]]}, docs/ha.md), each
        a whole configuration of its own; the router never reads them:
        the composition layer builds one instance per entry.
    """

    path: str
    name: str
    data_dir: str
    listener: ListenerConfig | None
    connectors: tuple[ConnectorConfig, ...]
    admin: AdminConfig | None
    routing: RoutingConfig = RoutingConfig()
    store: StoreConfig = StoreConfig()
    clients: ClientListenerConfig | None = None
    client_reconnect: ClientReconnectConfig = ClientReconnectConfig()
    client_queue: ClientQueueConfig = ClientQueueConfig()
    ha: HASettings | None = None
    security: SecurityConfig | None = None
    stomp_listener: StompListenerSettings | None = None
    mqtt_listener: MqttListenerSettings | None = None
    events: RotationSettings = RotationSettings()
    colocated: tuple["RouterConfig", ...] = ()


def errors(config: RouterConfig, reactor) -> list[Problem]:
    """
    What would stop the router working, each naming its key, in the
    order of the file's sections; empty when C{config} is usable.

    @param reactor: only used to construct (never listen on) the admin
        endpoint (L{meshroute.router.admin_settings.errors}).
    """
    found = link_settings.errors(config.name, config.connectors)
    if config.admin is not None:
        found += admin_settings.errors(config.admin, reactor)
    found += session_settings.errors(config.clients, config.client_reconnect,
                                     config.client_queue)
    if config.ha is not None:
        if config.ha.client_endpoints and config.clients is None:
            found.append(Problem("ha.client-endpoints",
                                 "this instance has no [clients.listener] for clients to "
                                 "reach"))
        found += ha_settings.errors(config.ha, config.name)
    if config.stomp_listener is not None:
        found += stomp_settings.errors(config.stomp_listener)
    if config.mqtt_listener is not None:
        found += mqtt_settings.errors(config.mqtt_listener)
    found += colocation_errors(config)
    return found


def colocation_errors(config: RouterConfig) -> list[Problem]:
    """
    What keeps the instances of one process (C{config}'s router and the
    HA instances it hosts) from running side by side, each problem named
    by the C{[[ha.colocated]]} entry that brings it in: two instances on
    one data-dir, one router name twice (an instance twice, or both
    instances of one pair, which the loss of the process would both
    take), or two listeners on one address.
    """
    found = []
    for index, hosted in enumerate(config.colocated):
        key = f"ha.colocated[{index}].config"
        for other in (config, *config.colocated[:index]):
            problem = _side_by_side_problem(hosted, other)
            if problem is not None:
                found.append(Problem(key, f"{hosted.path}: {problem}"))
    return found


def _side_by_side_problem(hosted: RouterConfig, other: RouterConfig) -> str | None:
    """
    Why C{hosted} cannot run in the process of C{other}, or None.
    """
    if hosted.name == other.name:
        if other.ha is not None and other.ha.role != hosted.ha.role:
            return (f"both instances of router {hosted.name!r}'s pair would run in one "
                    f"process (the other from {other.path}), and its loss would take both: "
                    "host an instance of another router")
        return f"router {hosted.name!r} runs in this process already, from {other.path}"
    if os.path.realpath(hosted.data_dir) == os.path.realpath(other.data_dir):
        return (f"router.data-dir {hosted.data_dir!r} is the data-dir of {other.path} too: "
                "each instance of a process keeps its own")
    for key, endpoint in listening_endpoints(hosted):
        for other_key, other_endpoint in listening_endpoints(other):
            if ha_settings.listeners_clash(endpoint, other_endpoint):
                return (f"{key} {endpoint!r} listens where {other.path}'s {other_key} "
                        f"{other_endpoint!r} does: each instance needs its own")
    return None


def keyed(key: str, descriptions: tuple[str, ...]) -> list[tuple[str, str]]:
    """
    C{(key, description)} of each endpoint of a key that takes one or a
    list of them: the key itself for one, C{key[INDEX]} for each of several.
    """
    if len(descriptions) == 1:
        return [(key, descriptions[0])]
    return [(f"{key}[{index}]", description) for index, description in enumerate(descriptions)]


def serving_endpoints(config: RouterConfig) -> list[tuple[str, str]]:
    """
    The server endpoints of C{config} that serve only once its store is
    open (routing, clients, STOMP, MQTT and their WebSockets), each with its key.
    """
    found = []
    if config.listener is not None:
        found.append(("routing.listener.endpoint", config.listener.endpoint))
    if config.clients is not None:
        found += keyed("clients.listener.endpoint", config.clients.endpoint)
    if config.stomp_listener is not None:
        found += keyed("stomp.listener.endpoint", config.stomp_listener.endpoint)
        found += keyed("stomp.listener.websocket", config.stomp_listener.websocket)
    if config.mqtt_listener is not None:
        found += keyed("mqtt.listener.endpoint", config.mqtt_listener.endpoint)
        found += keyed("mqtt.listener.websocket", config.mqtt_listener.websocket)
    return found


def listening_endpoints(config: RouterConfig) -> list[tuple[str, str]]:
    """
    Every server endpoint of C{config}, with its key.
    """
    found = serving_endpoints(config)
    if config.admin is not None:
        found.append(("admin.endpoint", config.admin.endpoint))
    if config.ha is not None and config.ha.replication is not None:
        found.append(("ha.replication.listener", config.ha.replication.listener))
    return found


def warnings(config: RouterConfig) -> list[Problem]:
    """
    What works but probably not as the operator hopes: a client listener
    open to anyone (no C{[security]}), and the HA settings' own warnings.
    """
    found = []
    if config.clients is not None and config.security is None:
        found.append(Problem(
            "security",
            f"no [security] section: the client listener {_listed(config.clients.endpoint)} "
            "is open to any client that reaches it, which may send to every queue of the "
            "mesh and consume from every local queue (docs/security.md)"))
    if config.stomp_listener is not None and config.security is None:
        found.append(Problem(
            "security",
            "no [security] section: the STOMP listener "
            f"{_listed(config.stomp_listener.endpoint)} is open to any client that reaches "
            "it, with any login (docs/security.md)"))
    if config.mqtt_listener is not None and config.security is None:
        found.append(Problem(
            "security",
            "no [security] section: the MQTT listener "
            f"{_listed(config.mqtt_listener.endpoint)} is open to any client that reaches "
            "it, with any username (docs/security.md)"))
    if config.ha is not None:
        found += ha_settings.warnings(config.ha)
    return found


def _listed(descriptions: tuple[str, ...]) -> str:
    return " and ".join(descriptions)
