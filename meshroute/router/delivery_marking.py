"""
Delivered means flagged: each queue's line of delivery batches, each
handed over only once the entries it delivers for the first time are
marked redelivered in the store, in order behind the batches before it.

A message delivered and not acknowledged so comes back flagged even after
the router died.  The deliveries one dispatch makes form a batch: one
store call marks all its entries, and the batch waits for it behind the
earlier batches of its queue, so that the queue's order holds.  If the
store fails the call, the batch and every batch behind it go back to the
front of the queue, unflagged, their credit back to their consumers, and
the queue tries again after L{MARK_RETRY_S} (or at the next credit,
message or consumer).

The rule is one of the local queues' (L{meshroute.router.queues}); this
module keeps the line, and the queues' manager dispatches through it.
"""

from typing import Callable

from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger

from meshroute.router.queue_state import DeliveryBatch, QueueItem, QueueState

log = Logger()

#: How long after the store failed to mark a batch of deliveries the queue
#: tries to deliver them again (sooner if credit, a message or a consumer
#: comes first).
MARK_RETRY_S = 1.0


class DeliveryMarking:
    """
    The batches of deliveries of every local queue on their way to their
    consumers (C{QueueState.sending}), marked in the store first.

    @param store: the router's L{meshroute.interfaces.IMessageStore}.
    @param clock: when a failed mark is retried.
    @param dispatch: called C{(state)} to run the queue's dispatch again:
        a batch is ready, or a retry is due.
    @param forget_if_idle: called C{(state)} when a failed mark may have
        left the queue with nothing in memory.
    """

    def __init__(self, store, clock: IReactorTime, dispatch: Callable[[QueueState], None],
                 forget_if_idle: Callable[[QueueState], None]) -> None:
        self._store = store
        self._clock = clock
        self._dispatch = dispatch
        self._forget_if_idle = forget_if_idle

    def mark(self, state: QueueState, deliveries: list) -> None:
        """
        Mark the entries a new batch delivers for the first time
        redelivered, in one store call; the batch waits for it behind the
        earlier batches of the queue.
        """
        entry_ids = [item.entry_id for _, _, item in deliveries
                     if item.entry_id is not None and not (item.redelivered or item.marked)]
        batch = DeliveryBatch(deliveries, not entry_ids)
        state.sending.append(batch)
        if entry_ids:
            self._store.mark_redelivered(entry_ids).addCallbacks(
                self._marked, self._mark_failed, (state, batch), None, (state, batch))

    def _marked(self, _, state: QueueState, batch: DeliveryBatch) -> None:
        batch.ready = True
        self._dispatch(state)

    def _mark_failed(self, failure, state: QueueState, batch: DeliveryBatch) -> None:
        """
        The store could not mark C{batch}: it and every batch behind it
        (so that nothing overtakes it) go back to the queue unflagged,
        their credit to their consumers; try again later.
        """
        log.failure("marking deliveries of {queue} in the store", failure, queue=state.name)
        sending = state.sending
        if batch not in sending:
            return
        taken: list[QueueItem] = []
        while sending and sending[-1] is not batch:
            taken.extend(self._taken_back(sending.pop()))
        taken.extend(self._taken_back(sending.pop()))
        state.put_back(taken)
        if state.retry_call is None or not state.retry_call.active():
            state.retry_call = self._clock.callLater(MARK_RETRY_S, self._dispatch, state)
        if not state.dispatching:
            self._forget_if_idle(state)

    def _taken_back(self, batch: DeliveryBatch) -> list[QueueItem]:
        return [item for consumer, delivery, item in batch.deliveries
                if consumer.take_back(delivery)]

    def hand_over_ready(self, state: QueueState) -> None:
        """
        Hand over the batches at the front of the queue's line that are
        ready, in order.  Called inside the dispatch loop only, so that a
        consumer acting from C{deliver} cannot make a later batch overtake.
        """
        sending = state.sending
        while sending and sending[0].ready:
            for consumer, delivery, _ in sending.popleft().deliveries:
                consumer.hand_over(delivery)
