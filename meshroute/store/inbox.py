"""
What links bring in: transfers received from peers, each stored once and
in link order, with the last sequence number durably received from each
peer (L{meshroute.store.sqlite.SQLiteStore.receive}, C{receive_many},
C{record_peer_store}).  Functions run by the store's executor.

C{links} holds, per peer, the last sequence number durably received from
it and (schema version 3) the peer's store id those numbers belong to
(beside the next sequence number to give a message sent to it, the
outbox's, L{meshroute.store.outbox}).  The store's own id,
L{meshroute.store.sqlite.SQLiteStore.store_id}, is random and chosen
once, when the store is created: a router restarted with an empty data
dir has a new one, and its peers then forget the sequence numbers they
received from its previous store (L{record_peer_store}) instead of
discarding its new transfers as already received.

A received transfer is recorded only if the one received before it on
the same link was (C{previous}): when storing one fails, none after it on
that link is stored, so the peer's next cumulative acknowledgement can
never cover the one that is missing.

A copy of a message that arrives while this router's own copy waits in an
outbox for its acknowledgement (the message came back: the router it was
handed to forwarded it on before acknowledging it, and routes changed)
is taken: the held copy goes back to the backlog (C{"recalled"}), so the
acknowledgement that later deletes the outbox entry deletes nothing.  The
messages after it in that outbox go back with it (keeping their entry
ids, so their order): were they left there, the recovery of that link
would replay them before the recalled one.

A copy of a message already held here (in any place) or already enqueued
here (C{enqueued_ids}) is a duplicate: its sequence number is recorded,
the copy dropped.

An arrival for a local queue may come with a claim (docs/routing.md, "An
arrival handed to a waiting consumer from its receive"): C{(after_entry,
pending)}, the highest entry of its queue the router has read and the
message ids of the arrivals it claimed before this one and has not had
back.  If the queue holds no entry above C{after_entry} but those (a read
from there would return this one entry first), the entry is stored
flagged redelivered, as the read that fetches an entry for a waiting
consumer flags it, and the outcome is C{("claimed", entry_id)}: the
router hands it over with no read.  Otherwise it is stored as any arrival
(C{"stored"}), for the reads to find.
"""

import json

from meshroute.errors import MeshrouteError
from meshroute.messages import Message
from meshroute.store.rows import (
    CLAIMED,
    INSERT_BACKLOG_ANY,
    INSERT_BACKLOG_NEW,
    INSERT_QUEUE,
    INSERT_QUEUE_FLAGGED_NEW,
    INSERT_QUEUE_NEW,
    RECORD_ENQUEUED,
    RECORD_ENQUEUED_NEW,
    as_row,
    by_key,
    none_enqueued,
)
from meshroute.store.transactions import OneByOne, atomic

_LAST_RECEIVED = "SELECT last_received FROM links WHERE peer = ?"
# Records seq as received (the caller checked that it is above the last).
_RECORD_RECEIVED = (
    "INSERT INTO links (peer, next_seq, last_received) VALUES (?, 1, ?) "
    "ON CONFLICT (peer) DO UPDATE SET last_received = excluded.last_received"
)
# The peer's store id; with ?3 true, also forget what was received from
# its previous store.
_RECORD_PEER_STORE = (
    "INSERT INTO links (peer, next_seq, last_received, peer_store_id) VALUES (?1, 1, 0, ?2) "
    "ON CONFLICT (peer) DO UPDATE SET peer_store_id = excluded.peer_store_id, "
    "last_received = CASE WHEN ?3 THEN 0 ELSE links.last_received END"
)
_ANY_HELD = "SELECT 1 FROM messages WHERE msg_id IN (SELECT value FROM json_each(?)) LIMIT 1"
_FORGET_ENQUEUED = "DELETE FROM enqueued_ids WHERE msg_id = ?"
# An entry of the queue above the claim's C{after_entry} that is not one
# of the arrivals claimed before it (which their claims stored flagged).
_UNCLAIMED_ABOVE = (
    "SELECT 1 FROM messages WHERE state = 'queue' AND dest_queue = ? AND id > ? "
    "AND NOT (redelivered AND msg_id IN (SELECT value FROM json_each(?))) LIMIT 1"
)
# A copy of a message held in an outbox came back: take the held one back
# to the backlog, with the returned copy's hop count.
_IN_OUTBOX = "SELECT id, peer, seq FROM messages WHERE msg_id = ? AND state = 'outbox'"
_RECALL = "UPDATE messages SET state = 'backlog', peer = NULL, seq = NULL, hops = ? WHERE id = ?"
# What follows a recalled message in its outbox goes back with it.
_RETURN_OUTBOX_AFTER = (
    "UPDATE messages SET state = 'backlog', peer = NULL, seq = NULL "
    "WHERE state = 'outbox' AND peer = ? AND seq > ? RETURNING dest_router"
)


class MissingTransfer(MeshrouteError):
    """
    A transfer cannot be recorded because the one before it on the same
    link was not stored (its write failed): the link must be closed so
    that the peer replays both.
    """

    def __init__(self, peer: str, previous: int, last: int) -> None:
        self.peer = peer
        super().__init__(
            f"transfer after {previous} from {peer} refused: only {last} is stored"
        )


def _last_received(connection, peer: str) -> int:
    found = connection.execute(_LAST_RECEIVED, (peer,)).fetchone()
    return found[0] if found is not None else 0


def _new_seq(connection, peer: str, seq: int, previous: int) -> bool:
    """
    Record C{seq} as received from C{peer} if it is new; return whether it
    was.

    @raise MissingTransfer: the transfer before it on this link
        (C{previous}) is not stored.
    """
    last = _last_received(connection, peer)
    if seq <= last:
        return False
    if last < previous:
        raise MissingTransfer(peer, previous, last)
    connection.execute(_RECORD_RECEIVED, (peer, seq))
    return True


def _check_seqs(connection, calls) -> dict:
    """
    For a batch of receives C{(peer, seq, previous, ...)}: C{{peer: highest
    seq}}, if each peer's calls follow each other (each one's C{previous}
    is the seq before it in the batch, and above it) and the first follows
    the last received from that peer; else raise L{OneByOne}.
    """
    first: dict = {}
    last: dict = {}
    for call in calls:
        peer, seq, previous = call[0], call[1], call[2]
        before = last.get(peer)
        if before is None:
            first[peer] = previous
        elif previous != before:
            raise OneByOne()
        if seq <= previous:
            raise OneByOne()
        last[peer] = seq
    for peer, previous in first.items():
        if _last_received(connection, peer) != previous:
            raise OneByOne()
    return last


def _claimable(connection, message: Message, claim) -> bool:
    """
    Whether C{message}, arriving with C{claim} (or None), is the next entry
    of its queue a read from the claim's C{after_entry} would return.
    """
    if claim is None:
        return False
    after_entry, pending = claim
    # Mostly none: spare json.dumps its encoder, made anew on every call.
    pending_ids = json.dumps(list(pending)) if pending else "[]"
    return connection.execute(
        _UNCLAIMED_ABOVE, (message.dest_queue, after_entry, pending_ids)
    ).fetchone() is None


def receive_local(connection, peer: str, seq: int, previous: int, message: Message,
                  now: float, claim=None):
    execute = connection.execute
    if not _new_seq(connection, peer, seq, previous):
        return "duplicate-seq"
    if not execute(RECORD_ENQUEUED_NEW, (message.msg_id, now)).rowcount:
        return "duplicate-id"
    claimed = _claimable(connection, message, claim)
    inserted = execute(INSERT_QUEUE_FLAGGED_NEW if claimed else INSERT_QUEUE_NEW,
                       as_row(message))
    if not inserted.rowcount:
        # Held here already (not enqueued by this call): undo the record.
        execute(_FORGET_ENQUEUED, (message.msg_id,))
        return "duplicate-id"
    return (CLAIMED, inserted.lastrowid) if claimed else "stored"


def _enqueue(connection, enqueued: list) -> list:
    """
    Enqueue C{enqueued}, C{(message, claim, now)} in link order, none of
    them held or enqueued here (the caller checked); the outcome of each,
    as L{receive_local} gives it.
    """
    connection.executemany(RECORD_ENQUEUED, [(m.msg_id, now) for m, _, now in enqueued])
    if all(claim is None for _, claim, _ in enqueued):
        connection.executemany(INSERT_QUEUE, [as_row(m) for m, _, _ in enqueued])
        return ["stored"] * len(enqueued)
    # One by one, in order: a claim looks at the entries before it.  Only
    # the first of a queue needs the store's check: nothing but this loop
    # writes meanwhile, so one after it is claimable exactly when it was
    # (and when it was not, or was not claimed, the one after it finds it).
    execute = connection.execute
    outcomes: list = []
    clear: dict[str, bool] = {}
    for message, claim, _ in enqueued:
        queue = message.dest_queue
        claimed = claim is not None and clear.get(queue, True) and (
            queue in clear or _claimable(connection, message, claim))
        clear[queue] = claimed
        if claimed:
            inserted = execute(INSERT_QUEUE_FLAGGED_NEW, as_row(message))
            outcomes.append((CLAIMED, inserted.lastrowid))
        else:
            execute(INSERT_QUEUE, as_row(message))
            outcomes.append("stored")
    return outcomes


def _receive_local_batch(connection, calls: list) -> list:
    last = _check_seqs(connection, calls)
    connection.executemany(_RECORD_RECEIVED, last.items())
    return _enqueue(connection, [(call[3], call[6], call[4]) for call in calls])


receive_local.batch = _receive_local_batch


def receive_backlog(connection, peer: str, seq: int, previous: int, message: Message):
    """
    See L{meshroute.store.sqlite.SQLiteStore.receive}; a recalled message
    answers C{("recalled", the peer whose outbox held it, {dest_router:
    messages that left that outbox for the backlog})}: the recalled one
    and every one after it in that outbox, so that a recovery replaying
    what is left of the outbox cannot send them out of their order.
    """
    execute = connection.execute
    if not _new_seq(connection, peer, seq, previous):
        return "duplicate-seq"
    if execute(INSERT_BACKLOG_NEW, as_row(message)).rowcount:
        return "stored"
    held = execute(_IN_OUTBOX, (message.msg_id,)).fetchone()
    if held is None:
        return "duplicate-id"
    entry, outbox_peer, outbox_seq = held
    execute(_RECALL, (message.hops, entry))
    returned = by_key(execute(_RETURN_OUTBOX_AFTER, (outbox_peer, outbox_seq)).fetchall())
    returned[message.dest_router] = returned.get(message.dest_router, 0) + 1
    return "recalled", outbox_peer, returned


def _receive_backlog_batch(connection, calls: list) -> list:
    last = _check_seqs(connection, calls)
    messages = [call[3] for call in calls]
    none_enqueued(connection, messages)
    connection.executemany(_RECORD_RECEIVED, last.items())
    connection.executemany(INSERT_BACKLOG_ANY, [as_row(m) for m in messages])
    return ["stored"] * len(calls)


receive_backlog.batch = _receive_backlog_batch


def receive_many(connection, peer: str, previous: int, items: list, now: float,
                 claims=None) -> list:
    """
    See L{meshroute.store.sqlite.SQLiteStore.receive_many}: a clean batch
    (new sequences after the last received, no id held or enqueued here,
    none twice) with one statement per kind of write (the local ones one
    at a time when some are claimed); anything else one by one, as
    L{receive_local} and L{receive_backlog} decide for a single transfer.
    A transfer refused (L{MissingTransfer}) refuses the batch: its changes
    are undone with the function's.
    """
    calls = []
    for (seq, message, local), claim in zip(items, claims or [None] * len(items)):
        calls.append((peer, seq, previous, message, local, claim))
        previous = seq
    try:
        _check_new(connection, calls)
    except OneByOne:
        return [receive_local(connection, peer, seq, before, message, now, claim) if local
                else receive_backlog(connection, peer, seq, before, message)
                for peer, seq, before, message, local, claim in calls]
    connection.execute(_RECORD_RECEIVED, (peer, previous))
    local = iter(_enqueue(connection, [(call[3], call[5], now) for call in calls if call[4]]))
    if not all(call[4] for call in calls):
        connection.executemany(INSERT_BACKLOG_ANY,
                               [as_row(call[3]) for call in calls if not call[4]])
    return [next(local) if call[4] else "stored" for call in calls]


def _check_new(connection, calls) -> None:
    """
    Raise L{OneByOne} unless the receives C{calls} can be written without
    a conflict: their sequences follow the last received, and their ids
    are distinct and neither held nor enqueued here.
    """
    _check_seqs(connection, calls)
    messages = [call[3] for call in calls]
    ids = json.dumps([m.msg_id for m in messages])
    if len(set(m.msg_id for m in messages)) < len(messages):
        raise OneByOne()
    if connection.execute(_ANY_HELD, (ids,)).fetchone() is not None:
        raise OneByOne()
    none_enqueued(connection, messages)


@atomic
def record_peer_store(connection, peer: str, store_id: str, forget_received: bool) -> None:
    connection.execute(_RECORD_PEER_STORE, (peer, store_id, forget_received))
