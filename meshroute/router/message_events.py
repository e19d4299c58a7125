"""
The records the engine writes about messages (docs/events.md): accepted,
enqueued, forwarded, dropped on the way, a duplicate refused,
dead-lettered; and about topics: a publication fanned out, a
subscription begun or ended.  The engine's parts write each through one
method here, so that its fields are the same wherever in the engine the
event happens; those written per message in a batch go through the
event log's C{emit_many}, one call per batch.  (The local queues write
their own C{message.consumed} and the drops of what waits in a queue,
L{meshroute.router.queue_events}.)
"""

from meshroute import events
from meshroute.messages import (
    DEAD_LETTER_QUEUE,
    DURABLE_PREFIX,
    PUBLICATION_HEADER,
    TARGETS_HEADER,
    TOPIC_HEADER,
    TOPIC_PREFIX,
    TOPIC_QUEUE,
    Message,
)

#: C{kind} of a C{topic.subscribed} or C{topic.unsubscribed} record.
DURABLE = "durable"
NON_DURABLE = "non-durable"

#: The fields of a message's MESSAGE_ACCEPTED record after the head.
_ACCEPTED_FIELDS = ("msg_id", "origin", "dest", "size", "persistent")
#: ... of its MESSAGE_ENQUEUED record.
_ENQUEUED_FIELDS = ("msg_id", "origin", "queue", "hops", "accepted_at", "persistent")
#: ... of its MESSAGE_FORWARDED record.
_FORWARDED_FIELDS = ("msg_id", "peer", "origin", "hops")
#: ... of the MESSAGE_DROPPED record of a message the engine drops.
_DROPPED_FIELDS = ("msg_id", "reason", "origin")
#: ... of a publication's TOPIC_FANNED_OUT record.
_FANNED_OUT_FIELDS = ("msg_id", "publication", "origin", "topic", "persistent", "hops",
                      "accepted_at", "durable", "non_durable", "sent", "targets")


def address_of(message: Message) -> str:
    """
    C{queue@router}: where C{message} is addressed; C{topic:NAME} for a
    publication as its publisher sent it.
    """
    if message.dest_queue == TOPIC_QUEUE and TARGETS_HEADER not in message.headers:
        return f"{TOPIC_PREFIX}{message.headers.get(TOPIC_HEADER, '')}"
    return f"{message.dest_queue}@{message.dest_router}"


def fanned_out(message: Message, copies) -> tuple:
    """
    The fields of the C{topic.fanned-out} record of C{message}, a
    publication (or a neighbour's copy of one) the fan-out took from
    C{$topic}, whose C{copies} are placed: the subscription queues it
    was copied into, durable and not, the ids of the copies made for the
    routers beyond and, in the same order, the routers each is for.
    Lists of strings, not an object per copy: a batch of records is
    encoded four times faster.
    """
    durable, non_durable, sent, targets = [], [], [], []
    for copy in copies:
        queue = copy.dest_queue
        if queue == TOPIC_QUEUE:
            sent.append(copy.msg_id)
            targets.append(copy.headers[TARGETS_HEADER].split(","))
        elif queue.startswith(DURABLE_PREFIX):
            durable.append(queue)
        else:
            non_durable.append(queue)
    headers = message.headers
    return (message.msg_id, headers.get(PUBLICATION_HEADER) or message.msg_id, message.origin,
            headers.get(TOPIC_HEADER, ""), message.persistent, message.hops,
            message.accepted_at, durable, non_durable, sent, targets)


def forwarded(peer: str, message: Message) -> tuple:
    """
    The fields of C{message}'s C{message.forwarded} record, sent on to
    C{peer} (L{MessageEvents.forwarded_records}).
    """
    return (message.msg_id, peer, message.origin, message.hops + 1)


class MessageEvents:
    """
    Writes the message records of router C{name} to C{log}; an enqueued
    or dead-lettered message also counts in its queue's rates
    (L{meshroute.router.queue_rates.QueueRates}).
    """

    def __init__(self, name: str, log: events.EventLog, rates) -> None:
        self._name = name
        self._log = log
        self._rates = rates

    def accepted(self, messages) -> None:
        self._log.emit_many(
            events.MESSAGE_ACCEPTED, _ACCEPTED_FIELDS,
            [(m.msg_id, m.origin, address_of(m), len(m.body), m.persistent) for m in messages])

    def enqueued(self, queue: str, messages) -> None:
        """
        C{message.enqueued} for C{messages}, all enqueued in C{queue}.
        """
        self._rates.entered(queue, len(messages))
        self._log.emit_many(
            events.MESSAGE_ENQUEUED, _ENQUEUED_FIELDS,
            [(m.msg_id, m.origin, queue, m.hops, m.accepted_at, m.persistent)
             for m in messages])

    def forwarded(self, peer: str, messages) -> None:
        """
        C{message.forwarded} for C{messages}, sent on to C{peer}.
        """
        self.forwarded_records([forwarded(peer, m) for m in messages])

    def forwarded_records(self, records: list[tuple]) -> None:
        """
        C{message.forwarded} for C{records} (L{forwarded}'s tuples), of
        messages sent to several peers.
        """
        self._log.emit_many(events.MESSAGE_FORWARDED, _FORWARDED_FIELDS, records)

    def dropped(self, records: list[tuple]) -> None:
        """
        C{message.dropped} for C{records}: C{(msg_id, reason, origin)}.
        """
        self._log.emit_many(events.MESSAGE_DROPPED, _DROPPED_FIELDS, records)

    def fanned_out(self, fanned, left_out=()) -> None:
        """
        C{topic.fanned-out} for each C{(message, copies)} of C{fanned}
        (L{fanned_out}): the fan-out's transaction that placed them is
        durable.  The copies whose ids are C{left_out} were not made: the
        store held them, or their subscription had them, already.
        """
        if left_out:
            fanned = [(message, [copy for copy in copies if copy.msg_id not in left_out])
                      for message, copies in fanned]
        self._log.emit_many(events.TOPIC_FANNED_OUT, _FANNED_OUT_FIELDS,
                            [fanned_out(message, copies) for message, copies in fanned])

    def subscribed(self, queue: str, pattern: str, durable=None, replaced: int | None = None
                   ) -> None:
        """
        C{topic.subscribed}: a non-durable subscription began, or durable
        subscription C{durable} (a
        L{Durable<meshroute.router.topic_subscriptions.Durable>}) was
        made, or C{replaced} with another pattern (C{replaced} messages
        deleted).
        """
        if durable is None:
            self._log.emit(events.TOPIC_SUBSCRIBED, queue=queue, pattern=pattern,
                           kind=NON_DURABLE)
            return
        self._log.emit(events.TOPIC_SUBSCRIBED, queue=queue, pattern=pattern, kind=DURABLE,
                       client_id=durable.client_id, name=durable.name, shared=durable.shared,
                       user=durable.user, replaced=replaced is not None,
                       deleted=replaced or 0)

    def unsubscribed(self, queue: str, dropped: int, durable=None, deleted: int = 0) -> None:
        """
        C{topic.unsubscribed}: a non-durable subscription ended (its
        consumer is gone), or durable subscription C{durable} was
        forgotten with the C{deleted} persistent messages it held; the
        C{dropped} non-persistent ones waiting in it were dropped
        (C{message.dropped}, reason C{unsubscribed}).
        """
        if durable is None:
            self._log.emit(events.TOPIC_UNSUBSCRIBED, queue=queue, kind=NON_DURABLE,
                           dropped=dropped)
            return
        self._log.emit(events.TOPIC_UNSUBSCRIBED, queue=queue, kind=DURABLE,
                       client_id=durable.client_id, name=durable.name, dropped=dropped,
                       deleted=deleted)

    def duplicate_send(self, original: str, dest: str, duplicate_id: str) -> None:
        """
        A client's send repeated the duplicate id of message C{original}.
        """
        self._log.emit(events.MESSAGE_DUPLICATE, msg_id=original, origin=self._name,
                      reason="duplicate-id", duplicate_id=duplicate_id, dest=dest)

    def duplicate_arrival(self, message: Message, peer: str) -> None:
        """
        C{message} arrived from C{peer} again: this router holds it.
        """
        self._log.emit(events.MESSAGE_DUPLICATE, msg_id=message.msg_id, peer=peer,
                      origin=message.origin)

    def dead_lettered(self, message: Message, reason: str) -> None:
        self._log.emit(events.MESSAGE_DEAD_LETTERED, msg_id=message.msg_id,
                      origin=message.origin, hops=message.hops, reason=reason,
                      dest=address_of(message))
        self._rates.entered(DEAD_LETTER_QUEUE)
