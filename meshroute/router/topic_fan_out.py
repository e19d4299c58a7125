"""
The topic fan-out: what turns a publication into its copies, one per
matching local subscription and one per link toward the routers whose
interest matches (docs/topics.md).

A publication is first taken in as any message is, into this router's
queue C{$topic} (L{TOPIC_QUEUE}): a client's send to C{topic:NAME} is
accepted there (stored when persistent), and a copy a neighbour sends
for the routers beyond arrives there over its link, stored with its
link sequence and checked against the ids enqueued here.  The fan-out
is that queue's one consumer.  For each publication it takes it makes:

 - for each local subscription whose pattern matches, a copy into the
   subscription's queue, id C{PUBLICATION/QUEUE@ROUTER}: persistent into a
   durable subscription when the publication is persistent, else in
   memory;
 - for the other routers it is for (at its publisher's router: every
   router whose interest matches; further on: the routers its copy
   names, L{TARGETS_HEADER}), grouped by next hop
   (L{meshroute.topics.interest.fan_out}), one copy per group, naming the
   group and addressed to the C{$topic} queue of one of its routers (the
   first by name); a router with no route now gets a copy of its own.
   While it waits here, it is rerouted and kept in order as any message
   for that router is (it never waits for a neighbour that is gone while
   its routers are reachable another way); the router at the other end
   of the link takes it into its own C{$topic}
   (L{Destinations.branching<meshroute.router.destinations.Destinations.branching>})
   and fans it out for the routers it names, in the order the link
   brought it.  The id of a copy between
   routers is C{PUBLICATION>FROM:DIGEST}, the digest of its group: the
   groups of one publication never overlap, so neither do these ids; a
   copy sent again (its acknowledgement lost) is the same id, refused
   where it arrived before; and a copy that comes back to a router
   through a loop while routes converge is a new id, taken on
   (C{max-hops} bounds the loop).

The persistent copies and the deletion of the publication from
C{$topic} are one store transaction (L{place_copies
<meshroute.store.sqlite.SQLiteStore.place_copies>}): a router that dies
in between has done neither, and does both after its restart; a copy
sent again over a link (its acknowledgement lost) is refused by the id
its first copy left here.  So each durable subscription gets a persistent publication
exactly once (within the store's duplicate window, as a queue does).
A copy for another router whose backlog holds C{max-backlog} messages
already is dropped (C{message.dropped}, reason C{max-backlog}): a router
that stays away for good must not fill this one's disk, and a
publisher is not refused for it (a queue's producer is: one destination
is its own business; a topic's many are not).

The in-memory copies are made only once the transaction is durable, and
a copy whose id was placed or given before is left out (the store's
ids, and the last
L{RECENT<meshroute.router.topic_subscriptions.RECENT>} in-memory ones): a subscription gets a
publication at most once however it comes back.

A publication that asks to be retained (C{x-retain: true}) is, at its
publisher's router, also taken into the table of retained messages
(L{meshroute.router.retained}) and saved in the same transaction; one
with an empty body clears its topic and is copied to nobody.

After each turn it tells the publishers' flow control how deep
C{$topic} is (L{meshroute.topics.backlog}): while it is too deep, the
router does not read the connections that publish to topics.

What it fanned out is counted (C{publications}, C{copies_made}) for
C{/metrics} and C{/api/v1/topics}, once its turn's transaction is durable
(a turn rolled back is taken again, and counted then), the copies left
out as duplicates not.  Then each publication taken is recorded,
C{topic.fanned-out}, naming the subscriptions it was copied into and
each copy made for the routers beyond: the tree the audit follows from
router to router (docs/events.md).
"""

import hashlib
from collections import Counter

from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure

from meshroute.messages import (
    PUBLICATION_HEADER,
    TARGETS_HEADER,
    TOPIC_HEADER,
    TOPIC_QUEUE,
    Message,
)
from meshroute.router.topic_subscriptions import DURABLE_PREFIX
from meshroute.topics.interest import fan_out
from meshroute.topics.patterns import BadTopic, parse_topic
from meshroute.topics.retained import wants_retain

log = Logger()

#: Publications the fan-out takes before its turn ends: one store
#: transaction for all of them.
BATCH = 256

#: Where a publication fanned out came from: this router's clients, or a
#: neighbour sending a copy for the routers beyond.
FROM_CLIENT, FROM_LINK = "client", "link"
#: The kinds of copies: into a local durable subscription, into a local
#: non-durable one, for other routers (over a link, or waiting for one).
TO_DURABLE, TO_NON_DURABLE, TO_LINK = "durable", "non-durable", "link"


def publishers_held(holding: bool, depth: int) -> None:
    """
    Say that the router started or stopped holding its topic publishers
    (L{meshroute.topics.backlog}), at C{$topic}'s C{depth}.
    """
    if holding:
        log.warn("topic publishers held: {depth} publications wait in $topic", depth=depth)
    else:
        log.info("topic publishers read again: {depth} publications wait in $topic",
                 depth=depth)


def _digest(group) -> str:
    return hashlib.blake2s(",".join(sorted(group)).encode(), digest_size=8).hexdigest()


class TopicFanOut:
    """
    The consumer of router C{name}'s C{$topic} queue.

    @param subscriptions: L{meshroute.router.topic_subscriptions.TopicSubscriptions}.
    @param interest: L{meshroute.router.topic_interest.TopicInterest}.
    @param routes: the route table (C{next_hop}).
    @param forwarding: L{meshroute.router.forwarding.Forwarding}.
    @param transient: L{meshroute.router.transient.TransientPath}.
    @param message_events: L{meshroute.router.message_events.MessageEvents}.
    @param retained: L{meshroute.router.retained.RetainedMessages}.
    @param backlog: L{meshroute.topics.backlog.TopicBacklog}: told C{$topic}'s
        depth after each turn.
    """

    def __init__(self, name: str, store, queues, subscriptions, interest, routes,
                 forwarding, transient, message_events, retained, backlog,
                 clock: IReactorTime, max_backlog: int = 100_000) -> None:
        self._name = name
        self._store = store
        self._queues = queues
        self._subscriptions = subscriptions
        self._interest = interest
        self._routes = routes
        self._forwarding = forwarding
        self._transient = transient
        self._events = message_events
        self._retained = retained
        self._backlog = backlog
        self._clock = clock
        self._max_backlog = max_backlog
        self._consumer = None
        self._taken: list = []
        self._call: IDelayedCall | None = None
        self._placing: Counter[str] = Counter()
        #: Publications fanned out, by source (L{FROM_CLIENT}, L{FROM_LINK}).
        self.publications: Counter[str] = Counter({FROM_CLIENT: 0, FROM_LINK: 0})
        #: Copies made of them, by kind (L{TO_DURABLE}, L{TO_NON_DURABLE},
        #: L{TO_LINK}).
        self.copies_made: Counter[str] = Counter({TO_DURABLE: 0, TO_NON_DURABLE: 0,
                                                  TO_LINK: 0})

    def start(self) -> None:
        self._consumer = self._queues.subscribe(TOPIC_QUEUE, self._take, BATCH)

    def stop(self) -> None:
        if self._call is not None and self._call.active():
            self._call.cancel()
        self._call = None
        if self._consumer is not None:
            self._consumer.cancel()
            self._consumer = None

    def _take(self, delivery) -> None:
        self._taken.append(delivery)
        if self._call is None:
            self._call = self._clock.callLater(0, self._fan_out)

    def _fan_out(self) -> None:
        """
        The end of the turn: copy what was taken, then let the queue give
        as many more.
        """
        self._call = None
        taken, self._taken = self._taken, []
        consumer = self._consumer
        if consumer is None:
            return
        transaction = self._queues.transaction()
        transaction.add(consumer, [delivery.delivery_id for delivery in taken])
        stored: list[Message] = []
        in_memory: list[Message] = []
        waiting = dict(self._store.backlog_depths())
        full = []
        fanned: list[tuple[Message, list[Message]]] = []
        kept = []
        for delivery in taken:
            message = delivery.message
            if wants_retain(message.headers) and TARGETS_HEADER not in message.headers:
                entry = self._retain(message)
                if entry is not None:
                    kept.append(entry)
                if not message.body:
                    # Clears its topic: delivered to nobody.
                    fanned.append((message, []))
                    continue
            copies = self.copies(message)
            if copies is None:
                continue
            fanned.append((message, copies))
            for copy in copies:
                if not copy.persistent:
                    in_memory.append(copy)
                elif copy.dest_router == self._name:
                    stored.append(copy)
                elif waiting.get(copy.dest_router, 0) >= self._max_backlog:
                    full.append((copy.msg_id, "max-backlog", copy.origin))
                else:
                    waiting[copy.dest_router] = waiting.get(copy.dest_router, 0) + 1
                    stored.append(copy)
        if full:
            log.warn("{n} publication copies dropped: max-backlog copies already wait for "
                     "their routers", n=len(full))
            self._events.dropped(full)
        if not stored and not transaction.entry_ids() and not kept:
            self._done([], transaction, stored, in_memory, taken, fanned, kept, Counter())
            return
        onward = Counter(copy.dest_router for copy in stored if copy.dest_router != self._name)
        self._placing.update(onward)
        d = self._store.place_copies(stored, transaction.entry_ids(), kept)
        d.addBoth(self._done, transaction, stored, in_memory, taken, fanned, kept, onward)
        # As acceptance does: a waiting consumer's read, and the links'
        # assigns, join the copies' commit (a link counts the copies being
        # placed for its routers: L{placing}).
        for queue in {copy.dest_queue for copy in stored if copy.dest_router == self._name}:
            self._queues.notify(queue)
        if onward:
            self._forwarding.pump_ahead(onward)

    def placing(self, router: str) -> int:
        """
        Copies for C{router} submitted to the store and not yet placed
        (they join its backlog when they are): counted, as the messages
        being accepted for it are, by the link that pumps ahead of their
        commit (L{meshroute.router.forwarding.Forwarding.pump_ahead}), so
        that its assign is submitted behind them and shares their commit
        instead of waiting for it.
        """
        return self._placing.get(router, 0)

    def _retain(self, message: Message):
        """
        The retained entry publication C{message} makes at its publisher's
        router, or None (its topic is not one: L{copies} drops it; or
        the table did not take it).
        """
        topic = message.headers.get(TOPIC_HEADER, "")
        try:
            parse_topic(topic)
        except BadTopic:
            return None
        return self._retained.published(message, topic)

    def _done(self, result, transaction, stored: list, in_memory: list, taken: list,
              fanned: list, kept: list, onward: Counter) -> None:
        """
        The store placed C{result} (those of C{stored} it did not hold
        already) and saved the retained entries C{kept}, or failed.
        C{fanned}: each publication taken, with its copies; C{onward}: how
        many of C{stored} were for each other router.
        """
        self._placing.subtract(onward)
        if isinstance(result, Failure):
            # Back to the front of $topic, flagged redelivered: taken again.
            log.failure("fan-out of {n} publications failed; they are taken again",
                        result, n=len(taken))
            transaction.rolled_back()
        else:
            transaction.committed()
            self._placed(result)
            self._retained.committed(kept)
            # Not into a subscription that ended since its copy was made.
            exists = self._subscriptions.exists
            first_time = self._subscriptions.first_time
            given = [copy for copy in in_memory
                     if copy.dest_router != self._name
                     or (exists(copy.dest_queue) and first_time(copy.msg_id))]
            # What it held or gave before (come round a loop) is no copy.
            left_out = ({copy.msg_id for copy in stored + in_memory}
                        - {copy.msg_id for copy in result + given})
            self._events.fanned_out(fanned, left_out)
            if given:
                self._transient.route(given)
            self._count(taken, result + given)
        if self._consumer is not None:
            self._consumer.add_credit(len(taken))
        self._backlog.measured(self._queues.depth(TOPIC_QUEUE))

    def _count(self, taken: list, copies: list[Message]) -> None:
        self.publications.update(
            FROM_LINK if TARGETS_HEADER in delivery.message.headers else FROM_CLIENT
            for delivery in taken)
        self.copies_made.update(
            TO_LINK if copy.dest_queue == TOPIC_QUEUE
            else TO_DURABLE if copy.dest_queue.startswith(DURABLE_PREFIX)
            else TO_NON_DURABLE
            for copy in copies)

    def _placed(self, stored: list) -> None:
        """
        The persistent copies are durable: enqueued here, or in the
        backlog of the routers they go to (whose links were pumped when
        they were submitted, and take them now if the commit came after
        their assign).
        """
        local: dict[str, list[Message]] = {}
        onward = set()
        for copy in stored:
            if copy.dest_router == self._name:
                local.setdefault(copy.dest_queue, []).append(copy)
            else:
                onward.add(copy.dest_router)
        for queue, copies in local.items():
            self._events.enqueued(queue, copies)
        for router in onward:
            self._forwarding.pump_towards(router)

    def copies(self, message: Message) -> list[Message] | None:
        """
        The copies of publication C{message} (the module docstring);
        None when it is dropped (C{message.dropped}): its topic is not one.
        """
        headers = message.headers
        try:
            topic = parse_topic(headers.get(TOPIC_HEADER, ""))
        except BadTopic as e:
            log.warn("publication {msg_id} dropped: {why}", msg_id=message.msg_id, why=e)
            self._events.dropped([(message.msg_id, "bad-topic", message.origin)])
            return None
        publication = headers.get(PUBLICATION_HEADER) or message.msg_id
        named = headers.get(TARGETS_HEADER)
        if named is None:
            local, targets = True, self._interest.interested(topic)
        else:
            group = set(named.split(","))
            local = self._name in group
            targets = group - {self._name}
        plain = {k: v for k, v in headers.items() if k != TARGETS_HEADER}
        plain[PUBLICATION_HEADER] = publication
        out = []
        if local:
            for queue, durable in self._subscriptions.matching(topic):
                out.append(Message(
                    msg_id=f"{publication}/{queue}@{self._name}", origin=message.origin,
                    dest_router=self._name, dest_queue=queue, body=message.body,
                    headers=plain, hops=message.hops,
                    persistent=message.persistent and durable,
                    accepted_at=message.accepted_at))
        if targets:
            groups = list(fan_out(targets, self._routes.next_hop).values())
            routed = set().union(*groups)
            groups.extend(frozenset((unreachable,)) for unreachable in targets - routed)
            for group in sorted(groups, key=min):
                # Addressed to one of its routers: it waits, and is
                # rerouted, as any message for that router.
                out.append(Message(
                    msg_id=f"{publication}>{self._name}:{_digest(group)}",
                    origin=message.origin,
                    dest_router=min(group), dest_queue=TOPIC_QUEUE, body=message.body,
                    headers={**plain, TARGETS_HEADER: ",".join(sorted(group))},
                    hops=message.hops, persistent=message.persistent,
                    accepted_at=message.accepted_at))
        return out
