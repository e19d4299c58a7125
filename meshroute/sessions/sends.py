"""
A served session's Sends on their way to the engine: each C{Send} is one
C{engine.submit}, each C{SendBatch} one C{engine.submit_many} (one store
call), answered when it fires; a Send the user may not make is answered
C{not-allowed} without reaching the engine, and inside a transaction
(L{meshroute.sessions.transaction}) a Send is held until the commit
instead.

A client that pipelines faster than the store commits is slowed down by
TCP instead of growing the router's memory: at L{MAX_SENDS_IN_PROGRESS}
Sends submitted and not yet answered the router stops reading its
connection, and reads again at L{RESUME_SENDS_AT}.  A publication is
answered once it is in C{$topic}, before its copies are made, so a client
publishing faster than the fan-out copies is slowed down by the same
means while the router holds its topic publishers
(L{meshroute.topics.backlog}): its connection is not read from its first
publication then until the fan-out has caught up (L{TOPICS_BEHIND}).
"""

from dataclasses import dataclass, field

from twisted.internet.defer import maybeDeferred, succeed
from twisted.python.failure import Failure

from meshroute.expiry import expires_at, expiring_sends
from meshroute.messages import TOPIC_PREFIX
from meshroute.sessions.permissions import NotAllowed
from meshroute.wire import client_frames as f

#: Sends in progress (submitted, not yet confirmed or refused) at which the
#: router stops reading from the connection, and the level at which it
#: reads again.
MAX_SENDS_IN_PROGRESS = 8192
RESUME_SENDS_AT = MAX_SENDS_IN_PROGRESS // 2

#: Why the router stops reading a publisher's connection while the topic
#: fan-out is behind (C{ConnectionCore.pause}'s reasons).
TOPICS_BEHIND = "topics-behind"


def submitted(engine, clock, frame: f.Send, notice_id: str = ""):
    """
    Submit C{frame}'s message to C{engine} (its time to live made an
    expiry by C{clock}); a Deferred firing with its message id.  A
    session's Sends go this way, and what a protocol sends on a client's
    behalf once its session is gone (an MQTT will).

    @param notice_id: what the message's expiry notice names its session
        by, if it asks for one.
    """
    if frame.ttl_ms:
        return maybeDeferred(engine.submit, frame.address, frame.body, frame.headers,
                             frame.persistent, frame.duplicate_id,
                             expires_at(clock, frame.ttl_ms), frame.notify_expiry, notice_id)
    if frame.duplicate_id:
        return maybeDeferred(engine.submit, frame.address, frame.body, frame.headers,
                             frame.persistent, duplicate_id=frame.duplicate_id)
    return maybeDeferred(engine.submit, frame.address, frame.body, frame.headers,
                         frame.persistent)


@dataclass(eq=False)
class Sends:
    """
    The Sends of one served session that the engine has not answered yet.

    @ivar session: the L{meshroute.sessions.served.ServedSession} they are
        the Sends of: its engine, its user's permissions, its transaction,
        and its L{meshroute.sessions.answers.Answers}, which answer them.
    @ivar in_progress: Sends submitted to the engine and not yet answered.
    @ivar paused: the connection is not read for them (at
        L{MAX_SENDS_IN_PROGRESS}).
    @ivar held: the session published while the router holds its topic
        publishers, and waits to be read again (L{TOPICS_BEHIND}).
    """

    session: object = field(repr=False)
    in_progress: int = 0
    paused: bool = False
    held: bool = False

    # -- taking them ------------------------------------------------------------

    def take(self, frame: f.Send) -> None:
        """
        A Send the session accepted in sequence: refused if the user may
        not make it, held if a transaction is open, else relayed.
        """
        session = self.session
        if session.guard is not None and not session.guard.may_send(frame.address):
            self.refuse(frame.command_id, frame.address)
        elif session.transaction_core.holding:
            session.transaction.send(frame)
        else:
            self.relay(frame)

    def take_batch(self, frame: f.SendBatch, skip: int) -> None:
        """
        The commands of C{frame} after its first C{skip} (a replay's):
        relayed together, or (in a transaction) held one by one as Sends.
        """
        if not self.session.transaction_core.holding:
            self.relay_batch(frame, skip)
            return
        first = frame.first_command_id
        for offset in range(skip, len(frame.messages)):
            self.take(f.Send(first + offset, *frame.messages[offset]))

    def take_many(self, sends: list) -> None:
        """
        Consecutive Sends (consecutive command ids) a protocol adapter
        read at once: relayed together as a batch is, with one store
        call, yet each answered by its own C{Confirm} or C{Error} (its
        client knows nothing of batches).  In a transaction they are held
        one by one, and so they are taken when the user may not make one
        of them: its refusal may end the connection (STOMP's), and the
        client's frames after it are then not carried out.
        """
        session = self.session
        guard = session.guard
        if (len(sends) == 1 or session.transaction_core.holding
                or guard is not None and not all(guard.may_send(send.address)
                                                 for send in sends)):
            for send in sends:
                if session.connection is None:
                    return
                self.take(send)
            return
        self._relay_items(sends[0].command_id, [_item(send) for send in sends], True)

    def refuse(self, command_id: int, address: str) -> None:
        """
        Answer a Send the user may not make C{not-allowed}; in a
        transaction, the transaction can then only roll back (as after
        any other refused Send of it).
        """
        session = self.session
        detail = session.guard.send_refusal(address)
        if session.transaction_core.holding:
            session.transaction_core.refused = detail
        session.answers.answer(command_id, f.Error(command_id, f.NOT_ALLOWED, detail))

    # -- relaying them ----------------------------------------------------------

    def relay(self, frame: f.Send) -> None:
        """
        Submit C{frame} to the engine; answer it when that fires.
        """
        session = self.session
        command_id = frame.command_id
        d = submitted(session.engine, session.clock, frame, session.notice_id)
        self._started(1)
        if session.engine.topic_backlog.holds_publishers():
            self._hold_if_publishing((frame.address,))
        d.addCallbacks(self._sent, self._send_failed, (command_id,), None, (command_id,))

    def relay_batch(self, frame: f.SendBatch, skip: int) -> None:
        """
        Carry out the commands of C{frame} after its first C{skip} (a
        replay's), with ONE call of the engine (one store call), and
        answer them together when it fires.
        """
        self._relay_items(frame.first_command_id + skip,
                          frame.messages[skip:] if skip else frame.messages, False)

    def _relay_items(self, first: int, items: list, each: bool) -> None:
        """
        Submit C{items} (a L{f.SendBatch}'s messages), the commands from
        C{first} on, with one C{engine.submit_many}; answer them when it
        fires, each by its own C{Confirm} if C{each}, else a
        C{Confirmed} per run of accepted ones.
        """
        session = self.session
        messages = expiring_sends(items, session.clock, session.notice_id)
        n = len(messages)
        if session.guard is not None:
            d = self._submit_allowed(messages)
        else:
            d = session.engine.submit_many(messages)
        self._started(n)
        if session.engine.topic_backlog.holds_publishers():
            self._hold_if_publishing(message[0] for message in messages)
        d.addCallbacks(self._sent_batch, self._send_batch_failed, (first, each), None,
                       (first, n))

    def _submit_allowed(self, messages: list):
        """
        C{engine.submit_many} of the messages the user may send; those it
        may not get a C{not-allowed} outcome in their place, so that the
        batch is answered in order as any batch with refusals is.
        """
        guard, engine = self.session.guard, self.session.engine
        allowed = [guard.may_send(message[0]) for message in messages]
        if all(allowed):
            return engine.submit_many(messages)

        def merge(outcomes: list) -> list:
            taken = iter(outcomes)
            return [next(taken) if ok else Failure(NotAllowed(
                guard.send_refusal(message[0])))
                for ok, message in zip(allowed, messages)]

        permitted = [message for ok, message in zip(allowed, messages) if ok]
        d = engine.submit_many(permitted) if permitted else succeed([])
        return d.addCallback(merge)

    def _started(self, n: int) -> None:
        self.in_progress += n
        if self.in_progress >= MAX_SENDS_IN_PROGRESS and not self.paused:
            self.paused = True
            self.session.connection.pause()

    def _hold_if_publishing(self, addresses) -> None:
        """
        The router holds its topic publishers: stop reading this
        connection if one of C{addresses} is a topic, until they are read
        again.
        """
        if self.held or not any(address.startswith(TOPIC_PREFIX) for address in addresses):
            return
        self.held = True
        if self.session.connection is not None:
            self.session.connection.pause(TOPICS_BEHIND)
        self.session.engine.topic_backlog.wait(self._read_again)

    def _read_again(self) -> None:
        "The fan-out caught up: read the publisher's connection again."
        self.held = False
        if self.session.connection is not None:
            self.session.connection.resume(TOPICS_BEHIND)

    # -- their answers ----------------------------------------------------------

    def _sent(self, msg_id: str, command_id: int) -> None:
        self.session.answers.answer(command_id, f.Confirm(command_id, msg_id))
        self._done(1)

    def _send_failed(self, failure, command_id: int) -> None:
        self.session.answers.refuse(command_id, failure, "send")
        self._done(1)

    def _sent_batch(self, outcomes: list, first: int, each: bool) -> None:
        """
        Answer a batch: an Error for each refused send, and for the
        accepted ones a Confirm each (C{each}) or one Confirmed per run.
        """
        answers = self.session.answers
        run_start, msg_ids = first, []
        for offset, outcome in enumerate(outcomes):
            command_id = first + offset
            if type(outcome) is str:
                if each:
                    answers.answer(command_id, f.Confirm(command_id, outcome))
                else:
                    msg_ids.append(outcome)
                continue
            if msg_ids:
                answers.confirm_run(run_start, msg_ids)
                msg_ids = []
            answers.refuse(command_id, outcome, "send")
            run_start = command_id + 1
        if msg_ids:
            answers.confirm_run(run_start, msg_ids)
        self._done(len(outcomes))

    def _send_batch_failed(self, failure, first: int, n: int) -> None:
        # submit_many reports each send's failure as its outcome; this is
        # a bug of its own.
        for command_id in range(first, first + n):
            self.session.answers.refuse(command_id, failure, "send")
        self._done(n)

    def _done(self, n: int) -> None:
        self.in_progress -= n
        if self.paused and self.in_progress <= RESUME_SENDS_AT:
            self.paused = False
            if self.session.connection is not None:
                self.session.connection.resume()
        self.session.check_drained()

    # -- the connection ---------------------------------------------------------

    def detached(self) -> None:
        "The connection is gone: nothing is paused on it."
        self.paused = False

    def reattached(self, connection) -> None:
        """
        The session is resumed on C{connection}: not read while too many
        Sends are in progress, or while it waits for the topic fan-out.
        """
        if self.in_progress >= MAX_SENDS_IN_PROGRESS:
            self.paused = True
            connection.pause()
        if self.held:
            connection.pause(TOPICS_BEHIND)


def _item(send: f.Send) -> tuple:
    "C{send} as an item of a L{f.SendBatch}'s messages."
    if send.ttl_ms:
        return (send.address, send.headers, send.body, send.persistent, send.duplicate_id,
                send.ttl_ms, send.notify_expiry)
    return send.address, send.headers, send.body, send.persistent, send.duplicate_id
