"""
The session's commands on the wire (L{CommandStream}): each written in
order, at once or, when the confirmation window is full or no connection
is up, after those waiting before it; the router's answers settling them;
what the client reports it holds (C{Received}); and the commands to write
again when the session is reattached.  The bookkeeping without I/O is the
L{CommandLog} (L{meshroute.client.commands}).
"""

from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.logger import Logger

from meshroute.client.commands import (
    COMMIT,
    ROLLBACK,
    SEND,
    SEND_BATCH,
    SUBSCRIBE,
    UNSUBSCRIBE,
    Command,
    CommandLog,
)
from meshroute.client.deliveries import Deliveries
from meshroute.client.errors import SendError, SubscribeError, TransactionRolledBack
from meshroute.client.router_connection import RouterConnection
from meshroute.client.session_machine import EndOfTurn
from meshroute.client.transactions import Transactions
from meshroute.client.two_phase import BY_XID, ENDING, RECOVER, Xid, error_of
from meshroute.wire import client_frames as f

log = Logger()

#: The commands of two-phase commit, whose refusals read as
#: L{error_of} says.
TWO_PHASE = ENDING | BY_XID

#: What the client holds is reported (C{Received}) this long after it grew,
#: or at once after this many more answers and deliveries (well within the
#: 16384 unreported answers a router holds): a few reports a second at any
#: rate, where one with every frame would cost the router a frame to read
#: per message (benchmarks/README.md, "Where a paced non-persistent
#: message's time goes").
RECEIVED_DELAY_S = 0.05
RECEIVED_EVERY = 256


def _cancelled(call: IDelayedCall | None) -> None:
    """
    Cancel C{call} if it is still to run.  Returns None, for the caller
    to store where it kept the call.
    """
    if call is not None and call.active():
        call.cancel()


class CommandStream:
    """
    The commands of one session, out and answered.

    @ivar log: the L{CommandLog}: ids, the replay buffer, the answers
        awaited, the commands waiting to be written.
    """

    def __init__(self, window: int, connection: RouterConnection, deliveries: Deliveries,
                 transactions: Transactions, end_of_turn: EndOfTurn,
                 clock: IReactorTime, ack_delay_s: float = 0.0) -> None:
        """
        @param window: C{confirmation-window-size} in bytes (-1: none).
        @param ack_delay_s: how long acknowledgements may wait for a frame
            to go with (C{ack_delay_ms}; 0: none).
        """
        self.log = CommandLog(window)
        self._connection = connection
        self._deliveries = deliveries
        self._transactions = transactions
        self._end_of_turn = end_of_turn
        self._clock = clock
        # The (answered, delivered) the router was last told.
        self._reported = (0, 0)
        # A report that waited RECEIVED_DELAY_S for a frame to go with.
        self._report_call: IDelayedCall | None = None
        self._report_due = False
        # Acknowledgements that waited ack_delay_s for a frame to go with.
        self._ack_delay_s = ack_delay_s
        self._ack_call: IDelayedCall | None = None
        self._acks_due = False

    # -- out ------------------------------------------------------------------------

    def submit(self, command: Command) -> None:
        """
        Write C{command} now, or queue it behind those waiting for room.
        """
        for command in self._transactions.begin_if_first(command):
            data = self.log.write_now(command)
            if data is not None:
                self._connection.write(data)

    def queue(self, command: Command) -> None:
        """
        No connection now: C{command} waits for the session to be resumed.
        """
        self.log.waiting.extend(self._transactions.begin_if_first(command))

    def drain(self) -> None:
        """
        Write the waiting commands that now fit.
        """
        while True:
            taken = self.log.next_to_write()
            if taken is None:
                return
            self._connection.write(taken[1])

    def flush(self) -> None:
        """
        The end of a turn on an open connection: write the Ack and Credit
        gathered if the turn writes something anyway, or a subscription
        wants its credit, or they waited C{ack_delay_s}; then Received
        if the report is due (L{RECEIVED_DELAY_S}, L{RECEIVED_EVERY});
        then hand what the turn wrote to the kernel.
        """
        deliveries = self._deliveries
        if deliveries.has_acks():
            if (not self._ack_delay_s or self._acks_due or self._connection.unflushed
                    or deliveries.credit_wanted()):
                self._stop_waiting_to_ack()
                for command in deliveries.take_acks():
                    self.submit(command)
            elif self._ack_call is None:
                self._ack_call = self._clock.callLater(self._ack_delay_s, self._ack_later)
        answered, delivered = self.log.answered_up_to(), self._deliveries.delivered_up_to
        was_answered, was_delivered = self._reported
        if answered > was_answered or delivered > was_delivered:
            if (self._report_due
                    or answered - was_answered + delivered - was_delivered >= RECEIVED_EVERY):
                self._stop_waiting_to_report()
                self._reported = (answered, delivered)
                self._connection.write_frame(f.Received(answered, delivered))
            elif self._report_call is None:
                self._report_call = self._clock.callLater(RECEIVED_DELAY_S, self._report_later)
        self._connection.flush()

    def _report_later(self) -> None:
        """
        What we hold grew L{RECEIVED_DELAY_S} ago: report it at the end of
        this turn.
        """
        self._report_call = None
        self._report_due = True
        self._end_of_turn.schedule()

    def _ack_later(self) -> None:
        """
        Acknowledgements waited C{ack_delay_s} and no frame went since:
        write them at the end of this turn (unless a close or a commit
        took them meanwhile).
        """
        self._ack_call = None
        if self._deliveries.has_acks():
            self._acks_due = True
            self._end_of_turn.schedule()

    def _stop_waiting_to_ack(self) -> None:
        self._acks_due = False
        self._ack_call = _cancelled(self._ack_call)

    def _stop_waiting_to_report(self) -> None:
        self._report_due = False
        self._report_call = _cancelled(self._report_call)

    def flush_while_down(self) -> None:
        """
        The end of a turn without a connection: this turn's Ack and Credit
        wait, in order, for the session to be resumed.
        """
        self._stop_waiting_to_ack()
        for command in self._deliveries.take_acks():
            self.queue(command)

    # -- across connections ---------------------------------------------------------

    def resume_point(self) -> tuple[int, int]:
        """
        What a resuming Open tells the router: every command done up to
        an id, every delivery received up to one (which counts as
        reported).
        """
        self._stop_waiting_to_report()
        self._reported = (self.log.answered_up_to(), self._deliveries.delivered_up_to)
        return self._reported

    def to_replay(self, last_command_id: int) -> list[bytes] | None:
        """
        The session was reattached, and the router received every command
        up to C{last_command_id}: the commands to write again.

        @return: their bytes, in order; None if the router claims commands
            that were never sent (the connection is broken then).
        """
        if last_command_id > self.log.last_id:
            self._connection.broken(f"router received command {last_command_id} of the "
                                    f"session, but only {self.log.last_id} were sent")
            return None
        return self.log.to_replay(last_command_id)

    def take_unsettled(self) -> tuple[list[Command], list[Command]]:
        """
        The session is gone: take out the commands written and awaiting an
        answer (their outcome is unknown), and those waiting to be written.
        Nothing of the old session is reported any more.
        """
        written, waiting = self.log.new_session(), list(self.log.waiting)
        self.log.waiting.clear()
        self._stop_waiting_to_report()
        self._stop_waiting_to_ack()
        self._reported = (0, 0)
        return written, waiting

    def requeue(self, commands: list[Command]) -> None:
        """
        C{commands} wait to be written in the new session.
        """
        self.log.waiting.extend(commands)

    # -- answers --------------------------------------------------------------------

    def _check_id(self, command_id: int, what: str) -> bool:
        if command_id > self.log.last_id:
            self._connection.broken(f"{what} for command {command_id}, which was not sent")
            return False
        return True

    def confirm(self, frame: f.Confirm) -> None:
        if not self._check_id(frame.command_id, "Confirm"):
            return
        command = self.log.answered(frame.command_id)
        if command is not None:
            d = command.deferred
            if command.kind in (SEND, SEND_BATCH):
                # A batch held in a transaction is answered message by message.
                d.answered(frame.command_id - command.command_id, [frame.msg_id])
            elif command.kind == SUBSCRIBE:
                self._deliveries.subscribed(command)
            elif command.kind == UNSUBSCRIBE:
                self._deliveries.unsubscribed(command)
            elif command.kind == RECOVER:
                self._connection.broken(f"Confirm for command {frame.command_id}, a Recover")
                return
            else:
                # A transaction's end, or a decision by xid.
                d.callback(None)
        self._answered()

    def error(self, frame: f.Error) -> None:
        if not self._check_id(frame.command_id, "Error"):
            return
        command = self.log.answered(frame.command_id)
        if command is None:
            log.warn("router refused command {command}: {code} {detail}",
                     command=frame.command_id, code=frame.code, detail=frame.detail)
        elif command.kind in (SEND, SEND_BATCH):
            error = (TransactionRolledBack if frame.code == f.ROLLED_BACK else SendError)(
                frame.code, frame.detail)
            command.deferred.failed(frame.command_id - command.command_id, error)
        elif command.kind in TWO_PHASE:
            command.deferred.errback(error_of(command.kind, frame))
        elif command.kind in (COMMIT, ROLLBACK) or frame.code == f.ROLLED_BACK:
            command.deferred.errback(TransactionRolledBack(frame.code, frame.detail))
        else:
            self._deliveries.refused(command, SubscribeError(frame.code, frame.detail))
        self._answered()

    def confirmed(self, frame: f.Confirmed) -> None:
        """
        Version 4: the sends C{first_command_id} on succeeded, one message
        id each.
        """
        first, msg_ids = frame.first_command_id, frame.msg_ids
        if not self._check_id(first + len(msg_ids) - 1, "Confirmed"):
            return
        runs = self.log.answered_run(first, len(msg_ids))
        for command, offset, start, n in runs:
            if command.kind not in (SEND, SEND_BATCH):
                self._connection.broken(f"Confirmed for command {command.command_id + offset}, "
                                        "which is not a send")
                return
        for command, offset, start, n in runs:
            command.deferred.answered(offset, msg_ids[start:start + n] if n < len(msg_ids)
                                      else msg_ids)
        self._answered()

    def recovered(self, frame: f.Recovered) -> None:
        """
        Version 7: the router's answer to a Recover, the xids of the
        prepared transactions.
        """
        if not self._check_id(frame.command_id, "Recovered"):
            return
        command = self.log.answered(frame.command_id)
        if command is not None:
            if command.kind != RECOVER:
                self._connection.broken(f"Recovered for command {frame.command_id}, which is "
                                        "not a Recover")
                return
            command.deferred.callback([Xid(*xid) for xid in frame.xids])
        self._answered()

    def processed(self, frame: f.Processed) -> None:
        if not self._check_id(frame.command_id, "Processed"):
            return
        self.log.processed(frame.command_id)
        self._answered()

    def _answered(self) -> None:
        """
        Answers made room in the window, and there is more to report.
        """
        self.drain()
        self._end_of_turn.schedule()
