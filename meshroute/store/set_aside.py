"""
Messages set aside into a local queue of their own, from wherever this
router holds them: the dead-letter queue (messages that cannot be
delivered) and the expired queue (messages whose time to live ran out)
(L{meshroute.store.sqlite.SQLiteStore.dead_letter}, C{expire},
C{sweep_expired}).  Functions run by the store's executor.

The dead-letter queue is the local queue
L{meshroute.messages.DEAD_LETTER_QUEUE}; a dead-lettered message carries
the reason in header L{DEAD_LETTER_REASON} and its original address
(C{queue@router}) in L{DEAD_LETTER_ADDRESS}, as an expired one in
L{meshroute.messages.EXPIRED_QUEUE} carries its address.  A message set
aside is a new row, the newest entry of its queue, and its id is
recorded as enqueued here: a later copy is a duplicate.
"""

import msgpack

from meshroute.messages import DEAD_LETTER_QUEUE, EXPIRED_QUEUE, Message
from meshroute.store.rows import COLUMNS, INSERT_QUEUE, RECORD_ENQUEUED_NEW, as_message

#: Header of a dead-lettered message: why it was dead-lettered.
DEAD_LETTER_REASON = "x-dead-letter-reason"
#: Header of a dead-lettered message: where it was going, C{queue@router}
#: (the name the message engine uses too).
DEAD_LETTER_ADDRESS = "x-original-address"

_HELD = "SELECT id, state, dest_router, dest_queue, peer FROM messages WHERE msg_id = ?"
_DELETE_ENTRY = "DELETE FROM messages WHERE id = ?"
# Entries whose expiry passed (?1, epoch ms) in queues and in the backlog,
# the soonest expired first, except in the queues of ?2 (a JSON array: the
# queues whose entries consumers may hold in memory), at most ?3.
_SELECT_EXPIRED = (
    f"SELECT id, {COLUMNS}, state FROM messages "
    "WHERE expires_ms IS NOT NULL AND expires_ms <= ?1 AND state IN ('queue', 'backlog') "
    "AND NOT (state = 'queue' AND dest_queue IN (SELECT value FROM json_each(?2))) "
    "ORDER BY expires_ms LIMIT ?3"
)

_packb = msgpack.packb


def dead_letter(connection, message: Message, reason: str, router: str, now: float):
    """
    See L{meshroute.store.sqlite.SQLiteStore.dead_letter}.  Returns
    C{(state, dest_router, dest_queue, peer)} of the place the message was
    taken from, C{("new", None, None, None)} when it was not held here,
    None when it was already dead-lettered (nothing changed).
    """
    execute = connection.execute
    held = execute(_HELD, (message.msg_id,)).fetchone()
    if held is not None:
        entry, state, dest_router, dest_queue, peer = held
        if state == "queue" and dest_queue == DEAD_LETTER_QUEUE:
            return None
        execute(_DELETE_ENTRY, (entry,))
        moved = (state, dest_router, dest_queue, peer)
    else:
        moved = ("new", None, None, None)
    _put_aside(connection, message, DEAD_LETTER_QUEUE, router,
               {DEAD_LETTER_REASON: reason}, now)
    return moved


def _put_aside(connection, message: Message, queue: str, router: str | None, headers: dict,
               now: float) -> None:
    """
    Insert C{message} into local queue C{queue} (of C{router}; None: its
    C{dest_router}) with C{headers} added to its own and its address in
    L{DEAD_LETTER_ADDRESS}: a new row, so that it is the newest entry of
    that queue (consumers paging by entry id see it).  Its id is recorded
    as enqueued here (at C{now}) unless it was already: a later copy is a
    duplicate.
    """
    connection.execute(INSERT_QUEUE, (
        message.msg_id, message.origin, router or message.dest_router, queue, message.body,
        _packb({**message.headers, **headers,
                DEAD_LETTER_ADDRESS: f"{message.dest_queue}@{message.dest_router}"}),
        message.hops, message.accepted_at, None,
    ))
    connection.execute(RECORD_ENQUEUED_NEW, (message.msg_id, now))


def expire(connection, messages: list, router: str | None, now: float) -> list:
    """
    See L{meshroute.store.sqlite.SQLiteStore.expire}.  Returns C{(message,
    state, dest_router, dest_queue, peer)} for each message moved.
    """
    execute = connection.execute
    moved = []
    for message in messages:
        held = execute(_HELD, (message.msg_id,)).fetchone()
        if held is None or held[3][0] == "$":
            continue
        entry, state, dest_router, dest_queue, peer = held
        execute(_DELETE_ENTRY, (entry,))
        _put_aside(connection, message, EXPIRED_QUEUE, router, {}, now)
        moved.append((message, state, dest_router, dest_queue, peer))
    return moved


def sweep_expired(connection, now_ms: int, busy_queues: str, limit: int,
                  router: str | None, now: float) -> list:
    """
    See L{meshroute.store.sqlite.SQLiteStore.sweep_expired}.
    """
    execute = connection.execute
    moved = []
    for found in execute(_SELECT_EXPIRED, (now_ms, busy_queues, limit)).fetchall():
        message = as_message(found)
        execute(_DELETE_ENTRY, (found[0],))
        _put_aside(connection, message, EXPIRED_QUEUE, router, {}, now)
        moved.append((message, found[9], message.dest_router, message.dest_queue, None))
    return moved
