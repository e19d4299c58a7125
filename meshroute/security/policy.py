"""
Who may do what: a router's users and permissions as one immutable
snapshot, and the holder through which a reload replaces it.

A permission names users and the address patterns they may send to and
the local queue patterns they may consume from.  In a pattern C{*}
matches any run of name characters (C{[A-Za-z0-9._-]}, never C{@}), so
C{orders@*} is the queue C{orders} on any router and C{orders-*} every
local queue whose name starts with C{orders-}.  A send pattern without
C{@} means a queue of this router.  A user may do what any permission
allows; a user no permission names may do nothing.
"""

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from meshroute.security.credentials import Credentials

_NAME_RUN = "[A-Za-z0-9._-]*"

#: Bound of the remembered answers per snapshot: a check per message must
#: cost a dictionary lookup, and a client cycling through names must not
#: grow memory.
_CACHE_SIZE = 4096


def compile_pattern(pattern: str) -> re.Pattern:
    """
    The regular expression matching exactly what C{pattern} matches.
    """
    return re.compile(_NAME_RUN.join(re.escape(part) for part in pattern.split("*")))


@dataclass(frozen=True)
class Permission:
    """
    One C{[[security.permission]]} entry.
    """

    users: tuple[str, ...]
    send: tuple[str, ...] = ()
    consume: tuple[str, ...] = ()


@dataclass(frozen=True)
class SecurityPolicy:
    """
    The users (name → credentials) and permissions in force, for the
    router named C{router}.
    """

    router: str
    users: Mapping[str, Credentials]
    permissions: tuple[Permission, ...]
    _send: list = field(init=False, repr=False, compare=False)
    _consume: list = field(init=False, repr=False, compare=False)
    _answers: dict = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        send, consume = [], []
        for permission in self.permissions:
            who = [compile_pattern(u) for u in permission.users]
            for pattern in permission.send:
                qualified = pattern if "@" in pattern else f"{pattern}@{self.router}"
                send.append((who, compile_pattern(qualified)))
            for pattern in permission.consume:
                consume.append((who, compile_pattern(pattern)))
        object.__setattr__(self, "_send", send)
        object.__setattr__(self, "_consume", consume)
        object.__setattr__(self, "_answers", {})

    def credentials(self, user: str) -> Credentials | None:
        """
        The credentials of C{user}, or C{None} for a user the users file
        does not hold.
        """
        return self.users.get(user)

    def names(self, user: str) -> bool:
        """
        Whether some permission names C{user} (what keeps a user known by
        its TLS certificate alone a user).
        """
        return any(u.fullmatch(user) for p in self.permissions for u in map(compile_pattern,
                                                                              p.users))

    def may_send(self, user: str, address: str) -> bool:
        """
        Whether C{user} may send to C{address}, a qualified C{queue@router}.
        """
        return self._allowed("send", self._send, user, address)

    def may_consume(self, user: str, queue: str) -> bool:
        """
        Whether C{user} may consume from the local queue C{queue}.
        """
        return self._allowed("consume", self._consume, user, queue)

    def _allowed(self, action: str, rules: list, user: str, name: str) -> bool:
        key = (action, user, name)
        answer = self._answers.get(key)
        if answer is None:
            answer = any(
                target.fullmatch(name) and any(u.fullmatch(user) for u in who)
                for who, target in rules
            )
            if len(self._answers) >= _CACHE_SIZE:
                self._answers.clear()
            self._answers[key] = answer
        return answer


class Security:
    """
    The policy in force, replaced whole on reload (SIGHUP); observers
    learn of each replacement, e.g. to close the connections of users who
    are gone.
    """

    def __init__(self, policy: SecurityPolicy) -> None:
        self.policy = policy
        self._observers: list[Callable[[SecurityPolicy, SecurityPolicy], None]] = []

    def observe(self, observer: Callable[[SecurityPolicy, SecurityPolicy], None]) -> None:
        """
        Call C{observer(old, new)} after every replacement.
        """
        self._observers.append(observer)

    def replace(self, policy: SecurityPolicy) -> None:
        """
        Put C{policy} in force and tell the observers.
        """
        old, self.policy = self.policy, policy
        for observer in list(self._observers):
            observer(old, policy)
