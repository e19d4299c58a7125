"""
A link's side of early sends (docs/routing.md, "Forwarding while the
origin's commit is in flight"): the sequence numbers they take, and the
acknowledgements that arrive before their commit.

Numbers come from a block the store reserved durably
(L{IMessageStore.reserve_seqs<meshroute.interfaces.IMessageStore.reserve_seqs>}),
never from one still being reserved: a router that crashes before an
early send's commit numbers above the whole block when it is back, so no
number its peer may have seen goes to another message.  An assign from
the backlog numbers above every block reserved before it, so once one is
submitted the block's rest is dropped, and the next block is reserved
right after it (above its numbers) if the link is sending early.

An acknowledgement that covers an early send whose accept is not
committed yet is held until it is (L{EarlyNumbers.holds}), so that the
outbox, the window and C{message.forwarded} follow the store.
"""

from typing import Callable

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorTime
from twisted.python.failure import Failure

from meshroute.interfaces import IMessageStore
from meshroute.wire.frames import Ack

#: Numbers reserved at once: a reservation is a commit, so one per this
#: many early sends.
EARLY_BLOCK = 1024


class EarlyNumbers:
    """
    The early sends' numbers of the link to C{peer}, and their accepts in
    flight.

    @param acknowledged: feeds a held acknowledgement to the link (in a
        reactor turn of its own) once the commits it covers are durable.
    @param failed: closes the link: a store call of its early sends failed
        (C{failed(failure, doing)}).
    """

    def __init__(self, peer: str, store: IMessageStore, clock: IReactorTime,
                 acknowledged: Callable[[Ack], None],
                 failed: Callable[[Failure, str], None]) -> None:
        self._peer = peer
        self._store = store
        self._clock = clock
        self._acknowledged = acknowledged
        self._failed = failed
        # The durably reserved numbers [_next, _end) early sends may take.
        self._next = self._end = 0
        # Assigns submitted so far, and how many there were when the
        # reservation in flight was submitted (None: none in flight).
        self._assigns = 0
        self._reserved_after: int | None = None
        # Early sends asked for numbers while the block was empty.
        self._wanted = False
        # The first number of each early accept not committed yet, in
        # order, and the latest acknowledgement held for them.
        self._uncommitted: list[int] = []
        self.held_ack: Ack | None = None

    def available(self) -> int:
        """
        How many numbers early sends may take now; with none, a block is
        reserved (usable once durable).
        """
        available = self._end - self._next
        if not available:
            self._wanted = True
            if self._reserved_after != self._assigns:
                self._reserve()
        return available

    def assigned(self) -> None:
        """
        An assign was just submitted: it numbers above the block, whose
        rest is dropped; the next block, reserved now (so above the
        assign's numbers), follows it if early sends use them.
        """
        self._assigns += 1
        sending_early = self._wanted or self._next < self._end
        self._next = self._end
        if sending_early:
            self._reserve()

    def _reserve(self) -> None:
        assigns = self._reserved_after = self._assigns
        d = self._store.reserve_seqs(self._peer, EARLY_BLOCK)

        def reserved(first: int) -> None:
            if self._reserved_after == assigns:
                self._reserved_after = None
            if self._assigns == assigns:
                self._next, self._end = first, first + EARLY_BLOCK
                self._wanted = False

        def failed(failure: Failure) -> None:
            if self._reserved_after == assigns:
                self._reserved_after = None
            self._failed(failure, "reserving link sequence numbers")

        d.addCallbacks(reserved, failed)

    def take(self, messages: list) -> list:
        """
        Number C{messages} (at most L{available}): their C{(seq,
        message)} pairs, to send, then to L{accept}.
        """
        first = self._next
        assigned = list(enumerate(messages, first))
        self._next = first + len(assigned)
        self._uncommitted.append(first)
        return assigned

    def accept(self, assigned: list) -> Deferred:
        """
        Accept C{assigned} (from L{take}, its transfers sent) into the
        outbox.

        @return: the store's Deferred: None once durable, or its failure
            (which also closes the link: the peer may hold them, and the
            next recovery numbers above the block).
        """
        d = self._store.accept_to_outbox(self._peer, assigned)
        d.addBoth(self._committed, assigned[0][0])
        return d

    def holds(self, frame: Ack) -> bool:
        """
        Whether C{frame} covers an early send whose accept is not durable
        yet: then it is held (the latest one) until it is.
        """
        if not (self._uncommitted and self._uncommitted[0] <= frame.seq):
            return False
        if self.held_ack is None or frame.seq > self.held_ack.seq:
            self.held_ack = frame
        return True

    def _committed(self, result, first: int):
        """
        The accept of the early sends from C{first} on ended: an
        acknowledgement held for it applies now, in a turn of its own
        (after the producers' answers and their C{message.accepted}).
        """
        self._uncommitted.remove(first)
        if isinstance(result, Failure):
            self._failed(result, "accepting messages into the outbox")
        frame = self.held_ack
        if frame is not None and not (self._uncommitted and self._uncommitted[0] <= frame.seq):
            self.held_ack = None
            self._clock.callLater(0, self._acknowledged, frame)
        return result
