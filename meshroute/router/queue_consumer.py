"""
One consumer of one local queue: its credit, the deliveries it holds
unacknowledged, and what it may do with them (acknowledge, give back,
drop, set aside as expired, cancel).

The rules it keeps (credit, acknowledgement, cancel, holding) are stated
with the others of the local queues in L{meshroute.router.queues}, whose
L{QueueManager<meshroute.router.queues.QueueManager>} makes each consumer
and dispatches to it.  A consumer changes its queue's state only through
the manager's methods for it (C{dispatch}, C{put_back}, C{settle}, ...),
as a transaction's acknowledgements do
(L{meshroute.router.transaction_acks}), so the one dispatch loop of the
queue stays the manager's.  That dispatch and the delivery batches
(L{meshroute.router.delivery_marking}) in turn give, hand over and take
back this consumer's deliveries through its methods for them (C{give},
C{hand_over}, C{take_back}).
"""

from typing import Callable

from twisted.internet.defer import Deferred, succeed
from twisted.logger import Logger

from meshroute.expiry import IN_SESSION
from meshroute.router.queue_state import Delivery, QueueItem, QueueState

log = Logger()


class Subscription:
    """
    One consumer of one queue.

    @param manager: the L{QueueManager<meshroute.router.queues.QueueManager>}
        of the queue, whose dispatch this consumer's changes go through.
    @ivar credit: how many more deliveries it may receive.
    @ivar ended: called once it is cancelled, after its deliveries went
        back (a topic subscription's end,
        L{meshroute.router.topic_subscriptions}).
    """

    def __init__(self, manager, queue: QueueState,
                 deliver: Callable[[Delivery], None], credit: int,
                 ended: Callable[[], None] | None = None) -> None:
        self._manager = manager
        #: The state of its queue (what a transaction taking its
        #: deliveries counts them against).
        self.state = queue
        self._deliver = deliver
        self.ended = ended
        self.queue = queue.name
        self.credit = credit
        self.cancelled = False
        self.holding_persistent = False
        self._unacked: dict[int, tuple[Delivery, QueueItem]] = {}

    @property
    def unacknowledged(self) -> int:
        """
        Deliveries made to this consumer and not yet acknowledged.
        """
        return len(self._unacked)

    def add_credit(self, n: int) -> None:
        """
        Allow C{n} more deliveries.  Ignored once cancelled.
        """
        if n < 0:
            raise ValueError(f"credit must not be negative: {n}")
        if self.cancelled:
            return
        self.credit += n
        self._manager.dispatch(self.state)

    def ack(self, delivery_ids) -> Deferred:
        """
        The consumer is done with these deliveries: delete them.

        Ids this consumer does not hold unacknowledged (already
        acknowledged, never delivered to it, or given back by L{cancel})
        are ignored, so acknowledging twice is harmless.

        @return: Deferred firing when the deletions are durable (and the
            C{message.consumed} events written); failing with the store's
            error if they could not be made (the entries are then back at
            the front of the queue, flagged redelivered).
        """
        done: list[Delivery] = []
        entry_ids: list[int] = []
        deleting: list[tuple[Delivery, QueueItem]] = []
        queue = self.state
        for held in self.take(delivery_ids):
            delivery = held[0]
            if delivery.entry_id is None:
                queue.transient_held -= 1
                done.append(delivery)
            else:
                deleting.append(held)
                entry_ids.append(delivery.entry_id)
        manager = self._manager
        if not entry_ids:
            manager.events.consumed(done)
            manager.forget_if_idle(queue)
            return succeed(None)
        queue.acking += 1

        def durable(_):
            queue.acking -= 1
            manager.events.consumed(done + [delivery for delivery, _ in deleting])
            manager.settle(queue)

        def failed(failure):
            # Still in the store: deliver them again rather than leave them
            # in flight until every consumer is gone.
            queue.acking -= 1
            manager.events.consumed(done)
            manager.put_back(queue, deleting)
            manager.settle(queue)
            return failure

        return manager.store.consume(entry_ids).addCallbacks(durable, failed)

    def hold_persistent(self, hold: bool) -> None:
        """
        Take no persistent entries while C{hold} is true (they stay in the
        queue); non-persistent ones are still delivered.  Ignored once
        cancelled.
        """
        if self.cancelled or hold == self.holding_persistent:
            return
        self.holding_persistent = hold
        if not hold:
            self._manager.dispatch(self.state)

    def give_back(self, delivery_ids) -> None:
        """
        These deliveries never reached the consumer: put them back at the
        front of the queue, flagged redelivered, and give back the credit
        they spent.  Ids this consumer does not hold unacknowledged are
        ignored.
        """
        held = self.take(delivery_ids)
        if not held:
            return
        self._manager.put_back(self.state, held)
        if not self.cancelled:
            self.credit += len(held)
        self._manager.settle(self.state)

    def drop(self, delivery_id: int, **fields) -> None:
        """
        Give up a non-persistent delivery the consumer cannot keep:
        C{message.dropped} with reason C{max-depth} (and C{fields}), and
        its credit back.  Ignored for an id not held or for a persistent
        entry (which is never dropped).
        """
        held = self._unacked.get(delivery_id)
        if held is None or held[0].entry_id is not None:
            return
        del self._unacked[delivery_id]
        delivery, queue, manager = held[0], self.state, self._manager
        queue.transient_held -= 1
        manager.events.dropped(delivery.message, queue.name, "max-depth", **fields)
        if not self.cancelled:
            self.add_credit(1)
        else:
            manager.forget_if_idle(queue)

    def expire(self, delivery_ids) -> None:
        """
        These deliveries, held back by the consumer (a disconnected
        session), expired before it handed them on: they go to
        C{$expired}, and their credit back.  Ids this consumer does not
        hold unacknowledged are ignored.
        """
        held = self.take(delivery_ids)
        if not held:
            return
        if not self.cancelled:
            self.credit += len(held)
        manager = self._manager
        manager.expire(self.state, [item for _, item in held], IN_SESSION)
        manager.settle(self.state)

    def cancel(self) -> None:
        """
        Stop consuming.  Unacknowledged deliveries go back to the front of
        the queue, flagged redelivered (the store has them flagged since
        they were delivered).
        """
        if self.cancelled:
            return
        self.cancelled = True
        manager, queue = self._manager, self.state
        queue.consumers.remove(self)
        held = list(self._unacked.values())
        self._unacked.clear()
        manager.put_back(queue, held)
        manager.settle(queue)
        if self.ended is not None:
            self.ended()

    def take(self, delivery_ids) -> list[tuple[Delivery, QueueItem]]:
        """
        Take the deliveries of C{delivery_ids} this consumer holds
        unacknowledged from it (the others are ignored).
        """
        unacked = self._unacked
        return [unacked.pop(delivery_id) for delivery_id in delivery_ids
                if delivery_id in unacked]

    def give(self, item: QueueItem, delivery_id: int) -> Delivery:
        """
        C{item} is this consumer's: it spends one credit and is held
        unacknowledged from now on, to be handed over with its batch.
        """
        self.credit -= 1
        delivery = Delivery(delivery_id, self.queue, item.message, item.redelivered, item.entry_id)
        self._unacked[delivery_id] = (delivery, item)
        return delivery

    def hand_over(self, delivery: Delivery) -> None:
        """
        Its batch is durable: deliver it, unless it went back to the queue
        meanwhile (this consumer was cancelled).
        """
        if delivery.delivery_id not in self._unacked:
            return
        try:
            self._deliver(delivery)
        except Exception:
            # It stays unacknowledged: a cancel gives it back to the queue.
            log.failure("consumer of {queue} failed to take a delivery", queue=self.queue)

    def take_back(self, delivery: Delivery) -> bool:
        """
        The store failed to mark its batch: it was not handed over.

        @return: whether this consumer still held it (it then has its
            credit back).
        """
        if self._unacked.pop(delivery.delivery_id, None) is None:
            return False
        if not self.cancelled:
            self.credit += 1
        return True
