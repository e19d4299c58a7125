"""
The entries of this router's local queues, as consumers take them:
paged oldest first by entry id, flagged redelivered once handed out,
deleted once acknowledged (L{meshroute.store.sqlite.SQLiteStore.fetch},
C{consume}, C{mark_redelivered}).  Functions run by the store's executor.
"""

import json

from meshroute.store.rows import COLUMNS, as_message, by_key
from meshroute.store.transactions import atomic

_FETCH = (
    f"SELECT id, {COLUMNS}, redelivered FROM messages "
    "WHERE state = 'queue' AND dest_queue = ? AND id > ? ORDER BY id LIMIT ?"
)
_CONSUME = (
    "DELETE FROM messages WHERE state = 'queue' "
    "AND id IN (SELECT value FROM json_each(?)) RETURNING dest_queue"
)
_MARK_REDELIVERED = (
    "UPDATE messages SET redelivered = 1 WHERE state = 'queue' "
    "AND id IN (SELECT value FROM json_each(?))"
)


@atomic
def fetch(connection, queue: str, after_entry: int, limit: int) -> list:
    return [
        (r[0], as_message(r), bool(r[9]))
        for r in connection.execute(_FETCH, (queue, after_entry, limit))
    ]


def fetch_marking(connection, queue: str, after_entry: int, limit: int, mark: int) -> list:
    entries = fetch(connection, queue, after_entry, limit)
    first = [entry for entry, _, redelivered in entries if not redelivered][:mark]
    if first:
        connection.execute(_MARK_REDELIVERED, (json.dumps(first),))
    return entries


@atomic
def consume(connection, entry_ids: str) -> dict:
    """
    Delete the queue entries C{entry_ids} (a JSON array); returns C{{queue:
    entries deleted}}.
    """
    return by_key(connection.execute(_CONSUME, (entry_ids,)).fetchall())


# Needs no fsync of its own (see SQLiteStore.consume): lost to a power
# failure, the entries are delivered again, flagged redelivered.
consume.relaxed = True


@atomic
def mark_redelivered(connection, entry_ids: str) -> int:
    return connection.execute(_MARK_REDELIVERED, (entry_ids,)).rowcount
