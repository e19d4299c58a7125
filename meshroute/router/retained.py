"""
Retained topic messages across the mesh (docs/topics.md, "Retained
messages"): every router keeps the latest retained publication of each
topic, whichever router it was published at, so that a subscription
made anywhere is given the matching ones from its own router at once.

 - At the publisher's router, the fan-out takes a publication that asks
   to be retained (L{RETAIN_HEADER}) into the table as it makes its
   copies (L{RetainedMessages.published}), stamped above what the table
   held for its topic, and saves it in the transaction that deletes it
   from C{$topic}; once that is durable it is flooded
   (L{RetainedMessages.committed}).
 - Flooded: sent to every neighbour whose link is of version 6 or later
   (L{RETAINED_VERSION}) as a system message to its queue C{$retained};
   a router takes an entry that is newer than the one it holds for the
   topic (L{meshroute.topics.retained.RetainedTable.offer}), saves it and
   sends it on to its other neighbours; an older one stops there.  A
   link that reaches delivery is sent the whole table, tombstones
   included: what a router missed while it was away, or what a lost
   system message carried, comes with its next link.  So every router
   holds the same table once the flood has passed, whatever order the
   copies came in.
 - Bounded: a router keeps at most C{max_count} retained messages of
   C{max_bytes} of bodies; one for a new topic past either is refused
   there (C{topic.retained-refused}, and a warning): its publication is
   still delivered as any is, and that router's table lacks it.  It is
   passed on all the same, the first time it is refused, for the
   routers beyond; but a router that was away then can only get it
   from a router that holds it.

What the table changed is recorded once durable: C{topic.retained},
C{topic.retained-cleared} (docs/events.md).
"""

import itertools

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.logger import Logger

from meshroute import events
from meshroute.messages import (
    PUBLICATION_HEADER,
    RETAINED_QUEUE,
    TARGETS_HEADER,
    TOPIC_HEADER,
    Message,
    expires_ms,
)
from meshroute.topics.retained import (
    REFUSED,
    RETAINED_HEADER,
    TAKEN,
    TOMBSTONE_MS,
    RetainedEntry,
    RetainedTable,
)
from meshroute.wire.frames import RETAINED_VERSION

log = Logger()

#: The headers of a flooded entry that are no publication's: its stamp,
#: its publisher's router, whether it is persistent.
STAMP_HEADER = "x-retained-stamp"
ORIGIN_HEADER = "x-retained-origin"
PERSISTENT_HEADER = "x-retained-persistent"

#: How often expired entries are forgotten, seconds.
EXPIRE_EVERY_S = 60.0
#: Entries refused here remembered, so that each is passed on once.
REFUSALS_KEPT = 65_536


class RetainedMessages:
    """
    The retained messages of router C{name}: its table, saved in
    C{store}, flooded to its neighbours through C{system}
    (L{meshroute.router.system_messages.SystemMessages}), recorded in
    C{event_log}.
    """

    def __init__(self, name: str, store, system, clock: IReactorTime, event_log,
                 max_count: int = 10_000, max_bytes: int = 64 * 1024 * 1024) -> None:
        self._name = name
        self._store = store
        self._clock = clock
        self._log = event_log
        self.table = RetainedTable(max_count, max_bytes)
        self._channels: dict[str, object] = {}
        self._numbers = itertools.count(1)
        self._expiry: IDelayedCall | None = None
        self._refused: dict[tuple, None] = {}
        self._arrivals: list[RetainedEntry] = []
        self._save_call: IDelayedCall | None = None
        system.serve(RETAINED_QUEUE, self._arrived)

    def _now_ms(self) -> int:
        return int(self._clock.seconds() * 1000)

    def load(self) -> Deferred:
        """
        Take the entries saved by earlier runs (newer ones may have
        arrived already: the newest wins either way), and start
        forgetting expired ones.
        """
        def taken(entries) -> None:
            self.table.load(entries)
            self._expire_later()
            # Links that came up before the store answered had a part.
            for peer, channel in sorted(self._channels.items()):
                self._send_all(peer, channel)

        return self._store.retained_messages().addCallback(taken)

    def stop(self) -> None:
        # Arrivals not saved yet come again with the next run's links.
        for call in (self._expiry, self._save_call):
            if call is not None and call.active():
                call.cancel()
        self._expiry = self._save_call = None

    def _expire_later(self) -> None:
        self._expiry = self._clock.callLater(EXPIRE_EVERY_S, self._expire)

    def _expire(self) -> None:
        if self.table.expire(self._now_ms()):
            # Saving nothing deletes what expired from the store too.
            self._save([])
        self._expire_later()

    # -- at the publisher's router ------------------------------------------------

    def published(self, message: Message, topic: str) -> RetainedEntry | None:
        """
        Publication C{message} (of C{topic}) asks to be retained, at its
        publisher's router: its entry, taken into the table now, for the
        fan-out to save in its transaction; None if it is not taken
        (expired, or refused: C{topic.retained-refused}).
        """
        now_ms = self._now_ms()
        headers = {k: v for k, v in message.headers.items() if k != TARGETS_HEADER}
        publication = headers.get(PUBLICATION_HEADER) or message.msg_id
        headers[PUBLICATION_HEADER] = publication
        stamp = self.table.stamp(topic, int(self._clock.seconds() * 1_000_000))
        expires = (stamp // 1000 + TOMBSTONE_MS) if not message.body else expires_ms(headers)
        entry = RetainedEntry(topic, stamp, self._name, publication, message.body, headers,
                              message.persistent, expires)
        return entry if self._offer(entry, now_ms) == TAKEN else None

    def committed(self, entries: list[RetainedEntry]) -> None:
        """
        The fan-out's transaction that saved C{entries} is durable:
        recorded and flooded.
        """
        self._recorded(entries)
        for entry in entries:
            self._flood(entry)

    # -- the links --------------------------------------------------------------------

    def link_up(self, peer: str, channel, version: int) -> None:
        """
        A link to C{peer} reached delivery at C{version}: from version 6
        it takes retained messages, the whole table first.
        """
        if version < RETAINED_VERSION:
            return
        self._channels[peer] = channel
        self._send_all(peer, channel)

    def _send_all(self, peer: str, channel) -> None:
        now_ms = self._now_ms()
        for entry in self.table:
            if not entry.expired(now_ms):
                channel.send_transient(self._as_message(entry, peer))

    def link_down(self, peer: str) -> None:
        self._channels.pop(peer, None)

    def _flood(self, entry: RetainedEntry, heard_from: str | None = None) -> None:
        for peer, channel in sorted(self._channels.items()):
            if peer != heard_from:
                channel.send_transient(self._as_message(entry, peer))

    def _as_message(self, entry: RetainedEntry, peer: str) -> Message:
        return Message(
            msg_id=f"{self._name}:retained:{next(self._numbers)}", origin=self._name,
            dest_router=peer, dest_queue=RETAINED_QUEUE, body=entry.body,
            headers={**entry.headers, STAMP_HEADER: str(entry.stamp),
                     ORIGIN_HEADER: entry.origin,
                     PERSISTENT_HEADER: "true" if entry.persistent else "false"},
            persistent=False, accepted_at=self._clock.seconds())

    def _arrived(self, message: Message) -> None:
        """
        A neighbour flooded an entry: taken, saved and sent on if newer.
        """
        headers = dict(message.headers)
        try:
            stamp = int(headers.pop(STAMP_HEADER))
            origin = headers.pop(ORIGIN_HEADER)
            persistent = headers.pop(PERSISTENT_HEADER) == "true"
            topic, publication = headers[TOPIC_HEADER], headers[PUBLICATION_HEADER]
        except (KeyError, ValueError):
            log.warn("a retained message from {peer} is malformed; dropped",
                     peer=message.origin)
            return
        expires = (stamp // 1000 + TOMBSTONE_MS) if not message.body else expires_ms(headers)
        entry = RetainedEntry(topic, stamp, origin, publication, message.body, headers,
                              persistent, expires)
        outcome = self._offer(entry, self._now_ms())
        if outcome == REFUSED and self._first_refusal(entry):
            # Not held here, but the routers beyond may have room.
            self._flood(entry, message.origin)
        if outcome != TAKEN:
            return
        self._flood(entry, message.origin)
        # Saved with the others the turn brings: one transaction.
        self._arrivals.append(entry)
        if self._save_call is None:
            self._save_call = self._clock.callLater(0, self._save_arrivals)

    def _save_arrivals(self) -> None:
        self._save_call = None
        entries, self._arrivals = self._arrivals, []
        self._save(entries).addCallback(lambda _: self._recorded(entries))

    def _first_refusal(self, entry: RetainedEntry) -> bool:
        """
        Whether C{entry} is refused here for the first time (the last
        L{REFUSALS_KEPT} are remembered): only then is it passed on, so
        that routers at their limits never pass one round a loop.
        """
        key = (entry.topic, entry.order)
        refused = self._refused
        if key in refused:
            return False
        refused[key] = None
        if len(refused) > REFUSALS_KEPT:
            del refused[next(iter(refused))]
        return True

    # -- the table ----------------------------------------------------------------------

    def _offer(self, entry: RetainedEntry, now_ms: int) -> str:
        outcome = self.table.offer(entry, now_ms)
        if outcome == REFUSED:
            log.warn("retained message of {topic} from {origin} refused: this router holds "
                     "{count} of max-retained {max_count} ({size} of max-retained-bytes "
                     "{max_bytes} bytes)", topic=entry.topic, origin=entry.origin,
                     count=self.table.count, max_count=self.table.max_count,
                     size=self.table.bytes, max_bytes=self.table.max_bytes)
            self._log.emit(events.TOPIC_RETAINED_REFUSED, topic=entry.topic,
                           publication=entry.publication, origin=entry.origin,
                           reason="max-retained")
        return outcome

    def _save(self, entries: list[RetainedEntry]) -> Deferred:
        d = self._store.save_retained(entries)
        d.addErrback(lambda failure: log.failure(
            "retained messages not saved: a neighbour's link brings them again", failure))
        return d

    def _recorded(self, entries: list[RetainedEntry]) -> None:
        for entry in entries:
            self._log.emit(
                events.TOPIC_RETAINED_CLEARED if entry.cleared else events.TOPIC_RETAINED,
                topic=entry.topic, publication=entry.publication, origin=entry.origin)

    # -- what subscriptions are given -----------------------------------------------------

    def copies(self, queue: str, pattern: tuple[str, ...], durable: bool,
               again: bool = False) -> list[Message]:
        """
        The copies of the retained messages matching C{pattern} (parsed)
        for subscription C{queue}, flagged L{RETAINED_HEADER}, by topic:
        stored into a durable one.  A copy's id is the live copy's
        (C{PUB/QUEUE@ROUTER}), so that a subscription given one is not
        given its live copy too; C{again} (a subscription that exists
        asks again) makes it a new one, C{PUB~MS/QUEUE@ROUTER} (still a
        subscription's copy of C{QUEUE} at C{ROUTER} to the audit).
        """
        now_ms = self._now_ms()
        suffix = f"~{now_ms}" if again else ""
        return [Message(msg_id=f"{entry.publication}{suffix}/{queue}@{self._name}",
                        origin=entry.origin, dest_router=self._name, dest_queue=queue,
                        body=entry.body, headers={**entry.headers, RETAINED_HEADER: "true"},
                        persistent=durable, accepted_at=entry.stamp / 1_000_000)
                for entry in self.table.matching(pattern, now_ms)]

    def describe(self) -> dict:
        """
        For the admin API and C{/metrics}.
        """
        table = self.table
        return {"count": table.count, "bytes": table.bytes,
                "cleared": len(table.entries) - table.count,
                "max_count": table.max_count, "max_bytes": table.max_bytes}
