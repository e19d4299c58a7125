"""
A message as a row of the C{messages} table, and the statements that
put one in a place (a local queue, the backlog) and record its id as
enqueued here: what accepting a client's send (L{meshroute.store.accepting}),
receiving a transfer (L{meshroute.store.inbox}) and setting a message aside
(L{meshroute.store.set_aside}) write alike.

Statements are constant strings, so sqlite3's statement cache prepares
each once.  The state literals must stay literals: the partial indexes
are only used when a query repeats them.  Ids travel as one JSON array
parameter: one prepared statement, one step, whatever the number of ids.
"""

import json

import msgpack

from meshroute.messages import Message, expires_ms
from meshroute.store.transactions import OneByOne

COLUMNS = "msg_id, origin, dest_router, dest_queue, body, headers, hops, accepted_at"
# Written with the message's expiry (L{as_row}), which is read back from its
# header.
_WRITTEN = f"{COLUMNS}, expires_ms"
INSERT_QUEUE = (
    f"INSERT INTO messages ({_WRITTEN}, state) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 'queue')"
)
INSERT_QUEUE_NEW = INSERT_QUEUE.replace("INSERT INTO", "INSERT OR IGNORE INTO", 1)
# Enqueued already flagged redelivered: an arrival claimed for a waiting
# consumer at its receive (L{meshroute.store.inbox}), as the read that
# fetches an entry for one flags it.
#: The outcome of an arrival claimed at its receive: C{(CLAIMED, entry_id)}.
CLAIMED = "claimed"
INSERT_QUEUE_FLAGGED_NEW = (
    f"INSERT OR IGNORE INTO messages ({_WRITTEN}, state, redelivered) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 'queue', 1)"
)
# Into the backlog unless already enqueued here (and, with OR IGNORE,
# unless already held here); rowcount says which.
INSERT_BACKLOG = (
    f"INSERT INTO messages ({_WRITTEN}, state) "
    "SELECT ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, 'backlog' "
    "WHERE NOT EXISTS (SELECT 1 FROM enqueued_ids WHERE msg_id = ?1)"
)
INSERT_BACKLOG_NEW = INSERT_BACKLOG.replace("INSERT INTO", "INSERT OR IGNORE INTO", 1)
# For batches, which check enqueued_ids once for all of their ids.
INSERT_BACKLOG_ANY = (
    f"INSERT INTO messages ({_WRITTEN}, state) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 'backlog')"
)
# Straight into a peer's outbox, with its link sequence number (a send
# forwarded before its accept committed: L{meshroute.store.outbox}).
INSERT_OUTBOX = (
    f"INSERT INTO messages ({_WRITTEN}, state, peer, seq) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 'outbox', ?, ?)"
)
_ANY_ENQUEUED = (
    "SELECT 1 FROM enqueued_ids WHERE msg_id IN (SELECT value FROM json_each(?)) LIMIT 1"
)
RECORD_ENQUEUED = "INSERT INTO enqueued_ids (msg_id, at) VALUES (?, ?)"
RECORD_ENQUEUED_NEW = "INSERT OR IGNORE INTO enqueued_ids (msg_id, at) VALUES (?, ?)"

_packb = msgpack.packb
_unpackb = msgpack.unpackb


def as_row(m: Message) -> tuple:
    """
    C{m} as the parameters of the columns the inserts above write.
    """
    headers = m.headers
    return (
        m.msg_id,
        m.origin,
        m.dest_router,
        m.dest_queue,
        m.body,
        _packb(headers) if headers else None,
        m.hops,
        m.accepted_at,
        (expires_ms(headers) or None) if headers and m.dest_queue[0] != "$" else None,
    )


def as_message(r: tuple) -> Message:
    """
    The message in C{r}, a row whose columns 1 to 8 are the L{COLUMNS}.
    """
    return Message(r[1], r[2], r[3], r[4], r[5], _unpackb(r[6]) if r[6] else {}, r[7], True, r[8])


def none_enqueued(connection, messages) -> None:
    """
    Raise L{OneByOne} if any of C{messages} was enqueued here.
    """
    ids = json.dumps([m.msg_id for m in messages])
    if connection.execute(_ANY_ENQUEUED, (ids,)).fetchone() is not None:
        raise OneByOne()


def by_key(rows) -> dict:
    """
    C{{key: rows}} for C{rows} of one column (as a DELETE or UPDATE
    RETURNING the destination of each row it changed gives them).
    """
    counts: dict = {}
    for (key,) in rows:
        counts[key] = counts.get(key, 0) + 1
    return counts
