"""
What links take out: messages assigned from the backlog to a peer's
outbox, each with the next sequence number of that link, held there
until the peer acknowledges them, replayed after a recovery, or returned
to the backlog when the link is gone
(L{meshroute.store.sqlite.SQLiteStore.assign}, C{outbox},
C{acknowledge}, C{return_outbox}).  Functions run by the store's
executor.

C{links} holds, per peer, the next sequence number to give a message
sent to it: never reused, it survives acknowledgements and restarts.
Every number below it may have been sent: an assign moves it past the
numbers it gives, and a link that sends messages before their accept is
committed (L{reserve_seqs},
L{meshroute.store.accepting.accept_to_outbox}) first moves it past a
whole block of numbers, durably, and sends only numbers of that block
(docs/routing.md, "Forwarding while the origin's commit is in flight").

A message returned from an outbox keeps its entry id, so it goes back to
its original place in the backlog: before every message that arrived
after it, which is what keeps per-producer order when traffic moves to
another link.
"""

import json
from operator import itemgetter

from meshroute.store.rows import COLUMNS, as_message, by_key
from meshroute.store.transactions import atomic

# Assigning reads entry ids and body sizes first (length() of a BLOB does
# not read it), chooses by count and bytes, then reads only those rows.
_SELECT_BACKLOG_SIZES = (
    "SELECT id, length(body) FROM messages "
    "WHERE state = 'backlog' AND dest_router = ? ORDER BY id LIMIT ?"
)
_SELECT_ENTRIES = (
    f"SELECT id, {COLUMNS} FROM messages "
    "WHERE id IN (SELECT value FROM json_each(?)) ORDER BY id"
)
_NEXT_SEQ = "SELECT next_seq FROM links WHERE peer = ?"
_NEW_LINK = "INSERT INTO links (peer, next_seq, last_received) VALUES (?, 1, 0)"
_SET_NEXT_SEQ = "UPDATE links SET next_seq = ? WHERE peer = ?"
# The i-th entry id of the JSON array gets seq first + i.
_TO_OUTBOX = (
    "UPDATE messages SET state = 'outbox', peer = ?1, seq = ?2 + j.key "
    "FROM json_each(?3) AS j WHERE messages.id = j.value"
)
_SELECT_OUTBOX = (
    f"SELECT seq, {COLUMNS} FROM messages "
    "WHERE state = 'outbox' AND peer = ? AND seq > ? ORDER BY seq"
)
_ACKNOWLEDGE = (
    "DELETE FROM messages WHERE state = 'outbox' AND peer = ? AND seq <= ? RETURNING dest_router"
)
# The peer holds our transfers up to ?2 (from this store): never number one
# at or below it again.  Only an older copy of this store (a restored
# backup) has its next_seq there; otherwise nothing is written.
_NUMBER_ABOVE = "UPDATE links SET next_seq = ?2 + 1 WHERE peer = ?1 AND next_seq <= ?2"
_RETURN_OUTBOX = (
    "UPDATE messages SET state = 'backlog', peer = NULL, seq = NULL "
    "WHERE state = 'outbox' AND peer = ? RETURNING dest_router"
)


def _next_seq(connection, peer: str) -> int:
    found = connection.execute(_NEXT_SEQ, (peer,)).fetchone()
    if found is None:
        connection.execute(_NEW_LINK, (peer,))
        return 1
    return found[0]


def assign(connection, peer: str, dest_routers, limit: int, max_bytes: int | None) -> list:
    if limit <= 0:
        return []
    execute = connection.execute
    sizes: list = []
    dests = set(dest_routers)
    for dest in dests:
        sizes.extend(execute(_SELECT_BACKLOG_SIZES, (dest, limit)))
    if not sizes:
        return []
    if len(dests) > 1:
        sizes.sort(key=itemgetter(0))
        del sizes[limit:]
    if max_bytes is not None:
        total = 0
        for taken, (_, size) in enumerate(sizes):
            total += size
            if total > max_bytes and taken:
                del sizes[taken:]
                break
    ids = json.dumps([entry for entry, _ in sizes])
    rows = execute(_SELECT_ENTRIES, (ids,)).fetchall()
    first = _next_seq(connection, peer)
    execute(_TO_OUTBOX, (peer, first, ids))
    execute(_SET_NEXT_SEQ, (first + len(rows), peer))
    return [(first + i, as_message(r)) for i, r in enumerate(rows)]


def reserve_seqs(connection, peer: str, count: int) -> int:
    """
    Reserve the next C{count} sequence numbers of the link to C{peer}:
    move C{next_seq} past them and return the first.  Once this is
    durable, the link may send messages numbered in the block before
    their own commit: a router that crashes before that commit numbers
    its next transfers above the block, so it never gives a number a
    peer may have seen to another message.
    """
    first = _next_seq(connection, peer)
    connection.execute(_SET_NEXT_SEQ, (first + count, peer))
    return first


@atomic
def read_outbox(connection, peer: str, after_seq: int) -> list:
    return [(r[0], as_message(r)) for r in connection.execute(_SELECT_OUTBOX, (peer, after_seq))]


def acknowledge(connection, peer: str, up_to_seq: int) -> dict:
    execute = connection.execute
    execute(_NUMBER_ABOVE, (peer, up_to_seq))
    return by_key(execute(_ACKNOWLEDGE, (peer, up_to_seq)).fetchall())


# Needs no fsync of its own (see "Relaxed commits" in
# meshroute.store.transactions): lost to a power failure, the forgotten
# transfers are replayed and the peer discards them by their seqs; and the
# next seq moved above the peer's (a restored store) is durable before any
# transfer numbered after it is sent (its assign is fsynced), and moved
# again at every link recovery.
acknowledge.relaxed = True


@atomic
def return_outbox(connection, peer: str) -> dict:
    return by_key(connection.execute(_RETURN_OUTBOX, (peer,)).fetchall())
