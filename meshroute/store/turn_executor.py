"""
The turn executor (C{[store] writer = "reactor"}): the store's SQL runs
on the reactor thread, with group commit at the end of each reactor
turn.  What every executor promises is in
L{meshroute.store.transactions}.
"""

import sqlite3

from twisted.internet.defer import Deferred, fail, succeed
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.internet.threads import deferToThreadPool
from twisted.logger import Logger
from twisted.python.failure import Failure

from meshroute.store.checkpoints import WalCheckpoints
from meshroute.store.transactions import (
    ALONE,
    GROUPED,
    ExecutorStopped,
    TransactionRunner,
)
from meshroute.store.turns import TurnGathering

log = Logger()


class TurnExecutor(TransactionRunner):
    """
    Group commit at the end of each reactor turn, on the reactor thread.

    What is submitted during one reactor turn waits for the turn to end
    and then runs, in submission order, in one transaction (as the
    threaded executor runs a batch: a savepoint per function, batch
    forms); the Deferreds fire right after its COMMIT, in submission
    order.  What their callbacks submit (a link's hand-over after an
    accept) goes into the next turn's transaction.

    The turn ends after the reactor's next pass over its sockets
    (L{meshroute.store.turns.TurnGathering} says why), so the turn's
    writes leave before its fsync.

    Why on the reactor thread: a paced message is usually alone in its
    turn, and with a writer thread each of its commits costs two thread
    wake-ups and two hand-overs of the GIL besides the fsync, which take
    longer than the fsync itself on a busy machine and cost most of the
    router's CPU at a low rate.  Here the reactor waits for the fsync
    instead (a fraction of a millisecond on a local disk), and every
    message that arrived in the turn shares it; at a high rate turns carry
    many messages, so commits still group.  The price: the reactor does
    nothing else during the fsync, which a writer thread overlaps with the
    routing work.  Measured on a quiet host (benchmarks/README.md), one
    hop's full-load throughput is the same or higher than with the writer
    thread, but two hops' and an HA pair's are not: a router that relays
    or replicates has routing work to overlap with its fsyncs.  And when
    other writers contend for the disk, every message the router handles
    waits for the slower fsync.

    Relaxed functions alone wait up to
    L{meshroute.store.transactions.RELAXED_DELAY_S} (or for the next
    function that does not) before their transaction runs, as in the
    threaded executor (L{TurnGathering}).  The WAL is checkpointed when no
    work is waiting and the checkpoint is due (a timer): on a real reactor on a connection
    of its own in the reactor's thread pool, so that the commits meanwhile
    do not wait for it (SQLite lets a PASSIVE checkpoint run beside a
    writer), and that the WAL is reused from its start rather than grown
    (an fsync of a growing file costs several times one that overwrites);
    or, past the WAL's size, inline after the transaction's Deferreds
    fired.

    @ivar commits: transactions committed so far.
    @ivar commit_seconds: how long they took (a histogram).
    """

    def __init__(
        self, clock: IReactorTime, replication=None, checkpoints: WalCheckpoints | None = None,
        guard=None,
    ) -> None:
        """
        @param clock: where the end of the turn and the relaxed and
            checkpoint delays are scheduled.
        @param replication: None, or the C{ICommitGate} each transaction
            is handed to (see "Replication" in
            L{meshroute.store.transactions}).
        @param guard: checked before each batch (L{TransactionRunner}).
        @param checkpoints: when the WAL is checkpointed (default: a
            L{WalCheckpoints} with its defaults).
        """
        super().__init__(replication, checkpoints, guard)
        self._clock = clock
        self._turn = TurnGathering(clock, self._run_queued)
        self._checkpoint_call: IDelayedCall | None = None
        # The checkpoint running in the thread pool, and its connection.
        self._checkpointing: Deferred | None = None
        self._aside: sqlite3.Connection | None = None
        self._closed = False

    def start(self, connect) -> Deferred:
        return self._open_here(connect)

    def submit(self, fn, *args) -> Deferred:
        return self._queued(GROUPED, fn, args, getattr(fn, "relaxed", False))

    def run(self, fn, *args) -> Deferred:
        return self._queued(ALONE, fn, args, False)

    def _queued(self, kind: int, fn, args: tuple, relaxed: bool) -> Deferred:
        if self._closed or self._connection is None:
            return fail(ExecutorStopped("the store is not open"))
        d = Deferred()
        self._turn.add((kind, fn, args, d), relaxed)
        return d

    def _run_queued(self, queued: list) -> None:
        """
        The turn ended (or the relaxed delay passed): run what it queued,
        fire its Deferreds, then checkpoint if the WAL is past its size.
        """
        outcomes: list = []
        self._run_batch(queued, outcomes)
        self._deliver(outcomes)
        if not self._closed:
            if self._checkpointing is None:
                self.checkpoints.wrote(self._connection)
            else:
                # One checkpoint at a time: the one running aside sees
                # this turn's writes due after it.
                self.checkpoints.written()
            self._checkpoint_later()

    def _checkpoint_later(self) -> None:
        wait = self.checkpoints.idle_wait_s()
        if wait is not None and self._checkpoint_call is None:
            self._checkpoint_call = self._clock.callLater(wait, self._checkpoint_if_idle)

    def _checkpoint_if_idle(self) -> None:
        """
        A checkpoint may be due: run it unless work waits (the run of that
        work schedules the next check) or one is running.
        """
        self._checkpoint_call = None
        if self._closed or self._turn or self._checkpointing is not None:
            return
        checkpoints = self.checkpoints
        if checkpoints.idle_wait_s() != 0:
            self._checkpoint_later()
            return
        if checkpoints.database is None or not hasattr(self._clock, "getThreadPool"):
            # In memory, or on a test clock: here.
            checkpoints.checkpoint(self._connection)
            self._checkpoint_later()
            return
        began = checkpoints.begin()
        self._checkpointing = deferToThreadPool(self._clock, self._clock.getThreadPool(),
                                                self._checkpoint_aside)
        self._checkpointing.addCallback(self._checkpointed, began)
        self._checkpointing.addErrback(self._checkpoint_failed, began)

    def _checkpoint_aside(self) -> tuple[int, int, int]:
        """
        In a pool thread (one checkpoint at a time): checkpoint on the
        executor's second connection, opened the first time.
        """
        try:
            if self._aside is None:
                self._aside = sqlite3.connect(self.checkpoints.database, isolation_level=None,
                                              check_same_thread=False)
        except sqlite3.Error as e:
            log.warn("opening {path} to checkpoint it failed, retried later: {error}",
                     path=self.checkpoints.database, error=e)
            return 1, 0, -1
        return self.checkpoints.run(self._aside)

    def _checkpointed(self, result: tuple[int, int, int], began: int) -> None:
        self._checkpointing = None
        self.checkpoints.ended(began, result)
        if not self._closed:
            self._checkpoint_later()

    def _checkpoint_failed(self, failure: Failure, began: int) -> None:
        log.failure("checkpointing {path}", failure, path=self.checkpoints.database)
        self._checkpointed((1, 0, -1), began)

    def stop(self) -> Deferred:
        """
        Run what is queued (and what its callbacks queue), then close the
        connection.  Idempotent.
        """
        if self._closed:
            return succeed(None)
        while self._turn and self._connection is not None:
            self._run_queued(self._turn.take())
        self._closed = True
        if self._checkpoint_call is not None and self._checkpoint_call.active():
            self._checkpoint_call.cancel()
        self._checkpoint_call = None
        if self._connection is not None:
            try:
                self._connection.close()
            except BaseException:
                return fail()
        if self._checkpointing is None:
            self._close_aside()
            return succeed(None)
        closed = Deferred()
        self._checkpointing.addBoth(lambda _: closed.callback(self._close_aside()))
        return closed

    def _close_aside(self) -> None:
        if self._aside is not None:
            self._aside.close()
            self._aside = None
