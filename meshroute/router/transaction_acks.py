"""
The deliveries a client transaction acknowledged, until it ends
(L{TransactionAcks}): taken from their consumers when acknowledged, so
that a cancel no longer gives them back, and kept in the store until the
transaction commits (deleted) or rolls back (back at the front of their
queues, flagged redelivered).  A transaction prepared for two-phase
commit locks its persistent ones in the store (L{TransactionAcks.prepared})
and lets go of them here: its decision reaches the queues through the
store, whenever it comes (L{meshroute.router.prepared}).

It changes the queues' state only through their
L{meshroute.router.queues.QueueManager}'s methods, under its dispatch
loop.
"""

from meshroute.router.queue_state import Delivery, QueueItem, QueueState


class TransactionAcks:
    """
    The deliveries acknowledged inside one client transaction.  Each queue
    they come from counts them as a deletion in flight (C{acking}), so it
    does not release (and later re-read) entries they hold.

    @param manager: the L{meshroute.router.queues.QueueManager} whose
        consumers' deliveries these are.
    """

    def __init__(self, manager) -> None:
        self._manager = manager
        self._held: dict[QueueState, list[tuple[Delivery, QueueItem]]] = {}

    @property
    def holding(self) -> bool:
        "Whether it holds any delivery."
        return bool(self._held)

    def add(self, subscription, delivery_ids) -> None:
        """
        Take these deliveries from C{subscription} (a
        L{meshroute.router.queue_consumer.Subscription}) into the transaction.
        Ids it does not hold unacknowledged are ignored.
        """
        taken = subscription.take(delivery_ids)
        if not taken:
            return
        queue = subscription.state
        held = self._held.get(queue)
        if held is None:
            queue.acking += 1
            held = self._held[queue] = []
        held.extend(taken)

    def entry_ids(self) -> list[int]:
        """
        The store entries to delete when the transaction commits.
        """
        return [delivery.entry_id for held in self._held.values() for delivery, _ in held
                if delivery.entry_id is not None]

    def committed(self) -> None:
        """
        The deletions are durable: the messages are consumed.
        """
        manager, held_by_queue, self._held = self._manager, self._held, {}
        for queue, held in held_by_queue.items():
            queue.acking -= 1
            queue.transient_held -= sum(1 for delivery, _ in held if delivery.entry_id is None)
            manager.events.consumed([delivery for delivery, _ in held])
            manager.settle(queue)

    def rolled_back(self) -> None:
        """
        The transaction is discarded: its deliveries go back to the front
        of their queues, flagged redelivered.
        """
        manager, held_by_queue, self._held = self._manager, self._held, {}
        for queue, held in held_by_queue.items():
            queue.acking -= 1
            manager.put_back(queue, held)
            manager.settle(queue)

    def prepared(self) -> None:
        """
        The transaction is prepared: its persistent deliveries are locked
        to it in the store, where its commit or rollback finds them, after
        a restart too; memory lets go of them.  The non-persistent ones,
        which only memory holds, stay held until it is decided here (a
        restart loses them, as it loses any non-persistent message).
        """
        manager, held_by_queue, self._held = self._manager, self._held, {}
        for queue, held in held_by_queue.items():
            transient = [pair for pair in held if pair[0].entry_id is None]
            if transient:
                self._held[queue] = transient
            else:
                queue.acking -= 1
                manager.settle(queue)
