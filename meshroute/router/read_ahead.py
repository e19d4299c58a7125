"""
Reading a queue's persistent entries ahead from the store, a page at a
time, into a bounded buffer (L{meshroute.router.queues}: a queue without
consumers holds none of them in memory), flagging as many as its
consumers have credit for in the same read.
"""

from collections import deque
from typing import Callable

from twisted.logger import Logger

from meshroute.router.queue_state import QueueItem, QueueState, StoreRead

log = Logger()

#: The most reads of one queue in flight while it is caught up (two
#: otherwise): at a paced rate one read commits, one waits with the
#: arrival after it, and a third takes the arrival after that.  More would
#: rarely help a paced message and cost a full load a read per arrival
#: frame, most of them answered by the same commit.
CAUGHT_UP_READS = 3


class ReadAhead:
    """
    Fills the read-ahead buffer of a queue's L{QueueState} from C{store},
    at most C{limit} entries, and calls C{dispatch(state)} when what it
    read may be delivered.
    """

    def __init__(self, store, limit: int, dispatch: Callable[[QueueState], None]) -> None:
        if limit < 1:
            raise ValueError("read_ahead must be at least 1")
        self._store = store
        self.limit = limit
        self._dispatch = dispatch

    def fill(self, state: QueueState) -> None:
        """
        Read more entries from the store when consumers exist, the store
        may have more, and the buffer is at most half full; the store flags
        as many of them as consumers have credit for beyond what already
        waits or the reads in flight flag (L{QueueItem.marked<meshroute.router.queue_state.QueueItem.marked>}).

        Another read may start beside those in flight when entries were
        notified since the latest of them began: an arrival's read then
        joins the arrival's transaction instead of waiting for the reads in
        flight and then taking a commit of its own.  They all read after a
        C{last_fetched} at most the one the later ones start from (it moves
        only when a read ends, and the epoch is the same) and new entries
        always get higher ids, so a read's rows up to the highest entry
        buffered before it ends were read by the reads before it and are
        skipped.  When a read adds entries, the buffer holds at most what
        it held when the read began (nothing at or below a read's start
        enters it after) and entries between the read's start and its last
        row, which are its rows: at most its limit, the room the buffer had
        when it began.  So the bound holds however many are in flight.
        Their results are taken in the order the reads began.

        At most two in flight, or L{CAUGHT_UP_READS} while the queue is
        L{caught_up<meshroute.router.queue_state.QueueState.caught_up>}: at
        a paced rate one read commits and one waits with the next arrival,
        and a third arrival would otherwise be received without its read
        and read a whole commit later (35% of the messages at 1,000/s:
        benchmarks/README.md).  Behind a backlog longer than a read's
        limit, a read beside another would return the same page again.
        """
        if not state.more or not state.consumers:
            return
        reads = state.reads
        if reads:
            latest = reads[-1]
            selects = sum(1 for read in reads if not read.claimed)
            if (latest.epoch != state.epoch or latest.notified == state.notified
                    or selects >= (CAUGHT_UP_READS if state.caught_up else 2)):
                return
        room = self.limit - len(state.buffer)
        if room * 2 < self.limit:
            return
        credit = sum(consumer.credit for consumer in state.consumers
                     if not consumer.holding_persistent)
        mark = max(0, min(room, credit - len(state.returned) - len(state.buffer)
                          - sum(read.mark for read in reads)))
        read = StoreRead(state.epoch, state.notified, room, mark)
        reads.append(read)
        d = self._store.fetch(state.name, state.last_fetched, room, mark)
        d.addCallbacks(self._fetched, self._fetch_failed, (state, read), None, (state, read))

    def _fetched(self, rows, state: QueueState, read: StoreRead) -> None:
        read.rows = rows
        self.take_reads(state)

    def _fetch_failed(self, failure, state: QueueState, read: StoreRead) -> None:
        log.failure("reading queue {queue} from the store", failure, queue=state.name)
        # Nothing read; the next notify, credit or subscription tries again.
        read.rows = ()
        read.failed = True
        self.take_reads(state)

    def take_reads(self, state: QueueState) -> None:
        """
        Buffer the rows of the reads that ended, in the order they began
        (the claims' rows too, L{meshroute.router.arrival_claims}: they
        say nothing of what else the store holds).
        """
        reads = state.reads
        dispatch = False
        while reads and reads[0].rows is not None:
            read = reads.popleft()
            dispatch = dispatch or not read.failed
            if read.epoch != state.epoch or read.failed:
                # The persistent memory was released while this read ran.
                continue
            mark = read.mark
            for entry_id, message, redelivered in read.rows:
                # The store flagged the first `mark` not flagged before.
                marked = not redelivered and mark > 0
                if marked:
                    mark -= 1
                if entry_id <= state.last_fetched:
                    # Also read by the read that began before this one.
                    continue
                state.buffer.append(QueueItem(entry_id, message, bool(redelivered),
                                          next(state.seq), marked))
                state.last_fetched = entry_id
            if read.claimed:
                continue
            state.caught_up = len(read.rows) < read.limit
            if state.caught_up and read.notified == state.notified:
                state.more = False
        if dispatch:
            self._dispatch(state)

    def release(self, state: QueueState) -> None:
        """
        No consumer is left and no deletion is in flight: every persistent
        entry this queue holds in memory is also in the store, undelivered,
        so drop them and read the queue from the start next time.
        """
        if not (state.buffer or state.last_fetched or state.reads
                or any(item.entry_id is not None for item in state.returned)):
            return
        state.buffer.clear()
        state.returned = deque(item for item in state.returned if item.entry_id is None)
        state.last_fetched = 0
        state.more = True
        state.caught_up = False
        state.epoch += 1
