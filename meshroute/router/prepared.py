"""
Prepared (two-phase) client transactions, router-wide: a client
transaction prepared under an xid (client protocol version 7,
docs/client-protocol.md "Two-phase commit") outlives its session, its
connection and the router process, and is decided (committed or rolled
back) by any session of the user that prepared it, on this router or on
the instance that took over from it.

The store is the authority (L{meshroute.store.prepared}): what is
prepared, its sends, the queue entries it locked, and the xids committed
within the duplicate-id window are all there, replicated or shared with
the rest of the store, so nothing here is loaded at start.  Memory holds
only what cannot outlive the process: the session that prepared a
transaction, which answers its held Sends once it is decided, and the
non-persistent deliveries it acknowledged.

The rules a transaction manager relies on (XA's, which PEP 249's
two-phase-commit extension follows):

 - A prepare checks the sends as a commit would (addresses, routers,
   backlogs, duplicate ids): once prepared, a commit cannot be refused;
   it accepts the sends then, exactly once, and consumes the messages
   the transaction acknowledged, which nothing delivered meanwhile.
 - Committing an xid committed before (within the window) succeeds
   again, changing nothing: a commit retried after a failover swallowed
   its answer completes exactly once.  An xid neither prepared nor
   committed within the window is L{UnknownXid}: never prepared, or
   rolled back.
 - Operations on one xid run one after the other, in the order asked.
 - An outcome the router could not carry out in full is never silent:
   L{HeuristicMixed} (some entries the transaction locked were no longer
   there) or L{HeuristicCommit} (a rollback of a committed xid), each
   with a C{transaction.heuristic} event and a logged error.
"""

from collections.abc import Callable

from twisted.internet.defer import Deferred, maybeDeferred
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure

from meshroute import events as event_names
from meshroute.errors import MeshrouteError
from meshroute.expiry import expires_at

log = Logger()

#: What the store knows of an xid (L{meshroute.store.prepared.find}).
_PREPARED = "prepared"


class UnknownXid(MeshrouteError):
    """
    No transaction of that xid is prepared, and none was committed within
    the duplicate-id window (the C{unknown-xid} error code).
    """

    code = "unknown-xid"


class HeuristicMixed(MeshrouteError):
    """
    The transaction's outcome was carried out for part of it only: some
    entries it had locked were no longer there (the C{heuristic-mixed}
    error code).
    """

    code = "heuristic-mixed"


class HeuristicCommit(MeshrouteError):
    """
    A rollback of a transaction that was committed: nothing was rolled
    back (the C{heuristic-commit} error code).
    """

    code = "heuristic-commit"


class NotTheirs(MeshrouteError):
    """
    The transaction was prepared by another user (the C{not-allowed}
    error code).
    """

    code = "not-allowed"


def xid_field(xid: tuple) -> list:
    """
    An xid as events and answers carry it: C{[format_id, global_id,
    branch]}.
    """
    return list(xid)


class PreparedTransactions:
    """
    One router's prepared transactions.

    @param store: the router's store (L{meshroute.store.sqlite.SQLiteStore}).
    @param acceptance: the engine's
        L{meshroute.router.acceptance.Acceptance}: checks sends, accepts
        a commit's.
    @param queues: the engine's L{meshroute.router.queues.QueueManager}.
    @param events: the event log.
    @param clock: for the expiry of a committed send with a time to live.
    """

    def __init__(self, store, acceptance, queues, events, clock: IReactorTime) -> None:
        self._store = store
        self._acceptance = acceptance
        self._queues = queues
        self._events = events
        self._clock = clock
        # The operation on each xid that the next waits for.
        self._busy: dict[tuple, Deferred] = {}
        # The session that prepared each xid here, told its decision.
        self._owners: dict[tuple, Callable[[list | None], None]] = {}
        # The non-persistent deliveries each xid acknowledged (memory only).
        self._transient: dict[tuple, object] = {}

    # -- one xid at a time -------------------------------------------------------

    def _serially(self, xid: tuple, fn, *args) -> Deferred:
        """
        C{fn(*args)} once the operation on C{xid} in progress, if any, is
        done.

        @return: Deferred firing with what C{fn} gives.
        """
        previous = self._busy.get(xid)
        finished = self._busy[xid] = Deferred()
        result = Deferred()

        def run(_=None) -> None:
            maybeDeferred(fn, *args).addBoth(settle)

        def settle(outcome) -> None:
            if self._busy.get(xid) is finished:
                del self._busy[xid]
            if isinstance(outcome, Failure):
                result.errback(outcome)
            else:
                result.callback(outcome)
            finished.callback(None)

        if previous is None:
            run()
        else:
            previous.addCallback(run)
        return result

    def _found(self, found: tuple | None, xid: tuple, user: str | None) -> tuple:
        """
        What the store knows of C{xid}, for C{user} to decide.

        @raise UnknownXid: nothing.
        @raise NotTheirs: it is another user's (on a router with users).
        """
        if found is None:
            raise UnknownXid(f"no transaction {xid_field(xid)} is prepared, and none was "
                             "committed within the duplicate-id window")
        if user is not None and found[2] != user:
            raise NotTheirs(f"transaction {xid_field(xid)} is not this user's")
        return found

    # -- prepare ------------------------------------------------------------------

    def prepare(self, xid: tuple, user: str | None, client_id: str, sends: list, acks,
                decided: Callable[[list | None], None]) -> Deferred:
        """
        Prepare a session's transaction as C{xid}: check its C{sends}
        (C{(address, body, headers, persistent, duplicate_id, ttl_ms,
        notify_expiry, sender)}, as the client sent them) as a commit
        would, then store them and lock the entries of its C{acks} (a
        L{TransactionAcks<meshroute.router.transaction_acks.TransactionAcks>}),
        durably.

        @param decided: called with the sends' message ids once a commit
            of C{xid} is durable, or with None once a rollback is, by
            whichever session decides it (unless L{forget_owner} came
            first).
        @return: Deferred firing with None once prepared; failing with the
            refusal of a send, L{DuplicateXid
            <meshroute.store.prepared.DuplicateXid>} or the store's error:
            nothing was done, and the caller rolls the transaction back.
        """
        return self._serially(xid, self._prepare, xid, user, client_id, sends, acks, decided)

    def _prepare(self, xid, user, client_id, sends, acks, decided) -> Deferred:
        d = self._acceptance.check(sends)
        d.addCallback(lambda _: self._store.prepare(xid, user, client_id, sends,
                                                    acks.entry_ids()))
        d.addCallback(self._prepared, xid, user, client_id, sends, acks, decided)
        return d

    def _prepared(self, _, xid, user, client_id, sends, acks, decided) -> None:
        locked = len(acks.entry_ids())
        acks.prepared()
        if acks.holding:
            self._transient[xid] = acks
        self._owners[xid] = decided
        self._events.emit(event_names.TRANSACTION_PREPARED, xid=xid_field(xid),
                          client_id=client_id, user=user, sends=len(sends), acks=locked)

    def forget_owner(self, xid: tuple) -> None:
        """
        The session that prepared C{xid} ended: nobody waits for its
        decision to answer Sends.
        """
        self._owners.pop(xid, None)

    # -- commit -------------------------------------------------------------------

    def commit(self, xid: tuple, user: str | None) -> Deferred:
        """
        Commit prepared transaction C{xid} for C{user} (None: a router
        without users).

        @return: Deferred firing, once durable, with the message ids of
            its sends, or with None for an xid committed before (within
            the duplicate-id window: nothing done again); failing with
            L{UnknownXid}, L{NotTheirs}, L{HeuristicMixed} (committed, but
            some of the entries it locked were gone), or the store's error
            (it stays prepared).
        """
        return self._serially(xid, self._commit, xid, user)

    def _commit(self, xid: tuple, user: str | None) -> Deferred:
        d = self._store.find_xid(xid)
        d.addCallback(self._found, xid, user)
        d.addCallback(self._commit_found, xid, user)
        return d

    def _commit_found(self, found: tuple, xid: tuple, user: str | None):
        kind, prepared_id, owner = found
        if kind != _PREPARED:
            return None
        d = self._store.prepared_sends(prepared_id)
        d.addCallback(lambda sends: self._acceptance.commit_prepared(
            prepared_id, xid, owner, [self._as_send(send) for send in sends]))
        d.addCallback(self._committed, xid)
        return d

    def _as_send(self, send: tuple) -> tuple:
        """
        A stored send as the acceptance takes it: its time to live, if it
        has one, runs from now, the commit being its acceptance.
        """
        address, body, headers, persistent, duplicate_id, ttl_ms, notify, sender = send
        if not ttl_ms:
            return (address, body, headers, persistent, duplicate_id)
        return (address, body, headers, persistent, duplicate_id,
                expires_at(self._clock, ttl_ms), notify, sender)

    def _committed(self, result: tuple, xid: tuple) -> list:
        msg_ids, consumed, missing = result
        self._queues.consumed_entries(consumed)
        self._decided(xid, msg_ids)
        self._events.emit(event_names.TRANSACTION_COMMITTED, xid=xid_field(xid),
                          one_phase=False, sends=len(msg_ids), acks=len(consumed))
        if missing:
            raise self._heuristic(HeuristicMixed, xid, "committed", missing)
        return msg_ids

    def commit_one_phase(self, xid: tuple, user: str | None, sends: list,
                         entry_ids: list) -> Deferred:
        """
        Commit a session's transaction in one phase as C{xid}: as the
        engine's C{commit} does (C{sends} and C{entry_ids} as it takes
        them), recording C{xid} as committed.

        @return: Deferred firing with the sends' message ids once durable;
            failing as the engine's C{commit} does, or with
            L{DuplicateXid<meshroute.store.prepared.DuplicateXid>}, nothing
            done.
        """
        return self._serially(xid, self._commit_one_phase, xid, user, sends, entry_ids)

    def _commit_one_phase(self, xid, user, sends, entry_ids) -> Deferred:
        d = self._acceptance.commit(sends, entry_ids, xid, user)
        d.addCallback(self._committed_one_phase, xid, len(entry_ids))
        return d

    def _committed_one_phase(self, msg_ids: list, xid: tuple, acks: int) -> list:
        self._events.emit(event_names.TRANSACTION_COMMITTED, xid=xid_field(xid),
                          one_phase=True, sends=len(msg_ids), acks=acks)
        return msg_ids

    # -- rollback -----------------------------------------------------------------

    def rollback(self, xid: tuple, user: str | None) -> Deferred:
        """
        Roll prepared transaction C{xid} back for C{user}: its sends are
        discarded, the entries it locked go back to their queues, flagged
        redelivered.

        @return: Deferred firing with None once durable; failing with
            L{UnknownXid}, L{NotTheirs}, L{HeuristicCommit} (it was
            committed) or L{HeuristicMixed} (rolled back, but some entries
            it locked were gone).
        """
        return self._serially(xid, self._rollback, xid, user)

    def _rollback(self, xid: tuple, user: str | None) -> Deferred:
        d = self._store.find_xid(xid)
        d.addCallback(self._found, xid, user)
        d.addCallback(self._rollback_found, xid)
        return d

    def _rollback_found(self, found: tuple, xid: tuple) -> Deferred:
        kind, prepared_id, _ = found
        if kind != _PREPARED:
            raise self._heuristic(HeuristicCommit, xid, "committed", 0)
        d = self._store.rollback_prepared(prepared_id)
        d.addCallback(self._rolled_back, xid)
        return d

    def _rolled_back(self, result: tuple, xid: tuple) -> None:
        returned, missing = result
        self._queues.returned_entries(returned)
        self._decided(xid, None)
        self._events.emit(event_names.TRANSACTION_ROLLED_BACK, xid=xid_field(xid),
                          acks=len(returned))
        if missing:
            raise self._heuristic(HeuristicMixed, xid, "rolled-back", missing)

    # -- recover ------------------------------------------------------------------

    def recover(self, user: str | None) -> Deferred:
        """
        @return: Deferred firing with the xids of the transactions C{user}
            (None: anyone) prepared and nobody decided yet, oldest first,
            each C{[format_id, global_id, branch]}.
        """
        return self._store.recover(user)

    # -- the outcome ----------------------------------------------------------------

    def _decided(self, xid: tuple, msg_ids: list | None) -> None:
        """
        What memory holds of C{xid}, now committed (its sends' C{msg_ids})
        or rolled back (None): the non-persistent deliveries it
        acknowledged, and the session that prepared it, which answers its
        held Sends.
        """
        transient = self._transient.pop(xid, None)
        if transient is not None:
            (transient.rolled_back if msg_ids is None else transient.committed)()
        decided = self._owners.pop(xid, None)
        if decided is not None:
            decided(msg_ids)

    def _heuristic(self, error: type, xid: tuple, outcome: str, missing: int) -> MeshrouteError:
        """
        An outcome the transaction manager did not ask for, in full: log
        it, write C{transaction.heuristic}, and return the error that
        tells the client.
        """
        if error is HeuristicCommit:
            why = (f"transaction {xid_field(xid)} was committed; it cannot be rolled back")
        else:
            why = (f"transaction {xid_field(xid)} was {outcome}, but {missing} of the "
                   "messages it acknowledged were no longer held where it locked them")
        log.error("heuristic outcome: {why}", why=why)
        self._events.emit(event_names.TRANSACTION_HEURISTIC, xid=xid_field(xid),
                          outcome=outcome, reason=error.code, missing=missing)
        return error(why)
