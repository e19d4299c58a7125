"""
An arrival for a waiting consumer handed over from its receive, with no
read: the receive claims it (docs/routing.md, "An arrival handed to
a waiting consumer from its receive").

A persistent message received from a link for a local queue is, while
that queue is caught up, the very entry the queue's next read would
return.  Reading it costs a SELECT and, when the read misses the
receive's commit, a commit of its own and a round trip through the
writer: a paced message waited a whole commit more for it
(benchmarks/README.md).  So the router claims it as it submits the
receive: the receive's transaction checks that the queue holds no entry
above the highest the router has read but the arrivals it claimed before
(exactly what the read would check), stores the entry flagged
redelivered, as the read that fetches an entry for a consumer with
credit flags it, and answers its entry id.  The router then takes that
id as a read's row (L{ReadAhead.take_reads
<meshroute.router.read_ahead.ReadAhead.take_reads>}), in the order the
claim was made among the queue's reads, and the dispatch delivers it
under every rule a read entry follows (order, credit, expiry, holding
consumers, transactions).

A claim is made only when nothing older could be delivered after it
and a consumer has credit for it: the queue's read-ahead buffer is empty,
nothing was given back to it, no SELECT read is in flight, the store
holds nothing unread that the router knows of (no notification since a
read found the queue's end), and its consumers have credit beyond what
the claims already made will take.  Behind a backlog, or with no credit,
the arrival is received as before and the reads serve it.  The store's
check makes the rest safe whatever the router believed: an arrival it
does not claim (something unread lies before it) is stored unflagged
and the queue is notified, so a read takes it, in its place.
"""

from typing import Callable

from meshroute.router.queue_state import QueueState, StoreRead
from meshroute.router.read_ahead import ReadAhead
from meshroute.store import CLAIMED


class Claim:
    """
    Arrivals of one queue claimed in one store call, in link order.

    @ivar checks: what the store checks for each (the C{claim} argument of
        L{IMessageStore.receive<meshroute.interfaces.IMessageStore.receive>}).
    """

    def __init__(self, claims: "ArrivalClaims", state: QueueState, read: StoreRead,
                 messages: tuple, checks: list) -> None:
        self._claims = claims
        self._state = state
        self._read = read
        self._messages = messages
        self.checks = checks

    def answered(self, outcomes: list) -> None:
        """
        The receives of the claimed arrivals answered C{outcomes}, one
        each: the entries the store claimed join the queue's read-ahead;
        if it declined one (C{"stored"}), the queue is notified so that a
        read takes it.
        """
        rows = [(outcome[1], message, False)
                for outcome, message in zip(outcomes, self._messages)
                if type(outcome) is tuple and outcome[0] == CLAIMED]
        self._claims.handed += len(rows)
        self._end(rows)
        if "stored" in outcomes:
            self._claims.notify(self._state.name)

    def failed(self, failure):
        """
        The receive failed: nothing was stored, nothing claimed.
        """
        self._end([])
        return failure

    def _end(self, rows: list) -> None:
        self._read.rows = rows
        self._claims.reads.take_reads(self._state)


class ArrivalClaims:
    """
    Claims arrivals for the queues of one L{QueueManager
    <meshroute.router.queues.QueueManager>}.

    @param reads: the queues' L{ReadAhead}, whose reads the claims join.
    @param notify: C{notify(queue)}: entries the reads must find.
    """

    def __init__(self, reads: ReadAhead, notify: Callable[[str], None]) -> None:
        self.reads = reads
        self.notify = notify
        #: Arrivals the store claimed since this router started.
        self.handed = 0

    def claim(self, state: QueueState | None, messages) -> Claim | None:
        """
        Claim as many of C{messages} (arriving for C{state}'s queue, in
        link order) as its consumers wait for, from the first: None if
        none.  What is not claimed is received as before (and the queue
        notified by the caller).
        """
        count = self._claimable(state, len(messages))
        if not count:
            return None
        claimed = tuple(message.msg_id for message in messages[:count])
        pending = tuple(msg_id for read in state.reads for msg_id in read.claimed)
        read = StoreRead(state.epoch, state.notified, count, count, claimed=claimed)
        state.reads.append(read)
        after = state.last_fetched
        return Claim(self, state, read, tuple(messages[:count]),
                     [(after, pending + claimed[:index]) for index in range(count)])

    def _claimable(self, state: QueueState | None, count: int) -> int:
        """
        How many arrivals C{state} may claim now (see the module's
        docstring): none unless the queue is caught up, at most the credit
        its consumers have beyond the claims in flight, and no more than
        its read-ahead buffer holds.
        """
        if (state is None or state.more or not state.consumers or state.buffer
                or state.returned):
            return 0
        pending = 0
        for read in state.reads:
            if not read.claimed or read.epoch != state.epoch:
                return 0
            pending += read.mark
        credit = sum(consumer.credit for consumer in state.consumers
                     if not consumer.holding_persistent)
        return max(0, min(count, credit - pending, self.reads.limit - pending))
