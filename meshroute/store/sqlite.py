"""
The SQLite message store: L{IMessageStore} on stdlib C{sqlite3}.

Durability
==========

The database runs in WAL mode; every change is committed before the
Deferred of the call that made it fires, and changes are group-committed
(see L{meshroute.store.transactions}): one transaction, one fsync, carries
everything that was submitted while the previous one was being written.
C{sync} chooses SQLite's C{PRAGMA synchronous}:

  - C{"full"} (C{synchronous=FULL}): the WAL is fsynced at every commit.
    Nothing acknowledged is lost, whether the router process crashes or
    the machine loses power or the OS crashes.
  - C{"normal"} (C{synchronous=NORMAL}): the WAL is fsynced only at
    checkpoints.  A crash of the router process (SIGKILL, a bug) loses
    nothing acknowledged, because committed transactions are in the OS's
    page cache; a power loss or an OS crash may lose the last
    transactions committed before it, i.e. messages whose send (or link
    acknowledgement) already succeeded.  The database is never corrupted
    either way.

The WAL is checkpointed by the executor's writer thread when it is idle,
or when the WAL passes a size, never inside a commit
(L{meshroute.store.checkpoints}).

With C{"full"}, two writes are committed without an fsync of their own
("Relaxed commits" in L{meshroute.store.transactions}), made durable by
the next commit that has one: forgetting the transfers a peer acknowledged
(L{SQLiteStore.acknowledge}), which a power failure can only make the
peer receive again, and it discards them; and deleting the queue entries
consumers acknowledged (L{SQLiteStore.consume}), which a power failure
can only make delivered again, flagged redelivered.

Data model
==========

One table, C{messages}, holds one row per message held by this router,
with a C{state} saying where it is: C{'backlog'} (waiting for a route to
C{dest_router}), C{'outbox'} (given to link C{peer} with sequence number
C{seq}, until acknowledged) or C{'queue'} (in local queue C{dest_queue}).
Moving a message is an UPDATE of those columns; its body is written once.
The row id is the entry id: arrival order at this router, never reused
(AUTOINCREMENT), so queues and the backlog are served oldest first and a
consumer's "above entry N" cursor never skips a new entry.  Partial
indexes serve each place: backlog by C{(dest_router, id)}, outbox by
C{(peer, seq)} (unique), queue by C{(dest_queue, id)}.

A message returned from an outbox (L{SQLiteStore.return_outbox}) keeps its
entry id, so it goes back to its original place in the backlog: before
every message that arrived after it, which is what keeps per-producer
order when traffic moves to another link.

C{links} holds, per peer, the next sequence number to give a message sent
to it (never reused, it survives acknowledgements and restarts), the
last sequence number durably received from it, and (schema version 3) the
peer's store id those numbers belong to.  The store's own id,
L{SQLiteStore.store_id}, is random and chosen once, when the store is
created: a router restarted with an empty data dir has a new one, and its
peers then forget the sequence numbers they received from its previous
store (L{SQLiteStore.record_peer_store}) instead of discarding its new
transfers as already received.

A received transfer is recorded only if the one received before it on
the same link was (C{previous}, see L{SQLiteStore.receive}): when storing
one fails, none after it on that link is stored, so the peer's next
cumulative acknowledgement can never cover the one that is missing.

A copy of a message that arrives while this router's own copy waits in an
outbox for its acknowledgement (the message came back: the router it was
handed to forwarded it on before acknowledging it, and routes changed)
is taken: the held copy goes back to the backlog (C{"recalled"}), so the
acknowledgement that later deletes the outbox entry deletes nothing.  The
messages after it in that outbox go back with it (keeping their entry
ids, so their order): were they left there, the recovery of that link
would replay them before the recalled one.

C{enqueued_ids} records the id of every message enqueued here (accepted
or received for a local queue, or dead-lettered), so that a copy arriving
again is recognised as a duplicate.  Rows older than C{dedup_window_s}
are pruned by L{prune}, which a running router calls on a timer in
bounded chunks (L{meshroute.store.pruning}), and one chunk of them at
L{open}: a copy arriving later than that
would be enqueued a second time, so the window must exceed the longest
time a message can spend in the mesh.  The rows are in insertion order,
so pruning deletes a prefix and costs only what it deletes.

C{duplicate_ids} (schema version 2) records the duplicate id of every
client send that carried one, with the id of the message it accepted and
when: L{SQLiteStore.accept_once} accepts a message only if its duplicate
id is not recorded within the last C{duplicate_id_window_s}, writing the
row and the message in one transaction, and otherwise answers the first
message's id.  Rows older than the window count as absent and are pruned
(a prefix, as above, at most L{PRUNE_CHUNK} at a time) at L{open} and by
L{SQLiteStore.prune_duplicate_ids}, which a running router calls on a
timer: not on the send path.

L{SQLiteStore.commit} is a client transaction's one store call: it
accepts several messages (each as C{accept} or C{accept_once} would) and
consumes several queue entries in one function, so the executor's
savepoint makes it all or nothing.

C{known_routers} (schema version 7) holds every router name this router
has heard of, written once per name (L{meshroute.routing.known}): a
send to a router heard of by an earlier run, or by the active instance
whose replicated store an HA backup took over, waits in the backlog
instead of being refused as C{unknown-router}.

The dead-letter queue is the local queue
L{meshroute.messages.DEAD_LETTER_QUEUE}; a dead-lettered message carries
the reason in header L{DEAD_LETTER_REASON} and its original address
(C{queue@router}) in L{DEAD_LETTER_ADDRESS}.

The schema is versioned: C{schema/NNN-*.sql}, shipped as package data,
each file the upgrade step from the version before; the C{meta} table
holds C{schema_version} (and the name of the router owning the store).

Synchronous accessors
=====================

L{SQLiteStore.last_received}, L{SQLiteStore.backlog_depths},
L{SQLiteStore.queue_depths}, L{SQLiteStore.outbox_peers} and
L{SQLiteStore.outbox_depths} are served from dicts loaded at L{open} and
updated only on the reactor thread, by a callback the store adds to each
write's Deferred before returning it.  So they change exactly when the
Deferred fires (after the commit), in submission order, and a caller's
own callbacks already see the change; they need no lock.

The store holds persistent messages only; C{Message.persistent} is not
stored (every message read back is persistent).
"""

import json
import re
import sqlite3
import time
from importlib.resources import files
from operator import itemgetter

import msgpack
from zope.interface import implementer

from meshroute.errors import MeshrouteError
from meshroute.harules.quorum import VoterRecord
from meshroute.interfaces import IKnownRouters, IMessageStore, IPeerEpochs, IVoterRecords
from meshroute.messages import DEAD_LETTER_QUEUE, EXPIRED_QUEUE, Message, expires_ms
from meshroute.store.threaded_executor import ThreadedExecutor
from meshroute.store.transactions import atomic
from meshroute.store.voter_records import read_records, save_record

#: The C{sync} settings, as in the C{[store] sync} configuration key.
SYNC_MODES = ("full", "normal")

#: Header of a dead-lettered message: why it was dead-lettered.
DEAD_LETTER_REASON = "x-dead-letter-reason"
#: Header of a dead-lettered message: where it was going, C{queue@router}
#: (the name the message engine uses too).
DEAD_LETTER_ADDRESS = "x-original-address"


class StoreError(MeshrouteError):
    """
    The store cannot be opened: a schema from a newer meshroute, a failed
    upgrade step, or a database belonging to another router.
    """


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


class DuplicateMessage(MeshrouteError):
    """
    This router already holds, or already enqueued, a message with this
    id.
    """

    def __init__(self, msg_id: str) -> None:
        self.msg_id = msg_id
        super().__init__(f"message {msg_id!r} is already held or was already enqueued here")


# Schema files: NNN-what.sql, NNN from 001 up without gaps.
_MIGRATION = re.compile(r"(\d{3})-[A-Za-z0-9_.-]+\.sql\Z")
_migrations: list[tuple[int, str, str]] | None = None


def migrations() -> list[tuple[int, str, str]]:
    """
    The schema upgrade steps shipped with this package: C{(version, file
    name, SQL)} in version order.
    """
    global _migrations
    if _migrations is None:
        found = []
        for entry in files("meshroute.store").joinpath("schema").iterdir():
            match = _MIGRATION.match(entry.name)
            if match:
                found.append((int(match.group(1)), entry.name, entry.read_text("utf-8")))
        found.sort()
        if [version for version, _, _ in found] != list(range(1, len(found) + 1)):
            raise StoreError(f"schema files are not numbered 001 up without gaps: {found}")
        _migrations = found
    return _migrations


# Statements: constant strings, so sqlite3's statement cache prepares each
# once.  The state literals must stay literals: the partial indexes are
# only used when a query repeats them.

_COLUMNS = "msg_id, origin, dest_router, dest_queue, body, headers, hops, accepted_at"
# Written with the message's expiry (L{_row}), which is read back from its
# header.
_WRITTEN = f"{_COLUMNS}, expires_ms"
_INSERT_QUEUE = (
    f"INSERT INTO messages ({_WRITTEN}, state) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 'queue')"
)
_INSERT_QUEUE_NEW = _INSERT_QUEUE.replace("INSERT INTO", "INSERT OR IGNORE INTO", 1)
# Into the backlog unless already enqueued here (and, with OR IGNORE,
# unless already held here); rowcount says which.
_INSERT_BACKLOG = (
    f"INSERT INTO messages ({_WRITTEN}, state) "
    "SELECT ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, 'backlog' "
    "WHERE NOT EXISTS (SELECT 1 FROM enqueued_ids WHERE msg_id = ?1)"
)
_INSERT_BACKLOG_NEW = _INSERT_BACKLOG.replace("INSERT INTO", "INSERT OR IGNORE INTO", 1)
# For batches, which check enqueued_ids once for all of their ids.
_INSERT_BACKLOG_ANY = (
    f"INSERT INTO messages ({_WRITTEN}, state) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 'backlog')"
)
_ANY_ENQUEUED = (
    "SELECT 1 FROM enqueued_ids WHERE msg_id IN (SELECT value FROM json_each(?)) LIMIT 1"
)
_ANY_HELD = "SELECT 1 FROM messages WHERE msg_id IN (SELECT value FROM json_each(?)) LIMIT 1"
_LAST_RECEIVED = "SELECT last_received FROM links WHERE peer = ?"
_RECORD_ENQUEUED = "INSERT INTO enqueued_ids (msg_id, at) VALUES (?, ?)"
_RECORD_ENQUEUED_NEW = "INSERT OR IGNORE INTO enqueued_ids (msg_id, at) VALUES (?, ?)"
_FORGET_ENQUEUED = "DELETE FROM enqueued_ids WHERE msg_id = ?"
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
# A copy of a message held in an outbox came back: take the held one back
# to the backlog, with the returned copy's hop count.
_IN_OUTBOX = "SELECT id, peer, seq FROM messages WHERE msg_id = ? AND state = 'outbox'"
_RECALL = "UPDATE messages SET state = 'backlog', peer = NULL, seq = NULL, hops = ? WHERE id = ?"
# What follows a recalled message in its outbox goes back with it.
_RETURN_OUTBOX_AFTER = (
    "UPDATE messages SET state = 'backlog', peer = NULL, seq = NULL "
    "WHERE state = 'outbox' AND peer = ? AND seq > ? RETURNING dest_router"
)
# Assigning reads entry ids and body sizes first (length() of a BLOB does
# not read it), chooses by count and bytes, then reads only those rows.
_SELECT_BACKLOG_SIZES = (
    "SELECT id, length(body) FROM messages "
    "WHERE state = 'backlog' AND dest_router = ? ORDER BY id LIMIT ?"
)
_SELECT_ENTRIES = (
    f"SELECT id, {_COLUMNS} FROM messages "
    "WHERE id IN (SELECT value FROM json_each(?)) ORDER BY id"
)
_NEXT_SEQ = "SELECT next_seq FROM links WHERE peer = ?"
_NEW_LINK = "INSERT INTO links (peer, next_seq, last_received) VALUES (?, 1, 0)"
_SET_NEXT_SEQ = "UPDATE links SET next_seq = ? WHERE peer = ?"
# Entry ids travel as one JSON array parameter (here and below): one
# prepared statement, one step, whatever the number of ids.  The i-th id
# gets seq first + i.
_TO_OUTBOX = (
    "UPDATE messages SET state = 'outbox', peer = ?1, seq = ?2 + j.key "
    "FROM json_each(?3) AS j WHERE messages.id = j.value"
)
_SELECT_OUTBOX = (
    f"SELECT seq, {_COLUMNS} FROM messages "
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
_FETCH = (
    f"SELECT id, {_COLUMNS}, redelivered FROM messages "
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
_HELD = "SELECT id, state, dest_router, dest_queue, peer FROM messages WHERE msg_id = ?"
# Entries whose expiry passed (?1, epoch ms) in queues and in the backlog,
# the soonest expired first, except in the queues of ?2 (a JSON array: the
# queues whose entries consumers may hold in memory), at most ?3.
_SELECT_EXPIRED = (
    f"SELECT id, {_COLUMNS}, state FROM messages "
    "WHERE expires_ms IS NOT NULL AND expires_ms <= ?1 AND state IN ('queue', 'backlog') "
    "AND NOT (state = 'queue' AND dest_queue IN (SELECT value FROM json_each(?2))) "
    "ORDER BY expires_ms LIMIT ?3"
)
_DELETE_ENTRY = "DELETE FROM messages WHERE id = ?"
_FIND_DUPLICATE = "SELECT id, msg_id, at FROM duplicate_ids WHERE duplicate_id = ?"
_FORGET_DUPLICATE = "DELETE FROM duplicate_ids WHERE id = ?"
_RECORD_DUPLICATE = "INSERT INTO duplicate_ids (duplicate_id, msg_id, at) VALUES (?, ?, ?)"
# Deletes the oldest duplicate ids up to the first one recorded at or after
# the cutoff (all of them if there is none), at most LIMIT of them (-1: no
# limit).  Parameters: cutoff, limit.
_PRUNE_DUPLICATES = (
    "DELETE FROM duplicate_ids WHERE id IN (SELECT id FROM duplicate_ids WHERE id < coalesce("
    "(SELECT id FROM duplicate_ids WHERE at >= ? ORDER BY id LIMIT 1), "
    "(SELECT max(id) + 1 FROM duplicate_ids)) ORDER BY id LIMIT ?)"
)
# The same for enqueued ids.
_PRUNE = (
    "DELETE FROM enqueued_ids WHERE id IN (SELECT id FROM enqueued_ids WHERE id < coalesce("
    "(SELECT id FROM enqueued_ids WHERE at >= ? ORDER BY id LIMIT 1), "
    "(SELECT max(id) + 1 FROM enqueued_ids)) ORDER BY id LIMIT ?)"
)

#: Most expired ids one prune deletes per table, at L{SQLiteStore.open},
#: in each C{accept_once}, and by default in each call of the running
#: router's L{meshroute.store.pruning.IdPruner}: a prune is one
#: transaction, and one that deleted a backlog of millions (after a long
#: downtime, or a window made shorter) would hold the writer for seconds.
PRUNE_CHUNK = 5000

_packb = msgpack.packb
_unpackb = msgpack.unpackb


def connect(path: str, sync: str) -> sqlite3.Connection:
    """
    A connection to the store database at C{path} as the executors need
    it (no implicit transactions), in WAL mode with C{sync} (one of
    L{SYNC_MODES}) as C{PRAGMA synchronous}.
    """
    connection = sqlite3.connect(path, isolation_level=None, cached_statements=256)
    try:
        connection.execute("PRAGMA busy_timeout = 5000")
        connection.execute("PRAGMA journal_mode = WAL")
        connection.execute(f"PRAGMA synchronous = {sync.upper()}")
        connection.execute("PRAGMA temp_store = MEMORY")
    except BaseException:
        connection.close()
        raise
    return connection


def _row(m: Message) -> tuple:
    """
    C{m} as the parameters of the C{_WRITTEN} columns.
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


def _message(r: tuple) -> Message:
    """
    The message in C{r}, a row whose columns 1 to 8 are the C{_COLUMNS}.
    """
    return Message(r[1], r[2], r[3], r[4], r[5], _unpackb(r[6]) if r[6] else {}, r[7], True, r[8])


@implementer(IMessageStore, IVoterRecords, IPeerEpochs, IKnownRouters)
class SQLiteStore:
    """
    The durable state of one router in one SQLite database file.

    Open once with L{open}, close with L{close}; a closed store is not
    reopened (make a new one).  Call it from the reactor thread only.
    """

    def __init__(
        self,
        path: str,
        sync: str = "full",
        executor=None,
        dedup_window_s: float = 86400.0,
        *,
        router: str | None = None,
        clock=None,
        duplicate_id_window_s: float = 3600.0,
    ) -> None:
        """
        @param path: the database file (created if missing).
        @param sync: one of L{SYNC_MODES}; see the module docstring.
        @param executor: where the SQL runs: a L{ThreadedExecutor} (the
            default, on the global reactor) or another executor
            (L{meshroute.store.transactions}).
        @param dedup_window_s: how long the ids of enqueued messages are
            kept for duplicate detection.
        @param router: this router's name: C{accept} puts a message whose
            C{dest_router} is this into a local queue, and dead-lettered
            messages are addressed to it.  Recorded in the database at the
            first open given one; opening it as another router is then
            refused.  Without it, C{accept} takes the message's C{origin}
            as this router (C{accept} is only called at the origin), and
            dead-lettered messages keep their C{dest_router}.
        @param clock: an C{IReactorTime} for the times recorded with
            enqueued ids and duplicate ids (default: the system clock).
        @param duplicate_id_window_s: how long a client send's duplicate
            id keeps a second send with the same id from being accepted
            (the C{[clients.listener] duplicate-id-window}).
        """
        if sync not in SYNC_MODES:
            raise ValueError(f"sync must be one of {SYNC_MODES}, not {sync!r}")
        if executor is None:
            from twisted.internet import reactor

            executor = ThreadedExecutor(reactor)
        self.path = path
        self.sync = sync
        self.router = router
        self.dedup_window_s = dedup_window_s
        self.duplicate_id_window_s = duplicate_id_window_s
        self._executor = executor
        self._submit = executor.submit
        self._now = clock.seconds if clock is not None else time.time
        self._received: dict[str, int] = {}
        self._backlog: dict[str, int] = {}
        self._queues: dict[str, int] = {}
        self._outboxes: dict[str, dict[str, int]] = {}
        self._peer_stores: dict[str, str] = {}
        #: This store's id after L{open}: random, chosen when the store was
        #: created, never changed.
        self.store_id = ""
        #: The schema version after L{open}.
        self.schema_version = 0
        #: The schema versions applied by the last L{open} (empty when the
        #: database was already current).
        self.applied_versions: list[int] = []

    @property
    def executor(self):
        """
        The executor running this store's SQL (its C{commits} counter shows
        the group commits).
        """
        return self._executor

    # Opening and closing.

    def _connect(self) -> sqlite3.Connection:
        return connect(self.path, self.sync)

    def open(self):
        """
        Open the database (creating it if needed), apply the schema upgrade
        steps it lacks, prune old enqueued ids and duplicate ids and load the synchronous
        accessors' state.  Fires with None when ready.
        """
        # A replicated store's every change must be a recorded write
        # transaction (meshroute.store.changes): its open-time prune is one,
        # submitted after the open; otherwise it is part of the open.
        replicated = getattr(self._executor, "replication", None) is not None
        cutoff = self._now() - self.dedup_window_s
        duplicates_cutoff = self._now() - self.duplicate_id_window_s
        d = self._executor.start(self._connect)
        d.addCallback(
            lambda _: self._executor.run(
                _open, self.path, self.router, cutoff, duplicates_cutoff, not replicated
            )
        )
        d.addCallback(self._opened)
        if replicated:
            d.addCallback(lambda _: self._submit(_prune_expired, cutoff, duplicates_cutoff))
            d.addCallback(lambda _: None)
        return d

    def _opened(self, state) -> None:
        (self.schema_version, self.applied_versions, self.store_id, received, peer_stores,
         backlog, queues, outboxes) = state
        self._received = received
        self._peer_stores = peer_stores
        self._backlog = backlog
        self._queues = queues
        self._outboxes = outboxes

    def close(self):
        """
        Finish every write submitted so far and close the database.  Fires
        with None when closed.
        """
        return self._executor.stop()

    # Writes.

    def accept(self, message: Message):
        if message.dest_router == (self.router or message.origin):
            d = self._submit(_accept_local, message, self._now())
            d.addCallback(_count, self._queues, message.dest_queue, 1)
        else:
            d = self._submit(_accept_backlog, message)
            d.addCallback(_count, self._backlog, message.dest_router, 1)
        return d

    def accept_once(self, message: Message, duplicate_id: str):
        """
        C{accept}, unless a client send with the same C{duplicate_id} was
        accepted within the last C{duplicate_id_window_s}: the id and the
        message are written in one transaction.  A non-persistent message
        (C{message.persistent} false) is not stored; only its duplicate
        id is recorded.

        @return: Deferred firing with None when accepted (and durable), or
            with the C{msg_id} of the message first accepted with that
            duplicate id (nothing changed); failing with
            L{DuplicateMessage} as C{accept} does.
        """
        local = message.dest_router == (self.router or message.origin)
        now = self._now()
        d = self._submit(_accept_once, message, duplicate_id, local, now,
                         now - self.duplicate_id_window_s)
        if message.persistent:
            if local:
                d.addCallback(_count_if_new, self._queues, message.dest_queue)
            else:
                d.addCallback(_count_if_new, self._backlog, message.dest_router)
        return d

    def accept_many(self, items):
        """
        Accept a batch of client sends in one transaction: C{items} are
        C{(message, duplicate_id)} pairs (C{""} for none), each taken as
        L{accept} or L{accept_once} would take it, in order (a duplicate id
        repeated within the batch is a duplicate of the earlier item).
        Non-persistent messages without a duplicate id have nothing to
        store and must not be given.

        @return: Deferred firing, once durable, with one outcome per item:
            None when accepted, or the C{msg_id} of the message first
            accepted with its duplicate id (that item changed nothing);
            failing (nothing changed) with L{DuplicateMessage} as
            C{accept} does, or with the database's error.
        """
        router = self.router
        calls = [(message, duplicate_id, message.dest_router == (router or message.origin))
                 for message, duplicate_id in items]
        now = self._now()
        d = self._submit(_accept_many, calls, now, now - self.duplicate_id_window_s)
        d.addCallback(self._accepted_many, calls)
        return d

    def _accepted_many(self, outcomes: list, calls: list) -> list:
        for (message, _, local), original in zip(calls, outcomes):
            if original is None and message.persistent:
                if local:
                    _count(None, self._queues, message.dest_queue, 1)
                else:
                    _count(None, self._backlog, message.dest_router, 1)
        return outcomes

    def commit(self, sends, entry_ids):
        """
        A client transaction, all or nothing: accept every message of
        C{sends} (C{(message, duplicate_id)} pairs, C{""} for none) as
        L{accept} or L{accept_once} would, and delete the queue entries
        C{entry_ids} (ids not in any queue are ignored), in one transaction.

        @return: Deferred firing, once durable, with one item per send:
            None when accepted, or the C{msg_id} of the message first
            accepted with its duplicate id (that send changed nothing);
            failing (nothing changed) with L{DuplicateMessage} as C{accept}
            does, or with the database's error.
        """
        router = self.router
        calls = [(message, duplicate_id, message.dest_router == (router or message.origin))
                 for message, duplicate_id in sends]
        now = self._now()
        d = self._submit(_commit, calls, json.dumps(list(entry_ids)), now,
                         now - self.duplicate_id_window_s)
        d.addCallback(self._committed, calls)
        return d

    def _committed(self, result, calls: list) -> list:
        outcomes, consumed = result
        self._accepted_many(outcomes, calls)
        _add_counts(consumed, self._queues, -1)
        return outcomes

    def duplicate_of(self, duplicate_id: str):
        """
        Fires with the C{msg_id} of the message accepted with
        C{duplicate_id} within the last C{duplicate_id_window_s}, or None.
        """
        return self._submit(_duplicate_of, duplicate_id, self._now() - self.duplicate_id_window_s)

    def prune_duplicate_ids(self, limit: int | None = None):
        """
        Forget the duplicate ids recorded more than C{duplicate_id_window_s}
        ago, the oldest first, at most C{limit} of them (default: all).
        Fires with the number forgotten.
        """
        return self._submit(_prune_duplicates, self._now() - self.duplicate_id_window_s,
                            -1 if limit is None else limit)

    def receive(self, peer: str, seq: int, message: Message, local: bool, previous: int = 0):
        if local:
            d = self._submit(_receive_local, peer, seq, previous, message, self._now())
        else:
            d = self._submit(_receive_backlog, peer, seq, previous, message)
        d.addCallback(self._received_one, peer, seq, message, local)
        return d

    def _received_one(
        self, outcome, peer: str, seq: int, message: Message, local: bool
    ) -> str:
        if type(outcome) is tuple:
            outcome, outbox_peer, returned = outcome
            _add_counts(self._left_outbox(returned, outbox_peer), self._backlog, 1)
        if outcome != "duplicate-seq":
            self._received[peer] = seq
            if outcome == "stored":
                if local:
                    _count(None, self._queues, message.dest_queue, 1)
                else:
                    _count(None, self._backlog, message.dest_router, 1)
        return outcome

    def receive_many(self, peer: str, previous: int, items):
        """
        L{receive} for each of C{items} (C{(seq, message, local)} in link
        order, C{previous} the highest sequence known received before the
        first) in one store call and one transaction.

        @return: Deferred firing with the outcome of each, as L{receive}
            gives it; failing (nothing stored) with L{MissingTransfer} when
            C{previous} is not stored.
        """
        d = self._submit(_receive_many, peer, previous, items, self._now())
        d.addCallback(self._received_many, peer, items)
        return d

    def _received_many(self, outcomes: list, peer: str, items) -> list:
        received_one = self._received_one
        return [received_one(outcome, peer, seq, message, local)
                for outcome, (seq, message, local) in zip(outcomes, items)]

    def last_received(self, peer: str) -> int:
        return self._received.get(peer, 0)

    def peer_store_id(self, peer: str) -> str:
        return self._peer_stores.get(peer, "")

    def record_peer_store(self, peer: str, store_id: str, forget_received: bool):
        d = self._submit(_record_peer_store, peer, store_id, forget_received)
        d.addCallback(self._recorded_peer_store, peer, store_id, forget_received)
        return d

    def _recorded_peer_store(self, _, peer: str, store_id: str, forget_received: bool) -> None:
        self._peer_stores[peer] = store_id
        if forget_received:
            self._received.pop(peer, None)

    def assign(self, peer: str, dest_routers, limit: int, max_bytes: int | None = None):
        d = self._submit(_assign, peer, dest_routers, limit, max_bytes)
        d.addCallback(self._assigned, peer)
        return d

    def _assigned(self, assigned: list, peer: str) -> list:
        if assigned:
            backlog = self._backlog
            for _, message in assigned:
                _count(None, backlog, message.dest_router, -1)
            outbox = self._outboxes.setdefault(peer, {})
            for _, message in assigned:
                _count(None, outbox, message.dest_router, 1)
        return assigned

    def outbox(self, peer: str, after_seq: int):
        return self._submit(_outbox, peer, after_seq)

    def acknowledge(self, peer: str, up_to_seq: int):
        d = self._submit(_acknowledge, peer, up_to_seq)
        d.addCallback(self._left_outbox, peer)
        d.addCallback(lambda by_dest: sum(by_dest.values()))
        return d

    def return_outbox(self, peer: str):
        d = self._submit(_return_outbox, peer)
        d.addCallback(self._left_outbox, peer)
        d.addCallback(_add_counts, self._backlog, 1)
        return d

    def _left_outbox(self, by_dest: dict, peer: str) -> dict:
        """
        C{by_dest[dest_router]} messages left C{peer}'s outbox; returns
        C{by_dest}.
        """
        outbox = self._outboxes.get(peer)
        if outbox is not None:
            _add_counts(by_dest, outbox, -1)
            if not outbox:
                del self._outboxes[peer]
        return by_dest

    def outbox_peers(self) -> list[str]:
        """
        Synchronous: the peers whose outbox holds messages (not yet
        acknowledged), sorted.  At start the message engine returns the
        outboxes of peers that do not come back to the backlog.
        """
        return sorted(self._outboxes)

    def outbox_depths(self) -> dict[str, dict[str, int]]:
        """
        Synchronous: C{{peer: {dest_router: messages}}} for the messages in
        each peer's outbox (not yet acknowledged).  The message engine
        keeps a destination's new messages behind those still in the
        outbox of a peer that is no longer its next hop.
        """
        return {peer: dict(outbox) for peer, outbox in self._outboxes.items()}

    def fetch(self, queue: str, after_entry: int, limit: int, mark: int = 0):
        """
        See L{IMessageStore.fetch}: with C{mark}, the first C{mark}
        entries fetched that are not flagged redelivered are flagged in
        the same transaction (their rows show them unflagged, as they
        were): the deliveries a consumer's credit already awaits need no
        L{mark_redelivered} commit of their own.
        """
        if mark:
            return self._submit(_fetch_marking, queue, after_entry, limit, mark)
        return self._submit(_fetch, queue, after_entry, limit)

    def consume(self, entry_ids):
        """
        Consumers acknowledged these queue entries: delete them.  Fires
        with the number deleted (ids not in any queue are ignored).

        With C{sync = "full"} the deletion has no fsync of its own, it is
        made durable by the next commit that has one (a relaxed commit,
        see L{meshroute.store.transactions}): a client's acknowledgement
        is never confirmed to it, and one lost to a power failure only
        delivers the message again, flagged redelivered, as one lost on
        the wire does.
        """
        d = self._submit(_consume, json.dumps(list(entry_ids)))
        d.addCallback(_add_counts, self._queues, -1)
        return d

    def mark_redelivered(self, entry_ids):
        """
        Flag these queue entries redelivered.  Fires with the number
        flagged (ids not in any queue are ignored).
        """
        return self._submit(_mark_redelivered, json.dumps(list(entry_ids)))

    def dead_letter(self, message: Message, reason: str):
        """
        Store C{message} in the dead-letter queue with C{reason} in header
        L{DEAD_LETTER_REASON} and its address in L{DEAD_LETTER_ADDRESS}.
        If this router holds it already (backlog, outbox or a queue), it
        is moved there; if it is already dead-lettered, nothing changes.
        Its id is recorded as enqueued here, so later copies are
        duplicates.  Fires with None when durable.
        """
        d = self._submit(
            _dead_letter, message, reason, self.router or message.dest_router, self._now()
        )
        d.addCallback(self._dead_lettered)
        return d

    def _dead_lettered(self, moved) -> None:
        if moved is not None:
            self._set_aside(moved, DEAD_LETTER_QUEUE)
        return None

    def _set_aside(self, moved: tuple, queue: str) -> None:
        """
        The counts after a message left C{moved}'s place (C{(state,
        dest_router, dest_queue, peer)}) for local queue C{queue}.
        """
        state, dest_router, dest_queue, peer = moved
        if state == "backlog":
            _count(None, self._backlog, dest_router, -1)
        elif state == "queue":
            _count(None, self._queues, dest_queue, -1)
        elif state == "outbox":
            self._left_outbox({dest_router: 1}, peer)
        _count(None, self._queues, queue, 1)

    def expire(self, messages):
        """
        Move C{messages}, whose time to live ran out, from where this
        router holds them (a queue, the backlog or an outbox) to the local
        queue L{EXPIRED_QUEUE}, their address in header
        L{DEAD_LETTER_ADDRESS}, in one transaction.  One this router no
        longer holds (consumed meanwhile) is left alone.  Fires with the
        messages moved.
        """
        d = self._submit(_expire, list(messages), self.router, self._now())
        d.addCallback(self._expired)
        return d

    def sweep_expired(self, now_ms: int, busy_queues, limit: int):
        """
        Move at most C{limit} entries whose expiry is at or before
        C{now_ms} from the queues (except C{busy_queues}, whose entries
        consumers may hold in memory) and the backlog to
        L{EXPIRED_QUEUE}, as L{expire} does, the soonest expired first.
        Fires with the messages moved.
        """
        d = self._submit(_sweep_expired, now_ms, json.dumps(sorted(busy_queues)), limit,
                         self.router, self._now())
        d.addCallback(self._expired)
        return d

    def _expired(self, moved: list) -> list:
        for place in moved:
            self._set_aside(place[1:], EXPIRED_QUEUE)
        return [place[0] for place in moved]

    def prune(self, limit: int | None = None):
        """
        Forget the ids of messages enqueued more than C{dedup_window_s}
        ago, the oldest first, at most C{limit} of them (default: all).
        Fires with the number forgotten.
        """
        return self._submit(_prune, self._now() - self.dedup_window_s,
                            -1 if limit is None else limit)

    def backlog_depths(self) -> dict[str, int]:
        return dict(self._backlog)

    def queue_depths(self) -> dict[str, int]:
        return dict(self._queues)

    # HA voter records (IVoterRecords; schema version 4).  Separate from
    # the message functions above: a witness's promises, not messages.

    def voter_records(self):
        """
        Fires with C{{group: (VoterRecord, lease_timeout_ms)}} for every
        group this router has voted for.
        """
        return self._submit(read_records)

    def save_voter_record(self, group: str, record: VoterRecord, lease_timeout_ms: int):
        """
        Replace C{group}'s voter record; fires with None once durable.
        """
        return self._submit(save_record, group, record, lease_timeout_ms)

    # The highest epoch seen per peer router name (IPeerEpochs; schema
    # version 6): what lets a restarted router still refuse an HA instance
    # that lost its place.

    def peer_epochs(self):
        """
        Fires with C{{peer: epoch}}.
        """
        return self._submit(_peer_epochs)

    def save_peer_epoch(self, peer: str, epoch: int):
        """
        Raise C{peer}'s epoch to C{epoch}; fires with None once durable.
        """
        return self._submit(_save_peer_epoch, peer, epoch)

    # The routers heard of (IKnownRouters; schema version 7): what lets a
    # restarted router, or an HA backup that took over, accept sends to
    # them before its links are up.

    def known_routers(self):
        """
        Fires with the set of router names saved.
        """
        return self._submit(_known_routers)

    def save_known_routers(self, names):
        """
        Save the router names C{names} not saved yet; fires with None once
        durable.
        """
        return self._submit(_save_known_routers, sorted(names), self._now())


# Mirror updates, on the reactor thread as Deferred callbacks.


def _count(result, counts: dict, key: str, delta: int):
    n = counts.get(key, 0) + delta
    if n:
        counts[key] = n
    else:
        del counts[key]
    return result


def _count_if_new(original: str | None, counts: dict, key: str):
    """
    After C{accept_once}: one more entry under C{key} if it accepted.
    """
    if original is None:
        _count(None, counts, key, 1)
    return original


def _add_counts(by_key: dict, counts: dict, sign: int) -> int:
    """
    Add C{by_key}'s counts (times C{sign}) to C{counts}; return their sum.
    """
    total = 0
    for key, n in by_key.items():
        _count(None, counts, key, sign * n)
        total += n
    return total


# What runs on the store's connection (the writer thread).  Each function
# makes its changes inside the transaction the executor opened; raising
# undoes them.  The hot ones have a C{batch} form (see
# meshroute.store.transactions): it handles a run of calls with one executemany
# per statement, and raises _OneByOne for anything unusual (a duplicate),
# so that the executor undoes it and runs the calls one by one, each
# getting its own outcome.


class _OneByOne(Exception):
    """
    A batch met a case it leaves to the one-by-one functions.
    """


def _check_seqs(connection, calls) -> dict:
    """
    For a batch of receives C{(peer, seq, previous, ...)}: C{{peer: highest
    seq}}, if each peer's calls follow each other (each one's C{previous}
    is the seq before it in the batch, and above it) and the first follows
    the last received from that peer; else raise L{_OneByOne}.
    """
    first: dict = {}
    last: dict = {}
    for call in calls:
        peer, seq, previous = call[0], call[1], call[2]
        before = last.get(peer)
        if before is None:
            first[peer] = previous
        elif previous != before:
            raise _OneByOne()
        if seq <= previous:
            raise _OneByOne()
        last[peer] = seq
    for peer, previous in first.items():
        if _last_received(connection, peer) != previous:
            raise _OneByOne()
    return last


def _last_received(connection, peer: str) -> int:
    row = connection.execute(_LAST_RECEIVED, (peer,)).fetchone()
    return row[0] if row is not None else 0


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


def _none_enqueued(connection, messages) -> None:
    """
    Raise L{_OneByOne} if any of C{messages} was enqueued here.
    """
    ids = json.dumps([m.msg_id for m in messages])
    if connection.execute(_ANY_ENQUEUED, (ids,)).fetchone() is not None:
        raise _OneByOne()


def upgrade_schema(connection: sqlite3.Connection, path: str) -> tuple[int, list[int]]:
    """
    Apply the schema upgrade steps the database at C{path} lacks, each in
    its own transaction with its version; return the latest version and
    the versions applied.  Run outside any transaction.

    @raise StoreError: the schema is newer than this meshroute knows, or
        a step failed.
    """
    execute = connection.execute
    steps = migrations()
    latest = steps[-1][0]
    version = 0
    if execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'meta'").fetchone():
        row = execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        version = int(row[0]) if row else 0
    if version > latest:
        raise StoreError(
            f"{path}: schema version {version} is newer than this meshroute knows ({latest})"
        )
    applied = []
    for step, name, sql in steps:
        if step <= version:
            continue
        try:
            # executescript runs no implicit transaction control with
            # isolation_level=None: the step and its version commit together.
            connection.executescript(
                f"BEGIN IMMEDIATE;\n{sql}\n;\n"
                f"INSERT OR REPLACE INTO meta (key, value) VALUES ('schema_version', {step});\n"
                "COMMIT;"
            )
        except sqlite3.Error as e:
            if connection.in_transaction:
                execute("ROLLBACK")
            raise StoreError(f"{path}: schema upgrade {name} failed: {e}") from e
        applied.append(step)
    return latest, applied


def _open(connection: sqlite3.Connection, path: str, router: str | None, cutoff: float,
          duplicates_cutoff: float, prune: bool):
    execute = connection.execute
    latest, applied = upgrade_schema(connection, path)
    execute("BEGIN IMMEDIATE")
    try:
        row = execute("SELECT value FROM meta WHERE key = 'router'").fetchone()
        if router is None:
            pass
        elif row is None:
            execute("INSERT INTO meta (key, value) VALUES ('router', ?)", (router,))
        elif row[0] != router:
            raise StoreError(f"{path} is the store of router {row[0]!r}, not {router!r}")
        if prune:
            _prune_expired(connection, cutoff, duplicates_cutoff)
        store_id = execute("SELECT value FROM meta WHERE key = 'store_id'").fetchone()[0]
        received = dict(execute("SELECT peer, last_received FROM links WHERE last_received > 0"))
        peer_stores = dict(
            execute("SELECT peer, peer_store_id FROM links WHERE peer_store_id != ''")
        )
        backlog = dict(
            execute(
                "SELECT dest_router, count(*) FROM messages WHERE state = 'backlog' "
                "GROUP BY dest_router"
            )
        )
        queues = dict(
            execute(
                "SELECT dest_queue, count(*) FROM messages WHERE state = 'queue' "
                "GROUP BY dest_queue"
            )
        )
        outboxes: dict = {}
        for peer, dest_router, n in execute(
            "SELECT peer, dest_router, count(*) FROM messages WHERE state = 'outbox' "
            "GROUP BY peer, dest_router"
        ):
            outboxes.setdefault(peer, {})[dest_router] = n
        execute("COMMIT")
    except BaseException:
        if connection.in_transaction:
            execute("ROLLBACK")
        raise
    return latest, applied, store_id, received, peer_stores, backlog, queues, outboxes


def _accept_local(connection, message: Message, now: float) -> None:
    try:
        connection.execute(_RECORD_ENQUEUED, (message.msg_id, now))
        connection.execute(_INSERT_QUEUE, _row(message))
    except sqlite3.IntegrityError:
        raise DuplicateMessage(message.msg_id) from None


def _accept_once(connection, message: Message, duplicate_id: str, local: bool, now: float,
                 cutoff: float) -> str | None:
    """
    See L{SQLiteStore.accept_once}.  Not atomic: the executor runs it in a
    savepoint, so a L{DuplicateMessage} undoes the duplicate id row too.
    """
    execute = connection.execute
    row = execute(_FIND_DUPLICATE, (duplicate_id,)).fetchone()
    if row is not None:
        if row[2] >= cutoff:
            return row[1]
        # Older than the window and not pruned yet (the pruner runs on a
        # timer, or the clock went back): it counts as absent.
        execute(_FORGET_DUPLICATE, (row[0],))
    execute(_RECORD_DUPLICATE, (duplicate_id, message.msg_id, now))
    if message.persistent:
        if local:
            _accept_local(connection, message, now)
        else:
            _accept_backlog(connection, message)
    return None


def _commit(connection, calls: list, entry_ids: str, now: float, cutoff: float):
    """
    See L{SQLiteStore.commit}.  Not atomic: the executor runs it in a
    savepoint, so anything raised undoes all of it.  Returns the outcome
    of each call and C{{queue: entries deleted}}.
    """
    return _accept_each(connection, calls, now, cutoff), _consume(connection, entry_ids)


def _accept_each(connection, calls: list, now: float, cutoff: float) -> list:
    """
    Accept C{(message, duplicate_id, local)} calls one by one, in order;
    the outcome of each (None, or the original's C{msg_id}).
    """
    outcomes = []
    for message, duplicate_id, local in calls:
        if duplicate_id:
            outcomes.append(_accept_once(connection, message, duplicate_id, local, now, cutoff))
            continue
        if local:
            _accept_local(connection, message, now)
        else:
            _accept_backlog(connection, message)
        outcomes.append(None)
    return outcomes


def _accept_many(connection, calls: list, now: float, cutoff: float) -> list:
    """
    See L{SQLiteStore.accept_many}.  Not atomic: the executor runs it in a
    savepoint, so anything raised undoes all of it.  Without duplicate ids
    (the common case) each kind of destination is one C{executemany}, as
    the executor's batch forms do: a batch's messages have different
    destinations in order of their own, so grouping keeps each
    destination's order.
    """
    if any(call[1] for call in calls):
        return _accept_each(connection, calls, now, cutoff)
    local = [(message, now) for message, _, is_local in calls if is_local]
    backlog = [(message,) for message, _, is_local in calls if not is_local]
    try:
        if local:
            _accept_local_batch(connection, local)
        if backlog:
            _accept_backlog_batch(connection, backlog)
    except (sqlite3.IntegrityError, _OneByOne):
        # A message id already held: the batch fails whole (raising undoes
        # what the statements did; a partly run executemany must not stay).
        # Ids are made by this router, so this is a broken invariant, not
        # a client's doing.
        first, last = calls[0][0].msg_id, calls[-1][0].msg_id
        raise DuplicateMessage(first if first == last else f"{first}..{last}") from None
    return [None] * len(calls)


@atomic
def _duplicate_of(connection, duplicate_id: str, cutoff: float) -> str | None:
    row = connection.execute(_FIND_DUPLICATE, (duplicate_id,)).fetchone()
    return row[1] if row is not None and row[2] >= cutoff else None


def _accept_local_batch(connection, calls: list) -> list:
    # A duplicate raises IntegrityError: the calls then run one by one.
    connection.executemany(_RECORD_ENQUEUED, [(m.msg_id, now) for m, now in calls])
    connection.executemany(_INSERT_QUEUE, [_row(m) for m, _ in calls])
    return [None] * len(calls)


_accept_local.batch = _accept_local_batch


@atomic
def _accept_backlog(connection, message: Message) -> None:
    try:
        stored = connection.execute(_INSERT_BACKLOG, _row(message)).rowcount
    except sqlite3.IntegrityError:
        stored = 0
    if not stored:
        raise DuplicateMessage(message.msg_id)


def _accept_backlog_batch(connection, calls: list) -> list:
    messages = [call[0] for call in calls]
    _none_enqueued(connection, messages)
    connection.executemany(_INSERT_BACKLOG_ANY, [_row(m) for m in messages])
    return [None] * len(calls)


_accept_backlog.batch = _accept_backlog_batch


def _receive_local(connection, peer: str, seq: int, previous: int, message: Message,
                   now: float) -> str:
    execute = connection.execute
    if not _new_seq(connection, peer, seq, previous):
        return "duplicate-seq"
    if not execute(_RECORD_ENQUEUED_NEW, (message.msg_id, now)).rowcount:
        return "duplicate-id"
    if not execute(_INSERT_QUEUE_NEW, _row(message)).rowcount:
        # Held here already (not enqueued by this call): undo the record.
        execute(_FORGET_ENQUEUED, (message.msg_id,))
        return "duplicate-id"
    return "stored"


def _receive_local_batch(connection, calls: list) -> list:
    last = _check_seqs(connection, calls)
    connection.executemany(_RECORD_RECEIVED, last.items())
    connection.executemany(_RECORD_ENQUEUED, [(call[3].msg_id, call[4]) for call in calls])
    connection.executemany(_INSERT_QUEUE, [_row(call[3]) for call in calls])
    return ["stored"] * len(calls)


_receive_local.batch = _receive_local_batch


def _receive_backlog(connection, peer: str, seq: int, previous: int, message: Message):
    """
    See L{SQLiteStore.receive}; a recalled message answers C{("recalled",
    the peer whose outbox held it, {dest_router: messages that left that
    outbox for the backlog})}: the recalled one and every one after it in
    that outbox, so that a recovery replaying what is left of the outbox
    cannot send them out of their order.
    """
    execute = connection.execute
    if not _new_seq(connection, peer, seq, previous):
        return "duplicate-seq"
    if execute(_INSERT_BACKLOG_NEW, _row(message)).rowcount:
        return "stored"
    held = execute(_IN_OUTBOX, (message.msg_id,)).fetchone()
    if held is None:
        return "duplicate-id"
    entry, outbox_peer, outbox_seq = held
    execute(_RECALL, (message.hops, entry))
    returned = _by_key(execute(_RETURN_OUTBOX_AFTER, (outbox_peer, outbox_seq)).fetchall())
    returned[message.dest_router] = returned.get(message.dest_router, 0) + 1
    return "recalled", outbox_peer, returned


def _receive_backlog_batch(connection, calls: list) -> list:
    last = _check_seqs(connection, calls)
    messages = [call[3] for call in calls]
    _none_enqueued(connection, messages)
    connection.executemany(_RECORD_RECEIVED, last.items())
    connection.executemany(_INSERT_BACKLOG_ANY, [_row(m) for m in messages])
    return ["stored"] * len(calls)


_receive_backlog.batch = _receive_backlog_batch


def _receive_many(connection, peer: str, previous: int, items: list, now: float) -> list:
    """
    See L{SQLiteStore.receive_many}: a clean batch (new sequences after
    the last received, no id held or enqueued here, none twice) with one
    statement per kind of write; anything else one by one, as
    L{_receive_local} and L{_receive_backlog} decide for a single
    transfer.  A transfer refused (L{MissingTransfer}) refuses the batch:
    its changes are undone with the function's.
    """
    calls = []
    for seq, message, local in items:
        calls.append((peer, seq, previous, message, local))
        previous = seq
    try:
        _check_new(connection, calls)
    except _OneByOne:
        return [_receive_local(connection, peer, seq, before, message, now) if local
                else _receive_backlog(connection, peer, seq, before, message)
                for peer, seq, before, message, local in calls]
    connection.execute(_RECORD_RECEIVED, (peer, previous))
    local = [call[3] for call in calls if call[4]]
    if local:
        connection.executemany(_RECORD_ENQUEUED, [(m.msg_id, now) for m in local])
        connection.executemany(_INSERT_QUEUE, [_row(m) for m in local])
    if len(local) < len(calls):
        connection.executemany(_INSERT_BACKLOG_ANY,
                               [_row(call[3]) for call in calls if not call[4]])
    return ["stored"] * len(calls)


def _check_new(connection, calls) -> None:
    """
    Raise L{_OneByOne} unless the receives C{calls} can be written
    without a conflict: their sequences follow the last received, and
    their ids are distinct and neither held nor enqueued here.
    """
    _check_seqs(connection, calls)
    messages = [call[3] for call in calls]
    ids = json.dumps([m.msg_id for m in messages])
    if len(set(m.msg_id for m in messages)) < len(messages):
        raise _OneByOne()
    if connection.execute(_ANY_HELD, (ids,)).fetchone() is not None:
        raise _OneByOne()
    _none_enqueued(connection, messages)


def _assign(connection, peer: str, dest_routers, limit: int, max_bytes: int | None) -> list:
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
    found = execute(_NEXT_SEQ, (peer,)).fetchone()
    if found is None:
        execute(_NEW_LINK, (peer,))
        first = 1
    else:
        first = found[0]
    execute(_TO_OUTBOX, (peer, first, ids))
    execute(_SET_NEXT_SEQ, (first + len(rows), peer))
    return [(first + i, _message(r)) for i, r in enumerate(rows)]


@atomic
def _record_peer_store(connection, peer: str, store_id: str, forget_received: bool) -> None:
    connection.execute(_RECORD_PEER_STORE, (peer, store_id, forget_received))


@atomic
def _outbox(connection, peer: str, after_seq: int) -> list:
    return [(r[0], _message(r)) for r in connection.execute(_SELECT_OUTBOX, (peer, after_seq))]


def _acknowledge(connection, peer: str, up_to_seq: int) -> dict:
    execute = connection.execute
    execute(_NUMBER_ABOVE, (peer, up_to_seq))
    return _by_key(execute(_ACKNOWLEDGE, (peer, up_to_seq)).fetchall())


# Needs no fsync of its own (see "Relaxed commits" in the transactions): lost
# to a power failure, the forgotten transfers are replayed and the peer
# discards them by their seqs; and the next seq moved above the peer's
# (a restored store) is durable before any transfer numbered after it is
# sent (its assign is fsynced), and moved again at every link recovery.
_acknowledge.relaxed = True


def _by_key(rows) -> dict:
    counts: dict = {}
    for (key,) in rows:
        counts[key] = counts.get(key, 0) + 1
    return counts


@atomic
def _return_outbox(connection, peer: str) -> dict:
    return _by_key(connection.execute(_RETURN_OUTBOX, (peer,)).fetchall())


@atomic
def _fetch(connection, queue: str, after_entry: int, limit: int) -> list:
    return [
        (r[0], _message(r), bool(r[9]))
        for r in connection.execute(_FETCH, (queue, after_entry, limit))
    ]


def _fetch_marking(connection, queue: str, after_entry: int, limit: int, mark: int) -> list:
    rows = _fetch(connection, queue, after_entry, limit)
    first = [entry for entry, _, redelivered in rows if not redelivered][:mark]
    if first:
        connection.execute(_MARK_REDELIVERED, (json.dumps(first),))
    return rows


@atomic
def _consume(connection, entry_ids: str) -> dict:
    return _by_key(connection.execute(_CONSUME, (entry_ids,)).fetchall())


# Needs no fsync of its own (see SQLiteStore.consume): lost to a power
# failure, the entries are delivered again, flagged redelivered.
_consume.relaxed = True


@atomic
def _mark_redelivered(connection, entry_ids: str) -> int:
    return connection.execute(_MARK_REDELIVERED, (entry_ids,)).rowcount


def _dead_letter(connection, message: Message, reason: str, router: str, now: float):
    """
    See L{SQLiteStore.dead_letter}.  Returns C{(state, dest_router,
    dest_queue, peer)} of the place the message was taken from, C{("new",
    None, None, None)} when it was not held here, None when it was already
    dead-lettered (nothing changed).
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
    connection.execute(_INSERT_QUEUE, (
        message.msg_id, message.origin, router or message.dest_router, queue, message.body,
        _packb({**message.headers, **headers,
                DEAD_LETTER_ADDRESS: f"{message.dest_queue}@{message.dest_router}"}),
        message.hops, message.accepted_at, None,
    ))
    connection.execute(_RECORD_ENQUEUED_NEW, (message.msg_id, now))


def _expire(connection, messages: list, router: str | None, now: float) -> list:
    """
    See L{SQLiteStore.expire}.  Returns C{(message, state, dest_router,
    dest_queue, peer)} for each message moved.
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


def _sweep_expired(connection, now_ms: int, busy_queues: str, limit: int,
                   router: str | None, now: float) -> list:
    """
    See L{SQLiteStore.sweep_expired}.
    """
    execute = connection.execute
    moved = []
    for row in execute(_SELECT_EXPIRED, (now_ms, busy_queues, limit)).fetchall():
        message = _message(row)
        execute(_DELETE_ENTRY, (row[0],))
        _put_aside(connection, message, EXPIRED_QUEUE, router, {}, now)
        moved.append((message, row[9], message.dest_router, message.dest_queue, None))
    return moved


@atomic
def _prune(connection, cutoff: float, limit: int) -> int:
    return connection.execute(_PRUNE, (cutoff, limit)).rowcount


def _prune_expired(connection, cutoff: float, duplicates_cutoff: float) -> None:
    """
    At open: one chunk of each table's expired ids.
    """
    connection.execute(_PRUNE, (cutoff, PRUNE_CHUNK))
    connection.execute(_PRUNE_DUPLICATES, (duplicates_cutoff, PRUNE_CHUNK))


@atomic
def _prune_duplicates(connection, cutoff: float, limit: int) -> int:
    return connection.execute(_PRUNE_DUPLICATES, (cutoff, limit)).rowcount


# Peer epochs, on the writer thread.


def _peer_epochs(connection) -> dict:
    return dict(connection.execute("SELECT peer, epoch FROM peer_epochs"))


@atomic
def _save_peer_epoch(connection, peer: str, epoch: int) -> None:
    connection.execute(
        "INSERT INTO peer_epochs (peer, epoch) VALUES (?, ?) "
        "ON CONFLICT (peer) DO UPDATE SET epoch = max(epoch, excluded.epoch)",
        (peer, epoch),
    )


# Known routers, on the writer thread.


def _known_routers(connection) -> set:
    return {router for (router,) in connection.execute("SELECT router FROM known_routers")}


@atomic
def _save_known_routers(connection, names: list, now: float) -> None:
    connection.executemany(
        "INSERT INTO known_routers (router, first_heard) VALUES (?, ?) "
        "ON CONFLICT (router) DO NOTHING",
        [(name, now) for name in names],
    )
