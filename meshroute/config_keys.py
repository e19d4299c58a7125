"""
The keys of a router configuration file: what each operator-facing key
may hold, and how one written value becomes the value the router uses.

Each section's keys are declared once, in a small table of L{Key} specs:
the operator-facing name, its kind, its default and its range.  Loading
(L{meshroute.config.load_config}) and printing the effective configuration
(L{meshroute.config_writer.format_config}) are both driven by these
tables, so they cannot drift apart; L{read_section} checks one section
against its table, converting every value (types, ranges, durations,
sizes, endpoints, the files behind C{password-file} and C{token-file}) and
raising a L{ConfigError} that names the file and the dotted key.

Durations are integers in milliseconds or strings with a unit (C{"500ms"},
C{"15s"}, C{"2m"}, C{"1h"}, C{"1.5s"}); they are stored as integer
milliseconds in attributes ending in C{_ms}.  Sizes are integers in bytes
or strings with a binary unit (C{"512 KiB"}, C{"64 MiB"}, C{"10 GiB"}),
stored as integer bytes.

This module knows keys and values, not how the sections of a file fit
together (the loader's) nor how a configuration is written back (the
writer's).  Being part of the composition layer's loader, no component
imports it.
"""

import math
import re
from dataclasses import dataclass
from decimal import Decimal

from twisted.internet.endpoints import clientFromString, serverFromString

from meshroute.errors import ConfigError
from meshroute.events import RetainBytes, RotationSettings
from meshroute.harules import settings as ha_settings
from meshroute.mqtt import settings as mqtt_settings
from meshroute.security.files import read_private
from meshroute.security.settings import pattern_problem
from meshroute.sessions import limits
from meshroute.stomp import settings as stomp_settings
from meshroute.store.settings import StoreConfig
from meshroute.store.writers import WRITERS
from meshroute.router.early_accepts import DEFAULT_EARLY_ACCEPT_HOLD_MS
from meshroute.topics.backlog import DEFAULT_HOLD_AT
from meshroute.wire.codec import MAX_CLIENT_FRAME_SIZE
from meshroute.wire.frames import MAX_LEASE_TIMEOUT_MS

_NAME = re.compile(r"[A-Za-z0-9._-]{1,64}")
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)")
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000}
_SIZE = re.compile(r"(\d+(?:\.\d+)?) ?(B|KiB|MiB|GiB|TiB)")
_UNIT_BYTES = {"B": 1, "KiB": 1024, "MiB": 1024**2, "GiB": 1024**3, "TiB": 1024**4}


#: The default of a key the operator must write.
REQUIRED = object()


@dataclass(frozen=True)
class Key:
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
    @ivar default: the value used when the key is absent, or C{REQUIRED}.
    @ivar minimum: the smallest allowed value (milliseconds for durations).
    @ivar maximum: the largest allowed value: every number has one, so a
        value the router could only fail on at run time (an
        C{OverflowError} on the wire, a timer past any clock) is refused
        here, and the README's reference section states each range.
    """

    name: str
    kind: str
    default: object = REQUIRED
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
HOUR_MS = 3_600_000
DAY_MS = 24 * HOUR_MS

ROUTER_KEYS = (Key("name", "name"), Key("data-dir", "str"))
LISTENER_KEYS = (
    Key("endpoint", "server-endpoint"),
    Key("password-file", "password-file"),
    Key("keepalive-interval", "duration", 60000, 10, HOUR_MS),
    Key("stage-valid-timeout", "duration", 15000, 1000, HOUR_MS),
    Key("reject-disconnect-delay", "duration", 5000, 1000, HOUR_MS),
    Key("allowed-routers", "names", None),
)
CONNECTOR_KEYS = (
    Key("router", "name"),
    Key("endpoint", "client-endpoints"),
    Key("password-file", "password-file"),
    Key("retry-interval", "duration", 2000, 1, HOUR_MS),
    Key("retry-interval-multiplier", "number", 1.0, 1.0, 100.0),
    Key("max-retry-interval", "duration", 2000, 1, HOUR_MS),
    Key("reconnect-attempts", "int", -1, -1, 2**31 - 1),
    Key("stage-valid-timeout", "duration", 15000, 1000, HOUR_MS),
)
ADMIN_KEYS = (Key("endpoint", "server-endpoint"), Key("token-file", "token-file", None))

#: The shortest admin token accepted: shorter ones can be guessed.
MIN_TOKEN_LENGTH = 16
ROUTING_KEYS = (
    Key("max-hops", "int", 16, 1, 255),
    Key("max-backlog", "int", 100_000, 1, 1_000_000_000),
    Key("max-transient-backlog", "int", 10_000, 1, 10_000_000),
    Key("reroute-delay", "duration", 5000, 0, HOUR_MS),
    Key("early-accept-hold", "duration", DEFAULT_EARLY_ACCEPT_HOLD_MS, 0, 1000),
    Key("max-retained", "int", 10_000, 0, 10_000_000),
    Key("max-retained-bytes", "size", 64 * 1024 * 1024, 0, 1024**4),
    Key("hold-publishers-at", "int", DEFAULT_HOLD_AT, 2, 10_000_000),
)
STORE_KEYS = (Key("sync", "choice", "full", choices=("full", "normal")),
               Key("writer", "choice", StoreConfig.writer, choices=tuple(sorted(WRITERS))),
               Key("min-free-disk", "size", StoreConfig.min_free_disk, 0, 1024**4))
EVENTS_KEYS = (
    Key("max-file-size", "size", RotationSettings.max_file_size, 1024, 1024**4),
    Key("max-age", "duration", None, 100, 30 * DAY_MS),
    Key("retain", "retain", None, 1, 2**62),
)
_TTL_OVERRIDE_KEY = Key("connection-ttl-override", "int", -1, -1, DAY_MS)
_CLIENT_CA_KEY = Key("client-ca", "str", None)
#: What one client may take (L{limits.ClientLimits}): the same keys in
#: every client-facing listener.
_CLIENT_LIMIT_KEYS = (
    Key("max-frame-size", "int", MAX_CLIENT_FRAME_SIZE, 64 * 1024, MAX_CLIENT_FRAME_SIZE),
    Key("max-connections", "int", limits.DEFAULT_MAX_CONNECTIONS, 1, 1_000_000),
    Key("max-sessions", "int", limits.DEFAULT_MAX_SESSIONS, 1, 10_000_000),
    Key("max-subscriptions", "int", limits.DEFAULT_MAX_SUBSCRIPTIONS, 1, 1_000_000),
    Key("max-unacknowledged", "int", limits.DEFAULT_MAX_UNACKNOWLEDGED, 1, 10_000_000),
    Key("max-headers", "int", limits.DEFAULT_MAX_HEADERS, 0, 100_000),
    Key("max-header-size", "int", limits.DEFAULT_MAX_HEADER_SIZE, 0, MAX_CLIENT_FRAME_SIZE),
    Key("stage-valid-timeout", "duration", limits.DEFAULT_STAGE_VALID_TIMEOUT_MS, 1000,
         HOUR_MS),
)
CLIENT_LISTENER_KEYS = (
    Key("endpoint", "server-endpoints"),
    _TTL_OVERRIDE_KEY,
    Key("connection-ttl-check-interval", "duration", 2000, 1, HOUR_MS),
    Key("duplicate-id-window", "duration", 3_600_000, 1, 30 * DAY_MS),
    Key("send-answer-hold", "duration", 2, 0, 1000),
    *_CLIENT_LIMIT_KEYS,
    _CLIENT_CA_KEY,
)


def _protocol_listener_keys(websocket_path: str) -> tuple[Key, ...]:
    """
    The keys of every protocol listener beside the native one
    (L{meshroute.sessions.listener_settings.ProtocolListenerSettings}),
    its WebSocket served at C{websocket_path} by default.
    """
    return (
        Key("endpoint", "server-endpoints"),
        Key("websocket", "server-endpoints", ()),
        Key("websocket-path", "str", websocket_path),
        _TTL_OVERRIDE_KEY,
        *_CLIENT_LIMIT_KEYS,
        _CLIENT_CA_KEY,
        Key("prefetch-count", "int", stomp_settings.DEFAULT_PREFETCH_COUNT, 1, 10_000_000),
    )


STOMP_LISTENER_KEYS = (
    *_protocol_listener_keys(stomp_settings.DEFAULT_WEBSOCKET_PATH),
    Key("heart-beat", "str", "{},{}".format(*stomp_settings.DEFAULT_HEARTBEAT_MS)),
)
MQTT_LISTENER_KEYS = (
    *_protocol_listener_keys(mqtt_settings.DEFAULT_WEBSOCKET_PATH),
    Key("topic-alias-maximum", "int", mqtt_settings.DEFAULT_TOPIC_ALIAS_MAXIMUM, 0,
         mqtt_settings.MAX_TOPIC_ALIAS_MAXIMUM),
    Key("mesh-wide", "bool", True),
)
HA_KEYS = (
    Key("role", "choice", choices=ha_settings.ROLES),
    Key("policy", "choice", ha_settings.REPLICATION, choices=ha_settings.POLICIES),
    Key("lock-poll-interval", "duration", 100, 1, 60_000),
    # None: the router's name, filled in by the loader.
    Key("group-name", "name", None),
    Key("heartbeat-interval", "duration", 500, 1, HOUR_MS),
    Key("lease-timeout", "duration", 3000, 1, MAX_LEASE_TIMEOUT_MS),
    Key("replication-timeout", "duration", 5000, 1, MAX_LEASE_TIMEOUT_MS),
    Key("replica-sync", "choice", "full", choices=ha_settings.REPLICA_SYNCS),
    Key("allow-failback", "bool", True),
    Key("restart-backup", "bool", True),
    Key("failover-on-shutdown", "bool", True),
    Key("initial-replication-sync-timeout", "duration", 30000, 1, DAY_MS),
    Key("max-saved-replicated-journals-size", "int", 2, 0, 1000),
    Key("client-endpoints", "client-endpoints", ()),
)
HA_REPLICATION_KEYS = (
    Key("listener", "server-endpoint"),
    Key("peer", "client-endpoint"),
    Key("password-file", "password-file"),
)
HA_WITNESS_KEYS = (Key("router", "name"), Key("endpoint", "client-endpoint"))
HA_COLOCATED_KEYS = (Key("config", "str"),)
SECURITY_KEYS = (Key("users-file", "str", None),)
PERMISSION_KEYS = (
    Key("users", "user-patterns"),
    Key("send", "address-patterns", ()),
    Key("consume", "queue-patterns", ()),
    Key("publish", "topic-patterns", ()),
    Key("subscribe", "topic-patterns", ()),
)
CLIENTS_KEYS = (Key("queue-depth", "int", None, 0, 10_000_000),)
CLIENT_RECONNECT_KEYS = (
    Key("keep-alive", "duration", 60000, 0, DAY_MS),
    Key("max-depth", "int", 1000, 0, 10_000_000),
    Key("max-depth-policy", "choice", "drop-oldest", choices=("drop-oldest", "drop-newest")),
    Key("recovery-buffer-size", "int", 64, 0, 100_000),
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


def convert(spec: Key, value: object, *, path: str, key: str, reactor) -> object:
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
            convert(Key(spec.name, "name"), item, path=path, key=item_key, reactor=reactor)
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
        one = Key(spec.name, spec.kind[:-1])
        if isinstance(value, str):
            result = (convert(one, value, path=path, key=key, reactor=reactor),)
        elif not isinstance(value, list) or not value:
            raise fail(f"a {one.kind.replace('-', ' ')} string or a non-empty list of them")
        else:
            result = tuple(convert(one, item, path=path, key=f"{key}[{index}]", reactor=reactor)
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


def reject_unknown(table: dict, allowed: list[str], *, path: str, prefix: str) -> None:
    """
    Refuse keys we do not know, so a typo never silently means a default.
    """
    for name in table:
        if name not in allowed:
            key = f"{prefix}.{name}" if prefix else name
            raise ConfigError(path, key, f"unknown key; allowed keys: {', '.join(sorted(allowed))}")


def read_section(table: object, keys: tuple[Key, ...], *, path: str, prefix: str, reactor) -> dict:
    """
    Read one section: every key checked, every default filled in, and the
    secret read from its C{password-file}.

    @return: dataclass keyword arguments, by attribute name.
    """
    if not isinstance(table, dict):
        raise ConfigError(path, prefix, f"expected a table, got {type(table).__name__}")
    reject_unknown(table, [spec.name for spec in keys], path=path, prefix=prefix)
    values = {}
    for spec in keys:
        key = f"{prefix}.{spec.name}"
        if spec.name in table:
            value = convert(spec, table[spec.name], path=path, key=key, reactor=reactor)
        elif spec.default is REQUIRED:
            raise ConfigError(path, key, "required key is missing")
        else:
            value = spec.default
        values[spec.attr] = value
        if spec.kind == "password-file":
            values["secret"] = read_secret(value, path=path, key=key)
        if spec.kind == "token-file" and value is not None:
            values["token"] = read_token(value, path=path, key=key)
    return values


def read_token(token_file: str, *, path: str, key: str) -> bytes:
    """
    Read a bearer token from a file only its owner may read or write.
    """
    token = read_private(token_file, key=key, config=path).strip("\r\n")
    if len(token) < MIN_TOKEN_LENGTH or any(c.isspace() or not c.isprintable() for c in token):
        raise ConfigError(path, key, f"{token_file}: the token must be one line of at least "
                                     f"{MIN_TOKEN_LENGTH} printable characters without spaces "
                                     "(e.g. from `openssl rand -hex 32`)")
    return token.encode("utf-8")


def read_secret(password_file: str, *, path: str, key: str) -> bytes:
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
