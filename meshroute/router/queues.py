"""
A router's local queues and their consumers.

Persistent entries live in the store (L{IMessageStore}); this module never
loads a whole queue: while a queue has consumers it keeps a bounded
read-ahead buffer of at most C{read_ahead} entries, paged in with
C{fetch(queue, after_entry, limit)}, and a queue without consumers holds no
persistent message in memory at all.  Non-persistent entries (the JMS
NON_PERSISTENT fast path) live only here, in memory, bounded per queue by
C{max_transient}; past it the oldest is dropped (C{message.dropped},
reason C{max-depth}), since a non-persistent message may be lost but must
never block a producer.  Those waiting in all queues together are bounded
by C{max_transient_total}, so that many queue names cannot add up to
unbounded memory: past it the oldest waiting in the message's own queue
is dropped, or the message itself if its queue has none waiting
(C{message.dropped}, reason C{max-total-depth}).

Delivery rules:

 - B{Order.}  Per queue, FIFO: entries that went back to the queue (their
   consumer left without acknowledging them) come first, in their original
   order and flagged C{redelivered}; then persistent entries by entry id.
   Persistent and non-persistent messages are two streams (JMS only orders
   messages of one delivery mode); when both are waiting they alternate,
   so neither starves the other.
 - B{Round-robin.}  Each delivery goes to the next consumer of the queue,
   in subscription order, that has credit.
 - B{Credit.}  A consumer's credit is how many more deliveries it may
   receive: each delivery spends one, acknowledging gives none back, and
   only L{Subscription.add_credit} (the client's C{Credit} frame) adds
   more.  So a client that grants credit as it acknowledges never holds
   more than its prefetch unacknowledged (docs/client-protocol.md).
 - B{Delivered means flagged.}  A persistent entry is marked redelivered
   in the store before its first delivery is handed to the consumer, so a
   message delivered and not acknowledged comes back flagged even after
   the router died.  Entries read from the store while consumers have
   credit for them are flagged by the read itself (as many as that
   credit, C{fetch(..., mark=n)}), so a message arriving for a waiting
   consumer costs no commit besides its arrival's: it may then be
   flagged a moment before its delivery (if the router stops in between,
   it comes back flagged without having been delivered, which the flag
   allows: it means "maybe delivered before").  An arrival for a
   waiting consumer of a caught-up queue is flagged by its receive
   instead, and handed over with no read
   (L{meshroute.router.arrival_claims}).  The deliveries one
   dispatch makes of entries not flagged yet form a batch: one
   store call marks them all, and the batch is handed over once that call
   is durable, behind the earlier batches of its queue (so the order
   holds).  If the store fails the call, the batch goes back to the front
   of the queue, unflagged, and its credit back to its consumers; the
   queue tries again after
   L{MARK_RETRY_S<meshroute.router.delivery_marking.MARK_RETRY_S>} (or at
   the next credit, message or consumer:
   L{meshroute.router.delivery_marking}).
 - B{Acknowledgement.}  L{Subscription.ack} deletes persistent entries from
   the store and emits C{message.consumed} once that is durable.  If the
   store fails the deletion, the entries go back to the front of the
   queue, flagged redelivered: they are delivered again (never left in
   flight).
 - B{Acknowledgement in a transaction.}  L{QueueManager.transaction}
   makes a L{TransactionAcks<meshroute.router.transaction_acks.TransactionAcks>}:
   the deliveries it holds are taken from their consumers (a cancel no
   longer gives them back) and kept in the store until the transaction
   ends: committed once their deletion is durable (C{message.consumed}),
   or rolled back: back at the front of their queues, flagged
   redelivered.  A transaction prepared (two-phase) locks its persistent
   ones in the store instead of memory, until a commit deletes them
   (L{QueueManager.consumed_entries}) or a rollback puts them back
   (L{QueueManager.returned_entries}), after any restart.
 - B{Cancel.}  L{Subscription.cancel} (an unsubscribe, or the session
   going away) puts unacknowledged deliveries back at the front of the
   queue, and they are delivered again with C{redelivered=True} (a
   delivery cancelled while its batch waited for the store was never
   handed over, and is flagged all the same, as one lost on the wire
   would be).  L{Subscription.give_back} does the same for some
   deliveries only (a resumed client session never received them) and
   returns their credit.
 - B{Holding.}  A consumer told to L{Subscription.hold_persistent} (a
   disconnected client session whose own queue is full) takes no
   persistent entries, which stay in the queue for it later or for another
   consumer; it may still take non-persistent ones, and
   L{Subscription.drop} gives up one of those it cannot keep
   (C{message.dropped}), returning its credit.
 - B{Expiry.}  A message whose expiry passed is never handed to a
   consumer: when a dispatch comes to it, it goes to C{$expired} instead
   (L{meshroute.expiry}), and so does one a session held back and finds
   expired (L{Subscription.expire}).

This module is L{QueueManager}: the queues by name and the one dispatch
loop of each, which must not nest, where every change to a queue's state
ends.  The rest is apart, and changes a queue only through the manager's
public methods: a queue's state (L{meshroute.router.queue_state}), which
item goes next to which consumer (the order and round-robin rules,
L{meshroute.router.delivery_order}), its consumers (L{Subscription},
L{meshroute.router.queue_consumer}), its read-ahead from the store
(L{meshroute.router.read_ahead}), the line of delivery batches marked in
the store before they are handed over
(L{meshroute.router.delivery_marking}), the deliveries a transaction
holds (L{meshroute.router.transaction_acks}) and the records the queues
write (L{meshroute.router.queue_events}).
"""

import itertools
from collections import deque
from functools import partial
from typing import Callable

from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger

from meshroute.expiry import IN_QUEUE, emit_expired, now_ms, set_aside
from meshroute.messages import EXPIRED_QUEUE, EXPIRES_HEADER, TOPIC_QUEUE, Message
from meshroute.router.arrival_claims import ArrivalClaims, Claim
from meshroute.router.delivery_marking import DeliveryMarking
from meshroute.router.delivery_order import next_delivery
from meshroute.router.queue_consumer import Subscription
from meshroute.router.queue_events import QueueEvents
from meshroute.router.queue_rates import QueueRates
from meshroute.router.queue_state import Delivery, QueueItem, QueueState
from meshroute.router.read_ahead import ReadAhead
from meshroute.router.transaction_acks import TransactionAcks

log = Logger()

#: Default bound of the per-queue read-ahead buffer (persistent entries
#: fetched from the store, not yet delivered).
READ_AHEAD = 256

#: Default bound of waiting non-persistent messages per queue.
MAX_TRANSIENT = 100_000

#: Default bound of waiting non-persistent messages in all queues together.
MAX_TRANSIENT_TOTAL = 100_000

class QueueManager:
    """
    The local queues of one router and their consumers.

    @param store: the router's L{meshroute.interfaces.IMessageStore}.
    @param events: where C{message.consumed} and C{message.dropped} go
        (anything with C{emit(event, **fields)}).
    @param clock: the router's clock.
    @param read_ahead: bound of each queue's read-ahead buffer.
    @param max_transient: bound of waiting non-persistent messages per
        queue.
    @param max_transient_total: bound of waiting non-persistent messages
        in all queues together.
    @param expired: called C{(message, where)} for each message this
        manager set aside in C{$expired} (as it was addressed), once that
        is durable; by default it emits C{message.expired}.
    """

    def __init__(self, store, events, clock: IReactorTime,
                 read_ahead: int = READ_AHEAD, max_transient: int = MAX_TRANSIENT,
                 max_transient_total: int = MAX_TRANSIENT_TOTAL,
                 expired: Callable[[Message, str], None] | None = None) -> None:
        self.clock = clock
        self.store = store
        self._reads = ReadAhead(store, read_ahead, self.dispatch)
        self._marking = DeliveryMarking(store, clock, self.dispatch, self.forget_if_idle)
        self._claims = ArrivalClaims(self._reads, self.notify)
        self._max_transient = max_transient
        self._max_transient_total = max_transient_total
        self._transient_waiting = 0
        self._queues: dict[str, QueueState] = {}
        self._delivery_ids = itertools.count(1)
        #: Messages in and out of each queue per second: the engine counts
        #: what it enqueues, this what is consumed.
        self.rates = QueueRates(clock)
        #: The records its queues, their consumers and transactions write.
        self.events = QueueEvents(events, self.rates, expired or partial(emit_expired, events))

    # -- what the engine calls ------------------------------------------------

    def notify(self, queue: str) -> None:
        """
        New persistent entries for C{queue} are in the store, or submitted
        to it: every store call made from now on sees them.  The engine
        notifies as it submits an arrival, so that the read for a waiting
        consumer joins the arrival's transaction (group commit) instead of
        following it in one of its own.
        """
        state = self._queues.get(queue)
        if state is None:
            # Nobody holds anything of it in memory: whoever subscribes
            # first reads it from the start.
            return
        state.more = True
        state.notified += 1
        if state.consumers:
            self.dispatch(state)

    def claim(self, queue: str, messages) -> Claim | None:
        """
        Persistent C{messages} are about to be received for C{queue}: claim
        those its consumers wait for, to be handed over from their receive
        with no read (L{meshroute.router.arrival_claims}); the queue is
        notified of the others by the caller.
        """
        return self._claims.claim(self._queues.get(queue), messages)

    @property
    def claimed(self) -> int:
        """
        How many arrivals were handed over from their receive since start.
        """
        return self._claims.handed

    def put_transient(self, queue: str, message: Message) -> None:
        """
        Enqueue a non-persistent message (memory only).
        """
        self.put_transient_many(queue, (message,))

    def put_transient_many(self, queue: str, messages) -> None:
        """
        Enqueue non-persistent messages (memory only), in order, with one
        dispatch: as many calls of L{put_transient} would, since before a
        message would find the queue (or all of them) full, the consumers
        are first given what they have credit for, so that a batch drops
        no more than single messages would.
        """
        state = self._state(queue)
        for message in messages:
            if (len(state.transient) >= self._max_transient
                    or self._transient_waiting >= self._max_transient_total):
                self.dispatch(state)
                state = self._state(queue)
                if len(state.transient) >= self._max_transient:
                    self._drop_oldest_transient(state, "max-depth")
                elif self._transient_waiting >= self._max_transient_total:
                    if not state.transient:
                        self.forget_if_idle(state)
                        self.events.dropped(message, queue, "max-total-depth")
                        state = self._state(queue)
                        continue
                    self._drop_oldest_transient(state, "max-total-depth")
            state.transient.append(QueueItem(None, message, False, next(state.seq)))
            state.transient_held += 1
            self._transient_waiting += 1
        self.dispatch(state)

    def discard(self, queue: str, reason: str) -> int:
        """
        Nobody will consume C{queue} again (a non-durable topic
        subscription ended): drop the non-persistent messages waiting in
        it, given back ones too (C{message.dropped} with C{reason}); how
        many.
        """
        state = self._queues.get(queue)
        if state is None:
            return 0
        dropped = len(state.transient)
        while state.transient:
            self._drop_oldest_transient(state, reason)
        # And those its consumer was given and gave back, unacknowledged.
        returned = [item for item in state.returned if item.entry_id is None]
        if returned:
            state.returned = deque(item for item in state.returned if item.entry_id is not None)
            state.transient_held -= len(returned)
            for item in returned:
                self.events.dropped(item.message, queue, reason)
        self.forget_if_idle(state)
        return dropped + len(returned)

    def _drop_oldest_transient(self, state: QueueState, reason: str) -> None:
        dropped = state.transient.popleft()
        state.transient_held -= 1
        self._transient_waiting -= 1
        self.events.dropped(dropped.message, state.name, reason)

    def busy(self) -> list[str]:
        """
        The queues whose persistent entries may be in memory (consumers,
        reads, deliveries or deletions in progress): the expiry sweep
        leaves them to the dispatch, which checks expiry at hand-over.
        """
        return [name for name, state in self._queues.items()
                if state.consumers or state.reads or state.acking or state.buffer
                or state.sending
                or any(item.entry_id is not None for item in state.returned)]

    def sweep_transient(self, now: int) -> None:
        """
        Set aside the non-persistent messages waiting in queues without
        consumers whose expiry is at or before C{now} (epoch ms).  The
        work is bounded by C{max_transient_total}, what may wait in all.
        """
        for state in list(self._queues.values()):
            if state.consumers or not state.transient:
                continue
            kept, expired = deque(), []
            for item in state.transient:
                (expired if item.message.expired(now) else kept).append(item)
            if expired:
                state.transient = kept
                self._transient_waiting -= len(expired)
                self.expire(state, expired, IN_QUEUE)
                self.forget_if_idle(state)

    # -- what client sessions call --------------------------------------------

    def subscribe(self, queue: str, deliver: Callable[[Delivery], None],
                  credit: int, ended: Callable[[], None] | None = None) -> Subscription:
        """
        Start consuming from C{queue}: C{deliver(delivery)} is called for
        each message given to this consumer, at most C{credit} times until
        more credit is added, and C{ended()} once it is cancelled.
        Deliveries may begin before this returns.
        """
        if credit < 0:
            raise ValueError(f"credit must not be negative: {credit}")
        state = self._state(queue)
        subscription = Subscription(self, state, deliver, credit, ended)
        state.consumers.append(subscription)
        self.dispatch(state)
        return subscription

    def transaction(self) -> TransactionAcks:
        """
        A new, empty set of deliveries acknowledged in a transaction.
        """
        return TransactionAcks(self)

    def consumed_entries(self, entries) -> None:
        """
        A prepared transaction's commit deleted the entries it had locked,
        C{(entry_id, message, redelivered)}: they are consumed.
        """
        self.events.consumed_messages((message.dest_queue, message, redelivered)
                                for _, message, redelivered in entries)

    def returned_entries(self, entries) -> None:
        """
        A prepared transaction's rollback put the entries it had locked,
        C{(entry_id, message)}, back into their queues, flagged
        redelivered.  Those a queue's reads went past (every read now
        runs after the rollback) come first, as entries cancelled
        consumers gave back do; its reads find the others.
        """
        by_queue: dict[str, list] = {}
        for entry_id, message in sorted(entries, key=lambda entry: entry[0]):
            by_queue.setdefault(message.dest_queue, []).append((entry_id, message))
        for queue, returned in by_queue.items():
            state = self._queues.get(queue)
            if state is None:
                continue  # nothing of it in memory: its first read finds them
            state.put_back([QueueItem(entry_id, message, True, next(state.seq))
                            for entry_id, message in returned
                            if entry_id <= state.last_fetched])
            self.notify(queue)
            self.settle(state)

    # -- what the admin API shows ---------------------------------------------

    def depths(self) -> dict[str, int]:
        """
        C{{queue: entries}}: persistent entries in the store (delivered but
        unacknowledged ones included) plus non-persistent ones in memory.
        """
        depths = dict(self.store.queue_depths())
        for name, state in self._queues.items():
            if state.transient_held:
                depths[name] = depths.get(name, 0) + state.transient_held
        return depths

    def depth(self, queue: str) -> int:
        "C{queue}'s entries, as L{depths} counts them."
        state = self._queues.get(queue)
        held = state.transient_held if state is not None else 0
        return self.store.queue_depth(queue) + held

    def consumer_counts(self) -> dict[str, int]:
        """
        C{{queue: consumers}} for every queue that has consumers.
        """
        return {name: len(state.consumers) for name, state in self._queues.items()
                if state.consumers}

    def unacknowledged_counts(self) -> dict[str, int]:
        """
        C{{queue: deliveries}} made to its consumers and not acknowledged,
        for every queue that has consumers.
        """
        return {name: sum(consumer.unacknowledged for consumer in state.consumers)
                for name, state in self._queues.items() if state.consumers}

    def describe(self) -> list[dict]:
        """
        C{GET /api/v1/queues}: C{[{"name", "depth", "consumers",
        "unacknowledged", "in_rate", "out_rate"}]} by name (rates in
        messages per second, L{QueueRates}), for every queue with entries,
        consumers or traffic within the rates' window; the topic fan-out's
        own C{$topic} only while publications wait in it.
        """
        depths = self.depths()
        consumers = self.consumer_counts()
        unacknowledged = self.unacknowledged_counts()
        rates = self.rates.rates()
        return [
            {"name": name, "depth": depths.get(name, 0), "consumers": consumers.get(name, 0),
             "unacknowledged": unacknowledged.get(name, 0),
             "in_rate": round(rates.get(name, (0.0, 0.0))[0], 3),
             "out_rate": round(rates.get(name, (0.0, 0.0))[1], 3)}
            for name in sorted(depths.keys() | consumers.keys() | rates.keys())
            if name != TOPIC_QUEUE or depths.get(name)
        ]

    # -- what its consumers, delivery batches and transactions call ----------
    # (L{Subscription}, L{meshroute.router.delivery_marking},
    # L{meshroute.router.transaction_acks}: they change a queue only here,
    # so that the queue's one dispatch loop stays this manager's.)

    def dispatch(self, state: QueueState) -> None:
        """
        Give waiting items to consumers with credit, then keep the
        read-ahead buffer filled.  Re-entrant calls (a consumer acting
        from inside C{deliver}, a fetch that completes at once) make the
        running loop go round again instead of nesting.
        """
        if state.dispatching:
            state.again = True
            return
        state.dispatching = True
        try:
            while True:
                state.again = False
                self._marking.hand_over_ready(state)
                self._reads.fill(state)
                batch = []
                expired = []
                now = None
                while state.returned or state.buffer or state.transient:
                    picked = next_delivery(state)
                    if picked is None:
                        break
                    consumer, item, waited = picked
                    if waited:
                        self._transient_waiting -= 1
                    headers = item.message.headers
                    if headers and EXPIRES_HEADER in headers:
                        if now is None:
                            now = now_ms(self.clock)
                        if item.message.expired(now):
                            expired.append(item)
                            continue
                    batch.append((consumer, consumer.give(item, next(self._delivery_ids)),
                                  item))
                if expired:
                    self.expire(state, expired, IN_QUEUE)
                if batch:
                    self._marking.mark(state, batch)
                    self._marking.hand_over_ready(state)
                self._reads.fill(state)
                if not state.again:
                    break
        finally:
            state.dispatching = False
        self.forget_if_idle(state)

    def put_back(self, state: QueueState, held: list) -> None:
        """
        Put C{(delivery, item)} pairs back at the front of C{state}, in
        their original order, flagged redelivered (as the store has them
        since their first delivery).
        """
        state.put_back([
            QueueItem(delivery.entry_id, delivery.message, True, item.seq) for delivery, item in held
        ])

    def settle(self, state: QueueState) -> None:
        """
        After consumers or acknowledgements changed: redeliver, and without
        consumers release the persistent entries held in memory.
        """
        if not state.consumers and not state.acking:
            self._reads.release(state)
        self.dispatch(state)

    def forget_if_idle(self, state: QueueState) -> None:
        "Drop C{state} from the queues by name if it holds nothing in memory."
        if state.idle() and self._queues.get(state.name) is state:
            del self._queues[state.name]

    def expire(self, state: QueueState, items: list, where: str) -> None:
        """
        C{items}, taken out of C{state} (waiting or held by a consumer),
        expired: non-persistent ones go to C{$expired} in memory, persistent
        ones are moved there in the store (one call); C{expired} is told
        of each once that is done.  If the store fails the move, the
        entries stay where they are in the store, to be found expired
        again by the next read or sweep.
        """
        entries = []
        for item in items:
            message = item.message
            if item.entry_id is None:
                state.transient_held -= 1
                self.put_transient(EXPIRED_QUEUE, set_aside(message, message.dest_router))
                self.events.expired(message, where)
            else:
                entries.append(message)
        if not entries:
            return
        state.acking += 1

        def moved(messages: list) -> None:
            state.acking -= 1
            for message in messages:
                self.events.expired(message, where)
            self.notify(EXPIRED_QUEUE)
            self.settle(state)

        def failed(failure) -> None:
            state.acking -= 1
            log.failure("moving expired messages of {queue} to $expired", failure,
                        queue=state.name)
            self.settle(state)

        self.store.expire(entries).addCallbacks(moved, failed)

    # -- inside ---------------------------------------------------------------

    def _state(self, queue: str) -> QueueState:
        state = self._queues.get(queue)
        if state is None:
            state = self._queues[queue] = QueueState(queue)
        return state
