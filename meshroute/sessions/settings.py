"""
C{[clients]}, C{[clients.listener]} and C{[clients.reconnect]}: where
clients connect, what one client may take, and what the router keeps for
a client session; and the rules that judge them together (L{errors}).

The TOML loader converts each value (durations in milliseconds in
attributes ending in C{_ms}); the router (L{meshroute.router.service}) builds its
client listener and its sessions' settings (L{SessionSettings}) from these.
"""

from dataclasses import dataclass

from meshroute.errors import Problem
from meshroute.sessions import limits
from meshroute.sessions.limits import ClientLimits
from meshroute.sessions.tls import client_ca_problem
from meshroute.wire.codec import MAX_CLIENT_FRAME_SIZE

#: C{[clients.reconnect] max-depth-policy}: which non-persistent message a
#: full disconnected session drops.
DROP_OLDEST = "drop-oldest"
DROP_NEWEST = "drop-newest"
MAX_DEPTH_POLICIES = (DROP_OLDEST, DROP_NEWEST)


@dataclass(frozen=True)
class ClientListenerConfig:
    """
    C{[clients.listener]}: where clients connect.

    @ivar endpoint: the server endpoint strings the listener listens on
        (a one-item tuple when the file gives a single string; several,
        e.g. IPv4 and IPv6, serve the same clients alike).
    @ivar connection_ttl_override: -1 lets each client choose its
        connection TTL; otherwise every connection gets this one (ms; -1
        from a client means never).
    @ivar connection_ttl_check_interval_ms: how often connections silent
        for their TTL are looked for and closed.
    @ivar duplicate_id_window_ms: how long a send's duplicate id keeps a
        second send with the same id from being accepted.
    @ivar max_frame_size: the largest frame a client may send, in bytes.
    @ivar send_answer_hold_ms: how long a send's answer may be held for a
        client that streams its sends, to leave with others
        (L{meshroute.sessions.answer_pacing}); 0 writes each at once.

    The other keys are what one client may take
    (L{meshroute.sessions.limits.ClientLimits}, same names and defaults).
    @ivar client_ca: the PEM file of the CA whose client certificates
        authenticate users (subject CN) on an C{ssl:} endpoint, or None.
    """

    endpoint: tuple[str, ...]
    connection_ttl_override: int = -1
    connection_ttl_check_interval_ms: int = 2000
    duplicate_id_window_ms: int = 3_600_000
    max_frame_size: int = MAX_CLIENT_FRAME_SIZE
    send_answer_hold_ms: int = 2
    max_connections: int = limits.DEFAULT_MAX_CONNECTIONS
    max_sessions: int = limits.DEFAULT_MAX_SESSIONS
    max_subscriptions: int = limits.DEFAULT_MAX_SUBSCRIPTIONS
    max_unacknowledged: int = limits.DEFAULT_MAX_UNACKNOWLEDGED
    max_headers: int = limits.DEFAULT_MAX_HEADERS
    max_header_size: int = limits.DEFAULT_MAX_HEADER_SIZE
    stage_valid_timeout_ms: int = limits.DEFAULT_STAGE_VALID_TIMEOUT_MS
    client_ca: str | None = None


@dataclass(frozen=True)
class ClientQueueConfig:
    """
    C{[clients]}: the bound of a connected client session's own queue
    (L{meshroute.sessions.depth}).

    @ivar queue_depth: deliveries a connected session holds for its
        client beyond the transport (at most C{[clients.reconnect]
        max-depth}; None, the default, stands for that).
    """

    queue_depth: int | None = None


@dataclass(frozen=True)
class ClientReconnectConfig:
    """
    C{[clients.reconnect]}: what the router keeps for a client session
    whose connection was lost (docs/client-protocol.md).

    @ivar keep_alive_ms: how long a disconnected session waits to be
        resumed before it expires.
    @ivar max_depth: deliveries a disconnected session holds; past it,
        persistent messages stay in their queues and non-persistent ones
        are dropped as C{max_depth_policy} (C{drop-oldest} or
        C{drop-newest}) says.
    @ivar recovery_buffer_size: deliveries kept to re-send those a
        resuming client did not receive.
    """

    keep_alive_ms: int = 60000
    max_depth: int = 1000
    max_depth_policy: str = DROP_OLDEST
    recovery_buffer_size: int = 64


@dataclass(frozen=True)
class SessionSettings:
    """
    The client listener's side of the contract (C{[clients.listener]} and
    C{[clients.reconnect]}), as its connections and served sessions use
    it.

    @ivar connection_ttl_override: -1 lets each client choose its TTL;
        otherwise the TTL every connection gets (-1 from a client: never).
    @ivar connection_ttl_check_interval_ms: how often silent connections
        are looked for.
    @ivar keep_alive_ms: how long a disconnected session waits for a
        resume.
    @ivar max_depth: deliveries a disconnected session holds.
    @ivar queue_depth: deliveries a connected session holds beyond its
        transport (at most C{max_depth}; None: C{max_depth}).
    @ivar max_depth_policy: one of L{MAX_DEPTH_POLICIES}.
    @ivar recovery_buffer_size: deliveries kept to re-send on resume.
    @ivar limits: what one client may take (L{ClientLimits}).
    @ivar send_answer_hold_ms: how long a send's answer may be held for a
        client that streams (L{meshroute.sessions.answer_pacing}); 0, the
        default here and for STOMP and MQTT sessions, writes each at once
        (the native listener's C{send-answer-hold} sets it).
    """

    connection_ttl_override: int = -1
    connection_ttl_check_interval_ms: int = 2000
    keep_alive_ms: int = 60000
    max_depth: int = 1000
    queue_depth: int | None = None
    max_depth_policy: str = DROP_OLDEST
    recovery_buffer_size: int = 64
    limits: ClientLimits = ClientLimits()
    send_answer_hold_ms: int = 0


def errors(listener: ClientListenerConfig | None, reconnect: ClientReconnectConfig,
           queue: ClientQueueConfig) -> list[Problem]:
    """
    The settings that cannot work, each naming its key: a C{client-ca}
    the listener cannot use (L{client_ca_problem}), a C{queue-depth} above
    C{max-depth} (a disconnected session's bound, which it defaults to).

    @param listener: C{[clients.listener]}, or None without one.
    """
    found: list[Problem] = []
    if listener is not None and listener.client_ca is not None:
        problem = client_ca_problem(listener.client_ca, list(listener.endpoint))
        if problem is not None:
            found.append(Problem("clients.listener.client-ca", problem))
    if queue.queue_depth is not None and queue.queue_depth > reconnect.max_depth:
        found.append(Problem("clients.queue-depth",
                             f"{queue.queue_depth} is above [clients.reconnect] max-depth "
                             f"({reconnect.max_depth}): a disconnected session's bound must "
                             "be at least a connected one's"))
    return found
