"""
A served session's part in two-phase commit (client protocol version 7,
docs/client-protocol.md "Two-phase commit"), beside its current
transaction (L{meshroute.sessions.transaction}): the transactions it
prepared, whose held Sends it answers once they are decided, and the
commands that name a transaction by its xid (C{CommitXid} of a prepared
one, C{RollbackXid}, C{Recover}), which any session of the user may send,
about any transaction of the router (the engine's
L{PreparedTransactions<meshroute.router.prepared.PreparedTransactions>}).

A prepared transaction outlives the session that prepared it: a session
that ends only stops waiting for its decision (the held Sends then go
unanswered, as any command of an ended session), and the transaction
stays prepared until a transaction manager decides it.
"""

from dataclasses import dataclass, field
from functools import partial

from twisted.internet.defer import maybeDeferred

from meshroute.wire import client_frames as f


@dataclass(eq=False)
class TwoPhase:
    """
    What one served session prepared, and its commands by xid.

    @ivar session: the L{meshroute.sessions.served.ServedSession}: its
        engine, its user, its answers.
    @ivar owned: the transactions it prepared and nobody decided yet:
        xid → their held Send frames, in order.
    @ivar in_progress: its Prepares, CommitXids, RollbackXids and
        Recovers not yet answered: a closing session waits for them.
    @ivar ended: the session ended (L{detach}): a prepare that becomes
        durable now has nobody to answer its Sends.
    """

    session: object = field(repr=False)
    owned: dict = field(default_factory=dict)
    in_progress: int = 0
    ended: bool = False

    def prepare(self, frame: f.Prepare, sends: list, acks) -> None:
        """
        Prepare the session's transaction (its held C{sends} and C{acks})
        as C{frame}'s xid; answer the Prepare once it is durable.  If it
        cannot be prepared, it is rolled back, and the Prepare answered
        with why.
        """
        session = self.session
        items = [(s.address, s.body, s.headers, s.persistent, s.duplicate_id, s.ttl_ms,
                  s.notify_expiry, session.notice_id) for s in sends]
        d = maybeDeferred(session.engine.prepared.prepare, frame.xid, session.user,
                          session.client_id, items, acks, partial(self._decided, frame.xid))
        self._started(d, frame, "prepare", lambda _: self._prepared(frame, sends),
                      partial(self._prepare_failed, sends, acks))

    def _prepared(self, frame: f.Prepare, sends: list):
        if self.ended:
            self.session.engine.prepared.forget_owner(frame.xid)
        else:
            self.owned[frame.xid] = sends
        return f.Confirm(frame.command_id, "")

    def _prepare_failed(self, sends: list, acks, failure):
        self.session.transaction_core.discard(
            sends, acks, f"the transaction could not be prepared: {failure.getErrorMessage()}")
        return failure

    def _decided(self, xid: tuple, msg_ids: list | None) -> None:
        """
        Transaction C{xid}, which this session prepared, was committed
        (its sends' C{msg_ids}) or rolled back (None): answer its held
        Sends.
        """
        sends = self.owned.pop(xid, None)
        if sends is None:
            return
        answers = self.session.answers
        if msg_ids is None:
            for send in sends:
                answers.answer(send.command_id, f.Error(
                    send.command_id, f.ROLLED_BACK, "the prepared transaction was rolled back"),
                    done=False)
            return
        for send, msg_id in zip(sends, msg_ids):
            answers.answer(send.command_id, f.Confirm(send.command_id, msg_id), done=False)

    def commit(self, frame: f.CommitXid) -> None:
        """
        Commit a prepared transaction by its xid (any of the user's).
        """
        session = self.session
        d = maybeDeferred(session.engine.prepared.commit, frame.xid, session.user)
        self._started(d, frame, "commit", lambda _: f.Confirm(frame.command_id, ""))

    def rollback(self, frame: f.RollbackXid) -> None:
        """
        Roll a prepared transaction back by its xid (any of the user's).
        """
        session = self.session
        d = maybeDeferred(session.engine.prepared.rollback, frame.xid, session.user)
        self._started(d, frame, "rollback", lambda _: f.Confirm(frame.command_id, ""))

    def recover(self, frame: f.Recover) -> None:
        """
        Answer which transactions of the user are prepared.
        """
        session = self.session
        d = maybeDeferred(session.engine.prepared.recover, session.user)
        self._started(d, frame, "recover",
                      lambda xids: f.Recovered(frame.command_id, [list(x) for x in xids]))

    def _started(self, d, frame, doing: str, answer, failed=None) -> None:
        """
        A command in progress: answer C{frame} with C{answer(result)}
        when C{d} fires, or with the error it fails with (after
        C{failed(failure)}, if given).
        """
        self.in_progress += 1
        if failed is not None:
            d.addErrback(failed)
        d.addCallbacks(lambda result: self.session.answers.answer(frame.command_id,
                                                                  answer(result)),
                       lambda failure: self.session.answers.refuse(frame.command_id, failure,
                                                                   doing))
        d.addBoth(self._done)

    def _done(self, _) -> None:
        self.in_progress -= 1
        self.session.check_drained()

    def detach(self) -> None:
        """
        The session ended: it no longer waits for the decisions of the
        transactions it prepared.
        """
        self.ended = True
        for xid in self.owned:
            self.session.engine.prepared.forget_owner(xid)
        self.owned.clear()
