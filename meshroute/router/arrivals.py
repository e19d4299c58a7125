"""
What arrives over links in their delivery stage: persistent messages,
stored with their link sequence in one transaction before they are
acknowledged (docs/routing.md), and non-persistent ones, routed on at
once.  Each goes where L{Destinations.arrival
<meshroute.router.destinations.Destinations.arrival>} says: a local
queue, the backlog of another router, or aside (C{$expired}, the
dead-letter queue).  A message id this router already holds is a
duplicate and is dropped, never enqueued twice.
"""

from itertools import groupby

from twisted.internet.defer import Deferred
from twisted.logger import Logger

from meshroute.expiry import IN_TRANSIT
from meshroute.messages import EXPIRED_QUEUE, SYSTEM_QUEUES, Message
from meshroute.store import CLAIMED

log = Logger()


class Arrivals:
    """
    Takes what router C{name}'s links deliver into C{store} and C{queues}:
    an arrival for a local queue whose consumers wait for it is claimed
    as it is received, and handed over from its receive with no read
    (L{meshroute.router.arrival_claims}).

    @param destinations: L{meshroute.router.destinations.Destinations}.
    @param message_events: L{meshroute.router.message_events.MessageEvents}.
    @param expired: L{meshroute.router.expired.ExpiredMessages}.
    @param dead_lettered: called C{(message, reason)} for a message now in
        the dead-letter queue.
    @param system: L{meshroute.router.system_messages.SystemMessages}.
    @param transient: L{meshroute.router.transient.TransientPath}.
    """

    def __init__(self, name: str, store, queues, destinations, message_events, expired,
                 dead_lettered, system, transient) -> None:
        self._name = name
        self._store = store
        self._queues = queues
        self._destinations = destinations
        self._events = message_events
        self._expired = expired
        self._dead_lettered = dead_lettered
        self._system = system
        self._transient = transient

    def arrived(self, peer: str, seq: int, previous: int, message: Message) -> Deferred:
        """
        A persistent message arrived from C{peer}: store it (dead-lettered
        here if it crossed too many links, enqueued if it is for us).

        @param previous: see L{IMessageStore.receive}.
        @return: Deferred firing when it is durable (or known duplicate),
            with the destination routers whose backlog it added to (empty
            when there is nothing to forward): the caller acknowledges it
            before it forwards them (see L{meshroute.router.acknowledgements}).
        """
        stored, local, aside = self._destinations.arrival(message)
        claim = self._queues.claim(stored.dest_queue, (stored,)) if local else None
        d = self._store.receive(peer, seq, stored, local or bool(aside), previous,
                                claim.checks[0] if claim else None)
        if claim:
            d.addErrback(claim.failed)
        elif local:
            self._queues.notify(stored.dest_queue)
        d.addCallback(self._stored_one, peer, message, local, aside, claim)
        return d

    def _stored_one(self, result, peer: str, message: Message, local: bool, aside: str,
                    claim) -> tuple:
        onward = self._stored(result, peer, message, local, aside)
        if claim:
            # After its message.enqueued: its delivery may follow at once.
            claim.answered([result])
        return onward

    def arrived_many(self, peer: str, previous: int, arrivals: list) -> Deferred:
        """
        L{arrived} for each of C{arrivals} (C{(seq, message)} in link
        order, C{previous} the highest sequence known received before the
        first), in one store call.

        @return: Deferred firing when all are durable (or known
            duplicates) with the destination routers whose backlog they
            added to.
        """
        placed = [self._destinations.arrival(message) for _seq, message in arrivals]
        by_queue: dict[str, list[int]] = {}
        for index, (message, local, _) in enumerate(placed):
            if local:
                by_queue.setdefault(message.dest_queue, []).append(index)
        checks = [None] * len(arrivals)
        claims, notified = [], []
        for queue, indexes in by_queue.items():
            claim = self._queues.claim(queue, [placed[index][0] for index in indexes])
            if claim is not None:
                claimed = indexes[:len(claim.checks)]
                claims.append((claim, claimed))
                for index, check in zip(claimed, claim.checks):
                    checks[index] = check
            if claim is None or len(claim.checks) < len(indexes):
                notified.append(queue)
        d = self._store.receive_many(
            peer, previous, [(seq, stored, local or bool(aside))
                             for (seq, _), (stored, local, aside) in zip(arrivals, placed)],
            checks if claims else None)
        if claims:
            d.addErrback(self._unanswered, claims)
        for queue in notified:
            self._queues.notify(queue)
        d.addCallback(self._stored_many, peer, arrivals, placed, claims)
        return d

    @staticmethod
    def _unanswered(failure, claims: list):
        for claim, _ in claims:
            claim.failed(failure)
        return failure

    def _stored_many(self, results: list, peer: str, arrivals: list, placed: list,
                     claims: list) -> set:
        onward = set()
        # A run of arrivals enqueued in one queue gets its records in one
        # write (four times cheaper than one at a time), in their order.
        for queue, run in groupby(zip(results, arrivals, placed), key=_enqueued_in):
            if queue is None:
                for result, (_seq, message), (_stored, local, aside) in run:
                    onward.update(self._stored(result, peer, message, local, aside))
            else:
                self._events.enqueued(queue, [message for _, (_seq, message), _ in run])
        # After their message.enqueued: their deliveries may follow at once.
        for claim, indexes in claims:
            claim.answered([results[index] for index in indexes])
        return onward

    def _stored(self, result, peer: str, message: Message, local: bool,
                aside: str) -> tuple:
        if _is_stored(result):
            result = "stored"
        if result == "duplicate-id":
            self._events.duplicate_arrival(message, peer)
        elif result == "recalled":
            log.info("message {msg_id} came back from {peer} while our copy awaited its "
                     "acknowledgement: the returned copy is kept", msg_id=message.msg_id,
                     peer=peer)
            # Ours went back to the backlog, with what followed it in its
            # outbox (possibly for other destinations).
            return tuple(self._store.backlog_depths())
        elif result == "stored":
            if aside == EXPIRED_QUEUE:
                self._expired.moved((message,), IN_TRANSIT)
            elif aside:
                self._dead_lettered(message, aside)
            elif local:
                # Its queue was notified when it was submitted (arrived).
                self._events.enqueued(message.dest_queue, (message,))
            else:
                return (message.dest_router,)
        return ()

    def arrived_transient_many(self, messages) -> None:
        """
        Non-persistent messages arrived from a peer, in order: routed on
        (L{TransientPath.route<meshroute.router.transient.TransientPath.route>}),
        those for a system queue to its handler.
        """
        routed = []
        branching = self._destinations.branching
        for message in messages:
            if message.dest_queue in SYSTEM_QUEUES:
                self._system.arrived(message)
            else:
                routed.append(branching(message))
        self._transient.route(routed)


def _is_stored(result) -> bool:
    """
    Whether C{result}, a receive's, says the message is stored (for a
    local queue: stored, or claimed as it was).
    """
    return result == "stored" or (type(result) is tuple and result[0] == CLAIMED)


def _enqueued_in(arrival: tuple) -> str | None:
    """
    The local queue an arrival C{(result, (seq, message), (stored, local,
    aside))} of a batch is now in, or None when its receive did anything
    else (L{Arrivals._stored} takes it).
    """
    result, (_seq, message), (_stored, local, aside) = arrival
    return message.dest_queue if local and not aside and _is_stored(result) else None
