"""
C{[security]} and its C{[[security.permission]]} entries: who the client
listeners let in and what each may do; and what a permission's pattern
may be (L{pattern_problem}), which the TOML loader asks of each pattern
it reads.
"""

import re
from dataclasses import dataclass

from meshroute.security.policy import Permission
from meshroute.topics.patterns import BadTopic, parse_pattern

#: A user or queue name pattern: name characters and C{*}.
_PATTERN = re.compile(r"[A-Za-z0-9._*-]{1,64}")


@dataclass(frozen=True)
class SecurityConfig:
    """
    C{[security]} with its C{[[security.permission]]} entries: who the
    client listener lets in (the users file, read by
    L{meshroute.security.load.load_policy}) and what each may do.

    @ivar users_file: the users file (L{meshroute.security.users}), or
        None when clients authenticate by TLS certificate only.
    """

    users_file: str | None = None
    permissions: tuple[Permission, ...] = ()


def pattern_problem(kind: str, value: object) -> str | None:
    """
    What is wrong with one pattern of a C{[[security.permission]]} list,
    or None.

    @param kind: C{"user-patterns"}, C{"queue-patterns"},
        C{"address-patterns"} (C{QUEUE} or C{QUEUE@ROUTER} patterns) or
        C{"topic-patterns"} (L{meshroute.topics.patterns}).
    """
    if not isinstance(value, str):
        return f"expected a pattern string, got {type(value).__name__} {value!r}"
    if kind == "topic-patterns":
        try:
            parse_pattern(value)
        except BadTopic as e:
            return str(e)
        return None
    parts = value.split("@") if kind == "address-patterns" else [value]
    if len(parts) > 2:
        return f"{value!r} has more than one @"
    if not all(_PATTERN.fullmatch(part) for part in parts):
        what = "QUEUE or QUEUE@ROUTER" if kind == "address-patterns" else "a name pattern"
        return f"{value!r} is not {what} (1 to 64 of A-Z a-z 0-9 . _ - and *)"
    return None
