"""
A link-state route table.

Every router describes its own delivery-stage links in an
L{Advertisement} (its name, a sequence number, the sorted names of its
live peers) and floods it to the whole mesh: each router passes on every
advertisement that is news to it, and sends its whole database to a
neighbour whose link just reached delivery.  So every router ends up
holding the newest advertisement of every router, and computes from that
same database the same graph: an edge A–B exists only when A lists B
I{and} B lists A (a router's own side comes from its own live links).
Breadth-first search over that graph gives the shortest path, in hops, to
every reachable router; among equal-length paths the lexicographically
smallest next hop wins, so the result depends on the database alone.

Why link state rather than distance vector: a distance-vector router only
knows its neighbours' distances, so after a failure two routers can keep
teaching each other a route through one another, counting up to
"infinity" before the route dies (split horizon and poisoned reverse only
cure two-router loops).  Here every router sees the whole graph; a dead
link disappears from the graph as soon as I{either} end's new
advertisement arrives (the bidirectional-edge rule), and a router that is
cut off is simply unreachable: there is no count to infinity.

No message loops once converged: every router runs the same computation
on the same database, so the next hop of a destination is always one hop
closer to it by the same distances, and a message follows one shortest
path.  I{While} the mesh converges, databases differ (an advertisement
has reached some routers and not others) and two routers may, for a
moment, each think the other is closer to a destination: a message can
bounce between them.  That lasts until the advertisement reaches both;
the hop count carried by every message, and the dead-letter queue past
C{max-hops}, bound what such a transient loop can do to a message.

Sequence numbers order one router's advertisements.  They must grow
across restarts without being stored, so a router takes the larger of
"previous + 1" and its clock in milliseconds; and if the mesh still
carries an advertisement of a previous incarnation numbered above ours
(a clock that went backwards), hearing it makes us jump above it and
flood a fresh one, so the mesh forgets the stale one.

Epochs order the instances of one router.  The two instances of an HA
pair share a router name (docs/ha.md); the one serving carries the
epoch its voters granted, and every advertisement carries its origin's
epoch (0 for a router without HA).  Advertisements compare by
C{(epoch, seq)}: a higher epoch wins even with a lower C{seq} (the new
instance numbers from its own clock, which may be behind the old
one's), and a stale instance's advertisements lose wherever they
arrive, whatever their C{seq}.  An instance that hears of itself from a
higher epoch does not jump above it: it has lost its place and must not
fight the instance that took it.
"""

from dataclasses import dataclass

from twisted.internet.interfaces import IReactorTime
from zope.interface import implementer

from meshroute.interfaces import IRouteTable


@dataclass(frozen=True)
class Advertisement:
    """
    One router's own view of its delivery-stage links, flooded to the
    whole mesh.

    @ivar origin: the router that made it.
    @ivar seq: orders the advertisements of C{origin}; higher is newer.
    @ivar neighbors: the routers C{origin} has a delivery-stage link to,
        sorted and without duplicates (normalised on construction).
    @ivar epoch: the epoch of the instance of C{origin} that made it (0
        for a router without HA); it orders advertisements before C{seq}.
    """

    origin: str
    seq: int
    neighbors: tuple[str, ...] = ()
    epoch: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "neighbors", tuple(sorted(set(self.neighbors))))

    @property
    def order(self) -> tuple[int, int]:
        """
        C{(epoch, seq)}: what makes one advertisement of C{origin} newer
        than another.
        """
        return self.epoch, self.seq


@implementer(IRouteTable)
class RouteTable:
    """
    The link-state database of one router, and the shortest paths over it.

    Pure: it never sends anything itself.  Whatever C{link_up},
    C{link_down} and C{received} return is for the caller to flood.
    Routes are recomputed lazily, on the first question after the
    database changed.
    """

    def __init__(self, name: str, clock: IReactorTime, epoch: int = 0) -> None:
        """
        @param name: this router's name.
        @param clock: only C{seconds()} is used, to number our own
            advertisements.
        @param epoch: the epoch this instance of the router serves in (0
            without HA), carried by our own advertisements.
        """
        self.name = name
        self.epoch = epoch
        self._clock = clock
        self._links: set[str] = set()
        self._own = Advertisement(name, self._next_seq(0), (), epoch)
        self._database: dict[str, Advertisement] = {}
        self._heard: set[str] = {name}
        self._news: set[str] = set()
        self._routes: dict[str, tuple[str, int]] | None = None
        self._changed: dict[str, float] = {name: clock.seconds()}

    @property
    def own(self) -> Advertisement:
        """
        Our own current advertisement.
        """
        return self._own

    def _next_seq(self, above: int) -> int:
        return max(above + 1, int(self._clock.seconds() * 1000))

    def _advertise(self, above: int) -> list[Advertisement]:
        self._own = Advertisement(self.name, self._next_seq(above), tuple(self._links),
                                  self.epoch)
        self._routes = None
        return [self._own]

    def link_up(self, peer: str) -> list[Advertisement]:
        """
        A link to C{peer} reached delivery.

        @return: our own advertisement, to send to every neighbour
            (C{peer} included).  The caller also sends
            L{advertisements} in full to C{peer}.
        """
        if peer == self.name:
            raise ValueError(f"{self.name} cannot link to itself")
        self._hear((peer,))
        if peer in self._links:
            return [self._own]
        self._links.add(peer)
        self._changed[self.name] = self._clock.seconds()
        return self._advertise(self._own.seq)

    def link_down(self, peer: str) -> list[Advertisement]:
        """
        The link to C{peer} is gone.

        @return: our own advertisement, to send to the remaining
            neighbours.
        """
        if peer in self._links:
            self._links.discard(peer)
            self._changed[self.name] = self._clock.seconds()
            return self._advertise(self._own.seq)
        return [self._own]

    def advertisements(self) -> list[Advertisement]:
        """
        Every advertisement known, ours first and then by origin: what to
        send to a neighbour whose link just reached delivery.
        """
        return [self._own] + [self._database[o] for o in sorted(self._database)]

    def received(self, advertisement: Advertisement) -> list[Advertisement]:
        """
        An advertisement arrived from a neighbour.

        @return: C{[advertisement]} when it is newer (by C{(epoch, seq)})
            than what we held for its origin (pass it on to the other
            neighbours); C{[]} when it is not news.  When it is about I{us},
            of our epoch and not our current one (a previous incarnation's,
            numbered at or above ours), our own fresh advertisement,
            numbered above it: send that to every neighbour, the sender
            included, since the sender holds the stale one.  About us from
            another epoch: C{[]} (a lower one loses to ours everywhere; a
            higher one is the instance that took our place).
        """
        origin = advertisement.origin
        if origin == self.name:
            if advertisement.epoch == self.epoch and (
                advertisement.seq > self._own.seq
                or (advertisement.seq == self._own.seq and advertisement != self._own)
            ):
                return self._advertise(max(advertisement.seq, self._own.seq))
            return []
        held = self._database.get(origin)
        if held is not None and held.order >= advertisement.order:
            return []
        if held is None or held.neighbors != advertisement.neighbors:
            self._changed[origin] = self._clock.seconds()
        self._database[origin] = advertisement
        self._hear((origin, *advertisement.neighbors))
        self._routes = None
        return [advertisement]

    def _listed(self) -> dict[str, set[str]]:
        """
        The neighbours each router lists: ours from our own links, the
        others' from their advertisements.
        """
        listed = {origin: set(adv.neighbors) for origin, adv in self._database.items()}
        listed[self.name] = set(self._own.neighbors)
        return listed

    def _graph(self) -> dict[str, set[str]]:
        """
        The bidirectional edges of the database: B is adjacent to A only
        when A lists B and B lists A.
        """
        listed = self._listed()
        return {
            router: {other for other in others if router in listed.get(other, ())}
            for router, others in listed.items()
        }

    def adjacencies(self) -> dict[tuple[str, str], bool]:
        """
        Every pair of routers one of which lists the other, as a sorted
        name pair, with whether the other lists it back: C{True} for an
        edge of the graph (a delivery-stage link both ends advertise),
        C{False} for a link one end no longer advertises (closed there,
        or its end is silent and still advertises what it last had).
        """
        listed = self._listed()
        pairs: dict[tuple[str, str], bool] = {}
        for router, others in listed.items():
            for other in others:
                pair = (router, other) if router < other else (other, router)
                pairs[pair] = router in listed.get(other, ())
        return dict(sorted(pairs.items()))

    def _compute(self) -> dict[str, tuple[str, int]]:
        """
        Breadth-first search from this router, level by level; a router's
        next hop is the smallest next hop among its predecessors on the
        previous level.
        """
        graph = self._graph()
        routes: dict[str, tuple[str, int]] = {}
        level = {peer: peer for peer in graph[self.name]}
        hops = 1
        while level:
            for router, hop in level.items():
                routes[router] = (hop, hops)
            following: dict[str, str] = {}
            for router, hop in level.items():
                for other in graph[router]:
                    if other == self.name or other in routes:
                        continue
                    if other not in following or hop < following[other]:
                        following[other] = hop
            level = following
            hops += 1
        return dict(sorted(routes.items()))

    def routes(self) -> dict[str, tuple[str, int]]:
        """
        C{{router: (next_hop, hops)}} for every reachable router other
        than this one, by router name.
        """
        if self._routes is None:
            self._routes = self._compute()
        return dict(self._routes)

    def next_hop(self, router: str) -> str | None:
        """
        The neighbour to forward to for C{router}, or None when it is not
        reachable now (or is this router).
        """
        if self._routes is None:
            self._routes = self._compute()
        route = self._routes.get(router)
        return route[0] if route is not None else None

    def changes(self) -> dict[str, float]:
        """
        C{{router: when}}: when this table last took a change of each
        router's links (its first advertisement, or one listing other
        neighbours than the one before; for this router, a link of its own
        up or down), in the clock's seconds.  The newest is the mesh's
        last topology change as this router saw it.
        """
        return dict(self._changed)

    def heard(self) -> frozenset[str]:
        """
        Every router L{known}, this one included.
        """
        return frozenset(self._heard)

    def _hear(self, routers) -> None:
        for router in routers:
            if router not in self._heard:
                self._heard.add(router)
                self._news.add(router)

    def known(self, router: str) -> bool:
        """
        Whether C{router} has ever been heard of (reachable or not): this
        router, an origin or a listed neighbour of any advertisement we
        stored, a direct peer, or a router L{remember}ed.
        """
        return router in self._heard

    def remember(self, routers) -> None:
        """
        Routers heard of by an earlier run (saved in the store): known from
        now on, and not news for L{newly_heard}.
        """
        self._heard.update(routers)

    def newly_heard(self) -> set[str]:
        """
        The routers first heard of since the last call, and not
        L{remember}ed: the names left to save.
        """
        news, self._news = self._news, set()
        return news
