"""
A transacted client's transactions (C{ClientOptions.transacted}, a JMS
transacted session), two-phase ones included (PEP 249's C{tpc_*} calls,
L{meshroute.client.two_phase}): L{Transactions}.

The client issues a C{Begin} before the first send or acknowledgement of
each transaction, and C{commit()} / C{rollback()} end it.  A two-phase
transaction, begun with C{tpc_begin(xid)}, ends with C{tpc_prepare()}
(it is then durable on the router, and decided by C{tpc_commit()} /
C{tpc_rollback()}, or by its xid from any session) or with a one-phase
C{tpc_commit()}; one without work is begun at its end, so that its xid
is prepared or committed all the same.

When the session is lost (recreated, or given up on), its transactions
are lost with it (L{Transactions.lose}): what was not committed is rolled
back, a commit in flight has an unknown outcome, and the current
transaction, if it had work, can only roll back.  A prepared transaction
is not lost: the router holds it, durably.  A commit or rollback by xid
in flight then fails with L{TransactionRetry} (XA_RETRY: call it again);
one not yet written goes to the next session; a prepare in flight is
rolled back by its xid in the next session.
"""

from twisted.internet.defer import Deferred
from twisted.python.failure import Failure

from meshroute.client.commands import (
    ACK,
    BEGIN,
    COMMIT,
    ROLLBACK,
    SEND,
    SEND_BATCH,
    Command,
    Transaction,
)
from meshroute.client.deliveries import Deliveries
from meshroute.client.errors import (
    HeuristicOutcome,
    TransactionOutcomeUnknown,
    TransactionRetry,
    TransactionRolledBack,
    TransactionStateError,
    UnblockedError,
    UnknownTransaction,
)
from meshroute.client.session_machine import ClientInputs
from meshroute.client.two_phase import (
    BY_XID,
    COMMIT_XID,
    ONE_PHASE_COMMIT,
    PREPARE,
    RECOVER,
    ROLLBACK_XID,
    Xid,
)
from meshroute.wire import client_frames as f

#: How the application ends a transaction (the machine's
#: C{transaction_ended}): C{commit()}, C{rollback()}, C{tpc_prepare()},
#: C{tpc_commit()} and C{tpc_rollback()}.
TPC_COMMIT = "tpc-commit"
TPC_ROLLBACK = "tpc-rollback"
ENDINGS = (COMMIT, ROLLBACK, PREPARE, TPC_COMMIT, TPC_ROLLBACK)

#: The commands a transaction is begun before, when it was not yet.
_BEGUN_BY = frozenset({SEND, SEND_BATCH, ACK, PREPARE, ONE_PHASE_COMMIT})


class Transactions:
    """
    The current transaction of a client, and how each one ends.

    @ivar transacted: the client was made with C{transacted=True}.
    @ivar current: the current L{Transaction}.
    @ivar prepared: the two-phase transaction handed to C{tpc_prepare()}
        and not yet decided by C{tpc_commit()} or C{tpc_rollback()}, or
        None: until it is, no two-phase transaction begins and nothing is
        sent (PEP 249).
    """

    def __init__(self, transacted: bool, deliveries: Deliveries, machine: ClientInputs) -> None:
        self.transacted = transacted
        self._deliveries = deliveries
        self._machine = machine
        self.current = Transaction()
        self.prepared: Transaction | None = None

    def begin_if_first(self, command: Command) -> list[Command]:
        """
        C{command}, preceded by its transaction's Begin when it is the
        transaction's first send or acknowledgement (or its end, when it
        has none).  A send while a prepared transaction awaits its
        decision fails at once, and nothing is written.
        """
        if not self.transacted or command.kind not in _BEGUN_BY:
            return [command]
        if self.prepared is not None and command.kind in (SEND, SEND_BATCH):
            command.deferred.errback(TransactionStateError(
                "a send between tpc_prepare() and tpc_commit() or tpc_rollback()"))
            return []
        transaction = command.transaction
        if transaction is None:
            transaction = command.transaction = self.current
        if transaction.begun:
            return [command]
        transaction.begun = True
        return [Command(BEGIN, f.Begin, (), transaction=transaction), command]

    def take_acks(self) -> None:
        """
        C{commit()} or C{rollback()} was asked for: this turn's
        acknowledgements join the transaction first, as machine inputs,
        so that they are taken in order after the sends the application
        made before.
        """
        if self.transacted:
            for command in self._deliveries.take_acks():
                self._machine.submit(command)

    def tpc_begin(self, xid: Xid) -> None:
        """
        The current transaction, which has no work yet, becomes two-phase
        transaction C{xid}.

        @raise TransactionStateError: it has work, or a prepared one
            awaits C{tpc_commit()} or C{tpc_rollback()}.
        """
        if self.prepared is not None:
            raise TransactionStateError(
                f"transaction {list(self.prepared.xid)} is prepared: tpc_commit() or "
                "tpc_rollback() it first")
        current = self.current
        if current.begun or current.xid is not None or current.rollback_only:
            raise TransactionStateError("tpc_begin() inside a transaction: end it first")
        current.xid = xid

    def end(self, ending: str, d: Deferred, xid: Xid | None = None) -> None:
        """
        End a transaction as C{ending} (one of L{ENDINGS}) says; C{d}
        fires with the outcome.  C{tpc_commit} and C{tpc_rollback} decide
        C{xid}, or (None) the prepared transaction, or else the current
        one, in one phase.

        @raise TransactionStateError: through C{d}, when the call does not
            fit the state (nothing was done).
        """
        current = self.current
        if ending in (TPC_COMMIT, TPC_ROLLBACK):
            if xid is None:
                xid = self.prepared.xid if self.prepared is not None else current.xid
            if xid is None:
                d.errback(TransactionStateError(
                    "no two-phase transaction: tpc_begin() one, or name its xid"))
            elif xid != current.xid:
                self._decide(ending, xid, d)
            else:
                self._end_current(COMMIT if ending == TPC_COMMIT else ROLLBACK, d)
        elif ending == PREPARE and current.xid is None:
            d.errback(TransactionStateError("tpc_prepare() of a transaction tpc_begin() did "
                                            "not begin"))
        elif ending != PREPARE and current.xid is not None:
            d.errback(TransactionStateError(
                "commit() or rollback() of a two-phase transaction: use tpc_commit() or "
                "tpc_rollback()"))
        else:
            self._end_current(ending, d)

    def _end_current(self, ending: str, d: Deferred) -> None:
        """
        End the current transaction as C{ending} (commit, rollback or
        prepare) and start the next.  A transaction with no work ends at
        once, unless it is a two-phase one; one that is rollback-only is
        rolled back, and its commit or prepare fails with
        L{TransactionRolledBack}.
        """
        transaction, self.current = self.current, Transaction()
        if ending != ROLLBACK and transaction.rollback_only:
            self._roll_back(transaction, d, TransactionRolledBack(f.ROLLED_BACK,
                                                                  transaction.rollback_only))
        elif ending == ROLLBACK:
            self._roll_back(transaction, d, None)
        elif transaction.xid is None:
            if transaction.begun:
                self._machine.submit(Command(COMMIT, f.Commit, (), d, transaction=transaction))
            else:
                d.callback(None)
        elif ending == COMMIT:
            self._machine.submit(Command(ONE_PHASE_COMMIT, f.CommitXid,
                                         (*transaction.xid, True), d, transaction=transaction))
        else:
            self.prepared = transaction
            answered = Deferred()
            answered.addBoth(self._prepare_answered, transaction)
            answered.chainDeferred(d)
            self._machine.submit(Command(PREPARE, f.Prepare, tuple(transaction.xid), answered,
                                         transaction=transaction))

    def _roll_back(self, transaction: Transaction, d: Deferred,
                   refused: TransactionRolledBack | None) -> None:
        """
        Roll C{transaction} back on the router if it began there; C{d}
        fires then, or fails with C{refused}.
        """
        if not transaction.begun:
            if refused is not None:
                d.errback(refused)
            else:
                d.callback(None)
            return
        rolled_back = Deferred()
        if refused is not None:
            rolled_back.addBoth(lambda _: d.errback(refused))
        else:
            rolled_back.chainDeferred(d)
        self._machine.submit(Command(ROLLBACK, f.Rollback, (), rolled_back,
                                     transaction=transaction))

    def _prepare_answered(self, result, transaction: Transaction):
        if isinstance(result, Failure):
            if self.prepared is transaction:
                self.prepared = None
        else:
            transaction.prepared = True
        return result

    def _decide(self, ending: str, xid: Xid, d: Deferred) -> None:
        """
        Commit or roll back transaction C{xid} by its xid.  The prepared
        transaction, if that is it, is decided once the router answers
        what became of it (not when it fails with L{TransactionRetry}).
        """
        if ending == TPC_COMMIT:
            command = Command(COMMIT_XID, f.CommitXid, (*xid, False))
        else:
            command = Command(ROLLBACK_XID, f.RollbackXid, tuple(xid))
        command.deferred = Deferred()
        command.deferred.addBoth(self._decided, xid)
        command.deferred.chainDeferred(d)
        self._machine.submit(command)

    def _decided(self, result, xid: Xid):
        prepared = self.prepared
        if (prepared is not None and prepared.xid == xid
                and (not isinstance(result, Failure)
                     or result.check(UnknownTransaction, HeuristicOutcome))):
            self.prepared = None
        return result

    def lose(self, written: list[Command], waiting: list[Command],
             detail: str) -> tuple[list[Command], list[Command]]:
        """
        The session that held the transactions' work is gone: settle their
        commands.  A Commit written and not answered may have been carried
        out (L{TransactionOutcomeUnknown}, L{TransactionRetry} for a
        one-phase two-phase commit), and so may its sends
        (L{UnblockedError}); so may a prepared transaction's (it waits for
        its decision on the router).  A commit or rollback by xid written
        and not answered fails with L{TransactionRetry}; one not written
        goes to the next session, as a Recover does.  A Prepare written
        and not answered is rolled back by its xid in the next session
        (L{_roll_back_lost_prepare}).  Anything else of a transaction was
        not carried out (L{TransactionRolledBack}; a Rollback simply
        succeeds).  The current transaction, if it had work
        (acknowledgements of this turn not yet taken included), can only
        roll back; this turn's acknowledgements and credit were for the
        lost session's deliveries and subscriptions, and are dropped.
        Both happen before any command is settled: an application
        callback (a C{rollback()}, a C{commit()}) runs inside the
        settling, and must find the new state.

        @return: the other commands, written and waiting (the rollbacks of
            lost prepares among the waiting).
        """
        current = self.current
        had_acks = self._deliveries.drop_acks()
        if current.begun or (self.transacted and had_acks):
            current.begun = False
            current.rollback_only = f"the transaction's session was lost ({detail})"
        committing = {command.transaction for command in written
                      if command.kind in (COMMIT, ONE_PHASE_COMMIT, PREPARE)}
        rest: tuple[list, list] = ([], [])
        rollbacks = []
        for commands, others, was_written in ((written, rest[0], True),
                                              (waiting, rest[1], False)):
            for command in commands:
                kind, d = command.kind, command.deferred
                if kind in BY_XID:
                    if was_written and kind != RECOVER:
                        d.errback(TransactionRetry(detail))
                    else:
                        others.append(command)
                    continue
                if command.transaction is None:
                    others.append(command)
                    continue
                if d is None:
                    continue
                if kind == COMMIT and was_written:
                    d.errback(TransactionOutcomeUnknown(detail))
                elif kind == ONE_PHASE_COMMIT and was_written:
                    d.errback(TransactionRetry(detail))
                elif kind == PREPARE and was_written:
                    rollbacks.append(self._roll_back_lost_prepare(command, detail))
                elif kind == ROLLBACK:
                    d.callback(None)
                elif command.transaction in committing or command.transaction.prepared:
                    d.errback(UnblockedError(detail))
                else:
                    d.errback(TransactionRolledBack(f.ROLLED_BACK, detail))
        rest[1].extend(rollbacks)
        return rest

    def _roll_back_lost_prepare(self, command: Command, detail: str) -> Command:
        """
        A Prepare written and not answered when its session was lost: the
        router may hold the transaction prepared (durably, replicated).
        The command that rolls it back by its xid in the next session:
        the prepare then fails with L{TransactionRolledBack} (the seed's
        rule for a prepare unblocked by failover), or, if that rollback
        cannot be done, with L{TransactionOutcomeUnknown}.
        """
        prepare = command.deferred

        def rolled_back(result) -> None:
            if isinstance(result, Failure) and not result.check(UnknownTransaction):
                prepare.errback(TransactionOutcomeUnknown(
                    f"the session was lost while preparing ({detail}), and rolling the "
                    f"transaction back failed: {result.getErrorMessage()}"))
            else:
                prepare.errback(TransactionRolledBack(
                    f.ROLLED_BACK, f"the session was lost while preparing ({detail}); the "
                    "transaction was rolled back"))

        rollback = Command(ROLLBACK_XID, f.RollbackXid, tuple(command.transaction.xid),
                           Deferred())
        rollback.deferred.addBoth(rolled_back)
        return rollback
