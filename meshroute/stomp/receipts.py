"""
The RECEIPTs a STOMP client asks for (the C{receipt} header of any of its
frames), and when each is due (docs/stomp.md):

 - a SEND's once the message is accepted, as a native Send is (its
   C{Confirm}: durable at the origin when persistent);
 - the receipt of a command the served session does not confirm (ACK,
   BEGIN, a SEND a transaction holds) once C{Processed} covers it: every
   command up to it is carried out;
 - NACK's, which is not a command, once every command before it is;
 - DISCONNECT's with the session's C{Closed};
 - the ERROR that ends a connection carries the receipt of the frame that
   caused it.

The later answers of a SEND a transaction holds (its C{Confirm} at the
commit, its C{rolled-back} at the rollback) are not the client's
business: the COMMIT or the ABORT is what it hears of.
"""

from dataclasses import dataclass, field

from meshroute.stomp.frames import StompFrame


@dataclass(eq=False)
class Receipts:
    """
    The receipts one STOMP connection owes its client.

    @ivar due: command id → the receipts due once it is done.
    @ivar held: ids of SENDs a transaction holds: their later answers are
        not the client's business.
    @ivar failing: the receipt of the frame whose ERROR ends the
        connection.
    @ivar goodbye: DISCONNECT's receipt, due with the session's C{Closed}.
    """

    due: dict = field(default_factory=dict)
    held: set = field(default_factory=set)
    failing: str | None = None
    goodbye: str | None = None

    def expect(self, frame: StompFrame, command_id: int) -> None:
        """
        C{frame} became command C{command_id}: its receipt, if it asks for
        one, is due once that command is done.
        """
        receipt = frame.header("receipt")
        if receipt is not None:
            self.due.setdefault(command_id, []).append(receipt)

    def after(self, frame: StompFrame, last_command: int, processed_up_to: int) -> list[str]:
        """
        C{frame} is not a command: its receipt is due once every command
        before it (up to C{last_command}) is done.  Returns it if that is
        now (C{processed_up_to}).
        """
        receipt = frame.header("receipt")
        if receipt is None:
            return []
        if last_command <= processed_up_to:
            return [receipt]
        self.due.setdefault(last_command, []).append(receipt)
        return []

    def confirmed(self, command_id: int) -> list[str]:
        """
        Command C{command_id} was confirmed: the receipts due now.
        """
        if command_id in self.held:
            self.held.discard(command_id)
            return []
        return self.due.pop(command_id, [])

    def processed(self, up_to: int) -> list[str]:
        """
        Every command up to C{up_to} is carried out: the receipts due now.
        """
        due, ready = self.due, []
        while due:
            command_id = next(iter(due))
            if command_id > up_to:
                break
            ready.extend(due.pop(command_id))
        return ready

    def refused(self, command_id: int) -> bool:
        """
        Command C{command_id} was refused: whether the client is told (an
        ERROR, carrying the command's receipt: L{failing}); a held SEND's
        refusal it is not.
        """
        if command_id in self.held:
            self.held.discard(command_id)
            return False
        receipts = self.due.pop(command_id, ())
        self.failing = receipts[0] if receipts else None
        return True
