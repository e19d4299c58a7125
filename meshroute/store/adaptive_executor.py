"""
The adaptive executor (C{[store] writer = "adaptive"}, the default): a
reactor turn that brings the store little commits on the reactor thread
at the turn's end, as the turn executor does; the rest goes to a writer
thread, as with the threaded executor.  What every executor promises is
in L{meshroute.store.transactions}.
"""

from meshroute.store.threaded_executor import ThreadedExecutor
from meshroute.store.transactions import GROUPED
from meshroute.store.turns import TurnGathering

#: The most items a turn may bring and still commit on the reactor thread
#: (L{AdaptiveExecutor} says how it was chosen).
INLINE_MAX_ITEMS = 4


class AdaptiveExecutor(ThreadedExecutor):
    """
    A L{ThreadedExecutor} whose small turns commit on the reactor thread
    while its writer thread is idle.

    Why: the two other executors each lose where the other wins.  A paced
    message is usually alone in its turn; on the writer thread its commit
    costs two thread wake-ups and two hand-overs of the GIL besides the
    fsync, which on a busy machine wait for a core and set the tail
    (benchmarks/README.md, "Send answers gathered for a client that
    streams": the turn executor's p99 was lower in 11 of 12 pairs, 5.42
    against 3.27 ms).  At full load a router that relays or replicates
    has routing work to overlap with its fsyncs, which only a writer
    thread does (two hops and an HA pair fell below their bars at 1 KiB
    on the turn executor).  Full load shows itself: turns bring many
    items, or the writer thread is still busy with earlier ones.

    How, for a function C{submit}ted:

      - While the writer thread has nothing outstanding (everything handed
        to it has its outcomes back on the reactor thread), it is gathered
        for the turn (L{TurnGathering}: committed after the reactor's next
        pass over its sockets, so that the turn's writes leave first).
      - At the turn's end, if the turn brought at most
        L{inline_max_items} and the writer thread does not hold the
        connection (it may be checkpointing), the turn runs here, on the
        reactor thread, on the same connection, holding the writer's lock
        meanwhile; its Deferreds fire right after.  Otherwise the turn
        goes to the writer thread.
      - While anything handed to the writer thread is outstanding,
        everything submitted goes to it too, after what waited for the
        turn.  So the outcomes fire in submission order whichever thread
        committed them: the thread's are back before a turn may run here,
        and what runs here is done before anything is handed over.
      - C{run} (a function alone) and a C{lengthy} function (a prune's
        chunk, a replica's batches: L{meshroute.store.transactions}) always
        go to the writer thread.

    Replication's hand-over before each COMMIT (L{TransactionRunner}) is
    a call when the turn runs here, and goes through C{callFromThread}
    otherwise.  Checkpoints stay the writer thread's: a turn that runs
    here and makes one due wakes the thread to wait for it (or to run it
    at once, when the WAL has passed its size), so the reactor never
    copies the WAL.

    How L{inline_max_items} was chosen (benchmarks/README.md, "The
    adaptive writer"): at 64, one hop's full-load throughput at 1 KiB fell
    11 % and two hops' 6 % (turns of tens of messages came to the reactor
    between two of the thread's batches, and the reactor stopped routing
    for their fsync); at 1, 4 and 16 the paced p99 and full load were the
    same within the spread, and 4 lost nothing against the thread.

    @ivar batches_here: batches committed on the reactor thread.
    @ivar batches_on_thread: batches committed on the writer thread.
    """

    inline_max_items = INLINE_MAX_ITEMS

    def __init__(self, reactor, replication=None, checkpoints=None, guard=None) -> None:
        """
        As L{ThreadedExecutor}; C{reactor} is also where the turns end.
        """
        super().__init__(reactor, replication, checkpoints, guard)
        self._turn = TurnGathering(reactor, self._turn_ended)
        # Items handed to the writer thread whose outcomes are not back.
        self._on_thread = 0
        # A turn runs here: its hand-overs to replication are calls.
        self._here = False
        self.batches_here = 0
        self.batches_on_thread = 0

    def _queued(self, item: tuple, relaxed: bool) -> None:
        if self._on_thread or item[0] != GROUPED or getattr(item[1], "lengthy", False):
            self._to_thread([item], relaxed)
        else:
            self._turn.add(item, relaxed)

    def _to_thread(self, items: list, relaxed: bool) -> None:
        """
        Hand C{items} to the writer thread, after what waited for the turn
        (submitted before them).
        """
        waiting = self._turn.take()
        if waiting:
            items = waiting + items
            relaxed = relaxed and all(getattr(item[1], "relaxed", False) for item in waiting)
        self._on_thread += len(items)
        super()._to_thread(items, relaxed)

    def _turn_ended(self, items: list) -> None:
        """
        The turn that submitted C{items} ended (nothing was outstanding on
        the writer thread meanwhile, or they would have gone to it): run
        them here if they are few and the writer is idle, else hand them
        to the writer thread.
        """
        if (len(items) > self.inline_max_items or self._connection is None
                or not self._writing.acquire(blocking=False)):
            # Many, or the writer thread is busy (or still opening the
            # connection).
            self._to_thread(items, False)
            return
        checkpoints = self.checkpoints
        outcomes: list = []
        self._here = True
        try:
            self._run_batch(items, outcomes)
            # The writer thread learns of a checkpoint when one becomes due
            # (it was waiting without a timeout) or is due at once.
            none_was_due = checkpoints.idle_wait_s() is None
            due_now = checkpoints.written()
            wake = none_was_due or due_now
        finally:
            self._here = False
            self._writing.release()
        if wake:
            self._wake.set()
        self.batches_here += 1
        self._deliver(outcomes)

    def _hand_over(self, call, batch) -> None:
        if self._here:
            call(batch)
        else:
            super()._hand_over(call, batch)

    def _ran_on_thread(self, taken: int, outcomes: list) -> None:
        self._on_thread -= taken
        self.batches_on_thread += 1
        super()._ran_on_thread(taken, outcomes)

    def _done(self, failure) -> None:
        # What waits for the turn when the writer thread ended (its start
        # failed) fails with what was queued.
        self._queue.extend(self._turn.take())
        super()._done(failure)

    def stop(self):
        """
        As L{ThreadedExecutor.stop}, after handing what waits for the turn
        to the writer thread.
        """
        if not self._closed and self._turn:
            self._to_thread([], False)
        if not self._closed and self._thread is not None:
            # The stop that the writer thread takes, as it takes the rest.
            self._on_thread += 1
        return super().stop()
