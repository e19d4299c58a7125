"""
How the store's SQL runs in transactions, whichever executor runs it.

An executor owns the store's one sqlite3 connection and decides when the
work submitted to it runs: with group commit on a writer thread of its
own (L{meshroute.store.threaded_executor}, C{[store] writer = "thread"}),
at the end of each reactor turn (L{meshroute.store.turn_executor},
C{writer = "reactor"}), either of these by the size of the turn and
whether the writer thread is busy (L{meshroute.store.adaptive_executor},
C{writer = "adaptive"}, the default), or inline for deterministic tests
(L{meshroute.store.inline_executor}).  How that work runs, once its time
has come, is the same for all of them: their common base,
L{TransactionRunner}, defined here.

The store hands an executor small functions C{fn(connection, *args)};
the executor runs them in the order they were submitted and returns a
L{Deferred} per function that fires, on the reactor thread, with what
the function returned (or fails with what it raised) once its
transaction is committed.

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

A function may say how it may be run (L{TransactionRunner._transaction}):
with C{atomic = True} (L{atomic}) it needs no savepoint of its own; with a
C{batch} form, consecutive submissions of it run as one call; with
C{lengthy = True} (L{lengthy}) it is never run on the reactor thread by an
executor that has a thread of its own.

Relaxed commits
===============

A function may carry C{relaxed = True}: its changes may be lost to a
power failure or an OS crash (never to a crash of the process) as long as
every later commit keeps them, because losing them only repeats work that
is safe to repeat (forgetting outbox entries the peer acknowledged: the
peer discards what it already holds).  A transaction made only of such
functions, on a connection with C{synchronous = FULL}, commits with
C{synchronous = NORMAL}: no fsync of its own.  The WAL is one file
written in order, so the next fsynced commit makes it durable too, and no
later transaction can survive it.

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

The executors take C{replication}, an L{meshroute.interfaces.ICommitGate}
(the active HA instance's gate), or None: a router without HA, for which
nothing here changes or costs more.  The store defines that interface and
what it is handed (L{meshroute.store.changes}): it learns of replication
only through it, and never imports HA.  With it:

  - the functions get a L{RecordingConnection} instead of the connection,
    and the write statements of each committed transaction become one
    L{ChangeBatch} (what a function that raised had run is dropped with
    its rollback);
  - a transaction with writes also sets the store's C{replication_state}
    row (schema version 5) to the batch's C{(replication.epoch,
    position)} before its COMMIT, so the data and the position it is at
    always commit together; C{position} is the row's, plus one;
  - once a transaction's statements ran and before its COMMIT, the
    executor hands its batch to C{replication.prepared(batch)}, on the
    reactor thread (L{TransactionRunner._hand_over}: at once for the
    executors that run on it, through C{callFromThread} for the writer
    thread, so the batch can be on its way to the backup while this
    store's fsync runs); if that COMMIT then fails, to
    C{replication.abandoned(batch)};
  - after each transaction (committed with or without writes, or failed;
    and after each C{run}), on the reactor thread, in commit order, the
    executor calls C{replication.committed(batch_or_None, fire)} instead
    of firing the Deferreds: C{fire()} fires them.  Whoever holds the
    gate decides when a caller may learn of a change.
"""

import sqlite3
import time
from functools import partial

from prometheus_client import Histogram
from twisted.internet.defer import Deferred, fail, succeed
from twisted.python.failure import Failure

from meshroute.errors import StoreFull
from meshroute.store.changes import (
    READ_REPLICATION_STATE,
    SET_REPLICATION_STATE,
    ChangeBatch,
    RecordingConnection,
)
from meshroute.store.checkpoints import WalCheckpoints

#: C{PRAGMA synchronous} FULL, as SQLite reports it.
_FULL = 2

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


# Kinds of queued items C{(kind, fn, args, deferred)}: a function to run
# in a transaction with the ones around it, one to run alone, and the
# stop (the writer thread's only).
GROUPED = 0
ALONE = 1
STOP = 2


def atomic(fn):
    """
    Mark C{fn} as making at most one change statement: it needs no
    savepoint of its own (see L{TransactionRunner._transaction}).
    """
    fn.atomic = True
    return fn


def lengthy(fn):
    """
    Mark C{fn} as work that may take long however few its submissions (a
    prune's chunk, a replica's batches): an executor that can run it off
    the reactor thread does (L{meshroute.store.adaptive_executor}).
    """
    fn.lengthy = True
    return fn


class OneByOne(Exception):
    """
    Raised by a function's C{batch} form: the run of submissions met a
    case it leaves to the one-by-one function (a duplicate), which gives
    each submission its own outcome.
    """


class ExecutorStopped(RuntimeError):
    """
    Work was submitted to an executor that is stopping or stopped.
    """


class TransactionRunner:
    """
    What every executor is, whatever its schedule: the owner of the
    store's connection, which runs queued items on it (a run of grouped
    functions as one transaction, the others alone) the same way
    whichever thread calls it, and collects their outcomes for the
    reactor thread.

    @ivar replication: None, or the C{ICommitGate} each transaction is
        handed to (see "Replication" in the module docstring).
    @ivar guard: None, or what is called (on the thread that runs the SQL)
        before each batch of queued work: when it raises, every item of
        the batch fails with what it raised and nothing of it runs.  A
        shared-store HA instance checks there that it still holds the
        store's lock (L{meshroute.ha.store_lock}).
    @ivar checkpoints: when the WAL is checkpointed.
    @ivar commits: transactions committed so far.
    @ivar commit_seconds: how long they took (a histogram).
    """

    def __init__(self, replication, checkpoints: WalCheckpoints | None,
                 guard=None) -> None:
        self.replication = replication
        self.guard = guard
        self.checkpoints = checkpoints or WalCheckpoints()
        self._connection: sqlite3.Connection | None = None
        # What the functions write through, when replicated.
        self._recording: RecordingConnection | None = None
        self._relaxable = False
        self._position: int | None = None
        self.commits = 0
        self.commit_seconds = commit_histogram()

    def _open(self, connect) -> None:
        """
        Open the connection with C{connect()} (in the thread that will use
        it) and set up what is done around its commits.
        """
        connection = connect()
        try:
            if self.replication is not None:
                self._recording = RecordingConnection(connection)
            self.checkpoints.opened(connection)
            self._relaxable = connection.execute("PRAGMA synchronous").fetchone()[0] == _FULL
        except BaseException:
            connection.close()
            raise
        # Set last: an executor that may also run on another thread takes
        # an open connection as set up.
        self._connection = connection

    def _open_here(self, connect) -> Deferred:
        """
        C{start} for the executors that run their SQL in the reactor's
        thread: open the connection at once.
        """
        try:
            self._open(connect)
        except BaseException:
            return fail()
        return succeed(None)

    def _deliver(self, outcomes: list) -> None:
        """
        On the reactor thread: fire the Deferreds of C{outcomes}, as
        collected by L{_run_batch} or L{_transaction}, in submission
        order; with replication, hand each transaction's batch (or None)
        and the firing of its outcomes to the gate, in commit order.
        """
        if self.replication is None:
            fire(outcomes)
            return
        for batch, results in outcomes:
            self.replication.committed(batch, partial(fire, results))

    def _run_batch(self, batch: list, outcomes: list) -> list | None:
        """
        Run C{batch} (queued items) in order: each run of grouped items as
        one transaction, other items alone.  At a stop, return what came
        after it (else None).  When the L{guard} raises, every item up to
        a stop fails with what it raised instead.
        """
        if self.guard is not None:
            try:
                self.guard()
            except BaseException:
                return self._refuse_batch(batch, outcomes, _store_failure())
        group: list = []
        for index, item in enumerate(batch):
            kind = item[0]
            if kind == GROUPED:
                group.append(item)
                continue
            if group:
                self._transaction(group, outcomes)
                group = []
            if kind == STOP:
                return batch[index + 1:]
            _, fn, args, d = item
            try:
                outcome = (d, True, fn(self._connection, *args))
            except BaseException:
                outcome = (d, False, _store_failure())
            self._ended(outcomes, [outcome])
        if group:
            self._transaction(group, outcomes)
        return None

    def _refuse_batch(self, batch: list, outcomes: list, failure: Failure) -> list | None:
        """
        Fail C{batch}'s items up to a stop with C{failure}; return what
        came after the stop (else None), as L{_run_batch} does.
        """
        for index, item in enumerate(batch):
            if item[0] == STOP:
                return batch[index + 1:]
            self._ended(outcomes, [(item[3], False, failure)])
        return None

    def _transaction(self, group: list, outcomes: list) -> None:
        """
        Run C{group}'s functions in one transaction and append C{(deferred,
        ok, value)} to C{outcomes}, in submission order (with replication:
        C{(batch_or_None, [(deferred, ok, value), ...])} per transaction,
        see L{_ended}).

        Each function runs inside a SAVEPOINT, so one that raises is rolled
        back alone and the others stay; two shortcuts skip that cost:

          - A function with C{atomic = True} promises to make at most one
            change statement (a failed statement undoes itself), so it
            needs no savepoint; nor does the only function of a
            transaction.
          - Consecutive submissions of a function with a C{batch}
            attribute run as one call C{fn.batch(connection, [args, ...])}
            returning a value per submission.  If it raises (L{OneByOne},
            or anything else), its changes are undone and the submissions
            run one by one through C{fn}, which gives each its own
            outcome: a batch only has to handle the common case.

        A transaction whose every function has C{relaxed = True} commits
        without an fsync when the connection's C{synchronous} is FULL (see
        "Relaxed commits" in the module docstring).

        If SQLite itself abandons the transaction (I/O error, disk full),
        or COMMIT fails, nothing in it is durable, so every function in it
        fails; the functions after the abandoned point start a new
        transaction.
        """
        execute = self._connection.execute
        # SQLite takes the level only outside a transaction.
        relaxed = self._relaxable and all(getattr(item[1], "relaxed", False) for item in group)
        if relaxed:
            execute("PRAGMA synchronous = NORMAL")
        try:
            self._group_transaction(group, outcomes)
        finally:
            if relaxed:
                execute("PRAGMA synchronous = FULL")

    def _group_transaction(self, group: list, outcomes: list) -> None:
        """
        L{_transaction} at the connection's current C{synchronous} level.
        """
        connection = self._connection
        recording = self._recording
        # What the functions are given: the connection, or its recorder.
        given = connection if recording is None else recording
        execute = connection.execute
        began = time.perf_counter()
        try:
            execute("BEGIN IMMEDIATE")
        except BaseException:
            failure = _store_failure()
            self._ended(outcomes, [(item[3], False, failure) for item in group])
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
                    failure = _store_failure()
                    if _undo(connection):
                        self._forget(mark)
                    else:
                        self._ended(outcomes, _failed(results, failure))
                        results = []
                        if not self._begin(group[i:], outcomes):
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
                failure = _store_failure()
                results.append([d, False, failure])
                if alone:
                    _rollback(connection)
                    self._forget(0)
                    self._ended(outcomes, results)
                    return
                if (_undo(connection) if savepoint else connection.in_transaction):
                    # Undone (an atomic function that raised changed nothing).
                    self._forget(mark)
                    i += 1
                    continue
                # SQLite abandoned the whole transaction: everything so far
                # in it is lost.  Carry on with the rest in a new one.
                self._ended(outcomes, _failed(results, failure))
                results = []
                if not self._begin(group[i + 1:], outcomes):
                    return
                i += 1
                continue
            if savepoint:
                execute("RELEASE fn")
            results.append([d, True, value])
            i += 1
        batch = prepared = None
        try:
            if recording is not None and recording.statements:
                batch = self._record_position(recording.take())
                self._hand_over(self.replication.prepared, batch)
                prepared = batch
            execute("COMMIT")
        except BaseException:
            failure = _store_failure()
            _rollback(connection)
            self._forget(0)
            if prepared is not None:
                self._hand_over(self.replication.abandoned, prepared)
            self._ended(outcomes, _failed(results, failure))
            return
        self.commits += 1
        self.commit_seconds.observe(time.perf_counter() - began)
        if batch is not None:
            self._position = batch.position
        self._ended(outcomes, results, batch)

    def _record_position(self, statements: tuple) -> ChangeBatch:
        """
        In the open transaction: the batch of C{statements}, at the
        position after the store's, whose (epoch, position) is now written
        into the C{replication_state} row.
        """
        execute = self._connection.execute
        if self._position is None:
            self._position = execute(READ_REPLICATION_STATE).fetchone()[1]
        batch = ChangeBatch(self.replication.epoch, self._position + 1, statements)
        execute(SET_REPLICATION_STATE, (batch.epoch, batch.position))
        return batch

    def _hand_over(self, call, batch: ChangeBatch) -> None:
        """
        Call C{call(batch)} on the reactor thread, before this
        transaction's outcomes are delivered: at once here, for the
        executors that run their SQL on the reactor thread.
        """
        call(batch)

    def _forget(self, mark: int) -> None:
        """
        Rolled back: forget what was recorded after C{mark}.
        """
        if self._recording is not None:
            self._recording.drop_after(mark)

    def _ended(self, outcomes: list, results: list, batch: ChangeBatch | None = None) -> None:
        """
        The outcomes C{results} of one transaction (or of one C{run}) are
        known: append them to C{outcomes}, as they are, or with replication
        as one C{(batch_or_None, results)} entry (the gate fires each entry
        in turn).
        """
        if self.replication is None:
            outcomes.extend(results)
        else:
            outcomes.append((batch, results))

    def _begin(self, rest: list, outcomes: list) -> bool:
        """
        Begin a new transaction for C{rest} (what was recorded in the
        abandoned one is forgotten); if that fails, fail them all and
        return False.
        """
        self._forget(0)
        try:
            self._connection.execute("BEGIN IMMEDIATE")
        except BaseException:
            failure = _store_failure()
            self._ended(outcomes, [(item[3], False, failure) for item in rest])
            return False
        return True


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


def _store_failure() -> Failure:
    """
    The failure of what was just raised, with SQLite's "database or disk
    is full" as L{StoreFull} (its cause the SQLite error): said in the log
    in a line, not a traceback per failed command.
    """
    failure = Failure()
    if getattr(failure.value, "sqlite_errorname", None) == "SQLITE_FULL":
        error = StoreFull(f"the router's disk is full ({failure.value})")
        error.__cause__ = failure.value
        return Failure(error)
    return failure


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


def fire(outcomes: list) -> None:
    """
    On the reactor thread: fire each Deferred with its outcome, in
    submission order.
    """
    for d, ok, value in outcomes:
        if ok:
            d.callback(value)
        else:
            d.errback(value)
