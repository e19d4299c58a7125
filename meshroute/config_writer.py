"""
A loaded configuration written back as TOML: what C{meshroute
check-config} prints, so an operator sees the values the router will
really use, defaults filled in.

Driven by the same key tables as the loader (L{meshroute.config_keys}),
each table here the reverse of its reading in L{meshroute.config}, so that
loading the output again gives an equal configuration.
"""

import json

from meshroute import config_keys
from meshroute.config_keys import Key
from meshroute.events import RetainBytes
from meshroute.router.settings import RouterConfig
from meshroute.stomp.settings import StompListenerSettings


def _protocol_listener_table(header: str, settings, keys: tuple[Key, ...], **more) -> str:
    """
    A protocol listener as loadable TOML: its values under their keys'
    attribute names (L{meshroute.config}'s reading in reverse).
    """
    values = {**vars(settings.limits), **vars(settings),
              "connection_ttl_override": settings.ttl_override_ms, **more}
    return _toml_table(header, values, keys)


def _stomp_table(settings: StompListenerSettings) -> str:
    """
    C{[stomp.listener]} as loadable TOML (L{meshroute.config}'s reading in reverse).
    """
    return _protocol_listener_table("[stomp.listener]", settings, config_keys.STOMP_LISTENER_KEYS,
                                    heart_beat="{},{}".format(*settings.heartbeat_ms))


def _toml_value(value: object) -> str:
    """
    Render one stored value as TOML.

    JSON string escapes are a subset of TOML's; only DEL needs escaping on
    top, since TOML forbids it raw in a basic string.
    """
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False).replace("\x7f", "\\u007f")
    if isinstance(value, RetainBytes):
        return f'"{int(value)} B"'
    if isinstance(value, tuple):
        return "[" + ", ".join(_toml_value(item) for item in value) + "]"
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value)


def _toml_table(header: str, config: object, keys: tuple[Key, ...]) -> str:
    """
    One table with every key that has a value (an empty list is none);
    C{secret} is not a key, so it is never printed.

    @param config: the section's values as attributes, or a dict of them
        by attribute name.
    """
    lines = [header]
    for spec in keys:
        value = config[spec.attr] if isinstance(config, dict) else getattr(config, spec.attr)
        if value is not None and value != ():
            lines.append(f"{spec.name} = {_toml_value(value)}")
    return "\n".join(lines) + "\n"


def format_config(config: RouterConfig) -> str:
    """
    The effective configuration, defaults filled in, as loadable TOML.

    This is what C{meshroute check-config} prints, so an operator sees the
    values the router will really use; durations appear in milliseconds.
    Loading the output again gives an equal configuration.
    """
    tables = [
        _toml_table("[router]", config, config_keys.ROUTER_KEYS),
        _toml_table("[routing]", config.routing, config_keys.ROUTING_KEYS),
        _toml_table("[store]", config.store, config_keys.STORE_KEYS),
        _toml_table("[events]", config.events, config_keys.EVENTS_KEYS),
    ]
    tables.append(_toml_table("[clients]", config.client_queue, config_keys.CLIENTS_KEYS))
    if config.clients is not None:
        tables.append(_toml_table("[clients.listener]", config.clients,
                                  config_keys.CLIENT_LISTENER_KEYS))
    tables.append(_toml_table("[clients.reconnect]", config.client_reconnect,
                              config_keys.CLIENT_RECONNECT_KEYS))
    if config.listener is not None:
        tables.append(_toml_table("[routing.listener]", config.listener,
                                  config_keys.LISTENER_KEYS))
    for connector in config.connectors:
        tables.append(_toml_table("[[routing.connector]]", connector, config_keys.CONNECTOR_KEYS))
    if config.stomp_listener is not None:
        tables.append(_stomp_table(config.stomp_listener))
    if config.mqtt_listener is not None:
        tables.append(_protocol_listener_table("[mqtt.listener]", config.mqtt_listener,
                                               config_keys.MQTT_LISTENER_KEYS))
    if config.admin is not None:
        tables.append(_toml_table("[admin]", config.admin, config_keys.ADMIN_KEYS))
    if config.security is not None:
        tables.append(_toml_table("[security]", config.security, config_keys.SECURITY_KEYS))
        for permission in config.security.permissions:
            tables.append(_toml_table("[[security.permission]]", permission,
                                      config_keys.PERMISSION_KEYS))
    if config.ha is not None:
        tables.append(_toml_table("[ha]", config.ha, config_keys.HA_KEYS))
        if config.ha.replication is not None:
            tables.append(_toml_table("[ha.replication]", config.ha.replication,
                                      config_keys.HA_REPLICATION_KEYS))
        for witness in config.ha.witnesses:
            tables.append(_toml_table("[[ha.witness]]", witness, config_keys.HA_WITNESS_KEYS))
    for hosted in config.colocated:
        tables.append(_toml_table("[[ha.colocated]]", {"config": hosted.path},
                                  config_keys.HA_COLOCATED_KEYS))
    return "\n".join(tables)
