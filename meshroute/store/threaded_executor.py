"""
The threaded executor (C{[store] writer = "thread"}, the default): the
store's SQL runs on a writer thread of its own, with group commit, so
that the reactor routes while the disk syncs.  What every executor
promises is in L{meshroute.store.transactions}.
"""

import threading
from collections import deque

from twisted.internet.defer import Deferred, fail, succeed
from twisted.python.failure import Failure

from meshroute.store.checkpoints import WalCheckpoints
from meshroute.store.transactions import (
    ALONE,
    GROUPED,
    RELAXED_DELAY_S,
    STOP,
    ExecutorStopped,
    TransactionRunner,
    fire,
)


class ThreadedExecutor(TransactionRunner):
    """
    One dedicated writer thread owning the connection, with group commit.

    The thread takes everything queued when it wakes, runs the grouped
    functions among it in one transaction (each inside its own SAVEPOINT,
    so one that raises is undone alone), commits once, and then fires all
    their Deferreds, in submission order, in one C{reactor.callFromThread}.
    While it commits, new work queues up and goes into the next
    transaction: the more callers wait, the more each fsync carries.  Reads
    go through the same thread and connection, so they see every change
    submitted before them.

    C{submit}, C{run} and C{stop} are called from the reactor thread only.

    @ivar commits: transactions committed so far.
    @ivar commit_seconds: how long they took (a histogram).
    """

    def __init__(
        self, reactor, replication=None, checkpoints: WalCheckpoints | None = None,
        guard=None,
    ) -> None:
        """
        @param reactor: an C{IReactorFromThreads}; the Deferreds fire in
            its thread.
        @param replication: None, or the C{ICommitGate} each transaction
            is handed to (see "Replication" in
            L{meshroute.store.transactions}).
        @param guard: checked before each batch (L{TransactionRunner}).
        @param checkpoints: when the writer thread checkpoints the WAL
            (default: a L{WalCheckpoints} with its defaults).
        @raise TypeError: when C{reactor} cannot be called from a thread
            (a L{task.Clock}: use an
            L{meshroute.store.inline_executor.InlineExecutor} there).
        """
        if not callable(getattr(reactor, "callFromThread", None)):
            raise TypeError(
                f"ThreadedExecutor needs a reactor with callFromThread, not {reactor!r}; "
                "on a task.Clock use InlineExecutor"
            )
        super().__init__(replication, checkpoints, guard)
        self._reactor = reactor
        # What was submitted, in order; the writer takes it all when woken.
        self._queue: deque = deque()
        self._wake = threading.Event()
        # A wake-up is scheduled for the relaxed functions queued.
        self._relaxed_wake = None
        self._thread: threading.Thread | None = None
        self._closed = False
        self._stopped = False
        self._waiting: list[Deferred] = []
        self._trigger = None
        # Held by the writer thread while it uses the connection, so that
        # a subclass may use it on the reactor thread while the writer is
        # idle (L{meshroute.store.adaptive_executor}).
        self._writing = threading.Lock()

    def start(self, connect) -> Deferred:
        """
        Start the writer thread and open the connection in it with
        C{connect()}.
        """
        if self._thread is not None:
            raise RuntimeError("executor already started")
        started: Deferred = Deferred()
        self._thread = threading.Thread(
            target=self._main, args=(connect, started), name="meshroute-store", daemon=True
        )
        self._thread.start()
        if hasattr(self._reactor, "addSystemEventTrigger"):
            # A reactor shutting down before the store is closed still
            # lets what is queued finish (it waits for "before" triggers).
            self._trigger = self._reactor.addSystemEventTrigger(
                "before", "shutdown", self._shutting_down
            )
        return started

    def _shutting_down(self) -> Deferred:
        self._trigger = None
        return self.stop()

    def submit(self, fn, *args) -> Deferred:
        """
        Queue C{fn(connection, *args)} for the next group transaction.
        """
        if self._closed:
            return fail(ExecutorStopped("the store is closed"))
        d = Deferred()
        self._queued((GROUPED, fn, args, d), getattr(fn, "relaxed", False))
        return d

    def _queued(self, item: tuple, relaxed: bool) -> None:
        """
        Where a submitted C{item} goes: to the writer thread.
        """
        self._to_thread([item], relaxed)

    def _to_thread(self, items: list, relaxed: bool) -> None:
        """
        Queue C{items} for the writer thread and wake it, or, when they
        are all C{relaxed}, have it woken after L{RELAXED_DELAY_S}.
        """
        self._queue.extend(items)
        if not relaxed:
            self._wake.set()
        elif self._relaxed_wake is None:
            self._relaxed_wake = self._reactor.callLater(RELAXED_DELAY_S, self._wake_relaxed)

    def _hand_over(self, call, batch) -> None:
        """
        From the writer thread: C{call(batch)} on the reactor thread,
        queued before the outcomes of the run that wrote it.
        """
        self._reactor.callFromThread(call, batch)

    def _ran_on_thread(self, taken: int, outcomes: list) -> None:
        """
        On the reactor thread: the writer thread ran C{taken} queued items,
        with C{outcomes}.
        """
        self._deliver(outcomes)

    def _wake_relaxed(self) -> None:
        """
        Relaxed functions waited L{RELAXED_DELAY_S}: wake the writer (if
        another function took them along meanwhile, it finds nothing).
        """
        self._relaxed_wake = None
        self._wake.set()

    def run(self, fn, *args) -> Deferred:
        """
        Queue C{fn(connection, *args)} to run alone, outside a transaction.
        """
        if self._closed:
            return fail(ExecutorStopped("the store is closed"))
        d = Deferred()
        self._queued((ALONE, fn, args, d), False)
        return d

    def stop(self) -> Deferred:
        """
        Finish what is queued, close the connection and end the thread.
        Idempotent: every call fires once the connection is closed.
        """
        if self._thread is None:
            return succeed(None)
        if self._trigger is not None:
            self._reactor.removeSystemEventTrigger(self._trigger)
            self._trigger = None
        if self._stopped:
            return succeed(None)
        d = Deferred()
        self._waiting.append(d)
        if not self._closed:
            self._closed = True
            self._queue.append((STOP, None, (), None))
            self._wake.set()
        return d

    def _done(self, failure: Failure | None) -> None:
        """
        On the reactor thread: the writer thread has ended.
        """
        self._closed = True
        self._stopped = True
        self._thread.join()
        if self._relaxed_wake is not None and self._relaxed_wake.active():
            self._relaxed_wake.cancel()
        self._relaxed_wake = None
        # Anything submitted while the thread was ending.
        self._fail_queued(call=lambda f, *a: f(*a))
        waiting, self._waiting = self._waiting, []
        for d in waiting:
            if failure is None:
                d.callback(None)
            else:
                d.errback(failure)

    # The writer thread.

    def _main(self, connect, started: Deferred) -> None:
        call = self._reactor.callFromThread
        try:
            with self._writing:
                self._open(connect)
        except BaseException:
            failure = Failure()
            call(started.errback, failure)
            call(self._done, None)
            self._fail_queued()
            return
        call(started.callback, None)
        queue, wake, writing = self._queue, self._wake, self._writing
        checkpoints = self.checkpoints
        while True:
            with writing:
                idle_wait_s = checkpoints.idle_wait_s()
            if not wake.wait(idle_wait_s):
                # Idle, and a checkpoint is due.
                with writing:
                    checkpoints.checkpoint(self._connection)
                continue
            # Cleared before taking: what is submitted after the take
            # wakes the next wait.
            wake.clear()
            batch = _take_all(queue)
            if not batch:
                continue
            outcomes: list = []
            with writing:
                rest = self._run_batch(batch, outcomes)
            call(self._ran_on_thread, len(batch), outcomes)
            if rest is not None:
                break
            with writing:
                checkpoints.wrote(self._connection)
        try:
            self._connection.close()
        except BaseException:
            call(self._done, Failure())
        else:
            call(self._done, None)
        self._fail_queued(rest)

    def _fail_queued(self, items: list = (), call=None) -> None:
        """
        Fail whatever was queued behind a stop (or a failed start), through
        C{call} (default: C{reactor.callFromThread}).
        """
        items = list(items) + _take_all(self._queue)
        failure = Failure(ExecutorStopped("the store is closed"))
        outcomes = [(item[3], False, failure) for item in items if item[3] is not None]
        if outcomes:
            (call or self._reactor.callFromThread)(fire, outcomes)


def _take_all(queue: deque) -> list:
    """
    Take everything in C{queue} (the reactor thread may append meanwhile:
    what it appends after the last take waits for the next).
    """
    taken = []
    take = queue.popleft
    while queue:
        taken.append(take())
    return taken
