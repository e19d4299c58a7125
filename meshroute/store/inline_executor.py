"""
The inline executor, for deterministic tests (an in-memory mesh on a
L{task.Clock}): each function runs at once, in the calling thread, in a
transaction of its own.  What every executor promises is in
L{meshroute.store.transactions}.
"""

from twisted.internet.defer import Deferred, fail, succeed

from meshroute.store.checkpoints import WalCheckpoints
from meshroute.store.transactions import ALONE, GROUPED, ExecutorStopped, TransactionRunner


class InlineExecutor(TransactionRunner):
    """
    Runs each function at once in the calling thread, in its own
    transaction, and returns an already-fired Deferred.

    For deterministic tests (an in-memory mesh on L{task.Clock}): no
    threads, no grouping, the same SQL.

    @ivar commits: transactions committed so far.
    @ivar commit_seconds: how long they took (a histogram).
    """

    def __init__(self, replication=None, checkpoints: WalCheckpoints | None = None,
                 guard=None) -> None:
        """
        @param replication: None, or the C{ICommitGate} each transaction
            is handed to (see "Replication" in
            L{meshroute.store.transactions}).
        @param guard: checked before each call (L{TransactionRunner}).
        @param checkpoints: when the WAL is checkpointed: with no thread
            to be idle in, only when a call took it past its size.
        """
        super().__init__(replication, checkpoints, guard)
        self._stopped = False

    def start(self, connect) -> Deferred:
        return self._open_here(connect)

    def submit(self, fn, *args) -> Deferred:
        if self._stopped or self._connection is None:
            return fail(ExecutorStopped("the store is not open"))
        if self.guard is not None:
            try:
                self.guard()
            except BaseException:
                return fail()
        outcomes: list = []
        try:
            return self._submit(fn, args, outcomes)
        finally:
            self.checkpoints.wrote(self._connection)

    def _submit(self, fn, args: tuple, outcomes: list) -> Deferred:
        if self.replication is None:
            self._transaction([(GROUPED, fn, args, None)], outcomes)
            _, ok, value = outcomes[0]
            return succeed(value) if ok else fail(value)
        d = Deferred()
        self._transaction([(GROUPED, fn, args, d)], outcomes)
        self._deliver(outcomes)
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
        outcomes: list = []
        self._run_batch([(ALONE, fn, args, d)], outcomes)
        self._deliver(outcomes)
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
