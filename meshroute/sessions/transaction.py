"""
The router's side of a client transaction (protocol version 2,
docs/client-protocol.md "Transactions"), as a small Automat machine that
each session owns beside its own:

    idle ── begin ──▶ holding ── commit / rollback / prepare / end ──▶ idle

 - C{idle}: no transaction: the session carries out Sends and Acks at
   once, as in version 1, without handing them to this machine (it
   reads C{TransactionCore.holding}, which only this machine's
   behaviours change).
 - C{holding}: after C{Begin}: Sends and Acks are held until C{Commit},
   which carries them all out in one store call
   (L{meshroute.router.engine.MessageEngine.commit}), or C{Rollback} (or the
   session ending), which discards the Sends and gives the acknowledged
   deliveries back to their queues, flagged redelivered.

Two-phase commit (protocol version 7): C{Prepare} hands the held Sends
and Acks to the router's prepared transactions, durably, under an xid
(L{meshroute.sessions.two_phase}, which answers the held Sends once the
transaction is decided, by this session or another); the machine is
idle again at once, and the next transaction may begin.  A one-phase
C{CommitXid} is a C{Commit} that records its xid as committed.

A C{Begin} while holding, or a C{Commit}, C{Rollback}, C{Prepare} or
one-phase C{CommitXid} while idle, has
no transition (C{NoTransition}): the session turns it into a
connection-level C{bad-command}, as for any command out of place.

The transaction lives in the session, not in the connection: a session
resumed on a new connection keeps its transaction, and a C{Commit}
replayed after a resume is carried out once (its held answer is re-sent).
A session that ends (closed, expired, failed) rolls its transaction back.
"""

from dataclasses import dataclass, field
from typing import Protocol

from automat import TypeMachineBuilder
from twisted.internet.defer import maybeDeferred

from meshroute.expiry import expires_at
from meshroute.wire import client_frames as f

#: Most Sends one transaction holds, and most bytes of them (bodies,
#: headers, addresses, duplicate ids; see L{held_size}): a Send beyond
#: either is refused (C{transaction-too-large}) and the transaction can
#: then only roll back.  The router holds a transaction's messages in
#: memory until the commit, so this bounds what one client can make it
#: hold.
MAX_TRANSACTION_SENDS = 10_000
MAX_TRANSACTION_BYTES = 64 * 1024 * 1024


def held_size(frame: f.Send) -> int:
    """
    The bytes of C{frame} a transaction holds: its body and its texts
    (a Send of empty body may carry megabytes of headers).
    """
    texts = [frame.address, frame.duplicate_id, *frame.headers.keys(), *frame.headers.values()]
    return len(frame.body) + sum(len(text.encode()) for text in texts)


class TransactionInputs(Protocol):
    """
    Everything that can happen to a session's transaction.
    """

    def begin(self, frame: f.Begin) -> None:
        "The client starts a transaction."

    def send(self, frame: f.Send) -> None:
        "The client sends a message."

    def ack(self, frame: f.Ack) -> None:
        "The client is done with some deliveries."

    def commit(self, frame: f.Commit | f.CommitXid) -> None:
        "The client commits the transaction (a one-phase CommitXid too)."

    def rollback(self, frame: f.Rollback) -> None:
        "The client rolls the transaction back."

    def prepare(self, frame: f.Prepare) -> None:
        "The client prepares the transaction for two-phase commit (version 7)."

    def end(self) -> None:
        "The session ends (Close, expired, failed): nobody can commit any more."


@dataclass(eq=False)
class TransactionCore:
    """
    What one transaction holds, and the I/O of its end.

    @ivar session: the L{meshroute.sessions.served.ServedSession} it belongs
        to: its answers answer the commands, its deliveries hold the
        deliveries acknowledged.
    @ivar sends: the Send frames held, in order.
    @ivar acks: the deliveries acknowledged, taken from their consumers
        (a L{meshroute.router.transaction_acks.TransactionAcks}).
    @ivar size: the bytes of the held Sends (L{held_size}).
    @ivar refused: why the transaction can only roll back ("" while it can
        commit).
    @ivar holding: the machine is in C{holding} (set and cleared by its
        behaviours only), so that the session carries Sends and Acks out
        at once outside a transaction, without the machine.
    @ivar commits_in_progress: Commits not yet durable (or failed): a
        closing session waits for them.
    """

    session: object = field(repr=False)
    sends: list = field(default_factory=list)
    acks: object = None
    size: int = 0
    refused: str = ""
    holding: bool = False
    commits_in_progress: int = 0

    def start(self, frame: f.Begin) -> None:
        self.holding = True
        self.sends = []
        self.acks = self.session.engine.queues.transaction()
        self.size = 0
        self.refused = ""
        self.session.answers.done(frame.command_id)

    def _take(self) -> tuple[list, object]:
        self.holding = False
        sends, acks = self.sends, self.acks
        self.sends, self.acks = [], None
        return sends, acks

    def hold_send(self, frame: f.Send) -> None:
        """
        Hold C{frame} until the commit.  Holding it is carrying it out:
        C{Processed} covers it, and its answer comes with the commit (or
        the rollback).
        """
        answers, command_id = self.session.answers, frame.command_id
        size = held_size(frame)
        if len(self.sends) >= MAX_TRANSACTION_SENDS or (
                self.size + size > MAX_TRANSACTION_BYTES):
            self.refused = (f"a transaction holds at most {MAX_TRANSACTION_SENDS} messages and "
                            f"{MAX_TRANSACTION_BYTES} bytes of messages")
            answers.answer(command_id, f.Error(command_id, f.TRANSACTION_TOO_LARGE,
                                               self.refused))
            return
        self.sends.append(frame)
        self.size += size
        answers.done(command_id)

    def hold_ack(self, frame: f.Ack) -> None:
        """
        Take the acknowledged deliveries into the transaction.
        """
        session, deliveries = self.session, self.session.deliveries
        for number, delivery_ids in deliveries.owned(frame.delivery_ids).items():
            self.acks.add(deliveries.subscriptions[number], delivery_ids)
        session.answers.done(frame.command_id)

    def commit(self, frame: f.Commit | f.CommitXid) -> None:
        """
        Carry out every held Send and Ack in one store call (a one-phase
        CommitXid's with its xid recorded as committed); answer the
        Sends, then the Commit, once it is durable.
        """
        sends, acks = self._take()
        session, command_id = self.session, frame.command_id
        if self._rolled_back_instead(command_id, sends, acks):
            return
        self.commits_in_progress += 1
        items = [(s.address, s.body, s.headers, s.persistent, s.duplicate_id,
                  expires_at(session.clock, s.ttl_ms), s.notify_expiry, session.notice_id)
                 if s.ttl_ms else (s.address, s.body, s.headers, s.persistent, s.duplicate_id)
                 for s in sends]
        if isinstance(frame, f.CommitXid):
            d = maybeDeferred(session.engine.prepared.commit_one_phase, frame.xid, session.user,
                              items, acks.entry_ids())
        else:
            d = maybeDeferred(session.engine.commit, items, acks.entry_ids())
        d.addCallbacks(self._committed, self._commit_failed, (command_id, sends, acks), None,
                       (command_id, sends, acks))

    def _committed(self, msg_ids: list, command_id: int, sends: list, acks) -> None:
        answers = self.session.answers
        for send, msg_id in zip(sends, msg_ids):
            answers.answer(send.command_id, f.Confirm(send.command_id, msg_id), done=False)
        acks.committed()
        answers.answer(command_id, f.Confirm(command_id, ""))
        self._commit_done()

    def _commit_failed(self, failure, command_id: int, sends: list, acks) -> None:
        self.discard(sends, acks, f"the commit failed: {failure.getErrorMessage()}")
        self.session.answers.refuse(command_id, failure, "commit")
        self._commit_done()

    def _commit_done(self) -> None:
        self.commits_in_progress -= 1
        self.session.check_drained()

    def prepare(self, frame: f.Prepare) -> None:
        """
        Hand every held Send and Ack to the router's prepared
        transactions (L{meshroute.sessions.two_phase.TwoPhase.prepare});
        a transaction that can only roll back is rolled back instead.
        """
        sends, acks = self._take()
        if not self._rolled_back_instead(frame.command_id, sends, acks):
            self.session.two_phase.prepare(frame, sends, acks)

    def _rolled_back_instead(self, command_id: int, sends: list, acks) -> bool:
        """
        Whether the transaction can only roll back: it is then rolled back,
        and its end (command C{command_id}) answered C{rolled-back}.
        """
        if not self.refused:
            return False
        self.discard(sends, acks, self.refused)
        self.session.answers.answer(command_id, f.Error(command_id, f.ROLLED_BACK, self.refused))
        return True

    def rollback(self, frame: f.Rollback) -> None:
        sends, acks = self._take()
        self.discard(sends, acks, "the client rolled the transaction back")
        self.session.answers.answer(frame.command_id, f.Confirm(frame.command_id, ""))

    def abandon(self) -> None:
        sends, acks = self._take()
        self.discard(sends, acks, "the session ended before the commit")

    def discard(self, sends: list, acks, why: str) -> None:
        """
        Nothing of the transaction is done: its Sends are answered
        C{rolled-back}, its deliveries go back to their queues.
        """
        answers = self.session.answers
        for send in sends:
            answers.answer(send.command_id, f.Error(send.command_id, f.ROLLED_BACK, why),
                           done=False)
        acks.rolled_back()


def _build_transaction_machine():
    builder = TypeMachineBuilder(TransactionInputs, TransactionCore)
    idle = builder.state("idle")
    holding = builder.state("holding")

    @idle.upon(TransactionInputs.begin).to(holding)
    def begin(inputs: TransactionInputs, core: TransactionCore, frame: f.Begin) -> None:
        core.start(frame)

    @holding.upon(TransactionInputs.send).loop()
    def hold_send(inputs: TransactionInputs, core: TransactionCore, frame: f.Send) -> None:
        core.hold_send(frame)

    @holding.upon(TransactionInputs.ack).loop()
    def hold_ack(inputs: TransactionInputs, core: TransactionCore, frame: f.Ack) -> None:
        core.hold_ack(frame)

    @holding.upon(TransactionInputs.commit).to(idle)
    def commit(inputs: TransactionInputs, core: TransactionCore, frame: f.Commit) -> None:
        core.commit(frame)

    @holding.upon(TransactionInputs.rollback).to(idle)
    def rollback(inputs: TransactionInputs, core: TransactionCore, frame: f.Rollback) -> None:
        core.rollback(frame)

    @holding.upon(TransactionInputs.prepare).to(idle)
    def prepare(inputs: TransactionInputs, core: TransactionCore, frame: f.Prepare) -> None:
        core.prepare(frame)

    @holding.upon(TransactionInputs.end).to(idle)
    def end(inputs: TransactionInputs, core: TransactionCore) -> None:
        core.abandon()

    idle.upon(TransactionInputs.end).loop().returns(None)
    return builder.build()


#: Machine factory: C{TRANSACTION_MACHINE(core)} returns the inputs object.
TRANSACTION_MACHINE = _build_transaction_machine()
