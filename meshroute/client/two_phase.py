"""
What two-phase commit adds to a transacted client (client protocol
version 7, docs/client-protocol.md "Two-phase commit"), in the names of
Python's DB-API two-phase-commit extension (PEP 249), so that a Python
transaction manager drives meshroute as it drives a database: the
transaction id, L{Xid}; the commands it adds and how their refusals
read (L{error_of}).  The client's transaction state is
L{meshroute.client.transactions}'.
"""

from typing import NamedTuple

from meshroute.client.errors import (
    ClientError,
    HeuristicOutcome,
    TransactionRolledBack,
    UnknownTransaction,
)
from meshroute.wire import client_frames as f

#: The commands of two-phase commit: the current transaction prepared,
#: or committed in one phase under its xid (both end the transaction);
#: a transaction committed or rolled back by its xid; the prepared ones
#: asked for.
PREPARE = "prepare"
ONE_PHASE_COMMIT = "one-phase-commit"
COMMIT_XID = "commit-xid"
ROLLBACK_XID = "rollback-xid"
RECOVER = "recover"

#: The commands that name a transaction by its xid, whichever session
#: prepared it: they belong to no transaction of the client's.
BY_XID = frozenset({COMMIT_XID, ROLLBACK_XID, RECOVER})

#: The commands that end the client's current transaction.
ENDING = frozenset({PREPARE, ONE_PHASE_COMMIT})


class Xid(NamedTuple):
    """
    A transaction id, PEP 249's C{Connection.xid()}: XA's format id,
    global transaction id and branch qualifier.
    """

    format_id: int
    global_transaction_id: str
    branch_qualifier: str


def checked_xid(xid) -> Xid:
    """
    C{xid} (an L{Xid}, or any triple) as an L{Xid}.

    @raise ValueError: it is not a triple of a format id from 0 to
        2**31 - 1, a global transaction id of 1 to 64 characters and a
        branch qualifier of at most 64 (XA's, PEP 249's).
    """
    try:
        xid = Xid(*xid)
    except TypeError:
        raise ValueError(f"an xid is (format_id, global_transaction_id, branch_qualifier), "
                         f"not {xid!r}") from None
    problem = f.xid_problem(*xid)
    if problem is not None:
        raise ValueError(problem)
    return xid


def error_of(kind: str, frame: f.Error) -> ClientError:
    """
    The error a two-phase command of C{kind} fails with when the router
    answers C{frame}: a prepare or a one-phase commit refused did nothing
    (L{TransactionRolledBack}); a command by xid tells what became of
    the transaction (L{UnknownTransaction}, L{HeuristicOutcome}) or why
    it could not be done (a L{ClientError}: the transaction stays as it
    was).
    """
    if kind in ENDING:
        return TransactionRolledBack(frame.code, frame.detail)
    if frame.code == f.UNKNOWN_XID:
        return UnknownTransaction(frame.code, frame.detail)
    if frame.code in (f.HEURISTIC_MIXED, f.HEURISTIC_COMMIT):
        return HeuristicOutcome(frame.code, frame.detail)
    return ClientError(frame.code, frame.detail)
