"""
Prepared (two-phase) client transactions, durably: a transaction prepared
under an xid holds its sends and the queue entries it acknowledged until
a commit or a rollback of that xid decides it, across restarts and
failovers (schema version 11; client protocol version 7,
docs/client-protocol.md "Two-phase commit").  Functions run by the
store's executor (L{meshroute.store.sqlite.SQLiteStore.prepare} and its
siblings).

 - L{prepare} writes the transaction, its sends as the client sent them
   (nothing is accepted yet: no message, no duplicate id), and moves the
   entries it acknowledged from state C{'queue'} to C{'prepared'}: no
   fetch, acknowledgement, expiry or sweep touches them from then on,
   whatever happens to the router.
 - L{commit_prepared} accepts the sends, as a one-phase commit does
   (L{meshroute.store.accepting.accept_each}: duplicate ids are checked
   then), deletes the locked entries, forgets the transaction and records
   its xid as committed, in one transaction.
 - L{rollback_prepared} puts the locked entries back into their queues,
   flagged redelivered, and forgets the transaction.
 - L{commit_one_phase} is a one-phase client commit
   (L{meshroute.store.accepting.commit}) that records its xid as
   committed.

C{committed_xids} keeps the xids committed here for the duplicate-id
window (C{cutoff}: a row older counts as absent, and is pruned with the
duplicate ids, L{meshroute.store.pruning}): a commit retried after its
answer was lost in a failover finds its xid committed.  An xid is
prepared or committed at most once at a time (L{DuplicateXid}).
"""

import sqlite3

import msgpack

from meshroute.errors import MeshrouteError
from meshroute.store.accepting import accept_each
from meshroute.store.accepting import commit as accept_and_consume
from meshroute.store.rows import COLUMNS, as_message, by_key
from meshroute.store.transactions import atomic

_XID = "format_id = ? AND global_id = ? AND branch = ?"
_FIND_PREPARED = f"SELECT id, user_name FROM prepared_transactions WHERE {_XID}"
_FIND_COMMITTED = f"SELECT id, user_name, at FROM committed_xids WHERE {_XID}"
_FORGET_COMMITTED = "DELETE FROM committed_xids WHERE id = ?"
_RECORD_PREPARED = (
    "INSERT INTO prepared_transactions (format_id, global_id, branch, user_name, client_id, "
    "prepared_at) VALUES (?, ?, ?, ?, ?, ?)"
)
_RECORD_SEND = (
    "INSERT INTO prepared_sends (prepared, address, headers, body, persistent, duplicate_id, "
    "ttl_ms, notify_expiry, sender) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
_SENDS_OF = (
    "SELECT address, body, headers, persistent, duplicate_id, ttl_ms, notify_expiry, sender "
    "FROM prepared_sends WHERE prepared = ? ORDER BY id"
)
# The entries acknowledged, moved out of their queues (only those still
# in one: an id not in a queue is not locked, and the caller hears so).
_LOCK = (
    "UPDATE messages SET state = 'prepared' WHERE state = 'queue' "
    "AND id IN (SELECT value FROM json_each(?)) RETURNING id, dest_queue"
)
_RECORD_ACK = "INSERT INTO prepared_acks (entry, prepared) VALUES (?, ?)"
_ACKS_OF = "SELECT count(*) FROM prepared_acks WHERE prepared = ?"
_CONSUME_LOCKED = (
    f"DELETE FROM messages WHERE state = 'prepared' "
    f"AND id IN (SELECT entry FROM prepared_acks WHERE prepared = ?) "
    f"RETURNING id, {COLUMNS}, redelivered"
)
_UNLOCK = (
    f"UPDATE messages SET state = 'queue', redelivered = 1 WHERE state = 'prepared' "
    f"AND id IN (SELECT entry FROM prepared_acks WHERE prepared = ?) "
    f"RETURNING id, {COLUMNS}"
)
_FORGET = (
    "DELETE FROM prepared_acks WHERE prepared = ?1",
    "DELETE FROM prepared_sends WHERE prepared = ?1",
    "DELETE FROM prepared_transactions WHERE id = ?1",
)
_RECORD_COMMITTED = (
    "INSERT INTO committed_xids (format_id, global_id, branch, user_name, at) "
    "VALUES (?, ?, ?, ?, ?)"
)
_RECOVER_ALL = (
    "SELECT format_id, global_id, branch FROM prepared_transactions ORDER BY id"
)
_RECOVER_OF = (
    "SELECT format_id, global_id, branch FROM prepared_transactions WHERE user_name = ? "
    "ORDER BY id"
)

#: What L{find} answers for an xid.
PREPARED = "prepared"
COMMITTED = "committed"

_packb = msgpack.packb
_unpackb = msgpack.unpackb


class DuplicateXid(MeshrouteError):
    """
    The xid is prepared here, or was committed here within the
    duplicate-id window: a transaction cannot take it (the
    C{duplicate-xid} error code).
    """

    code = "duplicate-xid"

    def __init__(self, xid: tuple) -> None:
        self.xid = tuple(xid)
        super().__init__(f"xid {list(xid)} is already prepared or committed here")


def _committed(connection, xid: tuple, cutoff: float) -> tuple | None:
    """
    The row of C{xid} in C{committed_xids} (C{(id, user_name, at)}) if it
    was committed at or after C{cutoff}; an older row counts as absent and
    is forgotten.
    """
    found = connection.execute(_FIND_COMMITTED, xid).fetchone()
    if found is not None and found[2] < cutoff:
        connection.execute(_FORGET_COMMITTED, (found[0],))
        return None
    return found


def _check_new(connection, xid: tuple, cutoff: float) -> None:
    """
    @raise DuplicateXid: C{xid} is prepared, or committed within the window.
    """
    if (connection.execute(_FIND_PREPARED, xid).fetchone() is not None
            or _committed(connection, xid, cutoff) is not None):
        raise DuplicateXid(xid)


def prepare(connection, xid: tuple, user: str | None, client_id: str, now: float, sends: list,
            entry_ids: str, cutoff: float) -> dict:
    """
    See L{meshroute.store.sqlite.SQLiteStore.prepare}.  Not atomic: the
    executor runs it in a savepoint, so a L{DuplicateXid} undoes all of
    it.  Returns C{{queue: entries locked}}.
    """
    _check_new(connection, xid, cutoff)
    try:
        prepared = connection.execute(_RECORD_PREPARED,
                                      (*xid, user, client_id, now)).lastrowid
    except sqlite3.IntegrityError:
        raise DuplicateXid(xid) from None
    connection.executemany(_RECORD_SEND, [
        (prepared, address, _packb(headers) if headers else None, body, persistent,
         duplicate_id, ttl_ms, notify_expiry, sender)
        for address, body, headers, persistent, duplicate_id, ttl_ms, notify_expiry, sender
        in sends])
    locked = connection.execute(_LOCK, (entry_ids,)).fetchall()
    connection.executemany(_RECORD_ACK, [(entry, prepared) for entry, _ in locked])
    return by_key([(queue,) for _, queue in locked])


@atomic
def find(connection, xid: tuple, cutoff: float) -> tuple | None:
    """
    What the store knows of C{xid}: C{(PREPARED, id, user_name)} for a
    prepared transaction, C{(COMMITTED, None, user_name)} for one committed
    at or after C{cutoff}, None otherwise.
    """
    found = connection.execute(_FIND_PREPARED, xid).fetchone()
    if found is not None:
        return (PREPARED, found[0], found[1])
    found = connection.execute(_FIND_COMMITTED, xid).fetchone()
    if found is not None and found[2] >= cutoff:
        return (COMMITTED, None, found[1])
    return None


@atomic
def sends_of(connection, prepared: int) -> list:
    """
    The sends of prepared transaction C{prepared}, in order, as
    L{prepare} was given them: C{(address, body, headers, persistent,
    duplicate_id, ttl_ms, notify_expiry, sender)}.
    """
    return [(address, body, _unpackb(headers) if headers else {}, bool(persistent),
             duplicate_id, ttl_ms, bool(notify_expiry), sender)
            for address, body, headers, persistent, duplicate_id, ttl_ms, notify_expiry, sender
            in connection.execute(_SENDS_OF, (prepared,))]


def _forget(connection, prepared: int) -> int:
    """
    Forget prepared transaction C{prepared}; return how many entries it
    had locked.
    """
    (locked,) = connection.execute(_ACKS_OF, (prepared,)).fetchone()
    for statement in _FORGET:
        connection.execute(statement, (prepared,))
    return locked


def commit_prepared(connection, prepared: int, xid: tuple, user: str | None, calls: list,
                    now: float, cutoff: float) -> tuple:
    """
    See L{meshroute.store.sqlite.SQLiteStore.commit_prepared}.  Not
    atomic: the executor runs it in a savepoint, so anything raised
    undoes all of it (the transaction stays prepared).  Returns the
    outcome of each call, C{(entry_id, message, redelivered)} for each
    locked entry deleted, and how many it had locked that were gone.
    """
    outcomes = accept_each(connection, calls, now, cutoff)
    consumed = [(r[0], as_message(r), bool(r[9]))
                for r in connection.execute(_CONSUME_LOCKED, (prepared,)).fetchall()]
    missing = _forget(connection, prepared) - len(consumed)
    connection.execute(_RECORD_COMMITTED, (*xid, user, now))
    return outcomes, consumed, missing


def rollback_prepared(connection, prepared: int) -> tuple:
    """
    See L{meshroute.store.sqlite.SQLiteStore.rollback_prepared}.  Returns
    C{(entry_id, message)} for each entry put back, and how many it had
    locked that were gone.
    """
    returned = [(r[0], as_message(r))
                for r in connection.execute(_UNLOCK, (prepared,)).fetchall()]
    return returned, _forget(connection, prepared) - len(returned)


def commit_one_phase(connection, xid: tuple, user: str | None, calls: list, entry_ids: str,
                     now: float, cutoff: float):
    """
    See L{meshroute.store.sqlite.SQLiteStore.commit}, with an xid.  Not
    atomic: the executor runs it in a savepoint, so a L{DuplicateXid}
    undoes all of it.
    """
    _check_new(connection, xid, cutoff)
    result = accept_and_consume(connection, calls, entry_ids, now, cutoff)
    connection.execute(_RECORD_COMMITTED, (*xid, user, now))
    return result


@atomic
def recover(connection, user: str | None) -> list:
    """
    The xids of the prepared transactions of C{user} (None: of everyone),
    oldest first, each C{[format_id, global_id, branch]}.
    """
    if user is None:
        rows = connection.execute(_RECOVER_ALL)
    else:
        rows = connection.execute(_RECOVER_OF, (user,))
    return [list(row) for row in rows]
