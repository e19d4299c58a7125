"""
From configuration to the policy in force: C{[security]} and the users
file it names become one L{SecurityPolicy}, at start and at each reload.
"""

from meshroute.security.policy import SecurityPolicy
from meshroute.security.users import read_users


def load_policy(config) -> SecurityPolicy:
    """
    The policy C{config}'s C{[security]} describes, its users read from
    the users file now.

    @param config: a router's settings
        (L{meshroute.router.settings.RouterConfig}): its C{name}, its
        C{path} and its C{security}.

    @raise ConfigError: the users file cannot be used (naming it, and the
        line of a malformed entry).
    @raise ValueError: C{config} has no C{[security]}.
    """
    security = config.security
    if security is None:
        raise ValueError(f"{config.path} has no [security] section")
    users = read_users(security.users_file) if security.users_file is not None else {}
    return SecurityPolicy(config.name, users, security.permissions)
