"""
A router's topic subscriptions: each is a local queue that the topic
fan-out (L{meshroute.router.topic_fan_out}) feeds with a copy of every
publication whose topic matches its pattern, consumed through the
queues' own machinery (credit, acknowledgements, redelivery, the
session's keep-alive and max-depth rules).  docs/topics.md tells the
whole story.

 - B{Non-durable}: lives with its consumer.  Its queue
   (C{$subscriber:N}) holds non-persistent copies only, in memory,
   bounded as any queue's non-persistent messages are (C{max-depth}:
   the oldest is dropped, C{message.dropped}); when its consumer is
   cancelled what waits in it is dropped (reason C{unsubscribed}) and
   its interest withdrawn.
 - B{Durable}: C{client_id} and C{name} identify it
   (L{durable_queue}); recorded in the store (so it outlives restarts
   and fails over with the store), it keeps collecting while no
   consumer is attached, persistent publications as persistent entries,
   and ends only when forgotten (L{TopicSubscriptions.forget}).  Shared
   ones take several consumers, each message to one of them; a
   non-shared one takes one at a time (L{DurableInUse}), and only the
   user that made it attaches to it (L{NotOwner}).  Subscribing
   again with another pattern replaces it (its messages go), as JMS
   does.

A subscription may ask, as it is made, for the retained messages that
match its pattern (L{meshroute.router.retained}): they are placed into
its queue before anything else, a durable one's in the transaction that
records it, each once (a copy has the id its live copy would have, so
the one that comes second is left out).

Each subscription's pattern counts in the router's interest
(L{meshroute.router.topic_interest}): a durable one from its creation
to its end, attached or not.  Its beginning and its end are recorded
(C{topic.subscribed}, C{topic.unsubscribed}): the audit judges what each
subscription got against its life.
"""

import itertools
import re
from collections.abc import Callable
from dataclasses import dataclass

from twisted.internet.defer import Deferred, fail, succeed

from meshroute.errors import MeshrouteError
from meshroute.messages import DURABLE_PREFIX, SUBSCRIBER_PREFIX
from meshroute.topics.index import PatternIndex
from meshroute.topics.patterns import BadTopic, format_words, parse_pattern
from meshroute.topics.retained import IF_NEW, NONE, RETAINED_CHOICES
from meshroute.store.topics import REPLACED

#: The ids of in-memory copies into local subscriptions remembered
#: (L{TopicSubscriptions.first_time}), so that a publication that comes
#: round a routing loop, or whose retained copy a subscription was given
#: as it was made, is not given to a non-durable subscription twice
#: (durable ones have the store's ids).
RECENT = 65_536

#: What a client id or a durable subscription's name may be: they make
#: the queue's name (L{durable_queue}).
DURABLE_NAME = re.compile(r"[A-Za-z0-9._-]{1,128}\Z")


class BadSubscription(MeshrouteError):
    """
    A subscription's pattern, client id or name is not one.
    """

    code = "bad-address"


class NotOwner(MeshrouteError):
    """
    A durable subscription is another user's: only the user that made it
    attaches to it (and so replaces or forgets it).
    """

    code = "not-allowed"


class DurableInUse(MeshrouteError):
    """
    A durable subscription that is not shared already has its consumer.
    """

    code = "subscription-in-use"


def durable_queue(client_id: str, name: str) -> str:
    """
    The local queue of durable subscription C{name} of C{client_id}.

    @raise BadSubscription: either is not a L{DURABLE_NAME}.
    """
    for what, value in (("client id", client_id), ("subscription name", name)):
        if not DURABLE_NAME.match(value or ""):
            raise BadSubscription(f"a durable subscription's {what} is 1 to 128 of "
                                  f"[A-Za-z0-9._-], not {value!r}")
    return f"{DURABLE_PREFIX}{client_id}:{name}"


@dataclass
class Durable:
    """
    One durable subscription, as recorded.
    """

    queue: str
    client_id: str
    name: str
    pattern: tuple[str, ...]
    shared: bool
    user: str | None
    created_at: float
    consumers: int = 0


class TopicSubscriptions:
    """
    The topic subscriptions of one router.

    @param store: the router's store (durable subscriptions).
    @param queues: its L{meshroute.router.queues.QueueManager}.
    @param interest: its L{meshroute.router.topic_interest.TopicInterest}.
    @param mesh_wide: its L{meshroute.router.mesh_wide.MeshWide}.
    @param message_events: its L{meshroute.router.message_events.MessageEvents}.
    @param retained: its L{meshroute.router.retained.RetainedMessages}.
    """

    def __init__(self, store, queues, interest, mesh_wide, message_events, retained) -> None:
        self._store = store
        self._retained = retained
        self._recent: dict[str, None] = {}
        self._queues = queues
        self._interest = interest
        self._mesh_wide = mesh_wide
        self._events = message_events
        self._index = PatternIndex()
        self._patterns: dict[str, tuple[str, ...]] = {}
        self.durable: dict[str, Durable] = {}
        self._numbers = itertools.count(1)

    def start(self) -> Deferred:
        """
        Take up the durable subscriptions the store holds.
        """
        def read(rows) -> None:
            for queue, client_id, name, pattern, shared, user, created_at in rows:
                parsed = parse_pattern(pattern)
                self.durable[queue] = Durable(queue, client_id, name, parsed, shared, user,
                                              created_at)
                self._add(queue, parsed)
            self._interest.ready()

        return self._store.durable_subscriptions().addCallback(read)

    # -- what the fan-out asks ------------------------------------------------

    def matching(self, topic: tuple[str, ...]) -> list[tuple[str, bool]]:
        """
        The queues of the subscriptions whose pattern matches C{topic}
        (parsed), each with whether it is durable, by queue name.
        """
        return sorted((queue, queue in self.durable) for queue in self._index.match(topic))

    def exists(self, queue: str) -> bool:
        """
        Whether C{queue} is the queue of a subscription now.
        """
        return queue in self._patterns

    def first_time(self, msg_id: str) -> bool:
        """
        Whether in-memory copy C{msg_id} was not given before (the last
        L{RECENT} are remembered); it is, from now.
        """
        recent = self._recent
        if msg_id in recent:
            return False
        recent[msg_id] = None
        if len(recent) > RECENT:
            del recent[next(iter(recent))]
        return True

    # -- what sessions ask ---------------------------------------------------------

    def subscribe(self, pattern: str, deliver: Callable, credit: int,
                  client_id: str = "", durable: str = "", shared: bool = False,
                  user: str | None = None, mesh_wide: bool = False,
                  retained: str = NONE) -> Deferred:
        """
        Start consuming the publications matching C{pattern}: a
        non-durable subscription, or durable subscription C{durable} of
        C{client_id} (made if it does not exist).  C{deliver} and C{credit}
        are as for L{QueueManager.subscribe
        <meshroute.router.queues.QueueManager.subscribe>}.

        @param mesh_wide: fire only once its interest reached every
            router reachable now (L{meshroute.router.mesh_wide}).
        @param retained: the retained messages matching C{pattern} it is
            given first: C{none}, C{all}, or C{if-new} (none to a durable
            subscription that exists with that pattern).
        @return: Deferred firing with the queue L{Subscription
            <meshroute.router.queue_consumer.Subscription>} (its C{queue} is the
            subscription's), once a durable one is recorded; failing with
            L{BadSubscription}, L{DurableInUse} or (mesh-wide: the
            subscription is then cancelled)
            L{MeshWideTimeout<meshroute.router.mesh_wide.MeshWideTimeout>}.
        """
        if retained not in RETAINED_CHOICES:
            return fail(BadSubscription(f"retained is one of {', '.join(RETAINED_CHOICES)}, "
                                        f"not {retained!r}"))
        d = self._subscribe(pattern, deliver, credit, client_id, durable, shared, user,
                            retained)
        if mesh_wide:
            d.addCallback(self._when_mesh_wide)
        return d

    def _when_mesh_wide(self, subscription) -> Deferred:
        def failed(failure):
            subscription.cancel()
            return failure

        return self._mesh_wide.wait().addCallbacks(lambda _: subscription, failed)

    def _subscribe(self, pattern: str, deliver: Callable, credit: int, client_id: str,
                   durable: str, shared: bool, user: str | None, retained: str) -> Deferred:
        try:
            parsed = parse_pattern(pattern)
            queue = durable_queue(client_id, durable) if durable else None
        except BadTopic as e:
            return fail(BadSubscription(str(e)))
        except BadSubscription as e:
            return fail(e)
        if queue is None:
            queue = f"{SUBSCRIBER_PREFIX}{next(self._numbers)}"
            self._add(queue, parsed)
            self._events.subscribed(queue, format_words(parsed))
            if retained != NONE:
                self._give_retained(queue, parsed)
            return succeed(self._queues.subscribe(queue, deliver, credit,
                                                  ended=lambda: self._ended(queue)))
        held = self.durable.get(queue)
        if held is not None and held.user != user:
            return fail(NotOwner(f"durable subscription {durable!r} of {client_id!r} belongs "
                                 "to another user"))
        if held is not None and held.consumers and not (held.shared and shared):
            return fail(DurableInUse(
                f"durable subscription {durable!r} of {client_id!r} already has its consumer"
                + ("" if held.shared else " and is not shared")))
        copies = []
        if retained != NONE:
            # A subscription that exists with this pattern asks again:
            # new ids (if-new: the store places none).
            again = held is not None and held.pattern == parsed
            copies = self._retained.copies(queue, parsed, True, again)
        d = self._store.record_subscription(queue, client_id, durable, format_words(parsed),
                                            shared, user, copies, retained == IF_NEW)
        d.addCallback(self._recorded, queue, client_id, durable, parsed, shared, user,
                      deliver, credit)
        return d

    def _recorded(self, result: tuple, queue: str, client_id: str, name: str,
                  pattern: tuple, shared: bool, user: str | None, deliver: Callable,
                  credit: int):
        what, deleted, given = result
        held = self.durable.get(queue)
        if held is not None and held.consumers and not (held.shared and shared):
            # Another consumer attached while this one was being recorded.
            raise DurableInUse(f"durable subscription {name!r} of {client_id!r} "
                               "already has its consumer")
        created = held is None
        if created:
            held = self.durable[queue] = Durable(queue, client_id, name, pattern, shared, user,
                                                 0.0)
            self._add(queue, pattern)
        elif what == REPLACED:
            self._remove(queue)
            held.pattern = pattern
            self._add(queue, pattern)
        held.shared = shared
        if created or what == REPLACED:
            self._events.subscribed(queue, format_words(pattern), held,
                                    replaced=None if created else deleted)
        if given:
            self._events.enqueued(queue, given)
        held.consumers += 1
        return self._queues.subscribe(queue, deliver, credit,
                                      ended=lambda: self._detached(held))

    def _give_retained(self, queue: str, pattern: tuple[str, ...]) -> None:
        """
        Place the retained messages matching C{pattern} into non-durable
        subscription C{queue}, in memory, before anything else.
        """
        copies = [copy for copy in self._retained.copies(queue, pattern, False)
                  if self.first_time(copy.msg_id)]
        if copies:
            self._events.enqueued(queue, copies)
            self._queues.put_transient_many(queue, copies)

    def _detached(self, held: Durable) -> None:
        held.consumers -= 1

    def _ended(self, queue: str) -> None:
        """
        A non-durable subscription's consumer is gone: so is it.
        """
        self._remove(queue)
        self._events.unsubscribed(queue, self._queues.discard(queue, "unsubscribed"))

    def forget(self, client_id: str, name: str) -> Deferred:
        """
        End durable subscription C{name} of C{client_id} for good: its
        messages are deleted with it.  Its consumers (cancel them first)
        must be gone.

        @return: Deferred firing with how many messages went (0 for a
            subscription that does not exist); failing with
            L{BadSubscription} or L{DurableInUse}.
        """
        try:
            queue = durable_queue(client_id, name)
        except BadSubscription as e:
            return fail(e)
        held = self.durable.get(queue)
        if held is None:
            return succeed(0)
        if held.consumers:
            return fail(DurableInUse(f"durable subscription {name!r} of {client_id!r} "
                                     f"has {held.consumers} consumer(s)"))

        def gone(deleted: int) -> int:
            if self.durable.pop(queue, None) is not None:
                self._remove(queue)
            dropped = self._queues.discard(queue, "unsubscribed")
            self._events.unsubscribed(queue, dropped, held, deleted)
            return deleted

        return self._store.forget_subscription(queue).addCallback(gone)

    # -- the index and the interest ---------------------------------------------

    def _add(self, queue: str, pattern: tuple[str, ...]) -> None:
        self._patterns[queue] = pattern
        self._index.add(pattern, queue)
        self._interest.subscribed(pattern)

    def _remove(self, queue: str) -> None:
        pattern = self._patterns.pop(queue, None)
        if pattern is not None:
            self._index.remove(pattern, queue)
            self._interest.unsubscribed(pattern)

    def describe(self) -> dict:
        """
        For the admin API: the local subscriptions, durable ones with
        their depth.
        """
        depths = self._store.queue_depths()
        return {
            "durable": [
                {"client_id": d.client_id, "name": d.name, "pattern": format_words(d.pattern),
                 "shared": d.shared, "consumers": d.consumers, "queue": d.queue,
                 "depth": depths.get(d.queue, 0)}
                for d in sorted(self.durable.values(), key=lambda d: d.queue)],
            "non_durable": [
                {"queue": queue, "pattern": format_words(pattern)}
                for queue, pattern in sorted(self._patterns.items())
                if queue not in self.durable],
        }
