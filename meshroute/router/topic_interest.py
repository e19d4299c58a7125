"""
Topic interest over the links: this router's own (what its
subscriptions' patterns aggregate to, under a version it raises with each
change) and every other router's, as L{Interest} frames carry them
(docs/topics.md).

It moves as route advertisements do (L{meshroute.router.forwarding}): a
link that reaches delivery (at link version 5 or later) is sent the whole
table; an advertisement newer than the one held for its origin is taken
at once and passed on at the end of the turn to every link that does not
hold it (L{TurnFlood}); an older one changes nothing.  An empty one
withdraws its origin's interest.  A router's interest is kept while it
is unreachable: its durable subscriptions keep collecting, their copies
waiting in the backlog for it as any message for it would.  Others'
interest is saved in the store as it is taken, and read at start
(L{TopicInterest.load}) before the fan-out takes what a previous run
left: those publications go where the mesh's interest was, not where a
router that has heard nothing yet would send them (nowhere).

Versions grow across restarts without being stored: at least the
clock's milliseconds at each change; and an advertisement of our own
from an earlier run numbered above ours (a clock that went backwards)
makes us advertise above it.
"""

from collections.abc import Callable
from dataclasses import dataclass

from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger

from meshroute.errors import WireError
from meshroute.routing.flood import TurnFlood
from meshroute.topics.interest import InterestTable, LocalInterest
from meshroute.topics.patterns import BadTopic, format_words, parse_pattern
from meshroute.wire.frames import TOPICS_VERSION, Interest

log = Logger()


@dataclass(frozen=True)
class InterestAdvertisement:
    """
    One router's interest as it travels: what L{TurnFlood} floods.
    """

    origin: str
    version: int
    patterns: frozenset

    @property
    def order(self) -> int:
        return self.version

    def item(self) -> list:
        "Its item of an L{Interest} frame."
        return [self.origin, self.version, sorted(format_words(p) for p in self.patterns)]


class TopicInterest:
    """
    The topic interest router C{name} holds and floods; C{store} keeps
    others' (L{load}).

    @param changed: called after a turn in which the table changed, with
        the origins whose interest changed (for those waiting on it:
        L{meshroute.router.mesh_wide}).
    """

    def __init__(self, name: str, store, clock: IReactorTime,
                 changed: Callable[[set[str]], None] = lambda origins: None) -> None:
        self.name = name
        self._store = store
        self.local = LocalInterest(now_ms=lambda: int(clock.seconds() * 1000))
        self.table = InterestTable()
        #: Whether our own interest is known (L{ready}): the durable
        #: subscriptions are read.  Before, none of ours is advertised, so
        #: that a restarted router never withdraws, for a moment, the
        #: interest of the durable subscriptions it holds.
        self.is_ready = False
        self._changed = changed
        self._links: dict[str, Callable] = {}
        self._flood = TurnFlood(clock, self._turn_ended)

    # -- this router's subscriptions -------------------------------------------

    def subscribed(self, pattern: tuple[str, ...]) -> None:
        "A local subscription to C{pattern} (parsed) began."
        if self.local.subscribed(pattern):
            self._advertise_own()

    def unsubscribed(self, pattern: tuple[str, ...]) -> None:
        "A local subscription to C{pattern} ended."
        if self.local.unsubscribed(pattern):
            self._advertise_own()

    def ready(self) -> None:
        """
        The durable subscriptions are read: advertise our interest.
        """
        self.is_ready = True
        self.local.version = max(self.local.version + 1, self.local.now())
        self._advertise_own()

    def _advertise_own(self) -> None:
        if not self.is_ready:
            return
        local = self.local
        self.table.advertised(self.name, local.version, local.advertised)
        self._flood.news(InterestAdvertisement(self.name, local.version, local.advertised))

    # -- the links --------------------------------------------------------------

    def link_up(self, peer: str, send: Callable, version: int) -> None:
        """
        A link to C{peer} reached delivery at C{version}: from version 5
        it hears interest, the whole table first.
        """
        if version < TOPICS_VERSION:
            return
        self._links[peer] = send
        everything = [self._advertisement(origin).item() for origin in self.table.origins()
                      if origin != self.name or self.is_ready]
        if everything:
            send(Interest(everything))
        self._flood.sent_everything(peer)

    def link_down(self, peer: str) -> None:
        self._links.pop(peer, None)

    def received(self, peer: str, frame: Interest) -> None:
        """
        Interest advertisements arrived from C{peer}: the news taken now,
        flooded at the end of the turn.

        @raise WireError: a pattern is not one (the link closes).
        """
        for origin, version, patterns in frame.advertisements:
            try:
                parsed = frozenset(parse_pattern(p) for p in patterns)
            except BadTopic as e:
                raise WireError(f"Interest from {peer}: {e}") from None
            if origin == self.name:
                if version > self.local.version:
                    # Ours from an earlier run, numbered above this one's.
                    self.local.version = version + 1
                    self._advertise_own()
                continue
            advertisement = InterestAdvertisement(origin, version, parsed)
            if version <= self.table.version(origin):
                self._flood.heard_again(advertisement, peer)
                continue
            self.table.advertised(origin, version, parsed)
            self._flood.news(advertisement, peer)

    def stop(self) -> None:
        self._flood.stop()

    def _turn_ended(self, pending: dict) -> None:
        for peer, send in list(self._links.items()):
            news = [advertisement.item() for advertisement, holders in pending.values()
                    if peer not in holders]
            if news:
                send(Interest(news))
        others = [advertisement.item() for origin, (advertisement, _) in pending.items()
                  if origin != self.name]
        if others:
            self._store.save_interest(others).addErrback(
                lambda failure: log.failure("topic interest not saved", failure))
        self._changed(set(pending))

    def load(self):
        """
        Take the interest saved by earlier runs (newer news may have
        arrived already: the newest version wins either way).

        @return: Deferred firing when it is taken.
        """
        def taken(saved) -> None:
            for origin, version, patterns in saved:
                if origin != self.name:
                    self.table.advertised(origin, version,
                                          frozenset(parse_pattern(p) for p in patterns))

        return self._store.topic_interest().addCallback(taken)

    def _advertisement(self, origin: str) -> InterestAdvertisement:
        return InterestAdvertisement(origin, self.table.version(origin),
                                     self.table.patterns(origin))

    # -- questions ---------------------------------------------------------------

    def interested(self, topic: tuple[str, ...]) -> set[str]:
        """
        The other routers whose interest matches C{topic} (parsed).
        """
        routers = self.table.interested(topic)
        routers.discard(self.name)
        return routers

    def describe(self) -> dict:
        """
        For the admin API: each router's advertised interest and version.
        """
        return {origin: {"version": self.table.version(origin),
                         "patterns": sorted(format_words(p)
                                            for p in self.table.patterns(origin))}
                for origin in sorted(self.table.origins())}
