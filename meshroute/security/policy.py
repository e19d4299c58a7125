"""
Who may do what: a router's users and permissions as one immutable
snapshot, and the holder through which a reload replaces it.

A permission names users and the address patterns they may send to and
the local queue patterns they may consume from.  In a pattern C{*}
matches any run of name characters (C{[A-Za-z0-9._-]}, never C{@}), so
C{orders@*} is the queue C{orders} on any router and C{orders-*} every
local queue whose name starts with C{orders-}.  A send pattern without
C{@} means a queue of this router.

A permission also names the topics its users may publish to and
subscribe to, in the topic pattern language (L{meshroute.topics.patterns}:
C{*} one word, C{#} zero or more words).  A publication is allowed when
one of the user's publish patterns matches its topic; a subscription
when the user's subscribe patterns, together, match every topic its
pattern can match, so that a subscription can never receive what its
user may not see (C{prices.eu.*} allows subscribing C{prices.eu.gbp} and
C{prices.eu.*}, never C{prices.#}).

A user may do what any permission allows; a user no permission names
may do nothing.
"""

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from meshroute.security.credentials import Credentials
from meshroute.topics.patterns import (
    ANY,
    ONE,
    covers_together,
    matches,
    parse_pattern,
    parse_topic,
)

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

    @ivar publish: topic patterns its users may publish to, as written.
    @ivar subscribe: topic patterns its users' subscriptions must stay
        within, as written.
    """

    users: tuple[str, ...]
    send: tuple[str, ...] = ()
    consume: tuple[str, ...] = ()
    publish: tuple[str, ...] = ()
    subscribe: tuple[str, ...] = ()


@dataclass(frozen=True)
class SecurityPolicy:
    """
    The users (name → credentials) and permissions in force, for the
    router named C{router}.

    Every pattern is compiled or parsed once, here, and every answer is
    remembered: a check per message costs a dictionary lookup once a
    user and a name have been seen.

    @raise BadTopic: a publish or subscribe pattern is not a topic
        pattern (the TOML loader refuses those first, naming the key).
    """

    router: str
    users: Mapping[str, Credentials]
    permissions: tuple[Permission, ...]
    _send: list = field(init=False, repr=False, compare=False)
    _consume: list = field(init=False, repr=False, compare=False)
    _publish: list = field(init=False, repr=False, compare=False)
    _subscribe: list = field(init=False, repr=False, compare=False)
    _answers: dict = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        send, consume, publish, subscribe = [], [], [], []
        for permission in self.permissions:
            who = [compile_pattern(u) for u in permission.users]
            for pattern in permission.send:
                qualified = pattern if "@" in pattern else f"{pattern}@{self.router}"
                send.append((who, compile_pattern(qualified)))
            consume.extend((who, compile_pattern(p)) for p in permission.consume)
            publish.extend((who, parse_pattern(p)) for p in permission.publish)
            subscribe.extend((who, parse_pattern(p)) for p in permission.subscribe)
        object.__setattr__(self, "_send", send)
        object.__setattr__(self, "_consume", consume)
        object.__setattr__(self, "_publish", publish)
        object.__setattr__(self, "_subscribe", subscribe)
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
        return self._remembered(("send", user, address), lambda: any(
            target.fullmatch(address) for target in self._granted(self._send, user)))

    def may_consume(self, user: str, queue: str) -> bool:
        """
        Whether C{user} may consume from the local queue C{queue}.
        """
        return self._remembered(("consume", user, queue), lambda: any(
            target.fullmatch(queue) for target in self._granted(self._consume, user)))

    def may_publish(self, user: str, topic: str) -> bool:
        """
        Whether C{user} may publish to the topic named C{topic}: some
        publish pattern of a permission naming the user matches it.

        @raise BadTopic: C{topic} is not a topic name (a wildcard
            included); the caller refuses it as such, not as a denial.
        """
        def decide() -> bool:
            words = parse_topic(topic)
            return any(matches(allowed, words) for allowed in self._granted(self._publish, user))

        return self._remembered(("publish", user, topic), decide)

    def may_subscribe(self, user: str, pattern: str) -> bool:
        """
        Whether C{user} may subscribe with the topic pattern C{pattern}:
        every topic it can match is matched by a subscribe pattern of a
        permission naming the user (by one or another of them,
        L{covers_together}).  So C{prices.eu.*} allows C{prices.eu.gbp}
        and C{prices.eu.*}, never C{prices.#}, which also matches
        C{prices.us.usd}.  A pattern so intricate that judging it passes
        L{meshroute.topics.patterns.MAX_COVER_STEPS} is refused: none of
        everyday length comes near.

        @raise BadTopic: C{pattern} is not a topic pattern.
        """
        def decide() -> bool:
            wanted = parse_pattern(pattern)
            if wanted == (ANY,):
                # '#' alone also matches the empty sequence, which is no
                # topic: judge the pattern of every topic, '*.#', so that
                # a user allowed '*.#' may subscribe '#'.
                wanted = (ONE, ANY)
            return covers_together(self._granted(self._subscribe, user), wanted)

        return self._remembered(("subscribe", user, pattern), decide)

    @staticmethod
    def _granted(rules: list, user: str) -> list:
        """
        The targets of C{rules} (C{(users, target)} pairs) that name
        C{user}.
        """
        return [target for who, target in rules if any(u.fullmatch(user) for u in who)]

    def _remembered(self, key: tuple, decide: Callable[[], bool]) -> bool:
        """
        The answer remembered for C{key}, or C{decide()}'s, remembered.
        """
        answer = self._answers.get(key)
        if answer is None:
            answer = decide()
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
