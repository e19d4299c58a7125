"""
The answers of a served session's commands (docs/client-protocol.md,
"Sessions that survive failures"), which let a client that lost its
connection resume the session and replay what it is not sure of, as
Artemis' session reattachment does:

 - B{the sequence}: each command's id is one more than the last.  One
   the session already received (a client replaying after a resume) is
   not carried out again: its held answer, if any, is re-sent.  Any other
   id means client and router disagree about the session: a
   connection-level C{bad-command}.
 - B{Processed}: every command up to C{processed_up_to} has been carried
   out; one C{Processed} per reactor turn tells the client, when it
   covers a command that has no answer of its own (C{Ack}, C{Credit},
   C{Close}, C{Begin}, a C{Send} a transaction holds).  A command whose
   answer was written is done for the client by that answer: a producer
   whose sends are all confirmed is told no C{Processed} at all.
 - B{held answers}: the C{Confirm}/C{Error} of every command whose
   receipt the client has not reported (C{Received.answered_up_to}), to
   re-send on resume.  A client that never reports them stops the session
   being resumable past L{MAX_HELD_ANSWERS} (its answers are then no
   longer held).
"""

from dataclasses import dataclass, field

from twisted.internet.interfaces import IDelayedCall
from twisted.logger import Logger

from meshroute.errors import MeshrouteError, StoreFull
from meshroute.sessions.sends import MAX_SENDS_IN_PROGRESS
from meshroute.store import ExecutorStopped
from meshroute.wire import client_frames as f

log = Logger()

#: Answers held for a client that does not report receiving them
#: (C{Received}); past it the session can no longer be resumed.
MAX_HELD_ANSWERS = 2 * MAX_SENDS_IN_PROGRESS


@dataclass(eq=False)
class Answers:
    """
    Which command a served session takes next, which it has carried out,
    and the answers it holds for a resume.

    @ivar session: the L{meshroute.sessions.served.ServedSession} they are
        the answers of: it writes them, and says whether it is resumable.
    @ivar last_command_id: the id of the last command received; the next
        must be one more.
    @ivar processed_up_to: every command up to it has been carried out
        (what C{Processed} reports).
    @ivar held: command id → its answer, until the client reports holding
        it.
    @ivar unanswered_done: the highest id of a command carried out
        without an answer of its own: only those need C{Processed}.
    """

    session: object = field(repr=False)
    last_command_id: int = 0
    processed_up_to: int = 0
    held: dict = field(default_factory=dict)
    unanswered_done: int = 0
    _done_above: set = field(default_factory=set)
    _processed_sent: int = 0
    _processed_call: IDelayedCall | None = None

    # -- the sequence -----------------------------------------------------------

    def accept(self, frame, replayable: bool = True) -> bool:
        """
        Whether C{frame} is the next command, to carry out.  A command the
        session already received is not carried out again (its held
        answer is re-sent); any other id (or a replayed Close, which
        cannot be: the session would be closing) is a connection-level
        C{bad-command}.
        """
        command_id = frame.command_id
        if command_id == self.last_command_id + 1:
            self.last_command_id = command_id
            if type(frame) is f.Send:
                self.session.answer_pacing.send_arrived()
            return True
        if replayable and 1 <= command_id <= self.last_command_id:
            held = self.held.get(command_id)
            if held is not None:
                self.session.write(held)
            return False
        self.session.connection.machine.protocol_error(
            f.BAD_COMMAND,
            f"{type(frame).__name__} has command id {command_id}, "
            f"expected {self.last_command_id + 1}",
        )
        return False

    def accept_batch(self, frame: f.SendBatch) -> int:
        """
        How many of C{frame}'s leading commands the session already
        received (a client replaying after a resume: their held answers
        are re-sent, they are not carried out again), or -1 when the batch
        does not follow the last command (a connection-level
        C{bad-command}, as for any command out of sequence).
        """
        first, last = frame.first_command_id, frame.command_id
        received = self.last_command_id
        if 1 <= first <= received + 1:
            if last > received:
                self.last_command_id = last
                self.session.answer_pacing.send_arrived()
            skip = min(last, received) - first + 1
            if skip:
                self._resend(range(first, first + skip))
            return skip
        self.session.connection.machine.protocol_error(
            f.BAD_COMMAND,
            f"SendBatch has command ids {first} to {last}, expected {received + 1} next",
        )
        return -1

    def _resend(self, command_ids) -> int:
        """
        Write the held answers of C{command_ids}, in order, each once (a
        Confirmed answers several commands).  Returns how many were held.
        """
        held, written, count = self.held, None, 0
        for command_id in command_ids:
            answer = held.get(command_id)
            if answer is not None:
                count += 1
                if answer is not written:
                    self.session.write(answer)
                    written = answer
        return count

    # -- answering --------------------------------------------------------------

    def answer(self, command_id: int, frame, done: bool = True) -> None:
        """
        Send the answer of a command, hold it until the client reports
        holding it, and count the command as carried out (unless C{done}
        is false: a Send a transaction held was carried out when held).
        """
        self._hold(command_id, command_id, frame)
        if type(frame) is f.Confirm and frame.msg_id:
            self.session.write_send_answer(frame)
        else:
            self.session.write(frame)
        if done:
            self.done(command_id, answered=True)

    def confirm_run(self, first: int, msg_ids: list) -> None:
        """
        Answer a run of a batch's Sends that were all accepted with one
        C{Confirmed}, and count them as carried out.
        """
        last = first + len(msg_ids) - 1
        frame = f.Confirmed(first, msg_ids)
        self._hold(first, last, frame)
        self.session.write_send_answer(frame)
        self.done_through(first, last)

    def _hold(self, first: int, last: int, frame) -> None:
        session = self.session
        if session.resumable:
            held = self.held
            for command_id in range(first, last + 1):
                held[command_id] = frame
            if len(held) > MAX_HELD_ANSWERS:
                session.not_resumable(f"more than {MAX_HELD_ANSWERS} answers were not "
                                      "reported received")

    def refuse(self, command_id: int, failure, doing: str) -> None:
        """
        Answer a command that failed with C{failure}: with the error's own
        code when it has one, else C{internal-error} (and log it: in a
        line when the disk was full, L{StoreFull}).  Not
        when the router's store closed under it: the router stops, and
        has closed its client connections first (an HA instance's with
        C{not-active}), so the client fails the call as unblocked and
        retries it elsewhere.
        """
        error = failure.value
        code = getattr(error, "code", None)
        session_id = self.session.session_id
        if failure.check(ExecutorStopped):
            log.info("client session {session}: {doing} not finished: the router stopped",
                     session=session_id, doing=doing)
        elif isinstance(error, MeshrouteError) and type(code) is str:
            self.answer(command_id, f.Error(command_id, code, str(error)))
        elif failure.check(StoreFull):
            # A line, not a traceback per command (docs/client-protocol.md,
            # internal-error).
            log.warn("client session {session}: {doing} failed: {error}",
                     session=session_id, doing=doing, error=error)
            self.answer(command_id, f.Error(command_id, f.INTERNAL_ERROR,
                                            f"{doing} failed in the router: {error}"))
        else:
            log.failure("client session {session}: {doing} failed", failure,
                        session=session_id, doing=doing)
            self.answer(command_id,
                        f.Error(command_id, f.INTERNAL_ERROR, f"{doing} failed in the router"))

    # -- Processed --------------------------------------------------------------

    def done(self, command_id: int, answered: bool = False) -> None:
        """
        Command C{command_id} has been carried out: C{Processed} covers it
        once every command before it is done too.  C{answered}: its answer
        was written (the client needs no C{Processed} for it).
        """
        if not answered and command_id > self.unanswered_done:
            self.unanswered_done = command_id
        if command_id != self.processed_up_to + 1:
            self._done_above.add(command_id)
            return
        above = self._done_above
        n = command_id
        while n + 1 in above:
            n += 1
            above.discard(n)
        self.processed_up_to = n
        self._schedule_processed()

    def done_through(self, first: int, last: int) -> None:
        """
        Commands C{first} to C{last} (a batch's sends) have been carried
        out and answered together (L{confirm_run}).
        """
        if first != self.processed_up_to + 1:
            self._done_above.update(range(first, last + 1))
            return
        self.processed_up_to = first - 1
        self._done_above.update(range(first + 1, last + 1))
        self.done(first, answered=True)

    def _schedule_processed(self) -> None:
        if (self._processed_call is None and self.unanswered_done > self._processed_sent
                and self.session.connection is not None):
            self._processed_call = self.session.clock.callLater(0, self._send_processed)

    def _send_processed(self) -> None:
        self._processed_call = None
        if self.session.connection is not None and self.processed_up_to > self._processed_sent:
            self._processed_sent = self.processed_up_to
            self.session.write(f.Processed(self.processed_up_to))

    # -- what the client holds --------------------------------------------------

    def forget(self, answered_up_to: int) -> None:
        """
        The client holds the answers up to C{answered_up_to}: they are no
        longer held.
        """
        held = self.held
        if held and answered_up_to > 0:
            for command_id in [c for c in held if c <= answered_up_to]:
                del held[command_id]

    def resend(self, answered_up_to: int) -> int:
        """
        The session is resumed on a new connection by a client that holds
        the answers up to C{answered_up_to}: re-send the others.  Returns
        how many answers were held.
        """
        self.forget(answered_up_to)
        return self._resend(sorted(self.held))

    def restart_processed(self) -> None:
        """
        The resumed session carries on: its new connection is told
        C{Processed} afresh.
        """
        self._processed_sent = 0
        self._schedule_processed()

    def detached(self) -> None:
        """
        The connection is gone: no C{Processed} is due.
        """
        if self._processed_call is not None:
            if self._processed_call.active():
                self._processed_call.cancel()
            self._processed_call = None
