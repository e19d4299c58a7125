"""
A served session's consumers: its subscriptions to local queues (and,
once made, to topics: L{meshroute.sessions.topic_subscribing}), the
deliveries the queues give them, and the client's acknowledgements
(docs/client-protocol.md, "Flow control").

 - B{owners}: every delivery not yet acknowledged, by session delivery id
   (ids are per session, from 1, increasing; they may skip numbers), with
   the subscription and the queue's delivery id it stands for.  An Ack
   names session delivery ids; the queue is told its own.
 - B{recovery}: the last C{recovery-buffer-size} deliveries written,
   forgotten once C{Received.delivered_up_to} covers them, so that a
   resumed session re-sends what its client did not receive (Artemis'
   reattachment); what cannot be re-sent goes back to its queue, flagged
   redelivered.
 - What the client cannot take now (it is away, or does not read) waits
   in the session's own queue (L{meshroute.sessions.own_queue}); on a
   version-4 connection the deliveries of one reactor turn go out as
   C{DeliverBatch} frames (L{DeliverBatches}).

Credit, C{max-subscriptions} and C{max-unacknowledged}
(L{meshroute.sessions.limits}) bound what one client may be given; an
Ack inside a transaction is held by it until the commit.
"""

from collections import deque
from dataclasses import dataclass, field
from functools import partial

from twisted.internet.defer import DeferredList
from twisted.internet.interfaces import IDelayedCall
from twisted.logger import Logger

from meshroute.expiry import now_ms
from meshroute.messages import DEAD_LETTER_QUEUE, EXPIRED_QUEUE, QUEUE_NAME, expires_ms
from meshroute.wire import client_frames as f

log = Logger()

#: Most deliveries in one DeliverBatch, and most bytes of bodies and
#: headers: a turn's deliveries past either go in the next frame, and a
#: delivery larger than the bytes goes as a Deliver of its own, so that a
#: frame to the client stays within L{f.MAX_ROUTER_FRAME_SIZE}.
DELIVER_BATCH_MAX_MESSAGES = 1000
DELIVER_BATCH_MAX_BYTES = 1024 * 1024


def no_subscription(frame: f.Unsubscribe) -> f.Error:
    """
    The answer to an Unsubscribe of a subscription the session does not
    have.
    """
    return f.Error(frame.command_id, f.INVALID_ARGUMENT, f"no subscription {frame.subscription}")


@dataclass(eq=False)
class Deliveries:
    """
    One served session's subscriptions and the deliveries it owes an
    acknowledgement for.

    @ivar session: the L{meshroute.sessions.served.ServedSession} they are
        the deliveries of: its engine's queues, its connection, its
        answers, its own queue and its transaction.
    @ivar subscriptions: subscription number → the queue manager's
        consumer.
    @ivar pending: subscription number → the initial credit of each topic
        subscription being made (L{meshroute.sessions.topic_subscribing}):
        its number is taken, its credit counts, and it joins
        C{subscriptions} once the router made it.
    @ivar stopped: the session stopped consuming (it closes or ended): a
        subscription made now ends at once.
    @ivar owners: session delivery id → C{(subscription, queue delivery
        id, persistent)} for every delivery not yet acknowledged.
    @ivar recovery: the last deliveries written (C{Deliver} frames).
    @ivar acks_in_progress: Acks whose deletions are not yet durable.
    @ivar batching: the connection speaks version 4: a turn's deliveries
        go out as C{DeliverBatch} frames.
    """

    session: object = field(repr=False)
    subscriptions: dict = field(default_factory=dict)
    pending: dict = field(default_factory=dict)
    stopped: bool = False
    owners: dict = field(default_factory=dict)
    recovery: deque = field(default_factory=deque)
    next_delivery_id: int = 0
    acks_in_progress: int = 0
    batching: bool = False

    def __post_init__(self) -> None:
        self.recovery = deque(maxlen=self.session.settings.recovery_buffer_size)

    # -- subscriptions ----------------------------------------------------------

    def subscribe(self, frame: f.Subscribe) -> None:
        session = self.session
        answer = session.answers.answer
        command_id, queue, number = frame.command_id, frame.queue, frame.subscription
        if not (QUEUE_NAME.match(queue) or queue in (DEAD_LETTER_QUEUE, EXPIRED_QUEUE)):
            answer(command_id, f.Error(command_id, f.BAD_ADDRESS,
                                       f"invalid queue name {queue!r}"))
            return
        refusal = self.argument_refusal(frame)
        if refusal is None and session.guard is not None and not session.guard.may_consume(queue):
            refusal = f.Error(command_id, f.NOT_ALLOWED,
                              session.guard.refusal(f"consume from {queue!r}"))
        if refusal is None:
            refusal = self.limit_refusal(frame)
        if refusal is not None:
            answer(command_id, refusal)
            return
        # Confirm first: deliveries may start inside queues.subscribe.
        answer(command_id, f.Confirm(command_id, ""))
        self.subscriptions[number] = session.engine.queues.subscribe(
            queue, partial(self.take, number), frame.credit)

    def argument_refusal(self, frame) -> f.Error | None:
        """
        The answer refusing Subscribe or SubscribeTopic C{frame} for its
        arguments (a negative credit, a subscription number in use,
        a topic subscription's still being made included), or None.
        """
        command_id, number = frame.command_id, frame.subscription
        if frame.credit < 0:
            return f.Error(command_id, f.INVALID_ARGUMENT, "credit must not be negative")
        if number in self.subscriptions or number in self.pending:
            return f.Error(command_id, f.INVALID_ARGUMENT,
                           f"subscription {number} is already in use")
        return None

    def limit_refusal(self, frame) -> f.Error | None:
        """
        The answer refusing Subscribe or SubscribeTopic C{frame} for the
        listener's bounds (C{max-subscriptions}, C{max-unacknowledged}),
        or None.
        """
        limits = self.session.settings.limits
        refusal = (limits.subscription_refusal(len(self.subscriptions) + len(self.pending))
                   or limits.credit_refusal(len(self.owners), self.outstanding_credit(),
                                            frame.credit))
        if refusal is None:
            return None
        return f.Error(frame.command_id, f.LIMIT_REACHED, refusal)

    def unsubscribe(self, frame: f.Unsubscribe) -> None:
        answer, command_id = self.session.answers.answer, frame.command_id
        if self.cancel(frame.subscription) is None:
            answer(command_id, no_subscription(frame))
            return
        answer(command_id, f.Confirm(command_id, ""))

    def cancel(self, number: int):
        """
        End subscription C{number}: what it was given and not
        acknowledged goes back to its queue.

        @return: the queue manager's consumer it was, or None when the
            session has no such subscription.
        """
        subscription = self.subscriptions.pop(number, None)
        if subscription is None:
            return None
        subscription.cancel()
        owners = self.owners
        for delivery_id in [d for d, owner in owners.items() if owner[0] == number]:
            del owners[delivery_id]
        # Held for a client that did not read: gone back to the queue.
        self.session.own_queue.forget(number)
        return subscription

    def cancel_all(self) -> None:
        """
        The session stops consuming (it closes or ends): every
        subscription ends, and what it was given and not acknowledged
        goes back to its queue.
        """
        self.stopped = True
        subscriptions, self.subscriptions = self.subscriptions, {}
        for subscription in subscriptions.values():
            subscription.cancel()
        self.owners.clear()
        self.session.own_queue.clear()

    def credit(self, frame: f.Credit) -> None:
        answers, command_id = self.session.answers, frame.command_id
        if frame.n < 1:
            answers.answer(command_id, f.Error(command_id, f.INVALID_ARGUMENT,
                                               "credit must be at least 1"))
            return
        subscription = self.subscriptions.get(frame.subscription)
        # Credit racing an Unsubscribe is harmless: ignored.
        if subscription is not None:
            refusal = self.session.settings.limits.credit_refusal(
                len(self.owners), self.outstanding_credit(), frame.n)
            if refusal is not None:
                answers.answer(command_id, f.Error(command_id, f.LIMIT_REACHED, refusal))
                return
            subscription.add_credit(frame.n)
        answers.done(command_id)

    def outstanding_credit(self) -> int:
        """
        The deliveries the session's subscriptions may still be given.
        """
        return (sum(subscription.credit for subscription in self.subscriptions.values())
                + sum(self.pending.values()))

    # -- deliveries ---------------------------------------------------------------

    def take(self, number: int, delivery) -> None:
        """
        The queue manager gives subscription C{number} a delivery: write
        it, or hold it in the session's own queue while the client cannot
        take it.
        """
        self.next_delivery_id += 1
        delivery_id = self.next_delivery_id
        persistent = delivery.entry_id is not None
        self.owners[delivery_id] = (number, delivery.delivery_id, persistent)
        m = delivery.message
        # A DeliverBatch's item; a Deliver frame is made only where one
        # is written, held or kept for a resume.
        item = [delivery_id, m.msg_id, m.origin, m.headers, m.body, delivery.redelivered]
        session = self.session
        connection = session.connection
        if connection is None or session.own_queue.pending or connection.unread:
            session.own_queue.hold(f.Deliver(delivery_id, number, *item[1:]), persistent)
        elif self.batching:
            # Into the recovery buffer with its batch (keep_for_resume).
            session.batches.add(number, item)
        else:
            self.written(f.Deliver(delivery_id, number, *item[1:]))

    def written(self, frame: f.Deliver) -> None:
        """
        Write C{frame}, and keep it to re-send on resume.
        """
        self.session.write(frame)
        if self.session.resumable:
            self.recovery.append(frame)

    def keep_for_resume(self, batches: dict) -> None:
        """
        The deliveries of C{batches} (subscription number → DeliverBatch
        items), written (or lost with the connection), join the recovery
        buffer as the Deliver frames a resume re-sends: only the last
        ones, which the buffer keeps, are made.
        """
        keep = self.recovery.maxlen  # recovery-buffer-size
        if not self.session.resumable or not keep:
            return
        tail = [(number, item) for number, items in batches.items() for item in items[-keep:]]
        self.recovery.extend(f.Deliver(item[0], number, *item[1:])
                             for number, item in tail[-keep:])

    def drop(self, frame: f.Deliver) -> None:
        """
        A non-persistent delivery the session's own queue has no room for.
        """
        session = self.session
        number, queue_delivery_id, _ = self.owners.pop(frame.delivery_id)
        self.subscriptions[number].drop(queue_delivery_id, session_id=session.session_id,
                                        client_id=session.client_id)

    def _expire_held(self, held: list) -> list:
        """
        The C{Deliver} frames of C{held} that may still be delivered; the
        others expired while the session held them: their messages go to
        C{$expired} and the session forgets them.
        """
        now = now_ms(self.session.clock)
        expired: dict[int, list[int]] = {}
        kept = []
        for frame in held:
            headers = frame.headers
            if headers and 0 < expires_ms(headers) <= now:
                number, queue_delivery_id, _ = self.owners.pop(frame.delivery_id)
                expired.setdefault(number, []).append(queue_delivery_id)
            else:
                kept.append(frame)
        for number, queue_delivery_ids in expired.items():
            self.subscriptions[number].expire(queue_delivery_ids)
        return kept

    # -- acknowledgements ---------------------------------------------------------

    def take_ack(self, frame: f.Ack) -> None:
        """
        An Ack the session accepted in sequence: held by the transaction
        if one is open, else carried out.
        """
        if self.session.transaction_core.holding:
            self.session.transaction.ack(frame)
        else:
            self.ack(frame)

    def ack(self, frame: f.Ack) -> None:
        by_subscription = self.owned(frame.delivery_ids)
        if not by_subscription:
            self.session.answers.done(frame.command_id)
            return
        self.acks_in_progress += 1
        acking = []
        for number, delivery_ids in by_subscription.items():
            d = self.subscriptions[number].ack(delivery_ids)
            d.addErrback(lambda failure: log.failure(
                "client session {session}: acknowledging failed", failure,
                session=self.session.session_id))
            acking.append(d)
        # One subscription is the common case: no DeferredList for it (a
        # fifth of a non-persistent acknowledgement's cost).
        done = acking[0] if len(acking) == 1 else DeferredList(acking)
        done.addCallback(self._ack_done, frame.command_id)

    def _ack_done(self, _, command_id: int) -> None:
        self.acks_in_progress -= 1
        self.session.answers.done(command_id)
        self.session.check_drained()

    def owned(self, delivery_ids) -> dict[int, list[int]]:
        """
        Take the unacknowledged deliveries among C{delivery_ids} (the
        others are ignored): C{{subscription: [queue delivery ids]}}.
        """
        by_subscription: dict[int, list[int]] = {}
        owners = self.owners
        for delivery_id in delivery_ids:
            owner = owners.pop(delivery_id, None)
            if owner is not None:
                by_subscription.setdefault(owner[0], []).append(owner[1])
        return by_subscription

    def unacknowledged_through(self, number: int, delivery_id: int) -> list[int]:
        """
        The session delivery ids of subscription C{number} not yet
        acknowledged, up to C{delivery_id} (what an AckThrough names).
        """
        ids = []
        for owned, owner in self.owners.items():
            # In delivery id order: deliveries are added as they are made.
            if owned > delivery_id:
                break
            if owner[0] == number:
                ids.append(owned)
        return ids

    def give_back(self, delivery_ids) -> None:
        """
        The client returns these deliveries unprocessed (STOMP's C{NACK};
        the native protocol has no such command): back to the front of
        their queues, flagged redelivered, with the credit they spent.
        Not a command, and outside any transaction.  Unknown ids are
        ignored.
        """
        for number, queue_delivery_ids in self.owned(delivery_ids).items():
            self.subscriptions[number].give_back(queue_delivery_ids)

    # -- a resume -----------------------------------------------------------------

    def received(self, delivered_up_to: int) -> None:
        """
        The client holds the deliveries up to C{delivered_up_to}: they
        need not be re-sent.
        """
        recovery = self.recovery
        while recovery and recovery[0].delivery_id <= delivered_up_to:
            recovery.popleft()

    def resend(self, delivered_up_to: int) -> tuple[int, dict[int, list[int]]]:
        """
        The session is resumed by a client that received the deliveries
        up to C{delivered_up_to}: re-send those of the recovery buffer it
        lacks, and keep in the own queue what waited there (less, in both,
        what expired meanwhile).

        @return: how many deliveries are re-sent or wait, and those sent
            before that the client did not receive and that cannot be sent
            again (C{{subscription: [queue delivery ids]}}), for
            L{requeue}.
        """
        owners, own_queue = self.owners, self.session.own_queue
        again = self._expire_held([d for d in self.recovery if d.delivery_id > delivered_up_to
                                   and d.delivery_id in owners])
        self.recovery.clear()
        own_queue.pending = deque(self._expire_held(list(own_queue.pending)))
        queued = len(own_queue.pending)
        resent = {d.delivery_id for d in again}
        resent.update(d.delivery_id for d in own_queue.pending)
        lost: dict[int, list[int]] = {}
        for delivery_id in [d for d in owners if d > delivered_up_to and d not in resent]:
            number, queue_delivery_id, _ = owners.pop(delivery_id)
            lost.setdefault(number, []).append(queue_delivery_id)
        for delivery in again:
            self.written(delivery)
        return len(again) + queued, lost

    def requeue(self, lost: dict[int, list[int]]) -> int:
        """
        Give the deliveries C{lost} (from L{resend}) back to their queues.
        Returns how many.
        """
        for number, queue_delivery_ids in lost.items():
            self.subscriptions[number].give_back(queue_delivery_ids)
        return sum(len(ids) for ids in lost.values())


@dataclass(eq=False)
class DeliverBatches:
    """
    Version 4: the deliveries of this turn, gathered (as the items of
    L{f.DeliverBatch}), a run of one subscription's at a time (delivery
    ids stay in order on the wire), into DeliverBatch frames written at
    the end of the turn, or before any other frame, or at a bound
    (L{DELIVER_BATCH_MAX_MESSAGES}, L{DELIVER_BATCH_MAX_BYTES}).  At the
    end of the turn, what was written is handed to the kernel at once
    (the connection's C{flush}): the client waits for it.

    @ivar session: the L{meshroute.sessions.served.ServedSession} whose
        deliveries they are: its connection, clock and recovery buffer.
    @ivar runs: subscription number → the items gathered this turn.
    """

    session: object = field(repr=False)
    runs: dict = field(default_factory=dict)
    _bytes: int = 0
    _count: int = 0
    _call: IDelayedCall | None = None
    # Deliveries were written this turn (before any other frame, or at a
    # bound) and not flushed yet.
    _written: bool = False

    def add(self, number: int, item: list) -> None:
        headers = item[3]
        size = len(item[4])
        if headers:
            size += sum(len(k) + len(v) for k, v in headers.items())
        if size > DELIVER_BATCH_MAX_BYTES:
            # Alone, after the batches before it (the session's write),
            # and kept for a resume as a batch's deliveries are.
            self.session.deliveries.written(f.Deliver(item[0], number, *item[1:]))
            return
        runs = self.runs
        if runs and (number not in runs
                     or self._count >= DELIVER_BATCH_MAX_MESSAGES
                     or self._bytes + size > DELIVER_BATCH_MAX_BYTES):
            self.write()
            runs = self.runs
        run = runs.get(number)
        if run is None:
            run = runs[number] = []
        run.append(item)
        self._count += 1
        self._bytes += size
        if self._call is None:
            self._call = self.session.clock.callLater(0, self._turn_ended)

    def _turn_ended(self) -> None:
        self._call = None
        if self.runs:
            self.write()
        if self._written:
            self._written = False
            connection = self.session.connection
            if connection is not None:
                connection.flush()

    def write(self) -> None:
        """
        Write what was gathered (before any other frame of the session,
        after the send answers held: they were made first).
        """
        self.session.answer_pacing.release()
        runs, self.runs = self.runs, {}
        self._count = self._bytes = 0
        connection = self.session.connection
        if connection is not None:
            for number, deliveries in runs.items():
                connection.write(f.DeliverBatch(number, deliveries))
            self._written = True
        self.session.deliveries.keep_for_resume(runs)

    def drop(self) -> None:
        """
        The connection is gone: this turn's deliveries not yet written
        are as lost in transit (kept in the recovery buffer and owners,
        so a resume deals with them as with any delivery the client did
        not receive).
        """
        self.session.deliveries.keep_for_resume(self.runs)
        self.runs = {}
        self._count = self._bytes = 0
        if self._call is not None and self._call.active():
            self._call.cancel()
        self._call = None
