"""
What one local queue holds in memory, and what it hands its consumers: the
state L{meshroute.router.queues.QueueManager} dispatches from and
L{meshroute.router.read_ahead.ReadAhead} fills from the store.
"""

import itertools
from collections import deque
from dataclasses import dataclass

from meshroute.messages import Message


@dataclass(frozen=True, slots=True)
class Delivery:
    """
    One message handed to one consumer.

    @ivar delivery_id: unique within the L{QueueManager
        <meshroute.router.queues.QueueManager>} (increasing); what
        the consumer acknowledges.
    @ivar redelivered: this message was delivered before and not
        acknowledged.
    @ivar entry_id: its store entry id, or None for a non-persistent
        message.
    """

    delivery_id: int
    queue: str
    message: Message
    redelivered: bool
    entry_id: int | None = None


@dataclass(slots=True)
class QueueItem:
    """
    A message in a queue's memory.  C{seq} is its arrival order in this
    queue's memory, used to put returned items back in their place.
    """

    entry_id: int | None
    message: Message
    redelivered: bool
    seq: int
    #: The store has it flagged redelivered already (fetched and flagged
    #: in one call, L{ReadAhead.fill<meshroute.router.read_ahead.ReadAhead.fill>}): its first delivery needs no
    #: mark of its own.
    marked: bool = False


@dataclass(slots=True)
class StoreRead:
    """
    A read of a queue's entries from the store (L{ReadAhead.fill<meshroute.router.read_ahead.ReadAhead.fill>}):
    the queue's C{epoch} and C{notified} when it began, its C{limit} and
    how many entries it flags (C{mark}); C{rows} once it ended (empty if
    it C{failed}).  Or the arrivals with the message ids C{claimed},
    answered by their receive instead of a SELECT
    (L{meshroute.router.arrival_claims}): its rows are those the store
    claimed, already flagged.
    """

    epoch: int
    notified: int
    limit: int
    mark: int
    rows: list | None = None
    failed: bool = False
    claimed: tuple = ()


class QueueState:
    """
    The in-memory side of one local queue.

    @ivar returned: items given back by cancelled consumers, in C{seq}
        order; delivered before anything else.
    @ivar buffer: persistent entries read ahead from the store.
    @ivar last_fetched: the highest entry id read into C{buffer}; the next
        fetch asks for entries above it.
    @ivar more: the store may hold entries above C{last_fetched}.
    @ivar notified: bumped by every C{notify}, so a fetch that started
        before a notification does not conclude the store is exhausted.
    @ivar reads: the reads from the store in flight (L{StoreRead}), in the
        order they began: each after the first only for entries notified
        after the one before it began; at most two, or three while the
        queue is C{caught_up} (L{ReadAhead.fill<meshroute.router.read_ahead.ReadAhead.fill>}),
        besides the arrivals claimed at their receive and not yet back
        (L{meshroute.router.arrival_claims}).
    @ivar caught_up: the latest read that ended found the end of the
        queue in the store (fewer rows than its limit): what arrives now
        is all a read returns beyond what is buffered.
    @ivar epoch: bumped when the persistent memory is released, so a
        fetch from before the release is ignored.
    @ivar acking: store.consume calls in flight.
    @ivar sending: batches of deliveries not yet handed over, in order.
    @ivar retry_call: the retry after a failed mark, if one is due.
    @ivar transient_held: non-persistent messages of this queue in memory,
        waiting or delivered and unacknowledged.
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self.consumers: list = []
        self.next_consumer = 0
        self.returned: deque[QueueItem] = deque()
        self.buffer: deque[QueueItem] = deque()
        self.transient: deque[QueueItem] = deque()
        self.seq = itertools.count(1)
        self.last_fetched = 0
        self.more = True
        self.reads: deque[StoreRead] = deque()
        self.caught_up = False
        self.notified = 0
        self.epoch = 0
        self.acking = 0
        self.sending: deque[DeliveryBatch] = deque()
        self.retry_call = None
        self.transient_held = 0
        self.take_transient = False
        self.dispatching = False
        self.again = False

    def idle(self) -> bool:
        return not (
            self.consumers or self.reads or self.acking or self.returned
            or self.buffer or self.transient or self.transient_held or self.sending
        )

    def put_back(self, items: list[QueueItem]) -> None:
        """
        Put C{items} back at the front of the queue, in their original
        order (C{seq}), among those already given back.
        """
        if items:
            self.returned = deque(sorted([*self.returned, *items], key=lambda item: item.seq))


@dataclass(eq=False, slots=True)
class DeliveryBatch:
    """
    The deliveries of one dispatch, waiting to be handed over.

    @ivar deliveries: C{(consumer, delivery, item)} in delivery order.
    @ivar ready: the entries it delivers for the first time are marked in
        the store (or there are none).
    """

    deliveries: list
    ready: bool
