"""
Which waiting item of a local queue goes next, and to which consumer: the
order rules of the local queues (L{meshroute.router.queues}), apart from
the dispatch loop that applies them, so that they read in one place.

 - Items that went back to the queue (their consumer left without
   acknowledging them) come first.
 - Persistent and non-persistent items are two streams (JMS only orders
   messages of one delivery mode): when both wait they alternate, so
   neither starves the other, and a persistent item that only holding
   consumers could take lets a non-persistent one go before it.
 - Round-robin: each item goes to the next consumer, in subscription
   order, that has credit (and, for a persistent item, is not holding
   persistent ones back).

Pure: it reads and pops the queue's state and touches no store, clock or
consumer's deliveries.
"""

from meshroute.router.queue_state import QueueItem, QueueState


def next_delivery(state: QueueState) -> tuple[object, QueueItem, bool] | None:
    """
    Take the next item to deliver from C{state}: C{(consumer, item,
    waited)}, where C{waited} says the item came from the non-persistent
    items waiting (not from those given back); or None when no consumer
    can take any waiting item (nothing is taken then).
    """
    buffer, transient = state.buffer, state.transient
    if not (buffer or state.returned):
        # Only non-persistent items wait (a queue of the fast path).
        if not transient:
            return None
        consumer = next_consumer(state, False)
        if consumer is None:
            return None
        return consumer, transient.popleft(), True
    both = bool(buffer) and bool(transient)
    sources = [state.returned] if state.returned else []
    if both:
        sources += [buffer, transient] if state.take_transient else [transient, buffer]
    elif buffer or transient:
        sources.append(buffer or transient)
    for source in sources:
        item = source[0]
        consumer = next_consumer(state, item.entry_id is not None)
        if consumer is not None:
            source.popleft()
            if both and source is not state.returned:
                state.take_transient = source is transient
            return consumer, item, source is transient
    return None


def next_consumer(state: QueueState, persistent: bool):
    """
    The next consumer of C{state}, round-robin from where the last
    delivery went, that may take an item (C{persistent} or not), or None;
    the round-robin moves past the one found.
    """
    consumers = state.consumers
    count = len(consumers)
    start = state.next_consumer
    for offset in range(count):
        index = (start + offset) % count
        consumer = consumers[index]
        if consumer.credit > 0 and not (persistent and consumer.holding_persistent):
            state.next_consumer = (index + 1) % count
            return consumer
    return None
