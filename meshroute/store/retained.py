"""
The store's side of retained topic messages (schema version 14,
docs/topics.md "Retained messages"): the latest entry of each topic,
saved as the router takes it and read at start.  Functions run by the
store's executor, each in a savepoint of its own.

The latest wins here as in memory (L{meshroute.topics.retained}): an
entry is written over the saved one of its topic only when it is newer
by C{(stamp, origin, publication)}, so saves that reach the store out of
order leave the newest.  Entries expired by then are deleted as each
save runs.
"""

import msgpack

from meshroute.topics.retained import RetainedEntry

_SAVE = (
    "INSERT INTO retained_messages "
    "(topic, stamp, origin, publication, body, headers, persistent, expires_at) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?) "
    "ON CONFLICT (topic) DO UPDATE SET stamp = excluded.stamp, origin = excluded.origin, "
    "publication = excluded.publication, body = excluded.body, headers = excluded.headers, "
    "persistent = excluded.persistent, expires_at = excluded.expires_at "
    "WHERE (excluded.stamp, excluded.origin, excluded.publication) "
    "> (retained_messages.stamp, retained_messages.origin, retained_messages.publication)"
)
_EXPIRE = "DELETE FROM retained_messages WHERE expires_at > 0 AND expires_at <= ?"
_ALL = (
    "SELECT topic, stamp, origin, publication, body, headers, persistent, expires_at "
    "FROM retained_messages ORDER BY topic"
)


def save(connection, entries: list[RetainedEntry], now_ms: int) -> None:
    """
    Save each of C{entries} unless a newer one of its topic is saved, and
    delete the entries expired at C{now_ms}.
    """
    connection.execute(_EXPIRE, (now_ms,))
    connection.executemany(_SAVE, [
        (e.topic, e.stamp, e.origin, e.publication, e.body, msgpack.packb(e.headers),
         int(e.persistent), e.expires_at_ms) for e in entries])


def read_all(connection, now_ms: int) -> list[RetainedEntry]:
    """
    Every saved entry not expired at C{now_ms}, by topic.
    """
    return [RetainedEntry(topic, stamp, origin, publication, bytes(body),
                          msgpack.unpackb(headers), bool(persistent), expires_at)
            for topic, stamp, origin, publication, body, headers, persistent, expires_at
            in connection.execute(_ALL) if not 0 < expires_at <= now_ms]
