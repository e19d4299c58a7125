"""
A transacted client's transactions (C{ClientOptions.transacted}, a JMS
transacted session): L{Transactions}.

The client issues a C{Begin} before the first send or acknowledgement of
each transaction, and C{commit()} / C{rollback()} end it.  When the
session is lost (recreated, or given up on), its transactions are lost
with it (L{Transactions.lose}): what was not committed is rolled back, a
commit in flight has an unknown outcome, and the current transaction, if
it had work, can only roll back.
"""

from twisted.internet.defer import Deferred

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
from meshroute.client.errors import TransactionOutcomeUnknown, TransactionRolledBack, UnblockedError
from meshroute.client.session_machine import ClientInputs
from meshroute.wire import client_frames as f


class Transactions:
    """
    The current transaction of a client, and how each one ends.

    @ivar transacted: the client was made with C{transacted=True}.
    @ivar current: the current L{Transaction}.
    """

    def __init__(self, transacted: bool, deliveries: Deliveries, machine: ClientInputs) -> None:
        self.transacted = transacted
        self._deliveries = deliveries
        self._machine = machine
        self.current = Transaction()

    def begin_if_first(self, command: Command) -> list[Command]:
        """
        C{command}, preceded by the current transaction's Begin when it is
        the transaction's first send or acknowledgement.
        """
        if not self.transacted or command.kind not in (SEND, SEND_BATCH, ACK):
            return [command]
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

    def end(self, commit: bool, d: Deferred) -> None:
        """
        End the current transaction and start the next; C{d} fires with the
        outcome.  A transaction with no work ends at once; one that is
        rollback-only is rolled back, and its commit fails with
        L{TransactionRolledBack}.
        """
        transaction, self.current = self.current, Transaction()
        refused = TransactionRolledBack(f.ROLLED_BACK, transaction.rollback_only) if (
            commit and transaction.rollback_only) else None
        if not transaction.begun:
            if refused is not None:
                d.errback(refused)
            else:
                d.callback(None)
            return
        if commit and refused is None:
            self._machine.submit(Command(COMMIT, f.Commit, (), d, transaction=transaction))
            return
        rolled_back = Deferred()
        if refused is not None:
            rolled_back.addBoth(lambda _: d.errback(refused))
        else:
            rolled_back.chainDeferred(d)
        self._machine.submit(Command(ROLLBACK, f.Rollback, (), rolled_back,
                                     transaction=transaction))

    def lose(self, written: list[Command], waiting: list[Command],
             detail: str) -> tuple[list[Command], list[Command]]:
        """
        The session that held the transactions' work is gone: settle their
        commands.  A Commit written and not answered may have been carried
        out (L{TransactionOutcomeUnknown}), and so may its sends
        (L{UnblockedError}); anything else of a transaction was not
        (L{TransactionRolledBack}; a Rollback simply succeeds).  The
        current transaction, if it had work (acknowledgements of this turn
        not yet taken included), can only roll back; this turn's
        acknowledgements and credit were for the lost session's deliveries
        and subscriptions, and are dropped.  Both happen before any
        command is settled: an application callback (a C{rollback()}, a
        C{commit()}) runs inside the settling, and must find the new
        state.

        @return: the other commands, written and waiting.
        """
        current = self.current
        had_acks = self._deliveries.drop_acks()
        if current.begun or (self.transacted and had_acks):
            current.begun = False
            current.rollback_only = f"the transaction's session was lost ({detail})"
        committing = {command.transaction for command in written if command.kind == COMMIT}
        rest: tuple[list, list] = ([], [])
        for commands, others, was_written in ((written, rest[0], True),
                                              (waiting, rest[1], False)):
            for command in commands:
                if command.transaction is None:
                    others.append(command)
                    continue
                d = command.deferred
                if d is None:
                    continue
                if command.kind == COMMIT and was_written:
                    d.errback(TransactionOutcomeUnknown(detail))
                elif command.kind == ROLLBACK:
                    d.callback(None)
                elif command.transaction in committing:
                    d.errback(UnblockedError(detail))
                else:
                    d.errback(TransactionRolledBack(f.ROLLED_BACK, detail))
        return rest
