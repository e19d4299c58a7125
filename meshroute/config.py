"""
The TOML loader: one router configuration file in, a validated
L{RouterConfig} of each component's own settings out.

Everything an operator can get wrong is caught before any service starts,
and reported as a L{ConfigError} naming the file and the dotted key
(C{routing.listener.keepalive-interval}, C{routing.connector[1].router}).
The rest of meshroute then trusts these objects without re-checking them.

The loader only reads: it parses the TOML, converts each value (types,
ranges, durations, sizes, endpoints, the files behind C{password-file}
and C{token-file}), and maps each section to its component's settings
class.  The rules that judge a combination of values are the
components', beside their code; L{meshroute.router.settings.errors} asks
each of them, and the loader reports the first problem naming the file.
Being the composition layer, it may import every component; none of them
imports it.

Each section's keys are declared, and each written value converted, in
L{meshroute.config_keys}; this module reads the file and fits its
sections together.  L{meshroute.config_writer} writes a configuration
back as TOML.

Relative paths (C{data-dir}, C{password-file}) are kept as written and so
are relative to the current working directory of the process, as with every
other path given to twistd; they are not relative to the config file.

C{[ha]}, C{[ha.replication]} and C{[[ha.witness]]} load into
L{meshroute.harules.settings.HASettings}; the twistd plugin then runs an HA
instance (L{meshroute.ha.instance}, or for C{policy = "shared-store"}
L{meshroute.ha.shared_store}) instead of a plain router.

C{[[ha.colocated]]} is the one exception to paths being relative to the
working directory: each entry's C{config} names the file of an HA
instance the same process runs beside this router, relative to the
including file (the two are written together, as Artemis' colocated
servers are); it is loaded whole, as its own file, into
L{RouterConfig.colocated}.  A C{[ha]} holding nothing else leaves the
router itself without HA.
"""

import os
import tomllib

from meshroute.config_keys import (
    ADMIN_KEYS,
    CLIENT_LISTENER_KEYS,
    CLIENT_RECONNECT_KEYS,
    CLIENTS_KEYS,
    CONNECTOR_KEYS,
    EVENTS_KEYS,
    HA_COLOCATED_KEYS,
    HA_KEYS,
    HA_REPLICATION_KEYS,
    HA_WITNESS_KEYS,
    HOUR_MS,
    LISTENER_KEYS,
    MQTT_LISTENER_KEYS,
    PERMISSION_KEYS,
    ROUTER_KEYS,
    ROUTING_KEYS,
    SECURITY_KEYS,
    STOMP_LISTENER_KEYS,
    STORE_KEYS,
    Key,
    read_section,
    reject_unknown,
)
from meshroute.errors import ConfigError
from meshroute.events import RotationSettings
from meshroute.harules.settings import HASettings, ReplicationSettings, WitnessSettings
from meshroute.link.settings import ConnectorConfig, ListenerConfig
from meshroute.mqtt.settings import MqttListenerSettings
from meshroute.router import settings as router_settings
from meshroute.router.admin_settings import AdminConfig
from meshroute.router.settings import RouterConfig, RoutingConfig
from meshroute.security.policy import Permission
from meshroute.security.settings import SecurityConfig
from meshroute.sessions import limits
from meshroute.sessions.settings import (
    ClientListenerConfig,
    ClientQueueConfig,
    ClientReconnectConfig,
)
from meshroute.stomp.frames import StompProtocolError, parse_heart_beat
from meshroute.stomp.settings import StompListenerSettings
from meshroute.store.settings import StoreConfig


def _listener_table(table: object, section: str, path: str) -> dict | None:
    """
    The C{listener} table of protocol section C{section} (C{[stomp]},
    C{[mqtt]}), or None without one.
    """
    if not isinstance(table, dict):
        raise ConfigError(path, section, f"expected a table, got {type(table).__name__}")
    reject_unknown(table, ["listener"], path=path, prefix=section)
    return table.get("listener")


def _protocol_listener_values(table: object, keys: tuple[Key, ...], prefix: str,
                              take) -> dict:
    """
    A protocol listener's values by attribute name, its client limits
    gathered as C{limits} and its TTL override as C{ttl_override_ms}.
    """
    values = take(table, keys, prefix)
    values["limits"] = limits.ClientLimits(
        **{name: values.pop(name) for name in limits.ClientLimits.__dataclass_fields__})
    values["ttl_override_ms"] = values.pop("connection_ttl_override")
    return values


def _read_stomp(table: object, take, *, path: str) -> StompListenerSettings | None:
    """
    Read C{[stomp.listener]}, if the C{[stomp]} table has one.

    @param take: L{read_section} bound to the file and reactor.
    """
    listener = _listener_table(table, "stomp", path)
    if listener is None:
        return None
    prefix = "stomp.listener"
    values = _protocol_listener_values(listener, STOMP_LISTENER_KEYS, prefix, take)
    try:
        heartbeat_ms = parse_heart_beat(values.pop("heart_beat"))
    except StompProtocolError as e:
        raise ConfigError(path, f"{prefix}.heart-beat",
                          f"{e.reason} (milliseconds: can send, wants)") from None
    if max(heartbeat_ms) > HOUR_MS:
        raise ConfigError(path, f"{prefix}.heart-beat",
                          f"must be at most {HOUR_MS} ms each, got {heartbeat_ms}")
    return StompListenerSettings(heartbeat_ms=heartbeat_ms, **values)


def _read_mqtt(table: object, take, *, path: str) -> MqttListenerSettings | None:
    """
    Read C{[mqtt.listener]}, if the C{[mqtt]} table has one.

    @param take: L{read_section} bound to the file and reactor.
    """
    listener = _listener_table(table, "mqtt", path)
    if listener is None:
        return None
    return MqttListenerSettings(
        **_protocol_listener_values(listener, MQTT_LISTENER_KEYS, "mqtt.listener", take))


def _check_data_dir(data_dir: str, *, path: str) -> None:
    """
    Refuse a data-dir that is a file or lies below one: the router could
    not create it.  (A missing one is created at start.)
    """
    directory = os.path.abspath(data_dir)
    while not os.path.exists(directory):
        directory = os.path.dirname(directory)
    if not os.path.isdir(directory):
        raise ConfigError(path, "router.data-dir",
                          f"cannot use {data_dir!r}: {directory} is not a directory")


def load_config(path: str | os.PathLike[str], reactor=None) -> RouterConfig:
    """
    Load and validate a router configuration file, and the files of the
    HA instances it hosts (C{[[ha.colocated]]}).

    @param reactor: used only to construct (never listen on or connect)
        each endpoint, to prove its string is valid; the global reactor is
        imported here when none is given, never at module import time.
    @raise ConfigError: for anything that would stop the router working.
    """
    if reactor is None:
        from twisted.internet import reactor as global_reactor

        reactor = global_reactor
    return _load(os.fspath(path), reactor, hosted=False)


def _load(path: str, reactor, hosted: bool) -> RouterConfig:
    """
    L{load_config} of one file.

    @param hosted: whether another file hosts this file's instance.
    """
    try:
        with open(path, "rb") as f:
            document = tomllib.load(f)
    except OSError as e:
        raise ConfigError(path, None, f"cannot read configuration: {e.strerror}") from e
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise ConfigError(path, None, f"invalid TOML: {e}") from e

    def take(table, keys, prefix):
        return read_section(table, keys, path=path, prefix=prefix, reactor=reactor)

    sections = ["router", "routing", "store", "events", "clients", "admin", "ha", "security",
                "stomp", "mqtt"]
    reject_unknown(document, sections, path=path, prefix="")
    if "router" not in document:
        raise ConfigError(path, "router", "required section [router] is missing")
    router = take(document["router"], ROUTER_KEYS, "router")
    _check_data_dir(router["data_dir"], path=path)
    routing = document.get("routing", {})
    if not isinstance(routing, dict):
        raise ConfigError(path, "routing", "expected a table")
    reject_unknown(routing, ["listener", "connector", *(spec.name for spec in ROUTING_KEYS)],
                    path=path, prefix="routing")
    scalars = {k: v for k, v in routing.items() if k not in ("listener", "connector")}
    routing_config = RoutingConfig(**take(scalars, ROUTING_KEYS, "routing"))
    listener = None
    if "listener" in routing:
        listener = ListenerConfig(**take(routing["listener"], LISTENER_KEYS, "routing.listener"))

    tables = routing.get("connector", [])
    if not isinstance(tables, list):
        raise ConfigError(path, "routing.connector", "expected [[routing.connector]] tables")
    connectors = tuple(ConnectorConfig(**take(table, CONNECTOR_KEYS,
                                              f"routing.connector[{index}]"))
                       for index, table in enumerate(tables))
    admin = None
    if "admin" in document:
        admin = AdminConfig(**take(document["admin"], ADMIN_KEYS, "admin"))
    store = StoreConfig(**take(document.get("store", {}), STORE_KEYS, "store"))
    event_rotation = RotationSettings(**take(document.get("events", {}), EVENTS_KEYS, "events"))
    clients = document.get("clients", {})
    if not isinstance(clients, dict):
        raise ConfigError(path, "clients", f"expected a table, got {type(clients).__name__}")
    reject_unknown(clients, ["listener", "reconnect", *(spec.name for spec in CLIENTS_KEYS)],
                    path=path, prefix="clients")
    client_listener = None
    if "listener" in clients:
        client_listener = ClientListenerConfig(
            **take(clients["listener"], CLIENT_LISTENER_KEYS, "clients.listener"))
    client_reconnect = ClientReconnectConfig(
        **take(clients.get("reconnect", {}), CLIENT_RECONNECT_KEYS, "clients.reconnect"))
    scalars = {k: v for k, v in clients.items() if k not in ("listener", "reconnect")}
    client_queue = ClientQueueConfig(**take(scalars, CLIENTS_KEYS, "clients"))
    ha = None
    colocated: tuple[RouterConfig, ...] = ()
    if "ha" in document:
        ha_table, colocated = _read_colocated(document["ha"], reactor, path=path,
                                              hosted=hosted)
        if ha_table is not None:
            ha = _read_ha(ha_table, router["name"], take, path=path)
    security = None
    if "security" in document:
        security = _read_security(document["security"], take, path=path)
    stomp_listener = _read_stomp(document.get("stomp", {}), take, path=path)
    mqtt_listener = _read_mqtt(document.get("mqtt", {}), take, path=path)
    config = RouterConfig(
        path=path, listener=listener, connectors=connectors, admin=admin,
        routing=routing_config, store=store, clients=client_listener,
        client_reconnect=client_reconnect, client_queue=client_queue, ha=ha, security=security,
        stomp_listener=stomp_listener, mqtt_listener=mqtt_listener, events=event_rotation, colocated=colocated, **router
    )
    for problem in router_settings.errors(config, reactor):
        raise ConfigError(path, problem.key, problem.message)
    return config


def _read_security(table: object, take, *, path: str) -> SecurityConfig:
    """
    Read C{[security]} and its C{[[security.permission]]} tables.

    @param take: L{read_section} bound to the file and reactor.
    """
    if not isinstance(table, dict):
        raise ConfigError(path, "security", f"expected a table, got {type(table).__name__}")
    reject_unknown(table, ["permission", *(spec.name for spec in SECURITY_KEYS)],
                    path=path, prefix="security")
    tables = table.get("permission", [])
    if not isinstance(tables, list):
        raise ConfigError(path, "security.permission",
                          "expected [[security.permission]] tables")
    permissions = tuple(Permission(**take(permission, PERMISSION_KEYS,
                                          f"security.permission[{index}]"))
                        for index, permission in enumerate(tables))
    scalars = {k: v for k, v in table.items() if k != "permission"}
    return SecurityConfig(permissions=permissions, **take(scalars, SECURITY_KEYS, "security"))


def _read_colocated(table: object, reactor, *, path: str, hosted: bool
                    ) -> tuple[object, tuple[RouterConfig, ...]]:
    """
    Take C{[[ha.colocated]]} out of C{[ha]} and load the file each entry's
    C{config} names (relative to this file's directory): a whole
    configuration of an HA instance that this router's process runs
    beside it.  A hosted file hosts none itself.  An error in a hosted
    file names it and its key, and which entry hosts it.

    @return: what is left of C{[ha]}, this router's own HA section (None
        when C{[ha]} held nothing but C{[[ha.colocated]]}: a router
        without HA hosting instances), and the hosted configurations,
        their paths absolute.
    """
    if not isinstance(table, dict) or "colocated" not in table:
        return table, ()
    if hosted:
        raise ConfigError(path, "ha.colocated", "a hosted instance hosts none itself")
    tables = table["colocated"]
    if not isinstance(tables, list) or not tables:
        raise ConfigError(path, "ha.colocated", "expected [[ha.colocated]] tables")
    configs = []
    for index, entry in enumerate(tables):
        prefix = f"ha.colocated[{index}]"
        written = read_section(entry, HA_COLOCATED_KEYS, path=path, prefix=prefix,
                        reactor=reactor)["config"]
        hosted_path = os.path.abspath(os.path.join(os.path.dirname(path), written))
        if not os.path.isfile(hosted_path):
            raise ConfigError(path, f"{prefix}.config",
                              f"{written!r}: no configuration file at {hosted_path}")
        try:
            config = _load(hosted_path, reactor, hosted=True)
        except ConfigError as e:
            raise ConfigError(e.path, e.key, f"{e.message} (hosted by {path}, "
                                             f"{prefix}.config)") from None
        if config.ha is None:
            raise ConfigError(hosted_path, "ha", f"required section [ha] is missing: {path} "
                              f"hosts this file's HA instance ({prefix}.config)")
        configs.append(config)
    rest = {key: value for key, value in table.items() if key != "colocated"}
    return rest or None, tuple(configs)


def _read_ha(table: object, router_name: str, take, *, path: str) -> HASettings:
    """
    Read C{[ha]} with its C{[ha.replication]} and C{[[ha.witness]]}; the
    group is named after the router unless C{group-name} says otherwise.

    @param take: L{read_section} bound to the file and reactor.
    """
    if not isinstance(table, dict):
        raise ConfigError(path, "ha", f"expected a table, got {type(table).__name__}")
    reject_unknown(table, ["replication", "witness", *(spec.name for spec in HA_KEYS)],
                    path=path, prefix="ha")
    replication = (ReplicationSettings(**take(table["replication"], HA_REPLICATION_KEYS,
                                              "ha.replication"))
                   if "replication" in table else None)
    tables = table.get("witness", [])
    if not isinstance(tables, list):
        raise ConfigError(path, "ha.witness", "expected [[ha.witness]] tables")
    witnesses = tuple(WitnessSettings(**take(witness, HA_WITNESS_KEYS, f"ha.witness[{index}]"))
                      for index, witness in enumerate(tables))
    scalars = {k: v for k, v in table.items() if k not in ("replication", "witness")}
    values = take(scalars, HA_KEYS, "ha")
    values["group_name"] = values["group_name"] or router_name
    return HASettings(replication=replication, witnesses=witnesses, **values)


def config_warnings(config: RouterConfig) -> list[str]:
    """
    What works but probably not as the operator hopes, one line each
    naming the file and the dotted key: C{meshroute check-config} prints
    these, and the router logs them at start.
    """
    return [f"{config.path}: {problem.key}: {problem.message}"
            for problem in router_settings.warnings(config)]
