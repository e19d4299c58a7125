"""
Accepting clients' sends at their origin: into a local queue when this
router is the destination, else into the backlog; once per duplicate id;
several at once; and a client transaction, all or nothing.  Functions
run by the store's executor (L{meshroute.store.sqlite.SQLiteStore.accept}
and its siblings).

C{duplicate_ids} (schema version 2) records the duplicate id of every
client send that carried one, with the id of the message it accepted and
when: L{accept_once} accepts a message only if its duplicate id is not
recorded within the last C{duplicate_id_window_s}, writing the row and
the message in one transaction, and otherwise answers the first
message's id.  Rows older than the window count as absent and are pruned
(a prefix, at most L{meshroute.store.pruning.PRUNE_CHUNK} at a time) at
the store's open and by
L{meshroute.store.sqlite.SQLiteStore.prune_duplicate_ids}, which a
running router calls on a timer: not on the send path.

L{accept_to_outbox} accepts sends whose transfers already left (the link
to their next hop was idle: docs/routing.md, "Forwarding while the
origin's commit is in flight") straight into that link's outbox.

L{commit} is a client transaction's one store call: it accepts several
messages (each as C{accept} or C{accept_once} would) and consumes several
queue entries in one function, so the executor's savepoint makes it all
or nothing.
"""

import sqlite3

from meshroute.errors import MeshrouteError
from meshroute.messages import Message
from meshroute.store.queue_entries import consume
from meshroute.store.rows import (
    INSERT_BACKLOG,
    INSERT_BACKLOG_ANY,
    INSERT_OUTBOX,
    INSERT_QUEUE,
    RECORD_ENQUEUED,
    as_row,
    none_enqueued,
)
from meshroute.store.transactions import OneByOne, atomic

_FIND_DUPLICATE = "SELECT id, msg_id, at FROM duplicate_ids WHERE duplicate_id = ?"
_FORGET_DUPLICATE = "DELETE FROM duplicate_ids WHERE id = ?"
_RECORD_DUPLICATE = "INSERT INTO duplicate_ids (duplicate_id, msg_id, at) VALUES (?, ?, ?)"


class DuplicateMessage(MeshrouteError):
    """
    This router already holds, or already enqueued, a message with this
    id.
    """

    def __init__(self, msg_id: str) -> None:
        self.msg_id = msg_id
        super().__init__(f"message {msg_id!r} is already held or was already enqueued here")


def accept_local(connection, message: Message, now: float) -> None:
    try:
        connection.execute(RECORD_ENQUEUED, (message.msg_id, now))
        connection.execute(INSERT_QUEUE, as_row(message))
    except sqlite3.IntegrityError:
        raise DuplicateMessage(message.msg_id) from None


def _accept_local_batch(connection, calls: list) -> list:
    # A duplicate raises IntegrityError: the calls then run one by one.
    connection.executemany(RECORD_ENQUEUED, [(m.msg_id, now) for m, now in calls])
    connection.executemany(INSERT_QUEUE, [as_row(m) for m, _ in calls])
    return [None] * len(calls)


accept_local.batch = _accept_local_batch


@atomic
def accept_backlog(connection, message: Message) -> None:
    try:
        stored = connection.execute(INSERT_BACKLOG, as_row(message)).rowcount
    except sqlite3.IntegrityError:
        stored = 0
    if not stored:
        raise DuplicateMessage(message.msg_id)


def _accept_backlog_batch(connection, calls: list) -> list:
    messages = [call[0] for call in calls]
    none_enqueued(connection, messages)
    connection.executemany(INSERT_BACKLOG_ANY, [as_row(m) for m in messages])
    return [None] * len(calls)


accept_backlog.batch = _accept_backlog_batch


def accept_once(connection, message: Message, duplicate_id: str, local: bool, now: float,
                cutoff: float) -> str | None:
    """
    See L{meshroute.store.sqlite.SQLiteStore.accept_once}.  Not atomic:
    the executor runs it in a savepoint, so a L{DuplicateMessage} undoes
    the duplicate id row too.
    """
    execute = connection.execute
    found = execute(_FIND_DUPLICATE, (duplicate_id,)).fetchone()
    if found is not None:
        if found[2] >= cutoff:
            return found[1]
        # Older than the window and not pruned yet (the pruner runs on a
        # timer, or the clock went back): it counts as absent.
        execute(_FORGET_DUPLICATE, (found[0],))
    execute(_RECORD_DUPLICATE, (duplicate_id, message.msg_id, now))
    if message.persistent:
        if local:
            accept_local(connection, message, now)
        else:
            accept_backlog(connection, message)
    return None


def accept_each(connection, calls: list, now: float, cutoff: float) -> list:
    """
    Accept C{(message, duplicate_id, local)} calls one by one, in order;
    the outcome of each (None, or the original's C{msg_id}).
    """
    outcomes = []
    for message, duplicate_id, local in calls:
        if duplicate_id:
            outcomes.append(accept_once(connection, message, duplicate_id, local, now, cutoff))
            continue
        if local:
            accept_local(connection, message, now)
        else:
            accept_backlog(connection, message)
        outcomes.append(None)
    return outcomes


def accept_many(connection, calls: list, now: float, cutoff: float) -> list:
    """
    See L{meshroute.store.sqlite.SQLiteStore.accept_many}.  Not atomic:
    the executor runs it in a savepoint, so anything raised undoes all of
    it.  Without duplicate ids (the common case) each kind of destination
    is one C{executemany}, as the executor's batch forms do: a batch's
    messages have different destinations in order of their own, so
    grouping keeps each destination's order.
    """
    if any(call[1] for call in calls):
        return accept_each(connection, calls, now, cutoff)
    local = [(message, now) for message, _, is_local in calls if is_local]
    backlog = [(message,) for message, _, is_local in calls if not is_local]
    try:
        if local:
            _accept_local_batch(connection, local)
        if backlog:
            _accept_backlog_batch(connection, backlog)
    except (sqlite3.IntegrityError, OneByOne):
        # A message id already held: the batch fails whole (raising undoes
        # what the statements did; a partly run executemany must not stay).
        # Ids are made by this router, so this is a broken invariant, not
        # a client's doing.
        first, last = calls[0][0].msg_id, calls[-1][0].msg_id
        raise DuplicateMessage(first if first == last else f"{first}..{last}") from None
    return [None] * len(calls)


def accept_to_outbox(connection, peer: str, assigned: list) -> None:
    """
    Accept a client's sends C{assigned} (C{(seq, message)}, numbered in a
    block L{meshroute.store.outbox.reserve_seqs} made durable) straight
    into C{peer}'s outbox: their transfers left before this commit.  Not
    atomic: the executor runs it in a savepoint, so a message id already
    held or enqueued here (a broken invariant: ids are made by this
    router) undoes all of it.
    """
    try:
        none_enqueued(connection, [message for _, message in assigned])
        connection.executemany(INSERT_OUTBOX,
                               [(*as_row(message), peer, seq) for seq, message in assigned])
    except (sqlite3.IntegrityError, OneByOne):
        first, last = assigned[0][1].msg_id, assigned[-1][1].msg_id
        raise DuplicateMessage(first if first == last else f"{first}..{last}") from None


def commit(connection, calls: list, entry_ids: str, now: float, cutoff: float):
    """
    See L{meshroute.store.sqlite.SQLiteStore.commit}.  Not atomic: the
    executor runs it in a savepoint, so anything raised undoes all of it.
    Returns the outcome of each call and C{{queue: entries deleted}}.
    """
    return accept_each(connection, calls, now, cutoff), consume(connection, entry_ids)


@atomic
def duplicate_of(connection, duplicate_id: str, cutoff: float) -> str | None:
    found = connection.execute(_FIND_DUPLICATE, (duplicate_id,)).fetchone()
    return found[1] if found is not None and found[2] >= cutoff else None
