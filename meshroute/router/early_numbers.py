"""
A link's side of early sends (docs/routing.md, "Forwarding while the
origin's commit is in flight"): the sequence numbers they take.

Numbers come from a block the store reserved durably
(L{IMessageStore.reserve_seqs<meshroute.interfaces.IMessageStore.reserve_seqs>}),
never from one still being reserved: a router that crashes before an
early send's commit numbers above the whole block when it is back, so no
number its peer may have seen goes to another message.  An assign from
the backlog numbers above every block reserved before it, so once one is
submitted the block's rest is dropped, and the next block is reserved
right after it (above its numbers) if the link is sending early.

Their accepts: L{meshroute.router.early_accepts}.
"""

from typing import Callable

from twisted.python.failure import Failure

from meshroute.interfaces import IMessageStore

#: Numbers reserved at once: a reservation is a commit, so one per this
#: many early sends.
EARLY_BLOCK = 1024


class EarlyNumbers:
    """
    The early sends' numbers of the link to C{peer}.

    @param failed: closes the link: reserving a block failed
        (C{failed(failure, doing)}).
    """

    def __init__(self, peer: str, store: IMessageStore,
                 failed: Callable[[Failure, str], None]) -> None:
        self._peer = peer
        self._store = store
        self._failed = failed
        # The durably reserved numbers [_next, _end) early sends may take.
        self._next = self._end = 0
        # Assigns submitted so far, and how many there were when the
        # reservation in flight was submitted (None: none in flight).
        self._assigns = 0
        self._reserved_after: int | None = None
        # Early sends asked for numbers while the block was empty.
        self._wanted = False

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
        message)} pairs, to send, then to accept
        (L{EarlyAccepts.accept<meshroute.router.early_accepts.EarlyAccepts.accept>}).
        """
        first = self._next
        assigned = list(enumerate(messages, first))
        self._next = first + len(assigned)
        return assigned
