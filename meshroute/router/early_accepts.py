"""
The accepts of a link's early sends (docs/routing.md, "Forwarding while
the origin's commit is in flight"): when this router, their origin,
writes them into the link's outbox, or finds it need not.

A send that left before its accept was committed used to be written at
once: an insert into the outbox, its fsync, and later the deletion its
peer's acknowledgement brings, all for a message that, at a paced rate,
the peer holds durably a millisecond after it left.  Now the accept is
**held** for up to C{hold_s} (C{[routing] early-accept-hold}): an
acknowledgement that covers it within that time makes it moot, and it is
never written; its senders are answered then, since the peer holds it
durably (so a confirmed message still arrives exactly once: its
destination, or a router on the way that stored it, has it).  Otherwise
the accept is submitted when its hold ends, and everything goes as it did
(L{holds}).  Held accepts are submitted at once when the link closes, so
that what is in flight stays in the outbox for the next recovery or the
reroute.

A crash while an accept is held loses it here, as a crash before its
commit always did: its senders were not answered, and the peer may or
may not hold it; the sequence numbers it took are in a durably reserved
block (L{meshroute.router.early_numbers}), so none is given to another
message.

An acknowledgement that covers an accept submitted and not committed yet
is held until it is, so that the outbox, the window and
C{message.forwarded} follow the store.

Until the store's outbox counts them (their commit), the early sends of
each peer per destination router are counted in L{EarlyPending}, which
L{Forwarding.assignable<meshroute.router.forwarding.Forwarding.assignable>}
reads as it reads the outboxes: no newer message for that destination
overtakes them on another link.
"""

from collections import Counter
from dataclasses import dataclass
from typing import Callable

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.python.failure import Failure

from meshroute.interfaces import IMessageStore
from meshroute.wire.frames import Ack

#: C{[routing] early-accept-hold}'s default, milliseconds: several times
#: what a peer's commit and its acknowledgement's own delay
#: (L{meshroute.router.peer_channel.ACK_DELAY_S}) take on a paced link, so
#: that most accepts are moot; the producer waits at most this long more
#: for its confirmation when the peer is slower.
DEFAULT_EARLY_ACCEPT_HOLD_MS = 10


class EarlyPending:
    """
    Early sends not yet in the store's outbox (held, or their accept not
    committed), per C{(peer, destination router)}: outlives a closing
    link, whose flushed accepts still commit.
    """

    def __init__(self) -> None:
        self._counts: Counter = Counter()

    def add(self, peer: str, messages) -> None:
        counts = self._counts
        for message in messages:
            counts[peer, message.dest_router] += 1

    def remove(self, peer: str, messages) -> None:
        counts = self._counts
        for message in messages:
            key = peer, message.dest_router
            left = counts[key] - 1
            assert left >= 0, f"more early sends to {key} removed than added"
            if left:
                counts[key] = left
            else:
                del counts[key]

    def peers_for(self, router: str) -> list[str]:
        "The peers whose links have early sends for C{router} pending."
        return [peer for peer, dest in self._counts if dest == router]

    def destinations(self, except_peer: str) -> set[str]:
        "The destination routers with early sends pending on a link to any peer but C{except_peer}."
        return {dest for peer, dest in self._counts if peer != except_peer}


@dataclass
class _Held:
    """
    An accept not submitted yet: its sends, numbered, and what answers
    their senders.
    """

    assigned: list
    answered: Deferred
    hold_ends: IDelayedCall


class EarlyAccepts:
    """
    The accepts of the early sends of the link to C{peer}.

    @param acknowledged: feeds a held acknowledgement to the link (in a
        reactor turn of its own) once the commits it covers are durable.
    @param failed: closes the link: an accept failed (C{failed(failure,
        doing)}).
    @param pending: counts what is not in the store's outbox yet.
    @param hold_s: how long an accept waits for an acknowledgement that
        makes it moot before it is submitted; 0: at once.
    """

    def __init__(self, peer: str, store: IMessageStore, clock: IReactorTime,
                 acknowledged: Callable[[Ack], None],
                 failed: Callable[[Failure, str], None],
                 pending: EarlyPending, hold_s: float) -> None:
        self._peer = peer
        self._store = store
        self._clock = clock
        self._acknowledged = acknowledged
        self._failed = failed
        self._pending = pending
        self._hold_s = hold_s
        # Accepts held, in order.
        self._held: list[_Held] = []
        # The first number of each accept held or not committed yet, in
        # order, and the latest acknowledgement held for them.
        self._uncommitted: list[int] = []
        self.held_ack: Ack | None = None

    def accept(self, assigned: list) -> Deferred:
        """
        Accept C{assigned} (C{(seq, message)}, their transfers sent) into
        the outbox, after the hold, unless an acknowledgement makes that
        moot first.

        @return: a Deferred firing with None once they are durable here
            or at the peer (the senders may be answered), or failing with
            the store's failure (which also closes the link: the peer may
            hold them, and the next recovery numbers above their block).
        """
        first = assigned[0][0]
        self._uncommitted.append(first)
        self._pending.add(self._peer, [message for _, message in assigned])
        if self._hold_s <= 0:
            return self._submit(assigned)
        held = _Held(assigned, Deferred(), None)
        held.hold_ends = self._clock.callLater(self._hold_s, self._hold_ended, held)
        self._held.append(held)
        return held.answered

    def _hold_ended(self, held: _Held) -> None:
        self._held.remove(held)
        self._submit(held.assigned).chainDeferred(held.answered)

    def _submit(self, assigned: list) -> Deferred:
        d = self._store.accept_to_outbox(self._peer, assigned)
        d.addBoth(self._committed, assigned)
        return d

    def made_moot(self, frame: Ack) -> set[int]:
        """
        The peer durably holds every transfer up to C{frame.seq}: the held
        accepts it covers whole are never written, and their senders are
        answered now (with C{message.accepted}, so before the channel
        reports them forwarded).  One it covers in part is submitted now:
        its senders are answered once it is durable, the Ack then applies
        (L{holds}).  Called outside the channel's machine, since an answer
        may lead to another send at once.

        @return: the sequence numbers that spared the store.
        """
        spared: set[int] = set()
        answered = []
        held_list = self._held
        while held_list and held_list[0].assigned[0][0] <= frame.seq:
            held = held_list.pop(0)
            held.hold_ends.cancel()
            if held.assigned[-1][0] > frame.seq:
                self._submit(held.assigned).chainDeferred(held.answered)
                break
            self._uncommitted.remove(held.assigned[0][0])
            self._pending.remove(self._peer, [message for _, message in held.assigned])
            spared.update(seq for seq, _ in held.assigned)
            answered.append(held.answered)
        for d in answered:
            d.callback(None)
        return spared

    def holds(self, frame: Ack) -> bool:
        """
        Whether C{frame} covers an early send whose accept is submitted and
        not durable yet (after L{made_moot}, none it covers is held): then
        it is held (the latest one) until that commits.
        """
        if not (self._uncommitted and self._uncommitted[0] <= frame.seq):
            return False
        if self.held_ack is None or frame.seq > self.held_ack.seq:
            self.held_ack = frame
        return True

    def flush(self) -> None:
        """
        Submit the accepts still held now: the link closed (what is in
        flight stays in the outbox for the next recovery or the reroute),
        or a send for a destination they hold goes to the backlog (its
        entry id must come after theirs).
        """
        held, self._held = self._held, []
        for entry in held:
            entry.hold_ends.cancel()
            self._submit(entry.assigned).chainDeferred(entry.answered)

    def _committed(self, result, assigned: list):
        """
        The accept of C{assigned} ended: the store's outbox counts them
        now (or, failed, never will), and an acknowledgement held for it
        applies, in a turn of its own (after the producers' answers and
        their C{message.accepted}).
        """
        self._uncommitted.remove(assigned[0][0])
        self._pending.remove(self._peer, [message for _, message in assigned])
        if isinstance(result, Failure):
            self._failed(result, "accepting messages into the outbox")
        frame = self.held_ack
        if frame is not None and not (self._uncommitted and self._uncommitted[0] <= frame.seq):
            self.held_ack = None
            self._clock.callLater(0, self._acknowledged, frame)
        return result
