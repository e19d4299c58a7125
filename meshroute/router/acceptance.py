"""
Accepting clients' sends and transactions: what a producer's send becomes
before the engine forwards or enqueues it.

A send is refused at once (nothing stored) when its address is malformed,
or when the mesh would not take it now: its router unknown, or its
destination's backlog at its bound (L{meshroute.router.admission}, whose
L{UnknownRouter<meshroute.router.admission.UnknownRouter>} and
L{BacklogFull<meshroute.router.admission.BacklogFull>} are the refusals
below).  A persistent send is answered once it is durable (one
for another router may leave for its next hop before that, when nothing
for that router waits ahead of it: L{meshroute.router.early_sends}); a
send with a duplicate id is stored with that id in one transaction, and a
repeat of it is answered with the first message's id, even when the
mesh's state would refuse it now (it is the retry of one accepted before,
whose answer a lost connection swallowed:
L{meshroute.router.refused_retries}).  A transaction's sends and
acknowledged queue entries are one store call: all of it or none; a
prepared (two-phase) transaction's sends are checked when it is prepared
and accepted, without refusal, when it is committed.
"""

from operator import itemgetter

from twisted.internet.defer import Deferred, DeferredList, fail, succeed
from twisted.python.failure import Failure

from meshroute.errors import MeshrouteError
from meshroute.expiry import now_ms
from meshroute.messages import AddressError, Message, expiry_headers, message_of
from meshroute.router.early_sends import EarlySends
from meshroute.router.message_events import address_of
from meshroute.router.refused_retries import RefusedRetries


def _expiry(fields) -> tuple[int, str]:
    """
    C{(expires_ms, notify)} for L{Acceptance._new_message} from the
    optional trailing fields of a send, C{[expires_ms, notify_expiry[,
    sender]]}: the session to notify only when asked.
    """
    if not fields:
        return 0, ""
    expires_ms, notify_expiry, *sender = fields
    return expires_ms, (sender[0] if sender and notify_expiry else "")


def _put(outcome, outcomes: list, position: int) -> None:
    """
    Record C{outcome} (a message id or a L{Failure}) as the outcome at
    C{position} of a batch of sends.
    """
    outcomes[position] = outcome


class Acceptance:
    """
    Router C{name}'s acceptance of clients' sends.

    @param ids: the router's L{MessageIds<meshroute.messages.MessageIds>}.
    @param destinations: L{meshroute.router.destinations.Destinations}.
    @param forwarding: L{meshroute.router.forwarding.Forwarding}: a send
        for another router lets its next hop's link take it.
    @param transient: L{meshroute.router.transient.TransientPath}, which
        takes the non-persistent sends.
    @param admission: L{meshroute.router.admission.Admission}: whether a
        send is refused now, and the persistent sends for each router on
        their way into the store, which it counts toward the bound.
    @param message_events: L{meshroute.router.message_events.MessageEvents}.
    """

    def __init__(self, name: str, store, admission, ids, clock, destinations, forwarding,
                 transient, queues, message_events) -> None:
        self._name = name
        self._store = store
        self._admission = admission
        self._ids = ids
        self._clock = clock
        self._destinations = destinations
        self._forwarding = forwarding
        self._transient = transient
        self._queues = queues
        self._events = message_events
        self._retries = RefusedRetries(store, message_events)

    def submit(self, address: str, body: bytes, headers: dict, persistent: bool,
               duplicate_id: str = "", expires_ms: int = 0, notify_expiry: bool = False,
               sender: str = "") -> Deferred:
        """
        Accept a message from a client.

        @param expires_ms: when its time to live runs out (absolute
            wall-clock epoch milliseconds; 0: never): not delivered after
            it, but set aside in C{$expired} (L{meshroute.expiry}).
        @param notify_expiry: tell the session C{sender} (what
            L{ExpiredMessages.sessions
            <meshroute.router.expired.ExpiredMessages.sessions>} know it
            by) if it expires (best effort, docs/client-protocol.md).

        @param duplicate_id: when not empty, accept the message only if no
            send with this id was accepted within the store's duplicate-id
            window (the id is recorded in the same transaction as the
            message); a duplicate fires with the first message's id,
            enqueues nothing and emits C{message.duplicate} with reason
            C{duplicate-id}, even when a send to that address would be
            refused now (C{UnknownRouter}, C{BacklogFull}).
        @return: Deferred firing with the message id once the message is
            durable (persistent) or accepted (non-persistent); failing with
            L{AddressError}, C{UnknownRouter} or C{BacklogFull}.
        """
        try:
            # A queue address has one destination.
            (destination,) = self._destinations.of(address)
        except AddressError as e:
            return fail(e)
        queue, router = destination.queue, destination.router
        refusal = self._admission.refusal(router, persistent)
        if refusal is not None:
            if duplicate_id:
                return self._retries.answer(refusal, duplicate_id, destination.address)
            return fail(refusal)
        headers = destination.headers(headers)
        message = self._new_message(queue, router, body, headers, persistent, expires_ms,
                                    sender if notify_expiry else "")
        if not persistent:
            if duplicate_id:
                d = self._store.accept_once(message, duplicate_id)
                d.addCallback(self._accepted_transient_once, message, duplicate_id)
                return d
            self._events.accepted((message,))
            self._transient.route((message,))
            return succeed(message.msg_id)
        if router != self._name:
            if not duplicate_id:
                early = self._early_sends()
                if early.take(0, message):
                    outcomes = [None]
                    (d,) = early.send(outcomes)
                    return d.addCallback(lambda _: outcomes[0])
            self._admission.submitted(router)
            self._forwarding.write_held(router)
        if duplicate_id:
            d = self._store.accept_once(message, duplicate_id)
            d.addBoth(self._accepted_once, message, duplicate_id)
        else:
            d = self._store.accept(message)
            d.addBoth(self._accepted, message)
        self._submitted((message,))
        return d

    def submit_many(self, sends) -> Deferred:
        """
        Accept a batch of client sends, each C{(address, headers, body,
        persistent, duplicate_id)} (a Send's fields, as a SendBatch carries
        them) or C{(..., duplicate_id, expires_ms, notify_expiry[,
        sender])}, each as L{submit} would (same
        refusals, same events, in order), with ONE store call for all the
        messages to store (L{SQLiteStore.accept_many}).

        @return: Deferred firing with one outcome per send, in order: the
            message id (the first message's for a duplicate id), or a
            L{Failure} (L{AddressError}, C{UnknownRouter}, C{BacklogFull},
            or the store's error for every stored one when the store call
            failed).
        """
        outcomes: list = []
        stored: list[tuple[Message, str]] = []
        positions: list[int] = []
        rechecks: list[Deferred] = []
        # The position of the first stored send of each duplicate id, and
        # the refused sends repeating one: answered as that send is (its
        # transaction is not written yet, a look-up would not find it).
        firsts: dict[str, int] = {}
        repeats: list[tuple] = []
        # Non-persistent sends without a duplicate id: taken at once, their
        # acceptance recorded with one call of the event log.
        transient: list[Message] = []
        now = self._clock.seconds()
        # Persistent sends for other routers that leave before their commit.
        early = self._early_sends()
        # The addresses of the batch resolved, each once (a batch's sends
        # mostly go to one).
        resolved: dict[str, tuple] = {}
        # The other routers some of whose sends go to the backlog.
        to_backlog: set[str] = set()
        for address, headers, body, persistent, duplicate_id, *expiry in sends:
            destinations = resolved.get(address)
            if destinations is None:
                try:
                    destinations = resolved[address] = self._destinations.of(address)
                except AddressError as e:
                    outcomes.append(Failure(e))
                    continue
            # A queue address has one destination.
            (destination,) = destinations
            queue, router = destination.queue, destination.router
            refusal = self._admission.refusal(router, persistent)
            if refusal is not None:
                if duplicate_id in firsts:
                    repeats.append((len(outcomes), firsts[duplicate_id], refusal,
                                    destination.address, duplicate_id))
                    outcomes.append(None)
                elif duplicate_id:
                    # Its place first: the store's look-up may answer at once.
                    outcomes.append(None)
                    d = self._retries.answer(refusal, duplicate_id, destination.address)
                    rechecks.append(d.addBoth(_put, outcomes, len(outcomes) - 1))
                else:
                    outcomes.append(Failure(refusal))
                continue
            message = self._new_message(queue, router, body, destination.headers(headers),
                                        persistent, *_expiry(expiry), accepted_at=now)
            if not persistent and not duplicate_id:
                transient.append(message)
                outcomes.append(message.msg_id)
                continue
            if persistent and router != self._name:
                if not duplicate_id and early.take(len(outcomes), message):
                    outcomes.append(None)
                    continue
                if duplicate_id:
                    early.hold(router)
                self._admission.submitted(router)
                to_backlog.add(router)
            if duplicate_id:
                firsts.setdefault(duplicate_id, len(outcomes))
            positions.append(len(outcomes))
            outcomes.append(None)
            stored.append((message, duplicate_id))
        if transient:
            self._events.accepted(transient)
            self._transient.route(transient)
        rechecks.extend(early.send(outcomes))
        for router in to_backlog:
            self._forwarding.write_held(router)
        if stored:
            d = self._store.accept_many(stored)
            d.addBoth(self._accepted_many, stored, positions, outcomes)
            if repeats:
                d.addCallback(lambda _: self._retries.answer_repeats(repeats, outcomes))
            rechecks.append(d)
            self._submitted([m for m, _ in stored if m.persistent])
        if not rechecks:
            return succeed(outcomes)
        return DeferredList(rechecks).addCallback(lambda _: outcomes)

    def _accepted_many(self, result, stored: list, positions: list, outcomes: list) -> None:
        if isinstance(result, Failure):
            self._not_accepting(stored)
            for position in positions:
                outcomes[position] = result
            return None
        for (message, duplicate_id), original, position in zip(stored, result, positions):
            if message.persistent:
                outcome = self._accepted_once(original, message, duplicate_id)
            else:
                outcome = self._accepted_transient_once(original, message, duplicate_id)
            outcomes[position] = outcome
        return None

    def _early_sends(self) -> EarlySends:
        """
        What decides which persistent sends for other routers leave before
        their commit (L{meshroute.router.early_sends}), as things are now.
        """
        return EarlySends(self._forwarding, self._events, self._store.backlog_depth,
                          self._admission.accepting, now_ms(self._clock))

    def _new_message(self, queue: str, router: str, body: bytes, headers: dict,
                     persistent: bool, expires_ms: int = 0, notify: str = "",
                     accepted_at: float | None = None) -> Message:
        """
        A message accepted now, or at C{accepted_at}: the one time of all
        the sends of a batch, accepted together.
        """
        if accepted_at is None:
            accepted_at = self._clock.seconds()
        return message_of(self._ids.next(), self._name, router, queue, body,
                          expiry_headers(headers, expires_ms, notify), 0, persistent,
                          accepted_at)

    def commit(self, sends, entry_ids, xid: tuple | None = None,
               user: str | None = None) -> Deferred:
        """
        Carry out a client transaction: accept every message of C{sends}
        (C{(address, body, headers, persistent, duplicate_id)} tuples, or
        with C{expires_ms, notify_expiry[, sender]} after them, each as
        L{submit} would) and delete the queue entries C{entry_ids}, in
        one store call, so that all of it or none of it is done.  A send
        that L{submit} would refuse refuses the whole transaction
        (L{check}).  With an C{xid} (a two-phase transaction committed in
        one phase, by C{user}) the store records it as committed in the
        same call.

        @return: Deferred firing with the message id of each send (the
            first message's for a duplicate id) once durable; failing
            with L{AddressError}, C{UnknownRouter}, C{BacklogFull},
            L{DuplicateXid<meshroute.store.prepared.DuplicateXid>} or the
            store's error, nothing done.
        """
        def store_call(stored) -> Deferred:
            return self._store.commit(stored, entry_ids, xid, user).addCallback(
                lambda outcomes: (outcomes,))

        d = self.check(sends)
        d.addCallback(lambda _: self._commit(sends, store_call))
        d.addCallback(itemgetter(0))
        return d

    def check(self, sends) -> Deferred:
        """
        Whether a transaction's C{sends} (as L{commit} takes them) may be
        accepted: a send that L{submit} would refuse refuses them all,
        unless its duplicate id was accepted before (the transaction is a
        retry of one that was applied, whose answer a failure swallowed):
        as with L{submit}, that send is answered with the first message's
        id, whatever the mesh's state now.

        @return: Deferred firing with None when they may; failing with
            L{AddressError}, C{UnknownRouter}, C{BacklogFull} (or the
            store's error) when not.
        """
        refused = []
        try:
            for address, _body, _headers, persistent, duplicate_id, *_ in sends:
                for destination in self._destinations.of(address):
                    refusal = self._admission.refusal(destination.router, persistent)
                    if refusal is not None:
                        if not duplicate_id:
                            raise refusal
                        refused.append((refusal, duplicate_id))
        except MeshrouteError as e:
            return fail(e)
        if not refused:
            return succeed(None)
        return self._retries.check(refused)

    def commit_prepared(self, prepared_id: int, xid: tuple, user: str | None,
                        sends) -> Deferred:
        """
        Commit the prepared transaction C{prepared_id} (of C{xid}, by
        C{user}): accept its C{sends} (as L{commit} takes them), with no
        refusal (its prepare checked them, and promised), delete the
        entries it locked, and record C{xid} committed, in one store call.

        @return: Deferred firing, once durable, with C{(msg_ids, consumed,
            missing)}: the message id of each send as L{commit} gives
            them, and the store's C{consumed} entries and C{missing}
            count (L{meshroute.store.sqlite.SQLiteStore.commit_prepared});
            failing with the store's error, nothing done.
        """
        return self._commit(sends, lambda stored: self._store.commit_prepared(
            prepared_id, xid, user, stored))

    def _commit(self, sends, store_call) -> Deferred:
        """
        Make the messages of a transaction's C{sends} and hand those to
        store (C{(message, duplicate_id)} pairs) to C{store_call}, whose
        Deferred fires with a tuple: the store's outcome of each, then
        what else the store answered.

        @return: Deferred firing with that tuple, the outcomes turned into
            the sends' message ids.
        """
        messages: list[tuple[Message, str]] = []
        for address, body, headers, persistent, duplicate_id, *expiry in sends:
            # A queue address has one destination.
            (destination,) = self._destinations.of(address)
            router = destination.router
            message = self._new_message(destination.queue, router, body,
                                        destination.headers(headers), persistent,
                                        *_expiry(expiry))
            if persistent and router != self._name:
                self._admission.submitted(router)
                self._forwarding.write_held(router)
            messages.append((message, duplicate_id))
        stored = [(m, duplicate_id) for m, duplicate_id in messages
                  if m.persistent or duplicate_id]
        d = store_call(stored)
        d.addBoth(self._committed, messages)
        self._submitted([m for m, _ in stored if m.persistent])
        return d

    def _submitted(self, messages) -> None:
        """
        Persistent C{messages} were submitted to the store: their local
        queues are notified now, so that a waiting consumer's read joins
        their commit (a consumer on this router gets a message as its
        producer gets its answer, not one commit later: docs/stomp.md),
        and the links toward the others' routers may take them.
        """
        elsewhere = set()
        for queue in {m.dest_queue for m in messages if m.dest_router == self._name}:
            self._queues.notify(queue)
        for message in messages:
            if message.dest_router != self._name:
                elsewhere.add(message.dest_router)
        if elsewhere:
            self._forwarding.pump_ahead(elsewhere)

    def _not_accepting(self, messages) -> None:
        for message, _ in messages:
            if message.persistent and message.dest_router != self._name:
                self._admission.ended(message.dest_router)

    def _committed(self, result, messages: list) -> tuple:
        if isinstance(result, Failure):
            self._not_accepting(messages)
            return result
        outcomes, *rest = result
        outcomes = iter(outcomes)
        msg_ids = []
        for message, duplicate_id in messages:
            original = next(outcomes) if message.persistent or duplicate_id else None
            if message.persistent:
                msg_ids.append(self._accepted_once(original, message, duplicate_id))
            else:
                msg_ids.append(self._accepted_transient_once(original, message, duplicate_id))
        return (msg_ids, *rest)

    def _accepted_once(self, result, message: Message, duplicate_id: str):
        if isinstance(result, str):
            if message.dest_router != self._name:
                self._admission.ended(message.dest_router)
            self._events.duplicate_send(result, address_of(message), duplicate_id)
            return result
        return self._accepted(result, message)

    def _accepted_transient_once(self, original: str | None, message: Message,
                                 duplicate_id: str):
        if original is not None:
            self._events.duplicate_send(original, address_of(message), duplicate_id)
            return original
        self._events.accepted((message,))
        self._transient.route((message,))
        return message.msg_id

    def _accepted(self, result, message: Message):
        if message.dest_router != self._name:
            self._admission.ended(message.dest_router)
        if isinstance(result, Failure):
            return result
        self._events.accepted((message,))
        if message.dest_router == self._name:
            # Its queue was notified when it was submitted (_submitted).
            self._events.enqueued(message.dest_queue, (message,))
        else:
            self._forwarding.pump_towards(message.dest_router)
        return message.msg_id
