"""
The store's side of topics (docs/topics.md).  Functions run by the
store's executor, each in a savepoint of its own.

Durable topic subscriptions, durably (schema version 12): which local
queue the topic fan-out feeds for each C{(client_id, name)}, with what
pattern, until it is unsubscribed for good
(L{meshroute.store.sqlite.SQLiteStore.record_subscription} and its
siblings).

A subscription recorded again with another pattern is replaced, as JMS
replaces a durable subscription whose topic changed: the messages it
held are deleted with the change, in one transaction.  Forgetting one
deletes its messages with it.

Other routers' topic interest (schema version 13): the newest
advertisement taken from each, saved as it is taken and read at start
(L{save_interest}, L{read_interest}).

The fan-out's copies of publications and the deletion of the
publications they copy, in one transaction (L{place_copies}), with the
retained messages its publications made (schema version 14,
L{meshroute.store.retained}).  A copy
whose id this router holds or enqueued before is left out, not an
error: a publication that came round a routing loop, or was fanned out
before a crash whose acknowledgement of it was lost, makes copies the
store already had, and the others must still be placed.
"""

import json

from meshroute.messages import Message
from meshroute.store import retained
from meshroute.store.queue_entries import consume
from meshroute.store.rows import (
    INSERT_BACKLOG_NEW,
    INSERT_QUEUE_NEW,
    RECORD_ENQUEUED_NEW,
    as_row,
)

_FORGET_ENQUEUED = "DELETE FROM enqueued_ids WHERE msg_id = ?"
_FIND = "SELECT pattern FROM durable_subscriptions WHERE queue = ?"
_INSERT = (
    "INSERT INTO durable_subscriptions "
    "(queue, client_id, name, pattern, shared, user_name, created_at) "
    "VALUES (?, ?, ?, ?, ?, ?, ?)"
)
_REPLACE = "UPDATE durable_subscriptions SET pattern = ?, shared = ? WHERE queue = ?"
_SET_SHARED = "UPDATE durable_subscriptions SET shared = ? WHERE queue = ?"
_DELETE = "DELETE FROM durable_subscriptions WHERE queue = ?"
_DELETE_ENTRIES = "DELETE FROM messages WHERE state = 'queue' AND dest_queue = ?"
_ALL = (
    "SELECT queue, client_id, name, pattern, shared, user_name, created_at "
    "FROM durable_subscriptions ORDER BY created_at, queue"
)

CREATED = "created"
EXISTING = "existing"
REPLACED = "replaced"


def record(connection, queue: str, client_id: str, name: str, pattern: str, shared: bool,
           user: str | None, now: float, copies: list[Message] = (),
           if_new: bool = False) -> tuple[str, int, list[bool]]:
    """
    Record the durable subscription C{queue}, and place C{copies} (the
    retained messages it is given as it is made) into its queue, each
    unless its id was enqueued here; with C{if_new}, only if it was
    created or replaced.

    @return: C{(what, deleted, placed)}: L{CREATED}, L{EXISTING} (same
        pattern; C{shared} updated) or L{REPLACED} (another pattern: its
        C{deleted} entries are gone); whether each copy was placed.
    """
    found = connection.execute(_FIND, (queue,)).fetchone()
    deleted = 0
    if found is None:
        connection.execute(_INSERT, (queue, client_id, name, pattern, int(shared), user, now))
        what = CREATED
    elif found[0] == pattern:
        connection.execute(_SET_SHARED, (int(shared), queue))
        what = EXISTING
    else:
        deleted = connection.execute(_DELETE_ENTRIES, (queue,)).rowcount
        connection.execute(_REPLACE, (pattern, int(shared), queue))
        what = REPLACED
    if if_new and what == EXISTING:
        return what, deleted, [False] * len(copies)
    return what, deleted, [_place_local(connection.execute, copy, now) for copy in copies]


def _place_local(execute, message: Message, now: float) -> bool:
    """
    Place C{message} into its local queue unless its id is held or was
    enqueued here; whether it was.
    """
    new = bool(execute(RECORD_ENQUEUED_NEW, (message.msg_id, now)).rowcount)
    if new and not execute(INSERT_QUEUE_NEW, as_row(message)).rowcount:
        execute(_FORGET_ENQUEUED, (message.msg_id,))
        new = False
    return new


def forget(connection, queue: str) -> int:
    """
    Delete the durable subscription C{queue} and its entries; how many
    entries went.
    """
    connection.execute(_DELETE, (queue,))
    return connection.execute(_DELETE_ENTRIES, (queue,)).rowcount


def read_all(connection) -> list[tuple]:
    """
    Every durable subscription, oldest first: C{(queue, client_id, name,
    pattern, shared, user, created_at)}.
    """
    return [(queue, client_id, name, pattern, bool(shared), user, created_at)
            for queue, client_id, name, pattern, shared, user, created_at
            in connection.execute(_ALL)]


def place_copies(connection, copies: list[tuple[Message, bool]], entry_ids: str,
                 now: float, retained_entries=()) -> tuple[list[bool], dict]:
    """
    Place each of C{copies} (C{(message, local)}: into a local durable
    subscription's queue, or the backlog for its destination router)
    unless its id is held or was enqueued here, or its subscription was
    forgotten since the copy was made, delete the queue entries
    C{entry_ids} (a JSON array), and save C{retained_entries}
    (L{meshroute.store.retained.save}).

    @return: C{(placed, consumed)}: whether each copy was placed, and
        C{{queue: entries deleted}}.
    """
    execute = connection.execute
    placed = []
    for message, local in copies:
        if local:
            # Not into a subscription forgotten since the fan-out made the copy.
            new = (execute(_FIND, (message.dest_queue,)).fetchone() is not None
                   and _place_local(execute, message, now))
        else:
            new = bool(execute(INSERT_BACKLOG_NEW, as_row(message)).rowcount)
        placed.append(new)
    if retained_entries:
        retained.save(connection, list(retained_entries), int(now * 1000))
    return placed, consume(connection, entry_ids)


_SAVE_INTEREST = (
    "INSERT INTO topic_interest (origin, version, patterns) VALUES (?, ?, ?) "
    "ON CONFLICT (origin) DO UPDATE SET version = excluded.version, "
    "patterns = excluded.patterns WHERE excluded.version > topic_interest.version"
)


def save_interest(connection, advertisements: list[tuple[str, int, list[str]]]) -> None:
    """
    Save each C{(origin, version, patterns)}, unless a newer version of
    its origin is saved.
    """
    connection.executemany(_SAVE_INTEREST, [(origin, version, json.dumps(patterns))
                                            for origin, version, patterns in advertisements])


def read_interest(connection) -> list[tuple[str, int, list[str]]]:
    """
    Every saved advertisement: C{(origin, version, patterns)}.
    """
    return [(origin, version, json.loads(patterns)) for origin, version, patterns
            in connection.execute("SELECT origin, version, patterns FROM topic_interest")]
