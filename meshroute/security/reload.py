"""
Reading C{[security]} and the users file again while the router runs
(SIGHUP), so that adding, removing or re-keying a user, or changing a
permission, needs no restart and drops no connection.

A reload is all or nothing: the configuration file and the users file are
read and checked in full first, and only then is the new policy put in
force (L{Security.replace}, whose observers close the connections of users
who are gone).  Anything wrong is logged naming the file and the key or
line, and the policy in force stays, as a router that lost its users to a
typo would lock every client out.

Only C{[security]} and the users file are taken from the file; every
other change waits for a restart.  A C{[security]} added to a router that
started without one, or removed from one that started with one, also
waits for a restart (and says so): the client listener was built open or
protected, and a reload never switches that.
"""

import dataclasses
from collections.abc import Callable

from twisted.logger import Logger

from meshroute.errors import ConfigError
from meshroute.security.load import load_policy
from meshroute.security.policy import Security, SecurityPolicy

log = Logger()


def describe_changes(old: SecurityPolicy, new: SecurityPolicy) -> str:
    """
    What a reload changed, for the log: users added, removed and re-keyed
    by name (never their credentials), and the count of permissions.
    """
    added = [name for name in new.users if name not in old.users]
    removed = [name for name in old.users if name not in new.users]
    changed = [name for name in new.users
               if name in old.users and new.users[name] != old.users[name]]
    parts = [f"{label} {', '.join(names)}" for label, names in (
        ("users added:", added), ("users removed:", removed),
        ("passwords changed:", changed)) if names]
    if not parts:
        parts.append(f"users unchanged ({len(new.users)})")
    same = "unchanged" if new.permissions == old.permissions else "changed"
    parts.append(f"{len(new.permissions)} permissions ({same})")
    return "; ".join(parts)


def reload_security(security: Security | None, config, read_config: Callable[[], object]
                    ) -> bool:
    """
    Read C{config.path}'s C{[security]} and its users file again and, if
    both are valid, put the new policy in force in C{security}.

    @param security: the router's L{Security}, or None for a router
        started without C{[security]}.
    @param config: the configuration the router started with
        (L{meshroute.router.settings.RouterConfig}); its name is kept,
        whatever the file says now.
    @param read_config: reads and validates C{config.path} again, raising
        L{ConfigError} for anything wrong: the TOML loader, which the
        composition layer hands down (this package never imports it).
    @return: whether a new policy is in force.
    """
    try:
        fresh = read_config()
        if security is None:
            if fresh.security is not None:
                raise ConfigError(config.path, "security",
                                  "added while the router runs: it takes effect at the next "
                                  "start; until then the client listener stays open")
            log.info("reload: {path} has no [security]; nothing to reload", path=config.path)
            return False
        if fresh.security is None:
            raise ConfigError(config.path, "security",
                              "removed while the router runs: the users and permissions in "
                              "force stay until the next start")
        policy = load_policy(dataclasses.replace(fresh, name=config.name))
    except ConfigError as e:
        log.error("reload refused, the users and permissions in force are kept: {error}",
                  error=str(e))
        return False
    old = security.policy
    security.replace(policy)
    log.info("reloaded [security] of {path}: {changes}", path=config.path,
             changes=describe_changes(old, policy))
    return True
