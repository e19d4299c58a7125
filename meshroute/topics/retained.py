"""
Retained messages (docs/topics.md, "Retained messages"): per topic, the
latest publication that asked to be kept (header L{RETAIN_HEADER}), so
that a later subscriber can be given it at once, as MQTT's retained
messages are.

Every router keeps a table of them, the same everywhere once the flood
has passed (L{meshroute.router.retained}).  Which of two entries of a
topic is the latest is decided by an order every router computes alike,
whatever order copies arrive in (L{RetainedEntry.order}): the stamp its
publisher's router gave it (microseconds of that router's clock, but
always above the stamp that router held for the topic then:
L{RetainedTable.stamp}), then the publisher's router's name, then the
publication's id.  So a retain made after another was seen always wins,
whatever the clocks; of two made concurrently at different routers, the
one whose router's clock read later wins (a router whose clock runs
fast wins such races for as long as it is ahead: that is the price of
agreeing without asking).

An empty retained publication clears its topic: it is kept as a
B{tombstone} (so that an older entry still travelling cannot bring the
topic back) for L{TOMBSTONE_MS}, then forgotten.  An entry whose
publication expires (C{x-expires-at}) is forgotten then, and never
given after.

Pure: no reactor, no I/O.
"""

from dataclasses import dataclass, field

from meshroute.topics.patterns import matches, parse_topic

#: The header of a publication to be retained (value C{true}); it stays
#: on every copy, live or retained, as MQTT's retain-as-published.
RETAIN_HEADER = "x-retain"
#: The header of a copy given because its subscription was made (value
#: C{true}): MQTT sets its RETAIN flag on exactly these.
RETAINED_HEADER = "x-retained"

#: What a subscription asks of the retained messages when it is made:
#: none, every match (MQTT retain handling 0), every match only if the
#: subscription is new (MQTT retain handling 1).
NONE, ALL, IF_NEW = "none", "all", "if-new"
RETAINED_CHOICES = (NONE, ALL, IF_NEW)

#: How long a cleared topic's tombstone is kept, milliseconds: a router
#: away for longer may bring back an entry cleared meanwhile.
TOMBSTONE_MS = 24 * 3600 * 1000

#: What L{RetainedTable.offer} did with an entry.
TAKEN, STALE, REFUSED = "taken", "stale", "refused"


def wants_retain(headers: dict) -> bool:
    """
    Whether a publication with C{headers} asks to be retained.
    """
    return headers.get(RETAIN_HEADER, "").lower() == "true"


@dataclass(frozen=True)
class RetainedEntry:
    """
    The retained message of C{topic}, or its tombstone (C{body} empty).

    @ivar stamp: microseconds, given by the publisher's router C{origin}.
    @ivar publication: the publication's id.
    @ivar headers: the publication's headers (its topic among them).
    @ivar expires_at_ms: when it is forgotten (0: never).
    """

    topic: str
    stamp: int
    origin: str
    publication: str
    body: bytes
    headers: dict = field(default_factory=dict, compare=False)
    persistent: bool = True
    expires_at_ms: int = 0

    @property
    def order(self) -> tuple[int, str, str]:
        "The order by which the latest entry of a topic wins."
        return (self.stamp, self.origin, self.publication)

    @property
    def cleared(self) -> bool:
        "Whether it is a tombstone."
        return not self.body

    def expired(self, now_ms: int) -> bool:
        return 0 < self.expires_at_ms <= now_ms


class RetainedTable:
    """
    One router's retained messages, by topic, bounded to C{max_count}
    messages of C{max_bytes} of bodies in all (tombstones do not count).
    """

    def __init__(self, max_count: int = 10_000, max_bytes: int = 64 * 1024 * 1024) -> None:
        self.max_count = max_count
        self.max_bytes = max_bytes
        self.entries: dict[str, RetainedEntry] = {}
        #: Each topic held, parsed (matched at every subscribe).
        self._words: dict[str, tuple[str, ...]] = {}
        self.count = 0
        self.bytes = 0

    def stamp(self, topic: str, now_us: int) -> int:
        """
        The stamp of a retain of C{topic} made here now: the clock, but
        above the stamp held for it.
        """
        held = self.entries.get(topic)
        return now_us if held is None else max(now_us, held.stamp + 1)

    def offer(self, entry: RetainedEntry, now_ms: int) -> str:
        """
        Take C{entry} if it is newer than what is held for its topic and
        fits: L{TAKEN}, L{STALE} (not newer, or expired), or L{REFUSED}
        (past C{max_count} or C{max_bytes}).
        """
        held = self.entries.get(entry.topic)
        if entry.expired(now_ms) or (held is not None and entry.order <= held.order):
            return STALE
        held_live = held is not None and not held.cleared
        if not entry.cleared:
            count = self.count + (0 if held_live else 1)
            size = self.bytes + len(entry.body) - (len(held.body) if held_live else 0)
            if count > self.max_count or size > self.max_bytes:
                return REFUSED
        self._put(entry)
        return TAKEN

    def _put(self, entry: RetainedEntry) -> None:
        self._drop(entry.topic)
        self.entries[entry.topic] = entry
        self._words[entry.topic] = parse_topic(entry.topic)
        if not entry.cleared:
            self.count += 1
            self.bytes += len(entry.body)

    def _drop(self, topic: str) -> None:
        held = self.entries.pop(topic, None)
        self._words.pop(topic, None)
        if held is not None and not held.cleared:
            self.count -= 1
            self.bytes -= len(held.body)

    def load(self, entries) -> None:
        """
        Take C{entries} as saved by an earlier run (each the newest of
        its topic then), unless newer ones arrived meanwhile; limits are
        not applied to what was kept before.
        """
        for entry in entries:
            held = self.entries.get(entry.topic)
            if held is None or entry.order > held.order:
                self._put(entry)

    def expire(self, now_ms: int) -> list[RetainedEntry]:
        """
        Forget the entries that expired (tombstones included); return them.
        """
        gone = [entry for entry in self.entries.values() if entry.expired(now_ms)]
        for entry in gone:
            self._drop(entry.topic)
        return gone

    def matching(self, pattern: tuple[str, ...], now_ms: int) -> list[RetainedEntry]:
        """
        The retained messages (not tombstones, not expired) whose topic
        matches C{pattern} (parsed), by topic.
        """
        words = self._words
        return [entry for topic, entry in sorted(self.entries.items())
                if not entry.cleared and not entry.expired(now_ms)
                and matches(pattern, words[topic])]

    def __iter__(self):
        return iter(list(self.entries.values()))
