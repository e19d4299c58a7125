"""
Where the store's SQL runs: with group commit at the end of each reactor
turn (L{TurnExecutor}, C{[store] writer = "reactor"}) or on a writer
thread of its own (L{ThreadedExecutor}, C{writer = "thread"}), or inline
for deterministic tests (L{InlineExecutor}).

An executor owns the store's one sqlite3 connection.  The store hands it
small functions C{fn(connection, *args)}; the executor runs them in the
order they were submitted and returns a L{Deferred} per function that
fires, on the reactor thread, with what the function returned (or fails
with what it raised) once its transaction is committed.

The executors offer the same methods:

  - C{start(connect)}: C{connect()} opens the connection (in the thread
    that will use it); fires when it is open.
  - C{submit(fn, *args)}: run C{fn(connection, *args)} inside a
    transaction.  Its changes are durable when the Deferred fires.  A
    function that raises has its own changes undone and nothing else's.
  - C{run(fn, *args)}: run C{fn(connection, *args)} alone, outside any
    transaction, for work that manages its own (schema upgrades).
  - C{stop()}: finish everything submitted so far, close the connection;
    fires when closed.  Submitting after C{stop} is a programming error.
  - C{commits}: how many transactions were committed, so tests (and
    benchmarks) can see the grouping.
  - C{commit_seconds}: a histogram of how long each committed
    transaction took, from its BEGIN to the end of its COMMIT (the
    fsync, with C{sync = "full"}), kept in memory for the router's
    C{/metrics}: one observation per group commit, thread-safe.

The connection must be opened with C{isolation_level=None}: the executors
issue BEGIN, SAVEPOINT and COMMIT themselves.

Relaxed commits
===============

A function may carry C{relaxed = True}: its changes may be lost to a
power failure or an OS crash (never to a crash of the process) as long
as every later commit keeps them, because losing them only repeats work
that is safe to repeat (forgetting outbox entries the peer acknowledged:
the peer discards what it already holds).  A transaction made only of such functions, on a connection with
C{synchronous = FULL}, commits with C{synchronous = NORMAL}: no fsync of
its own.  The WAL is one file written in order, so the next fsynced
commit makes it durable too, and no later transaction can survive it.

Nor does such a function start a transaction of its own (wake the
threaded executor's writer, or end the turn executor's wait): it waits,
in its place in the order of submissions, for the next function that
does, or at most L{RELAXED_DELAY_S}, and usually shares that function's
transaction (and its one round trip between the threads).  So forgetting
what a peer acknowledged, or what a consumer acknowledged, costs a
steady flow of messages neither a commit nor a thread wake-up of its own.

Checkpoints
===========

All also take C{checkpoints}, a L{WalCheckpoints}: the connection's WAL
is checkpointed by the executor, never inside a commit (see
L{meshroute.store.checkpoints}).  The writer thread and the turn executor
checkpoint when nothing is queued and the checkpoint is due, or after a
batch that took the WAL past its size, and only after handing that
batch's outcomes to the reactor; the inline executor only by size.

Replication
===========

The executors take C{replication}, an
L{meshroute.interfaces.ICommitGate} (the active HA instance's gate), or
None: a router without HA, for which nothing here changes or costs more.  The store defines that interface and what it is
handed (L{meshroute.store.changes}): it learns of replication only
through it, and never imports HA.  With it:

  - the functions get a L{RecordingConnection} instead of the connection,
    and the write statements of each committed transaction become one
    L{ChangeBatch} (what a function that raised had run is dropped with
    its rollback);
  - a transaction with writes also sets the store's C{replication_state}
    row (schema version 5) to the batch's C{(replication.epoch,
    position)} before its COMMIT, so the data and the position it is at
    always commit together; C{position} is the row's, plus one;
  - after each transaction (committed with or without writes, or failed;
    and after each C{run}), on the reactor thread, in commit order, the
    executor calls C{replication.committed(batch_or_None, fire)} instead
    of firing the Deferreds: C{fire()} fires them.  Whoever holds the
    gate decides when a caller may learn of a change.
"""

import sqlite3
import threading
import time
from functools import partial
from collections import deque

from prometheus_client import Histogram
from twisted.internet.defer import Deferred, fail, succeed
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.internet.threads import deferToThreadPool
from twisted.logger import Logger
from twisted.python.failure import Failure

from meshroute.store.changes import (
    READ_REPLICATION_STATE,
    SET_REPLICATION_STATE,
    ChangeBatch,
    RecordingConnection,
)
from meshroute.store.checkpoints import WalCheckpoints

#: C{PRAGMA synchronous} FULL, as SQLite reports it.
_FULL = 2
log = Logger()

#: The longest a relaxed function waits for a function that wakes the
#: writer before it wakes it itself ("Relaxed commits" above).
RELAXED_DELAY_S = 0.05

#: Upper bounds, in seconds, of the commit-time histogram's buckets: from
#: a commit without an fsync to a disk in trouble.
COMMIT_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                  0.25, 0.5, 1.0, 2.5)


def commit_histogram() -> Histogram:
    """
    A new, unregistered histogram of commit times (C{commit_seconds}).
    """
    return Histogram("meshroute_store_commit_seconds",
                     "Time of each store transaction from its BEGIN to the end of its COMMIT.",
                     buckets=COMMIT_BUCKETS, registry=None)


# Item kinds in the writer thread's queue.
_GROUPED = 0
_ALONE = 1
_STOP = 2


def atomic(fn):
    """
    Mark C{fn} as making at most one change statement: it needs no
    savepoint of its own (see L{_transaction}).
    """
    fn.atomic = True
    return fn


class ExecutorStopped(RuntimeError):
    """
    Work was submitted to an executor that is stopping or stopped.
    """


class _Executor:
    """
    What every executor keeps for the transaction functions at the end of
    this module (L{_open}, L{_transaction}, L{_ended}...), which run the
    SQL the same way whichever thread calls them.
    """

    def __init__(self, replication, checkpoints: WalCheckpoints | None) -> None:
        self.replication = replication
        self.checkpoints = checkpoints or WalCheckpoints()
        self._connection: sqlite3.Connection | None = None
        self._recording: RecordingConnection | None = None
        self._relaxable = False
        self._position: int | None = None
        self.commits = 0
        self.commit_seconds = commit_histogram()

    def _open_here(self, connect) -> Deferred:
        """
        C{start} for the executors that run their SQL in the reactor's
        thread: open the connection at once.
        """
        try:
            _open(self, connect)
        except BaseException:
            return fail()
        return succeed(None)


class ThreadedExecutor(_Executor):
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
        self, reactor, replication=None, checkpoints: WalCheckpoints | None = None
    ) -> None:
        """
        @param reactor: an C{IReactorFromThreads}; the Deferreds fire in
            its thread.
        @param replication: None, or the C{ICommitGate} each transaction
            is handed to (see "Replication" in the module docstring).
        @param checkpoints: when the writer thread checkpoints the WAL
            (default: a L{WalCheckpoints} with its defaults).
        @raise TypeError: when C{reactor} cannot be called from a thread
            (a L{task.Clock}: use an L{InlineExecutor} there).
        """
        if not callable(getattr(reactor, "callFromThread", None)):
            raise TypeError(
                f"ThreadedExecutor needs a reactor with callFromThread, not {reactor!r}; "
                "on a task.Clock use InlineExecutor"
            )
        super().__init__(replication, checkpoints)
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
        self._queue.append((_GROUPED, fn, args, d))
        if not getattr(fn, "relaxed", False):
            self._wake.set()
        elif self._relaxed_wake is None:
            self._relaxed_wake = self._reactor.callLater(RELAXED_DELAY_S, self._wake_relaxed)
        return d

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
        self._queue.append((_ALONE, fn, args, d))
        self._wake.set()
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
            self._queue.append((_STOP, None, (), None))
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
            _open(self, connect)
        except BaseException:
            failure = Failure()
            call(started.errback, failure)
            call(self._done, None)
            self._fail_queued()
            return
        call(started.callback, None)
        queue, wake = self._queue, self._wake
        checkpoints = self.checkpoints
        while True:
            if not wake.wait(checkpoints.idle_wait_s()):
                # Idle, and a checkpoint is due.
                checkpoints.checkpoint(self._connection)
                continue
            # Cleared before taking: what is submitted after the take
            # wakes the next wait.
            wake.clear()
            batch = _take_all(queue)
            if not batch:
                continue
            outcomes: list = []
            rest = _run_batch(self, batch, outcomes)
            if outcomes:
                if self.replication is None:
                    call(_fire, outcomes)
                else:
                    call(_hand_over, self.replication, outcomes)
            if rest is not None:
                break
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
            (call or self._reactor.callFromThread)(_fire, outcomes)


class TurnExecutor(_Executor):
    """
    Group commit at the end of each reactor turn, on the reactor thread.

    What is submitted during one reactor turn waits for the turn to end (a
    C{callLater(0)}: it runs after the input the turn read was handled) and
    then runs, in submission order, in one transaction (as
    L{ThreadedExecutor} runs a batch: a savepoint per function, batch
    forms); the Deferreds fire right after its COMMIT, in submission
    order.  What their callbacks submit (a link's hand-over after an
    accept) goes into the next turn's transaction.

    Why on the reactor thread: a paced message is usually alone in its
    turn, and with a writer thread each of its commits costs two thread
    wake-ups and two hand-overs of the GIL besides the fsync, which take
    longer than the fsync itself on a busy machine and cost most of the
    router's CPU at a low rate.  Here the reactor waits for the fsync
    instead (a fraction of a millisecond on a local disk), and every
    message that arrived in the turn shares it; at a high rate turns carry
    many messages, so commits still group.  The price: the reactor does
    nothing else during the fsync, which a writer thread overlaps with the
    routing work, so the full-load throughput is lower.

    Relaxed functions alone wait up to L{RELAXED_DELAY_S} (or for the next
    function that does not) before their transaction runs, as in
    L{ThreadedExecutor}.  The WAL is checkpointed when no work is waiting
    and the checkpoint is due (a timer): on a real reactor on a connection
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
        self, clock: IReactorTime, replication=None, checkpoints: WalCheckpoints | None = None
    ) -> None:
        """
        @param clock: where the end of the turn and the relaxed and
            checkpoint delays are scheduled.
        @param replication: None, or the C{ICommitGate} each transaction
            is handed to (see "Replication" in the module docstring).
        @param checkpoints: when the WAL is checkpointed (default: a
            L{WalCheckpoints} with its defaults).
        """
        super().__init__(replication, checkpoints)
        self._clock = clock
        self._queue: list = []
        # The scheduled run of what is queued, and whether it is the
        # turn's end (else the relaxed delay).
        self._run_call: IDelayedCall | None = None
        self._run_soon = False
        self._checkpoint_call: IDelayedCall | None = None
        # The checkpoint running in the thread pool, and its connection.
        self._checkpointing: Deferred | None = None
        self._aside: sqlite3.Connection | None = None
        self._closed = False

    def start(self, connect) -> Deferred:
        return self._open_here(connect)

    def submit(self, fn, *args) -> Deferred:
        return self._queued(_GROUPED, fn, args, getattr(fn, "relaxed", False))

    def run(self, fn, *args) -> Deferred:
        return self._queued(_ALONE, fn, args, False)

    def _queued(self, kind: int, fn, args: tuple, relaxed: bool) -> Deferred:
        if self._closed or self._connection is None:
            return fail(ExecutorStopped("the store is not open"))
        d = Deferred()
        self._queue.append((kind, fn, args, d))
        if self._run_call is None:
            self._run_soon = not relaxed
            self._run_call = self._clock.callLater(0 if self._run_soon else RELAXED_DELAY_S,
                                                   self._run_queued)
        elif not (relaxed or self._run_soon):
            # Relaxed functions were waiting: they go with this one.
            self._run_call.cancel()
            self._run_soon = True
            self._run_call = self._clock.callLater(0, self._run_queued)
        return d

    def _run_queued(self) -> None:
        """
        The turn ended (or the relaxed delay passed): run what is queued,
        fire its Deferreds, then checkpoint if the WAL is past its size.
        """
        self._run_call = None
        queued, self._queue = self._queue, []
        outcomes: list = []
        _run_batch(self, queued, outcomes)
        if self.replication is None:
            _fire(outcomes)
        else:
            _hand_over(self.replication, outcomes)
        if not self._closed:
            self.checkpoints.wrote(self._connection)
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
        if self._closed or self._queue or self._checkpointing is not None:
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
        while True:
            if self._run_call is not None and self._run_call.active():
                self._run_call.cancel()
            self._run_call = None
            if not self._queue or self._connection is None:
                break
            self._run_queued()
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


class InlineExecutor(_Executor):
    """
    Runs each function at once in the calling thread, in its own
    transaction, and returns an already-fired Deferred.

    For deterministic tests (an in-memory mesh on L{task.Clock}): no
    threads, no grouping, the same SQL.

    @ivar commits: transactions committed so far.
    @ivar commit_seconds: how long they took (a histogram).
    """

    def __init__(self, replication=None, checkpoints: WalCheckpoints | None = None) -> None:
        """
        @param replication: None, or the C{ICommitGate} each transaction
            is handed to (see "Replication" in the module docstring).
        @param checkpoints: when the WAL is checkpointed: with no thread
            to be idle in, only when a call took it past its size.
        """
        super().__init__(replication, checkpoints)
        self._stopped = False

    def start(self, connect) -> Deferred:
        return self._open_here(connect)

    def submit(self, fn, *args) -> Deferred:
        if self._stopped or self._connection is None:
            return fail(ExecutorStopped("the store is not open"))
        outcomes: list = []
        try:
            return self._submit(fn, args, outcomes)
        finally:
            self.checkpoints.wrote(self._connection)

    def _submit(self, fn, args: tuple, outcomes: list) -> Deferred:
        if self.replication is None:
            _transaction(self, [(_GROUPED, fn, args, None)], outcomes)
            _, ok, value = outcomes[0]
            return succeed(value) if ok else fail(value)
        d = Deferred()
        _transaction(self, [(_GROUPED, fn, args, d)], outcomes)
        _hand_over(self.replication, outcomes)
        return d

    def run(self, fn, *args) -> Deferred:
        if self._stopped or self._connection is None:
            return fail(ExecutorStopped("the store is not open"))
        if self.replication is None:
            try:
                return succeed(fn(self._connection, *args))
            except BaseException:
                return fail()
        d = Deferred()
        try:
            outcome = (d, True, fn(self._connection, *args))
        except BaseException:
            outcome = (d, False, Failure())
        self.replication.committed(None, partial(_fire, [outcome]))
        return d

    def stop(self) -> Deferred:
        if not self._stopped:
            self._stopped = True
            if self._connection is not None:
                try:
                    self._connection.close()
                except BaseException:
                    return fail()
        return succeed(None)


def _run_batch(executor, batch: list, outcomes: list) -> list | None:
    """
    Run C{batch} (queued items) in order on C{executor}'s connection: each
    run of grouped items as one transaction, other items alone.  At a
    stop, return what came after it (else None).
    """
    group: list = []
    for index, item in enumerate(batch):
        kind = item[0]
        if kind == _GROUPED:
            group.append(item)
            continue
        if group:
            _transaction(executor, group, outcomes)
            group = []
        if kind == _STOP:
            return batch[index + 1:]
        _, fn, args, d = item
        try:
            outcome = (d, True, fn(executor._connection, *args))
        except BaseException:
            outcome = (d, False, Failure())
        _ended(executor, outcomes, [outcome])
    if group:
        _transaction(executor, group, outcomes)
    return None


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


def _transaction(executor, group: list, outcomes: list) -> None:
    """
    Run C{group}'s functions in one transaction on C{executor}'s
    connection and append C{(deferred, ok, value)} to C{outcomes}, in
    submission order (with replication: C{(batch_or_None, [(deferred, ok,
    value), ...])} per transaction, see L{_ended}).

    Each function runs inside a SAVEPOINT, so one that raises is rolled
    back alone and the others stay; two shortcuts skip that cost:

      - A function with C{atomic = True} promises to make at most one
        change statement (a failed statement undoes itself), so it needs
        no savepoint; nor does the only function of a transaction.
      - Consecutive submissions of a function with a C{batch} attribute
        run as one call C{fn.batch(connection, [args, ...])} returning a
        value per submission.  If it raises, its changes are undone and
        the submissions run one by one through C{fn}, which gives each its
        own outcome: a batch only has to handle the common case.

    A transaction whose every function has C{relaxed = True} commits
    without an fsync when the connection's C{synchronous} is FULL (see
    "Relaxed commits" in the module docstring).

    If SQLite itself abandons the transaction (I/O error, disk full), or
    COMMIT fails, nothing in it is durable, so every function in it fails;
    the functions after the abandoned point start a new transaction.
    """
    execute = executor._connection.execute
    # SQLite takes the level only outside a transaction.
    relaxed = executor._relaxable and all(getattr(item[1], "relaxed", False) for item in group)
    if relaxed:
        execute("PRAGMA synchronous = NORMAL")
    try:
        _group_transaction(executor, group, outcomes)
    finally:
        if relaxed:
            execute("PRAGMA synchronous = FULL")


def _group_transaction(executor, group: list, outcomes: list) -> None:
    """
    L{_transaction} at the connection's current C{synchronous} level.
    """
    connection = executor._connection
    recording = executor._recording
    # What the functions are given: the connection, or its recorder.
    given = connection if recording is None else recording
    execute = connection.execute
    began = time.perf_counter()
    try:
        execute("BEGIN IMMEDIATE")
    except BaseException:
        failure = Failure()
        _ended(executor, outcomes, [(item[3], False, failure) for item in group])
        return
    results: list = []  # [d, ok, value] of the open transaction
    alone = len(group) == 1
    i, n = 0, len(group)
    one_by_one = 0  # items before this index are not batched again
    mark = 0  # where the current function's recorded statements start
    while i < n:
        _, fn, args, d = group[i]
        if recording is not None:
            mark = len(recording.statements)
        batch = getattr(fn, "batch", None)
        if batch is not None and i >= one_by_one and i + 1 < n and group[i + 1][1] is fn:
            j = i + 2
            while j < n and group[j][1] is fn:
                j += 1
            run = group[i:j]
            execute("SAVEPOINT fn")
            try:
                values = batch(given, [item[2] for item in run])
            except BaseException:
                failure = Failure()
                if _undo(connection):
                    _forget(recording, mark)
                else:
                    _ended(executor, outcomes, _failed(results, failure))
                    results = []
                    if not _begin(connection, group[i:], executor, outcomes):
                        return
                one_by_one = j
            else:
                execute("RELEASE fn")
                results.extend([item[3], True, value] for item, value in zip(run, values))
                i = j
                continue
        savepoint = not alone and not getattr(fn, "atomic", False)
        if savepoint:
            execute("SAVEPOINT fn")
        try:
            value = fn(given, *args)
        except BaseException:
            failure = Failure()
            results.append([d, False, failure])
            if alone:
                _rollback(connection)
                _forget(recording, 0)
                _ended(executor, outcomes, results)
                return
            if (_undo(connection) if savepoint else connection.in_transaction):
                # Undone (an atomic function that raised changed nothing).
                _forget(recording, mark)
                i += 1
                continue
            # SQLite abandoned the whole transaction: everything so far in
            # it is lost.  Carry on with the rest in a new one.
            _ended(executor, outcomes, _failed(results, failure))
            results = []
            if not _begin(connection, group[i + 1:], executor, outcomes):
                return
            i += 1
            continue
        if savepoint:
            execute("RELEASE fn")
        results.append([d, True, value])
        i += 1
    batch = None
    try:
        if recording is not None and recording.statements:
            batch = _record_position(executor, connection, recording.take())
        execute("COMMIT")
    except BaseException:
        failure = Failure()
        _rollback(connection)
        _forget(recording, 0)
        _ended(executor, outcomes, _failed(results, failure))
        return
    executor.commits += 1
    executor.commit_seconds.observe(time.perf_counter() - began)
    if batch is not None:
        executor._position = batch.position
    _ended(executor, outcomes, results, batch)


def _open(executor, connect) -> None:
    """
    Open C{executor}'s connection with C{connect()} (in the thread that
    will use it) and set up what the executor does around its commits.
    """
    connection = executor._connection = connect()
    executor._recording = _recording(executor.replication, connection)
    executor.checkpoints.opened(connection)
    executor._relaxable = connection.execute("PRAGMA synchronous").fetchone()[0] == _FULL


def _record_position(executor, connection: sqlite3.Connection, statements: tuple) -> ChangeBatch:
    """
    In the open transaction: the batch of C{statements}, at the position
    after the store's, whose (epoch, position) is now written into the
    C{replication_state} row.
    """
    if executor._position is None:
        executor._position = connection.execute(READ_REPLICATION_STATE).fetchone()[1]
    batch = ChangeBatch(executor.replication.epoch, executor._position + 1, statements)
    connection.execute(SET_REPLICATION_STATE, (batch.epoch, batch.position))
    return batch


def _recording(replication, connection: sqlite3.Connection) -> RecordingConnection | None:
    """
    The recorder the functions write through, when replicated.
    """
    return None if replication is None else RecordingConnection(connection)


def _forget(recording: RecordingConnection | None, mark: int) -> None:
    """
    Rolled back: forget what was recorded after C{mark}.
    """
    if recording is not None:
        recording.drop_after(mark)


def _ended(executor, outcomes: list, results: list, batch: ChangeBatch | None = None) -> None:
    """
    The outcomes C{results} of one transaction (or of one C{run}) are
    known: append them to C{outcomes}, as they are, or with replication as
    one C{(batch_or_None, results)} entry (the gate fires each entry in
    turn).
    """
    if executor.replication is None:
        outcomes.extend(results)
    else:
        outcomes.append((batch, results))


def _hand_over(replication, transactions: list) -> None:
    """
    On the reactor thread: hand each transaction's batch (or None) and the
    firing of its outcomes to C{replication}, in commit order.
    """
    for batch, results in transactions:
        replication.committed(batch, partial(_fire, results))


def _undo(connection: sqlite3.Connection) -> bool:
    """
    Roll back to and release the innermost savepoint.  Returns False if
    the transaction is gone (SQLite abandoned it).
    """
    if connection.in_transaction:
        try:
            connection.execute("ROLLBACK TO fn")
            connection.execute("RELEASE fn")
        except sqlite3.Error:
            _rollback(connection)
    return connection.in_transaction


def _begin(connection: sqlite3.Connection, rest: list, executor, outcomes: list) -> bool:
    """
    Begin a new transaction for C{rest} (what was recorded in the
    abandoned one is forgotten); if that fails, fail them all and return
    False.
    """
    _forget(executor._recording, 0)
    try:
        connection.execute("BEGIN IMMEDIATE")
    except BaseException:
        failure = Failure()
        _ended(executor, outcomes, [(item[3], False, failure) for item in rest])
        return False
    return True


def _failed(results: list, failure: Failure) -> list:
    """
    C{results} of a transaction that did not commit: those that had
    succeeded fail with C{failure}.
    """
    return [(d, False, value if not ok else failure) for d, ok, value in results]


def _rollback(connection: sqlite3.Connection) -> None:
    if connection.in_transaction:
        try:
            connection.execute("ROLLBACK")
        except sqlite3.Error:
            pass


def _fire(outcomes: list) -> None:
    """
    On the reactor thread: fire each Deferred with its outcome, in
    submission order.
    """
    for d, ok, value in outcomes:
        if ok:
            d.callback(value)
        else:
            d.errback(value)
