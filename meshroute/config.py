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

Each section's keys are declared once, in a small table of L{_Key} specs:
the operator-facing name, its kind, its default and its minimum.  Loading
(L{load_config}) and printing the effective configuration (L{format_config})
are both driven by those tables, so they cannot drift apart.

Durations are integers in milliseconds or strings with a unit (C{"500ms"},
C{"15s"}, C{"2m"}, C{"1h"}, C{"1.5s"}); they are stored as integer
milliseconds in attributes ending in C{_ms}.  Sizes are integers in bytes
or strings with a binary unit (C{"512 KiB"}, C{"64 MiB"}, C{"10 GiB"}),
stored as integer bytes.

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

import json
import math
import os
import re
import tomllib
from dataclasses import dataclass
from decimal import Decimal

from twisted.internet.endpoints import clientFromString, serverFromString

from meshroute.router import settings as router_settings
from meshroute.router.admin_settings import AdminConfig
from meshroute.errors import ConfigError
from meshroute.events import RetainBytes, RotationSettings
from meshroute.harules import settings as ha_settings
from meshroute.harules.settings import HASettings, ReplicationSettings, WitnessSettings
from meshroute.link.settings import ConnectorConfig, ListenerConfig
from meshroute.router.settings import RouterConfig, RoutingConfig
from meshroute.security.files import read_private
from meshroute.security.policy import Permission
from meshroute.mqtt import settings as mqtt_settings
from meshroute.mqtt.settings import MqttListenerSettings
from meshroute.security.settings import SecurityConfig, pattern_problem
from meshroute.sessions import limits
from meshroute.sessions.settings import (
    ClientListenerConfig,
    ClientQueueConfig,
    ClientReconnectConfig,
)
from meshroute.stomp import settings as stomp_settings
from meshroute.stomp.frames import StompProtocolError, parse_heart_beat
from meshroute.stomp.settings import StompListenerSettings
from meshroute.store.settings import StoreConfig
from meshroute.topics.backlog import DEFAULT_HOLD_AT
from meshroute.wire.codec import MAX_CLIENT_FRAME_SIZE
from meshroute.wire.frames import MAX_LEASE_TIMEOUT_MS

_NAME = re.compile(r"[A-Za-z0-9._-]{1,64}")
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)")
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000}
_SIZE = re.compile(r"(\d+(?:\.\d+)?) ?(B|KiB|MiB|GiB|TiB)")
_UNIT_BYTES = {"B": 1, "KiB": 1024, "MiB": 1024**2, "GiB": 1024**3, "TiB": 1024**4}


_REQUIRED = object()


@dataclass(frozen=True)
class _Key:
    """
    The rule for one operator-facing key.

    @ivar kind: one of C{str}, C{name}, C{names}, C{duration}, C{int},
        C{size} (bytes), C{retain} (an C{int} counts files, a size is a
        L{RetainBytes}), C{number}, C{server-endpoint}, C{client-endpoint},
        C{server-endpoints} and C{client-endpoints} (one endpoint string
        or a non-empty list of them, none repeated, stored as a tuple),
        C{user-patterns},
        C{queue-patterns}, C{address-patterns} (lists of name patterns,
        L{meshroute.security.policy}; an address pattern may name a
        router after one C{@}), C{topic-patterns} (lists of topic
        patterns, L{meshroute.topics.patterns}), C{bool}, C{password-file}
        (a string; the file's contents become the section's C{secret}),
        C{token-file} (a string; the file, which only its owner may read,
        holds the section's C{token}),
        C{choice} (a string among C{choices}).
    @ivar default: the value used when the key is absent, or C{_REQUIRED}.
    @ivar minimum: the smallest allowed value (milliseconds for durations).
    @ivar maximum: the largest allowed value: every number has one, so a
        value the router could only fail on at run time (an
        C{OverflowError} on the wire, a timer past any clock) is refused
        here, and the README's reference section states each range.
    """

    name: str
    kind: str
    default: object = _REQUIRED
    minimum: int | float | None = None
    maximum: int | float | None = None
    choices: tuple[str, ...] = ()

    @property
    def attr(self) -> str:
        """
        The dataclass attribute: snake_case, with C{_ms} for durations.
        """
        suffix = "_ms" if self.kind == "duration" else ""
        return self.name.replace("-", "_") + suffix


#: Upper bounds shared by several keys (milliseconds).
_HOUR_MS = 3_600_000
_DAY_MS = 24 * _HOUR_MS

_ROUTER_KEYS = (_Key("name", "name"), _Key("data-dir", "str"))
_LISTENER_KEYS = (
    _Key("endpoint", "server-endpoint"),
    _Key("password-file", "password-file"),
    _Key("keepalive-interval", "duration", 60000, 10, _HOUR_MS),
    _Key("stage-valid-timeout", "duration", 15000, 1000, _HOUR_MS),
    _Key("reject-disconnect-delay", "duration", 5000, 1000, _HOUR_MS),
    _Key("allowed-routers", "names", None),
)
_CONNECTOR_KEYS = (
    _Key("router", "name"),
    _Key("endpoint", "client-endpoints"),
    _Key("password-file", "password-file"),
    _Key("retry-interval", "duration", 2000, 1, _HOUR_MS),
    _Key("retry-interval-multiplier", "number", 1.0, 1.0, 100.0),
    _Key("max-retry-interval", "duration", 2000, 1, _HOUR_MS),
    _Key("reconnect-attempts", "int", -1, -1, 2**31 - 1),
    _Key("stage-valid-timeout", "duration", 15000, 1000, _HOUR_MS),
)
_ADMIN_KEYS = (_Key("endpoint", "server-endpoint"), _Key("token-file", "token-file", None))

#: The shortest admin token accepted: shorter ones can be guessed.
MIN_TOKEN_LENGTH = 16
_ROUTING_KEYS = (
    _Key("max-hops", "int", 16, 1, 255),
    _Key("max-backlog", "int", 100_000, 1, 1_000_000_000),
    _Key("max-transient-backlog", "int", 10_000, 1, 10_000_000),
    _Key("reroute-delay", "duration", 5000, 0, _HOUR_MS),
    _Key("max-retained", "int", 10_000, 0, 10_000_000),
    _Key("max-retained-bytes", "size", 64 * 1024 * 1024, 0, 1024**4),
    _Key("hold-publishers-at", "int", DEFAULT_HOLD_AT, 2, 10_000_000),
)
_STORE_KEYS = (_Key("sync", "choice", "full", choices=("full", "normal")),
               _Key("writer", "choice", "thread", choices=("reactor", "thread")))
_EVENTS_KEYS = (
    _Key("max-file-size", "size", RotationSettings.max_file_size, 1024, 1024**4),
    _Key("max-age", "duration", None, 100, 30 * _DAY_MS),
    _Key("retain", "retain", None, 1, 2**62),
)
_TTL_OVERRIDE_KEY = _Key("connection-ttl-override", "int", -1, -1, _DAY_MS)
_CLIENT_CA_KEY = _Key("client-ca", "str", None)
#: What one client may take (L{limits.ClientLimits}): the same keys in
#: every client-facing listener.
_CLIENT_LIMIT_KEYS = (
    _Key("max-frame-size", "int", MAX_CLIENT_FRAME_SIZE, 64 * 1024, MAX_CLIENT_FRAME_SIZE),
    _Key("max-connections", "int", limits.DEFAULT_MAX_CONNECTIONS, 1, 1_000_000),
    _Key("max-sessions", "int", limits.DEFAULT_MAX_SESSIONS, 1, 10_000_000),
    _Key("max-subscriptions", "int", limits.DEFAULT_MAX_SUBSCRIPTIONS, 1, 1_000_000),
    _Key("max-unacknowledged", "int", limits.DEFAULT_MAX_UNACKNOWLEDGED, 1, 10_000_000),
    _Key("max-headers", "int", limits.DEFAULT_MAX_HEADERS, 0, 100_000),
    _Key("max-header-size", "int", limits.DEFAULT_MAX_HEADER_SIZE, 0, MAX_CLIENT_FRAME_SIZE),
    _Key("stage-valid-timeout", "duration", limits.DEFAULT_STAGE_VALID_TIMEOUT_MS, 1000,
         _HOUR_MS),
)
_CLIENT_LISTENER_KEYS = (
    _Key("endpoint", "server-endpoints"),
    _TTL_OVERRIDE_KEY,
    _Key("connection-ttl-check-interval", "duration", 2000, 1, _HOUR_MS),
    _Key("duplicate-id-window", "duration", 3_600_000, 1, 30 * _DAY_MS),
    *_CLIENT_LIMIT_KEYS,
    _CLIENT_CA_KEY,
)


def _protocol_listener_keys(websocket_path: str) -> tuple[_Key, ...]:
    """
    The keys of every protocol listener beside the native one
    (L{meshroute.sessions.listener_settings.ProtocolListenerSettings}),
    its WebSocket served at C{websocket_path} by default.
    """
    return (
        _Key("endpoint", "server-endpoints"),
        _Key("websocket", "server-endpoints", ()),
        _Key("websocket-path", "str", websocket_path),
        _TTL_OVERRIDE_KEY,
        *_CLIENT_LIMIT_KEYS,
        _CLIENT_CA_KEY,
        _Key("prefetch-count", "int", stomp_settings.DEFAULT_PREFETCH_COUNT, 1, 10_000_000),
    )


_STOMP_LISTENER_KEYS = (
    *_protocol_listener_keys(stomp_settings.DEFAULT_WEBSOCKET_PATH),
    _Key("heart-beat", "str", "{},{}".format(*stomp_settings.DEFAULT_HEARTBEAT_MS)),
)
_MQTT_LISTENER_KEYS = (
    *_protocol_listener_keys(mqtt_settings.DEFAULT_WEBSOCKET_PATH),
    _Key("topic-alias-maximum", "int", mqtt_settings.DEFAULT_TOPIC_ALIAS_MAXIMUM, 0,
         mqtt_settings.MAX_TOPIC_ALIAS_MAXIMUM),
    _Key("mesh-wide", "bool", True),
)
_HA_KEYS = (
    _Key("role", "choice", choices=ha_settings.ROLES),
    _Key("policy", "choice", ha_settings.REPLICATION, choices=ha_settings.POLICIES),
    _Key("lock-poll-interval", "duration", 100, 1, 60_000),
    # None: the router's name, filled in by _read_ha.
    _Key("group-name", "name", None),
    _Key("heartbeat-interval", "duration", 500, 1, _HOUR_MS),
    _Key("lease-timeout", "duration", 3000, 1, MAX_LEASE_TIMEOUT_MS),
    _Key("replication-timeout", "duration", 5000, 1, MAX_LEASE_TIMEOUT_MS),
    _Key("replica-sync", "choice", "full", choices=ha_settings.REPLICA_SYNCS),
    _Key("allow-failback", "bool", True),
    _Key("restart-backup", "bool", True),
    _Key("failover-on-shutdown", "bool", True),
    _Key("initial-replication-sync-timeout", "duration", 30000, 1, _DAY_MS),
    _Key("max-saved-replicated-journals-size", "int", 2, 0, 1000),
    _Key("client-endpoints", "client-endpoints", ()),
)
_HA_REPLICATION_KEYS = (
    _Key("listener", "server-endpoint"),
    _Key("peer", "client-endpoint"),
    _Key("password-file", "password-file"),
)
_HA_WITNESS_KEYS = (_Key("router", "name"), _Key("endpoint", "client-endpoint"))
_HA_COLOCATED_KEYS = (_Key("config", "str"),)
_SECURITY_KEYS = (_Key("users-file", "str", None),)
_PERMISSION_KEYS = (
    _Key("users", "user-patterns"),
    _Key("send", "address-patterns", ()),
    _Key("consume", "queue-patterns", ()),
    _Key("publish", "topic-patterns", ()),
    _Key("subscribe", "topic-patterns", ()),
)
_CLIENTS_KEYS = (_Key("queue-depth", "int", None, 0, 10_000_000),)
_CLIENT_RECONNECT_KEYS = (
    _Key("keep-alive", "duration", 60000, 0, _DAY_MS),
    _Key("max-depth", "int", 1000, 0, 10_000_000),
    _Key("max-depth-policy", "choice", "drop-oldest", choices=("drop-oldest", "drop-newest")),
    _Key("recovery-buffer-size", "int", 64, 0, 100_000),
)


def parse_duration_ms(value: object, *, path: str, key: str) -> int:
    """
    Turn a configured duration into whole milliseconds.

    An integer is already milliseconds; a string carries a unit (C{ms},
    C{s}, C{m}, C{h}) and may have a decimal part as long as the result is
    a whole number of milliseconds.  Booleans and floats are refused: a
    bare C{1.5} would leave the operator guessing about the unit.

    @raise ConfigError: naming C{path} and C{key} for anything else.
    """
    if isinstance(value, int) and not isinstance(value, bool):
        if value < 0:
            raise ConfigError(path, key, f"duration must not be negative, got {value}")
        return value
    match = _DURATION.fullmatch(value) if isinstance(value, str) else None
    if match is None:
        expected = 'integer milliseconds or a string like "500ms", "15s", "2m", "1h"'
        raise ConfigError(path, key, f"expected {expected}, got {value!r}")
    ms = Decimal(match[1]) * _UNIT_MS[match[2]]
    if ms != ms.to_integral_value():
        raise ConfigError(path, key, f"{value!r} is not a whole number of milliseconds")
    return int(ms)


def parse_size(value: object, *, path: str, key: str) -> int:
    """
    Turn a configured size into whole bytes: an integer is bytes; a string
    is a number and a binary unit (C{B}, C{KiB}, C{MiB}, C{GiB}, C{TiB}),
    with or without a space, whose product is a whole number of bytes.

    @raise ConfigError: naming C{path} and C{key} for anything else.
    """
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    match = _SIZE.fullmatch(value) if isinstance(value, str) else None
    if match is None:
        raise ConfigError(path, key, 'expected integer bytes or a string like "512 KiB", '
                                     f'"64 MiB", "10 GiB", got {value!r}')
    size = Decimal(match[1]) * _UNIT_BYTES[match[2]]
    if size != size.to_integral_value():
        raise ConfigError(path, key, f"{value!r} is not a whole number of bytes")
    return int(size)


def _convert(spec: _Key, value: object, *, path: str, key: str, reactor) -> object:
    """
    Check one present key against its spec and return the stored value.
    """

    def fail(expected: str) -> ConfigError:
        return ConfigError(path, key, f"expected {expected}, got {type(value).__name__} {value!r}")

    is_int = isinstance(value, int) and not isinstance(value, bool)
    if spec.kind == "duration":
        result = parse_duration_ms(value, path=path, key=key)
    elif spec.kind == "size":
        result = parse_size(value, path=path, key=key)
    elif spec.kind == "retain":
        if isinstance(value, str):
            result = RetainBytes(parse_size(value, path=path, key=key))
        elif not is_int:
            raise fail('a number of files or a total size like "10 GiB"')
        else:
            result = value
    elif spec.kind == "int":
        if not is_int:
            raise fail("an integer")
        result = value
    elif spec.kind == "bool":
        if not isinstance(value, bool):
            raise fail("true or false")
        result = value
    elif spec.kind == "number":
        if not (is_int or isinstance(value, float)):
            raise fail("a number")
        result = float(value)
        if not math.isfinite(result):
            raise fail("a finite number")
    elif spec.kind == "names":
        if not isinstance(value, list) or not value:
            raise fail("a non-empty list of router names (omit the key to allow any router)")
        for index, item in enumerate(value):
            item_key = f"{key}[{index}]"
            _convert(_Key(spec.name, "name"), item, path=path, key=item_key, reactor=reactor)
        if len(set(value)) != len(value):
            raise ConfigError(path, key, f"router names are repeated in {value!r}")
        result = tuple(value)
    elif spec.kind.endswith("-patterns"):
        if not isinstance(value, list) or (spec.kind == "user-patterns" and not value):
            raise fail("a non-empty list of patterns" if spec.kind == "user-patterns"
                       else "a list of patterns")
        for index, item in enumerate(value):
            problem = pattern_problem(spec.kind, item)
            if problem is not None:
                raise ConfigError(path, f"{key}[{index}]", problem)
        result = tuple(value)
    elif spec.kind.endswith("-endpoints"):
        one = _Key(spec.name, spec.kind[:-1])
        if isinstance(value, str):
            result = (_convert(one, value, path=path, key=key, reactor=reactor),)
        elif not isinstance(value, list) or not value:
            raise fail(f"a {one.kind.replace('-', ' ')} string or a non-empty list of them")
        else:
            result = tuple(_convert(one, item, path=path, key=f"{key}[{index}]", reactor=reactor)
                           for index, item in enumerate(value))
            if len(set(result)) != len(result):
                raise ConfigError(path, key, f"endpoints are repeated in {value!r}")
    else:
        if not isinstance(value, str) or not value:
            raise fail("a non-empty string")
        if "\x00" in value:
            # No path or endpoint holds one; the OS would refuse it later,
            # with a ValueError naming neither file nor key.
            raise fail("a string without NUL characters")
        if spec.kind == "choice" and value not in spec.choices:
            raise ConfigError(path, key, f"expected one of {', '.join(spec.choices)}, got {value!r}")
        if spec.kind == "name" and not _NAME.fullmatch(value):
            raise ConfigError(path, key, f"{value!r} is not a router name ([A-Za-z0-9._-]{{1,64}})")
        if spec.kind.endswith("endpoint"):
            problem = endpoint_problem(spec.kind, value, reactor)
            if problem is not None:
                raise ConfigError(path, key, problem)
        result = value
    unit = {"duration": " ms", "size": " bytes"}.get(spec.kind, "")
    if spec.minimum is not None and result < spec.minimum:
        raise ConfigError(path, key, f"must be at least {spec.minimum}{unit}, got {result}{unit}")
    if spec.maximum is not None and result > spec.maximum:
        raise ConfigError(path, key, f"must be at most {spec.maximum}{unit}, got {result}{unit}")
    return result


def endpoint_problem(kind: str, value: str, reactor) -> str | None:
    """
    What is wrong with an endpoint string, or None: parsed with Twisted's
    own parser, and its port checked.

    Twisted's parsers take any integer as a port; the error comes only when
    the router listens or connects (an C{OverflowError} traceback at start,
    or a connector that fails forever).  A listener may ask for port 0 (any
    free port); a client must name a real one.

    @param kind: C{"server-endpoint"} or C{"client-endpoint"}.
    @param reactor: only used to construct the endpoint, never to listen
        or connect.
    """
    server = kind == "server-endpoint"
    parse = serverFromString if server else clientFromString
    try:
        endpoint = parse(reactor, value)
    except Exception as e:
        return f"invalid {kind.replace('-', ' ')} {value!r}: {e}"
    # A TLS client endpoint wraps the TCP one that holds the port.
    while hasattr(endpoint, "_wrappedEndpoint"):
        endpoint = endpoint._wrappedEndpoint
    port = getattr(endpoint, "_port", None)
    lowest = 0 if server else 1
    if isinstance(port, int) and not lowest <= port <= 65535:
        return f"invalid {kind.replace('-', ' ')} {value!r}: port must be {lowest}..65535"
    return None


def _reject_unknown(table: dict, allowed: list[str], *, path: str, prefix: str) -> None:
    """
    Refuse keys we do not know, so a typo never silently means a default.
    """
    for name in table:
        if name not in allowed:
            key = f"{prefix}.{name}" if prefix else name
            raise ConfigError(path, key, f"unknown key; allowed keys: {', '.join(sorted(allowed))}")


def _take(table: object, keys: tuple[_Key, ...], *, path: str, prefix: str, reactor) -> dict:
    """
    Read one section: every key checked, every default filled in, and the
    secret read from its C{password-file}.

    @return: dataclass keyword arguments, by attribute name.
    """
    if not isinstance(table, dict):
        raise ConfigError(path, prefix, f"expected a table, got {type(table).__name__}")
    _reject_unknown(table, [spec.name for spec in keys], path=path, prefix=prefix)
    values = {}
    for spec in keys:
        key = f"{prefix}.{spec.name}"
        if spec.name in table:
            value = _convert(spec, table[spec.name], path=path, key=key, reactor=reactor)
        elif spec.default is _REQUIRED:
            raise ConfigError(path, key, "required key is missing")
        else:
            value = spec.default
        values[spec.attr] = value
        if spec.kind == "password-file":
            values["secret"] = _read_secret(value, path=path, key=key)
        if spec.kind == "token-file" and value is not None:
            values["token"] = _read_token(value, path=path, key=key)
    return values


def _listener_table(table: object, section: str, path: str) -> dict | None:
    """
    The C{listener} table of protocol section C{section} (C{[stomp]},
    C{[mqtt]}), or None without one.
    """
    if not isinstance(table, dict):
        raise ConfigError(path, section, f"expected a table, got {type(table).__name__}")
    _reject_unknown(table, ["listener"], path=path, prefix=section)
    return table.get("listener")


def _protocol_listener_values(table: object, keys: tuple[_Key, ...], prefix: str,
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


def _protocol_listener_table(header: str, settings, keys: tuple[_Key, ...], **more) -> str:
    """
    A protocol listener as loadable TOML: its values under their keys'
    attribute names (L{_protocol_listener_values} in reverse).
    """
    values = {**vars(settings.limits), **vars(settings),
              "connection_ttl_override": settings.ttl_override_ms, **more}
    return _toml_table(header, values, keys)


def _read_stomp(table: object, take, *, path: str) -> StompListenerSettings | None:
    """
    Read C{[stomp.listener]}, if the C{[stomp]} table has one.

    @param take: L{_take} bound to the file and reactor.
    """
    listener = _listener_table(table, "stomp", path)
    if listener is None:
        return None
    prefix = "stomp.listener"
    values = _protocol_listener_values(listener, _STOMP_LISTENER_KEYS, prefix, take)
    try:
        heartbeat_ms = parse_heart_beat(values.pop("heart_beat"))
    except StompProtocolError as e:
        raise ConfigError(path, f"{prefix}.heart-beat",
                          f"{e.reason} (milliseconds: can send, wants)") from None
    if max(heartbeat_ms) > _HOUR_MS:
        raise ConfigError(path, f"{prefix}.heart-beat",
                          f"must be at most {_HOUR_MS} ms each, got {heartbeat_ms}")
    return StompListenerSettings(heartbeat_ms=heartbeat_ms, **values)


def _stomp_table(settings: StompListenerSettings) -> str:
    """
    C{[stomp.listener]} as loadable TOML (L{_read_stomp} in reverse).
    """
    return _protocol_listener_table("[stomp.listener]", settings, _STOMP_LISTENER_KEYS,
                                    heart_beat="{},{}".format(*settings.heartbeat_ms))


def _read_mqtt(table: object, take, *, path: str) -> MqttListenerSettings | None:
    """
    Read C{[mqtt.listener]}, if the C{[mqtt]} table has one.

    @param take: L{_take} bound to the file and reactor.
    """
    listener = _listener_table(table, "mqtt", path)
    if listener is None:
        return None
    return MqttListenerSettings(
        **_protocol_listener_values(listener, _MQTT_LISTENER_KEYS, "mqtt.listener", take))


def _read_token(token_file: str, *, path: str, key: str) -> bytes:
    """
    Read a bearer token from a file only its owner may read or write.
    """
    token = read_private(token_file, key=key, config=path).strip("\r\n")
    if len(token) < MIN_TOKEN_LENGTH or any(c.isspace() or not c.isprintable() for c in token):
        raise ConfigError(path, key, f"{token_file}: the token must be one line of at least "
                                     f"{MIN_TOKEN_LENGTH} printable characters without spaces "
                                     "(e.g. from `openssl rand -hex 32`)")
    return token.encode("utf-8")


def _read_secret(password_file: str, *, path: str, key: str) -> bytes:
    """
    Read a shared secret, dropping the line end editors add.
    """
    try:
        with open(password_file, "rb") as f:
            secret = f.read().rstrip(b"\r\n")
    except OSError as e:
        message = f"cannot read password file {password_file!r}: {e.strerror}"
        raise ConfigError(path, key, message) from e
    if not secret:
        raise ConfigError(path, key, f"password file {password_file!r} is empty")
    return secret


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
        return _take(table, keys, path=path, prefix=prefix, reactor=reactor)

    sections = ["router", "routing", "store", "events", "clients", "admin", "ha", "security",
                "stomp", "mqtt"]
    _reject_unknown(document, sections, path=path, prefix="")
    if "router" not in document:
        raise ConfigError(path, "router", "required section [router] is missing")
    router = take(document["router"], _ROUTER_KEYS, "router")
    _check_data_dir(router["data_dir"], path=path)
    routing = document.get("routing", {})
    if not isinstance(routing, dict):
        raise ConfigError(path, "routing", "expected a table")
    _reject_unknown(routing, ["listener", "connector", *(spec.name for spec in _ROUTING_KEYS)],
                    path=path, prefix="routing")
    scalars = {k: v for k, v in routing.items() if k not in ("listener", "connector")}
    routing_config = RoutingConfig(**take(scalars, _ROUTING_KEYS, "routing"))
    listener = None
    if "listener" in routing:
        listener = ListenerConfig(**take(routing["listener"], _LISTENER_KEYS, "routing.listener"))

    tables = routing.get("connector", [])
    if not isinstance(tables, list):
        raise ConfigError(path, "routing.connector", "expected [[routing.connector]] tables")
    connectors = tuple(ConnectorConfig(**take(table, _CONNECTOR_KEYS,
                                              f"routing.connector[{index}]"))
                       for index, table in enumerate(tables))
    admin = None
    if "admin" in document:
        admin = AdminConfig(**take(document["admin"], _ADMIN_KEYS, "admin"))
    store = StoreConfig(**take(document.get("store", {}), _STORE_KEYS, "store"))
    event_rotation = RotationSettings(**take(document.get("events", {}), _EVENTS_KEYS, "events"))
    clients = document.get("clients", {})
    if not isinstance(clients, dict):
        raise ConfigError(path, "clients", f"expected a table, got {type(clients).__name__}")
    _reject_unknown(clients, ["listener", "reconnect", *(spec.name for spec in _CLIENTS_KEYS)],
                    path=path, prefix="clients")
    client_listener = None
    if "listener" in clients:
        client_listener = ClientListenerConfig(
            **take(clients["listener"], _CLIENT_LISTENER_KEYS, "clients.listener"))
    client_reconnect = ClientReconnectConfig(
        **take(clients.get("reconnect", {}), _CLIENT_RECONNECT_KEYS, "clients.reconnect"))
    scalars = {k: v for k, v in clients.items() if k not in ("listener", "reconnect")}
    client_queue = ClientQueueConfig(**take(scalars, _CLIENTS_KEYS, "clients"))
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

    @param take: L{_take} bound to the file and reactor.
    """
    if not isinstance(table, dict):
        raise ConfigError(path, "security", f"expected a table, got {type(table).__name__}")
    _reject_unknown(table, ["permission", *(spec.name for spec in _SECURITY_KEYS)],
                    path=path, prefix="security")
    tables = table.get("permission", [])
    if not isinstance(tables, list):
        raise ConfigError(path, "security.permission",
                          "expected [[security.permission]] tables")
    permissions = tuple(Permission(**take(permission, _PERMISSION_KEYS,
                                          f"security.permission[{index}]"))
                        for index, permission in enumerate(tables))
    scalars = {k: v for k, v in table.items() if k != "permission"}
    return SecurityConfig(permissions=permissions, **take(scalars, _SECURITY_KEYS, "security"))


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
        written = _take(entry, _HA_COLOCATED_KEYS, path=path, prefix=prefix,
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

    @param take: L{_take} bound to the file and reactor.
    """
    if not isinstance(table, dict):
        raise ConfigError(path, "ha", f"expected a table, got {type(table).__name__}")
    _reject_unknown(table, ["replication", "witness", *(spec.name for spec in _HA_KEYS)],
                    path=path, prefix="ha")
    replication = (ReplicationSettings(**take(table["replication"], _HA_REPLICATION_KEYS,
                                              "ha.replication"))
                   if "replication" in table else None)
    tables = table.get("witness", [])
    if not isinstance(tables, list):
        raise ConfigError(path, "ha.witness", "expected [[ha.witness]] tables")
    witnesses = tuple(WitnessSettings(**take(witness, _HA_WITNESS_KEYS, f"ha.witness[{index}]"))
                      for index, witness in enumerate(tables))
    scalars = {k: v for k, v in table.items() if k not in ("replication", "witness")}
    values = take(scalars, _HA_KEYS, "ha")
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


def _toml_table(header: str, config: object, keys: tuple[_Key, ...]) -> str:
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
        _toml_table("[router]", config, _ROUTER_KEYS),
        _toml_table("[routing]", config.routing, _ROUTING_KEYS),
        _toml_table("[store]", config.store, _STORE_KEYS),
        _toml_table("[events]", config.events, _EVENTS_KEYS),
    ]
    tables.append(_toml_table("[clients]", config.client_queue, _CLIENTS_KEYS))
    if config.clients is not None:
        tables.append(_toml_table("[clients.listener]", config.clients, _CLIENT_LISTENER_KEYS))
    tables.append(_toml_table("[clients.reconnect]", config.client_reconnect,
                              _CLIENT_RECONNECT_KEYS))
    if config.listener is not None:
        tables.append(_toml_table("[routing.listener]", config.listener, _LISTENER_KEYS))
    for connector in config.connectors:
        tables.append(_toml_table("[[routing.connector]]", connector, _CONNECTOR_KEYS))
    if config.stomp_listener is not None:
        tables.append(_stomp_table(config.stomp_listener))
    if config.mqtt_listener is not None:
        tables.append(_protocol_listener_table("[mqtt.listener]", config.mqtt_listener,
                                               _MQTT_LISTENER_KEYS))
    if config.admin is not None:
        tables.append(_toml_table("[admin]", config.admin, _ADMIN_KEYS))
    if config.security is not None:
        tables.append(_toml_table("[security]", config.security, _SECURITY_KEYS))
        for permission in config.security.permissions:
            tables.append(_toml_table("[[security.permission]]", permission, _PERMISSION_KEYS))
    if config.ha is not None:
        tables.append(_toml_table("[ha]", config.ha, _HA_KEYS))
        if config.ha.replication is not None:
            tables.append(_toml_table("[ha.replication]", config.ha.replication,
                                      _HA_REPLICATION_KEYS))
        for witness in config.ha.witnesses:
            tables.append(_toml_table("[[ha.witness]]", witness, _HA_WITNESS_KEYS))
    for hosted in config.colocated:
        tables.append(_toml_table("[[ha.colocated]]", {"config": hosted.path},
                                  _HA_COLOCATED_KEYS))
    return "\n".join(tables)
