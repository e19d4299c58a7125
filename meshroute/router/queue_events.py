"""
The records the local queues write (docs/events.md): C{message.consumed}
once an acknowledgement is durable, counted in the queue's rate out;
C{message.dropped} for a non-persistent message a queue or a consumer
could not keep; and, through the manager's C{expired} hook, each message
set aside in C{$expired}.  The queue manager, its consumers and a
transaction's acknowledgements all write them through one L{QueueEvents},
so that the fields are the same wherever the event happens.  (The
engine's own records are L{meshroute.router.message_events}.)
"""

from typing import Callable

from meshroute import events as event_names
from meshroute.messages import Message
from meshroute.router.queue_rates import QueueRates
from meshroute.router.queue_state import Delivery

#: The fields of a C{message.consumed} record, in the order
#: L{meshroute.events.EventLog.emit_many} is given them.
_CONSUMED_FIELDS = ("msg_id", "queue", "origin", "accepted_at", "persistent", "redelivered")


class QueueEvents:
    """
    Writes the local queues' records.

    @param events: the event log (anything with C{emit(event, **fields)}
        and C{emit_many}).
    @param rates: where a consumed message counts as one out of its queue.
    @param expired: called C{(message, where)} for each message set aside
        in C{$expired}, once that is durable.
    """

    def __init__(self, events, rates: QueueRates,
                 expired: Callable[[Message, str], None]) -> None:
        self._events = events
        self._rates = rates
        self.expired = expired

    def consumed(self, deliveries: list[Delivery]) -> None:
        "C{message.consumed} for each of C{deliveries}, acknowledged durably."
        self.consumed_messages((d.queue, d.message, d.redelivered) for d in deliveries)

    def consumed_messages(self, consumed) -> None:
        """
        C{message.consumed} for each C{(queue, message, redelivered)}.
        """
        records = []
        for queue, message, redelivered in consumed:
            self._rates.left(queue)
            records.append((message.msg_id, queue, message.origin, message.accepted_at,
                            message.persistent, redelivered))
        self._events.emit_many(event_names.MESSAGE_CONSUMED, _CONSUMED_FIELDS, records)

    def dropped(self, message: Message, queue: str, reason: str, **fields) -> None:
        "C{message.dropped}: C{message}, non-persistent, is given up for C{reason}."
        self._events.emit(event_names.MESSAGE_DROPPED, msg_id=message.msg_id,
                          origin=message.origin, queue=queue, reason=reason, **fields)
