"""
C{[admin]}: where the JSON admin API listens and the bearer token it asks
for; and the rule that keeps it from being open to other hosts
(L{errors}).

The TOML loader converts the values (the endpoint string, the token file,
which only its owner may read, into the token).
"""

import ipaddress
from dataclasses import dataclass, field

from twisted.internet.endpoints import UNIXServerEndpoint, serverFromString

from meshroute.errors import Problem


@dataclass(frozen=True)
class AdminConfig:
    """
    C{[admin]}: where the JSON admin API listens, and the bearer token it
    asks for.

    @ivar token: the contents of C{token_file} without trailing line ends,
        or None without one (then C{endpoint} is loopback or a UNIX
        socket); kept out of C{repr} like a listener's secret.
    """

    endpoint: str
    token_file: str | None = None
    token: bytes | None = field(default=None, repr=False)


def errors(admin: AdminConfig, reactor) -> list[Problem]:
    """
    An API without a token that other hosts can reach: anyone reaching it
    would read the whole mesh.

    @param reactor: only used to construct the endpoint (L{is_local}).
    """
    if admin.token is None and not is_local(admin.endpoint, reactor):
        return [Problem("admin.endpoint",
                        f"{admin.endpoint!r} is reachable from other hosts and there is "
                        "no admin.token-file: anyone reaching it would read the whole "
                        "mesh; bind it to loopback (interface=127.0.0.1) or set "
                        "token-file")]
    return []


def is_local(description: str, reactor) -> bool:
    """
    Whether the server endpoint C{description} (already valid) can only be
    reached from this host: a UNIX socket, or TCP (or TLS) bound to a
    loopback address.  An endpoint of any other kind, or bound to every
    interface, is not.
    """
    endpoint = serverFromString(reactor, description)
    if isinstance(endpoint, UNIXServerEndpoint):
        return True
    interface = getattr(endpoint, "_interface", "")
    try:
        return bool(interface) and ipaddress.ip_address(interface).is_loopback
    except ValueError:
        return False
