"""
The link's settings, as the file gives them and as each link is given
them.

C{[routing.listener]} and C{[[routing.connector]]} (L{ListenerConfig},
L{ConnectorConfig}): where other routers reach this one, and the links it
keeps open itself; and the rule that judges the connectors together
(L{errors}).  The TOML loader converts each value (durations in
milliseconds in attributes ending in C{_ms}, the password file's secret);
the router (L{meshroute.router.service}) turns these into the link
factories' and the connector services' own settings (L{ListenerSettings},
L{ConnectorSettings}): the part of the contract each side of a link keeps.
"""

from collections.abc import Sequence
from dataclasses import dataclass, field

from meshroute.errors import Problem


@dataclass(frozen=True)
class ListenerSettings:
    """
    The routing listener's side of the contract, in milliseconds.
    """

    secret: bytes
    keepalive_interval_ms: int
    stage_valid_timeout_ms: int
    reject_disconnect_delay_ms: int
    allowed_routers: frozenset | None = None


@dataclass(frozen=True)
class ConnectorSettings:
    """
    One routing connector's side of the contract, in milliseconds.
    """

    secret: bytes
    expected_peer: str
    stage_valid_timeout_ms: int


@dataclass(frozen=True)
class ListenerConfig:
    """
    C{[routing.listener]}: where other routers connect to us.

    @ivar secret: the contents of C{password_file} without trailing line
        ends; kept out of C{repr} so logging a config cannot leak it.
    @ivar allowed_routers: the router names allowed to connect, or C{None}
        for any router that knows the secret.
    """

    endpoint: str
    password_file: str
    secret: bytes = field(repr=False)
    keepalive_interval_ms: int = 60000
    stage_valid_timeout_ms: int = 15000
    reject_disconnect_delay_ms: int = 5000
    allowed_routers: tuple[str, ...] | None = None


@dataclass(frozen=True)
class ConnectorConfig:
    """
    One C{[[routing.connector]]}: an outgoing link we keep open.

    The four retry parameters feed a L{ClientService} backoff policy;
    C{reconnect_attempts} is -1 for forever and 0 for no retry.

    @ivar endpoint: the client endpoint strings to try in turn (a one-item
        tuple when the file gives a single string).  The backoff applies
        between full rounds over them (L{meshroute.link.rotation}).
    """

    router: str
    endpoint: tuple[str, ...]
    password_file: str
    secret: bytes = field(repr=False)
    retry_interval_ms: int = 2000
    retry_interval_multiplier: float = 1.0
    max_retry_interval_ms: int = 2000
    reconnect_attempts: int = -1
    stage_valid_timeout_ms: int = 15000


def errors(router_name: str, connectors: Sequence[ConnectorConfig]) -> list[Problem]:
    """
    The connectors that cannot work, in file order, each naming its key:
    one to this router itself, a second one to the same router, a
    C{max-retry-interval} below its C{retry-interval}.

    @param router_name: C{router.name}, which no connector may name.
    """
    found: list[Problem] = []
    seen: set[str] = set()
    for index, connector in enumerate(connectors):
        prefix = f"routing.connector[{index}]"
        if connector.router == router_name:
            found.append(Problem(f"{prefix}.router",
                                 f"a router cannot connect to itself ({connector.router!r})"))
        elif connector.router in seen:
            found.append(Problem(f"{prefix}.router",
                                 f"a connector to {connector.router!r} is already configured"))
        seen.add(connector.router)
        if connector.max_retry_interval_ms < connector.retry_interval_ms:
            found.append(Problem(f"{prefix}.max-retry-interval",
                                 f"{connector.max_retry_interval_ms} ms is less than "
                                 f"retry-interval {connector.retry_interval_ms} ms"))
    return found
