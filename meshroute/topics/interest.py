"""
Topic interest across the mesh: what this router advertises for its
subscriptions (L{LocalInterest}), which routers want which topics, as
their advertisements say (L{InterestTable}), and how a publication is
fanned out toward them (L{fan_out}).

Each router advertises the aggregated patterns of its subscriptions
(L{meshroute.topics.patterns.aggregate}: a pattern another covers is not
advertised again) under a version it raises with every change, as route
advertisements are versioned: the newest version of a router's interest
wins, an older one arriving late changes nothing, an empty one withdraws
it, and a router forgotten by the routes (unreachable for good) is
forgotten here too.

A publication goes to the routers whose interest matches its topic, one
copy per link: the targets are grouped by their next hop
(L{fan_out}), and each copy carries its group, so a router forwards a
copy only toward the targets it was given, never back (a route tree
rooted at the publisher's router, branching where the paths part).
"""

from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass

from meshroute.topics.index import PatternIndex
from meshroute.topics.patterns import aggregate, subsumes


@dataclass(frozen=True)
class Interest:
    """
    One router's advertised interest.

    @ivar version: raised by the router with every change.
    @ivar patterns: parsed patterns, aggregated.
    """

    version: int
    patterns: frozenset


def _hides(one: tuple[str, ...], other: tuple[str, ...]) -> bool:
    """
    Whether C{other} is left out of an aggregation holding C{one}
    (L{aggregate}'s rule: subsumed, and of two that subsume each other
    the one that sorts first is kept).
    """
    return subsumes(one, other) and (not subsumes(other, one) or one < other)


class LocalInterest:
    """
    This router's own interest: the patterns of its subscriptions,
    counted (several subscriptions may share one), and what it
    advertises for them: their aggregation, under a version raised each
    time the aggregation changes, to the clock's milliseconds (C{now_ms})
    at least (and only then: a subscription a
    broader one covers changes nothing the mesh needs to hear).
    """

    def __init__(self, version: int = 0, now_ms: Callable[[], int] = lambda: 0) -> None:
        self._counts: dict[tuple[str, ...], int] = {}
        self._now_ms = now_ms
        self.version = version
        self.advertised: frozenset = frozenset()

    def subscribed(self, pattern: tuple[str, ...]) -> bool:
        """
        A subscription to C{pattern} (parsed) began; whether the
        advertisement changed (then advertise L{advertised} under
        L{version}).  The aggregation changes around C{pattern} alone:
        what it subsumes leaves, unless it is subsumed itself (linear in
        the patterns advertised).
        """
        count = self._counts.get(pattern, 0)
        self._counts[pattern] = count + 1
        if count or any(_hides(kept, pattern) for kept in self.advertised):
            return False
        return self._changed({kept for kept in self.advertised if not _hides(pattern, kept)}
                             | {pattern})

    def unsubscribed(self, pattern: tuple[str, ...]) -> bool:
        """
        A subscription to C{pattern} ended; whether the advertisement
        changed (the last one for a pattern withdraws it, unless another
        covers it; the patterns it alone subsumed come back).
        """
        count = self._counts.get(pattern, 0)
        if count > 1:
            self._counts[pattern] = count - 1
            return False
        self._counts.pop(pattern, None)
        if pattern not in self.advertised:
            return False
        rest = self.advertised - {pattern}
        hidden = [live for live in self._counts if subsumes(pattern, live)
                  and not any(subsumes(kept, live) for kept in rest)]
        return self._changed(rest | aggregate(hidden))

    def _changed(self, now) -> bool:
        now = frozenset(now)
        if now == self.advertised:
            return False
        self.advertised = now
        # Above every version a previous run of this router advertised,
        # without storing it: its clock in milliseconds (as route
        # advertisements are numbered, meshroute.routing.table).
        self.version = max(self.version + 1, self._now_ms())
        return True

    def now(self) -> int:
        "The clock's milliseconds: the least version of the next change."
        return self._now_ms()


class InterestTable:
    """
    The newest advertised interest of every other router, indexed for
    matching.
    """

    def __init__(self) -> None:
        self._interest: dict[str, Interest] = {}
        self._index = PatternIndex()

    def advertised(self, router: str, version: int, patterns: Iterable) -> bool:
        """
        C{router} advertised C{patterns} under C{version}: take it if it
        is newer than what is held; whether anything changed.  Empty
        C{patterns} withdraw the router's interest (its version is kept,
        so an older advertisement arriving late is still refused).
        """
        held = self._interest.get(router)
        if held is not None and version <= held.version:
            return False
        patterns = frozenset(patterns)
        old = held.patterns if held is not None else frozenset()
        for pattern in old - patterns:
            self._index.remove(pattern, router)
        for pattern in patterns - old:
            self._index.add(pattern, router)
        self._interest[router] = Interest(version, patterns)
        return patterns != old

    def forget(self, router: str) -> None:
        """
        The routes forgot C{router}: forget its interest and version.
        """
        held = self._interest.pop(router, None)
        if held is not None:
            for pattern in held.patterns:
                self._index.remove(pattern, router)

    def origins(self) -> set[str]:
        "The routers whose interest is held (withdrawn included)."
        return set(self._interest)

    def version(self, router: str) -> int:
        held = self._interest.get(router)
        return 0 if held is None else held.version

    def patterns(self, router: str) -> frozenset:
        held = self._interest.get(router)
        return frozenset() if held is None else held.patterns

    def interested(self, topic: tuple[str, ...]) -> set[str]:
        """
        The routers whose advertised interest matches C{topic} (parsed).
        """
        return self._index.match(topic)


def fan_out(targets: Iterable[str], next_hop: Callable[[str], Hashable | None]
            ) -> dict[Hashable, frozenset[str]]:
    """
    C{targets} grouped by their next hop: one copy of a publication per
    hop, carrying its group.  A target without a route (C{next_hop}
    answers None) is left out: nothing is sent toward it.
    """
    groups: dict[Hashable, set[str]] = {}
    for target in targets:
        hop = next_hop(target)
        if hop is not None:
            groups.setdefault(hop, set()).add(target)
    return {hop: frozenset(group) for hop, group in groups.items()}
