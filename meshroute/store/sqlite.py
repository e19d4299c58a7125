"""
The SQLite message store: L{IMessageStore} on stdlib C{sqlite3}.

L{SQLiteStore} is the store's face: each method hands one function to
the store's executor (L{meshroute.store.transactions}), taken from the
module of its idea, and updates the store's L{StoreMirror} when it
commits:

  - L{meshroute.store.accepting}: clients' sends, duplicate ids, client
    transactions;
  - L{meshroute.store.prepared}: prepared (two-phase) client
    transactions, and the xids committed;
  - L{meshroute.store.inbox}: transfers received from peers;
  - L{meshroute.store.outbox}: messages given to peers, until
    acknowledged;
  - L{meshroute.store.queue_entries}: local queues' entries, as
    consumers take them;
  - L{meshroute.store.set_aside}: dead letters and expired messages;
  - L{meshroute.store.pruning}: forgetting expired ids;
  - L{meshroute.store.router_records}: what a witness promised, and
    what this router remembers of the others (the methods of
    L{RouterRecords}, which the store is too);
  - L{meshroute.store.database}: the file, its schema and its owner;
    L{meshroute.store.rows}: a message as a row.

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
the next commit that has one: forgetting the transfers a peer
acknowledged (L{SQLiteStore.acknowledge}), which a power failure can
only make the peer receive again, and it discards them; and deleting the
queue entries consumers acknowledged (L{SQLiteStore.consume}), which a
power failure can only make delivered again, flagged redelivered.

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

C{links} holds, per peer, the next sequence number to give a message sent
to it (L{meshroute.store.outbox}) and the last sequence number durably
received from it, with the store id of the peer those numbers belong to
(L{meshroute.store.inbox}).

C{enqueued_ids} records the id of every message enqueued here (accepted
or received for a local queue, or dead-lettered), so that a copy arriving
again is recognised as a duplicate.  Rows older than C{dedup_window_s}
are pruned by L{SQLiteStore.prune}, which a running router calls on a
timer in bounded chunks (L{meshroute.store.pruning}), and one chunk of
them at L{SQLiteStore.open}: a copy arriving later than that would be
enqueued a second time, so the window must exceed the longest time a
message can spend in the mesh.

C{duplicate_ids} (schema version 2) records the duplicate id of every
client send that carried one (L{meshroute.store.accepting});
C{prepared_transactions}, C{prepared_sends}, C{prepared_acks} and
C{committed_xids} (schema version 11) the two-phase transactions
(L{meshroute.store.prepared}), whose acknowledged entries wait in
C{messages} in state C{'prepared'} until they are decided;
C{known_routers} (schema version 7) every router name this router has
heard of, C{peer_epochs} (schema version 6) the highest HA epoch seen per
peer (L{meshroute.store.router_records}); C{ha_voter_records} (schema
versions 4 and 10) a witness's promises (L{meshroute.store.voter_records});
C{replication_state} (schema version 5) the position of a replicated
store (L{meshroute.store.changes}).

The store holds persistent messages only; C{Message.persistent} is not
stored (every message read back is persistent).
"""

import json
import time

from zope.interface import implementer

from meshroute.interfaces import IMessageStore
from meshroute.messages import Message
from meshroute.store import (
    accepting,
    inbox,
    outbox,
    prepared,
    pruning,
    queue_entries,
    retained,
    set_aside,
    topics,
)
from meshroute.store.database import SYNC_MODES, claim, connect, upgrade_schema
from meshroute.store.mirror import StoreMirror
from meshroute.store.router_records import RouterRecords
from meshroute.store.adaptive_executor import AdaptiveExecutor


@implementer(IMessageStore)
class SQLiteStore(RouterRecords):
    """
    The durable state of one router in one SQLite database file: its
    messages, and its records (L{RouterRecords}).

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
        @param executor: where the SQL runs: an L{AdaptiveExecutor} (the
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

            executor = AdaptiveExecutor(reactor)
        self.path = path
        self.sync = sync
        self.router = router
        self.dedup_window_s = dedup_window_s
        self.duplicate_id_window_s = duplicate_id_window_s
        super().__init__(executor.submit, clock.seconds if clock is not None else time.time)
        self._executor = executor
        self._mirror = StoreMirror()
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

    def _connect(self):
        return connect(self.path, self.sync)

    def open(self):
        """
        Open the database (creating it if needed), apply the schema upgrade
        steps it lacks, prune old enqueued ids and duplicate ids and load
        the synchronous accessors' state.  Fires with None when ready.
        """
        # A replicated store's every change must be a recorded write
        # transaction (meshroute.store.changes): its open-time prune is one,
        # submitted after the open; otherwise it is part of the open.
        replicated = self.replicated
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
            d.addCallback(
                lambda _: self._submit(pruning.prune_one_chunk, cutoff, duplicates_cutoff)
            )
            d.addCallback(lambda _: None)
        return d

    @property
    def replicated(self) -> bool:
        """
        Whether every transaction is handed to a replication gate (an HA
        pair's active instance): nothing it holds may leave before the
        gate confirms it, so its links never forward a message before its
        accept is committed (docs/routing.md).
        """
        return getattr(self._executor, "replication", None) is not None

    def _opened(self, state) -> None:
        self.schema_version, self.applied_versions, self.store_id, self._mirror = state

    def reusable_bytes(self) -> int:
        """
        The bytes of the database file that are free pages, which new rows
        take before the file grows, as of the last checkpoint
        (L{meshroute.store.checkpoints}).
        """
        return self._executor.checkpoints.reusable_bytes

    def squeeze_wal(self, squeezed: bool) -> None:
        """
        While C{squeezed} (the disk is nearly full,
        L{meshroute.store.disk_space}), checkpoint after every batch of
        work, so that the WAL file is reused from its beginning rather
        than grown (up to L{meshroute.store.checkpoints.WAL_MAX_BYTES}
        otherwise).
        """
        self._executor.checkpoints.squeezed = squeezed

    def close(self):
        """
        Finish every write submitted so far and close the database.  Fires
        with None when closed.
        """
        return self._executor.stop()

    # Clients' sends (meshroute.store.accepting).

    def _is_local(self, message: Message) -> bool:
        """
        Whether C{message} goes to a local queue: its C{dest_router} is
        this router (or, without a router name, its origin).
        """
        return message.dest_router == (self.router or message.origin)

    def accept(self, message: Message):
        local = self._is_local(message)
        if local:
            d = self._submit(accepting.accept_local, message, self._now())
        else:
            d = self._submit(accepting.accept_backlog, message)
        d.addCallback(self._mirror.entered, message, local)
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
            L{meshroute.store.DuplicateMessage} as C{accept} does.
        """
        local = self._is_local(message)
        now = self._now()
        d = self._submit(accepting.accept_once, message, duplicate_id, local, now,
                         now - self.duplicate_id_window_s)
        if message.persistent:
            d.addCallback(self._mirror.entered_if_new, message, local)
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
            failing (nothing changed) with
            L{meshroute.store.DuplicateMessage} as C{accept} does, or with
            the database's error.
        """
        calls = self._sends(items)
        now = self._now()
        d = self._submit(accepting.accept_many, calls, now, now - self.duplicate_id_window_s)
        d.addCallback(self._mirror.accepted, calls)
        return d

    def commit(self, sends, entry_ids, xid: tuple | None = None, user: str | None = None):
        """
        A client transaction, all or nothing: accept every message of
        C{sends} (C{(message, duplicate_id)} pairs, C{""} for none) as
        L{accept} or L{accept_once} would, and delete the queue entries
        C{entry_ids} (ids not in any queue are ignored), in one transaction.

        @param xid: a two-phase transaction's xid, committed in one phase
            (by C{user}): recorded as committed in the same transaction,
            unless it is prepared or committed already.
        @return: Deferred firing, once durable, with one item per send:
            None when accepted, or the C{msg_id} of the message first
            accepted with its duplicate id (that send changed nothing);
            failing (nothing changed) with
            L{meshroute.store.DuplicateMessage} as C{accept} does,
            L{meshroute.store.prepared.DuplicateXid} for an C{xid} taken,
            or with the database's error.
        """
        calls = self._sends(sends)
        now = self._now()
        cutoff = now - self.duplicate_id_window_s
        if xid is None:
            d = self._submit(accepting.commit, calls, json.dumps(list(entry_ids)), now, cutoff)
        else:
            d = self._submit(prepared.commit_one_phase, tuple(xid), user, calls,
                             json.dumps(list(entry_ids)), now, cutoff)
        d.addCallback(self._mirror.committed, calls)
        return d

    # Prepared (two-phase) transactions (meshroute.store.prepared).

    def prepare(self, xid: tuple, user: str | None, client_id: str, sends, entry_ids):
        """
        Prepare a client transaction as C{xid}, durably: its C{sends}, each
        C{(address, body, headers, persistent, duplicate_id, ttl_ms,
        notify_expiry, sender)} as the client sent it (none is accepted
        yet), and the queue entries C{entry_ids} it acknowledged, which
        leave their queues, locked to it (ids not in any queue are
        ignored), in one transaction.

        @return: Deferred firing with None once durable; failing (nothing
            changed) with L{meshroute.store.prepared.DuplicateXid} when
            C{xid} is prepared, or was committed within the duplicate-id
            window.
        """
        now = self._now()
        d = self._submit(prepared.prepare, tuple(xid), user, client_id, now, list(sends),
                         json.dumps(list(entry_ids)), now - self.duplicate_id_window_s)
        d.addCallback(self._mirror.prepared)
        return d

    def prepared_count(self) -> int:
        """
        Synchronous: how many transactions are prepared and not yet
        committed or rolled back (in doubt).
        """
        return self._mirror.prepared_count()

    def find_xid(self, xid: tuple):
        """
        Fires with what the store knows of C{xid}:
        C{("prepared", id, user)}, C{("committed", None, user)} (within the
        duplicate-id window), or None.
        """
        return self._submit(prepared.find, tuple(xid), self._now() - self.duplicate_id_window_s)

    def prepared_sends(self, prepared_id: int):
        """
        Fires with the sends of prepared transaction C{prepared_id} (the
        id L{find_xid} gives), in order, as L{prepare} was given them.
        """
        return self._submit(prepared.sends_of, prepared_id)

    def commit_prepared(self, prepared_id: int, xid: tuple, user: str | None, sends):
        """
        Commit prepared transaction C{prepared_id} (of C{xid}, by C{user}),
        all or nothing: accept C{sends} (its sends as messages,
        C{(message, duplicate_id)} pairs) as L{commit} does, delete the
        entries it locked, forget it and record C{xid} as committed.

        @return: Deferred firing, once durable, with C{(outcomes,
            consumed, missing)}: one item per send as L{commit} gives
            them; C{(entry_id, message, redelivered)} of each entry
            deleted; how many entries it had locked were gone.  Failing
            (nothing changed: it stays prepared) as L{commit} does.
        """
        calls = self._sends(sends)
        now = self._now()
        d = self._submit(prepared.commit_prepared, prepared_id, tuple(xid), user, calls, now,
                         now - self.duplicate_id_window_s)
        d.addCallback(self._mirror.committed_prepared, calls)
        return d

    def rollback_prepared(self, prepared_id: int):
        """
        Roll prepared transaction C{prepared_id} back: the entries it locked
        go back to their queues, flagged redelivered, and it is forgotten.

        @return: Deferred firing, once durable, with C{(returned,
            missing)}: C{(entry_id, message)} of each entry put back; how
            many it had locked were gone.
        """
        d = self._submit(prepared.rollback_prepared, prepared_id)
        d.addCallback(self._mirror.rolled_back)
        return d

    def recover(self, user: str | None):
        """
        Fires with the xids of the transactions prepared by C{user} (None:
        by anyone), oldest first, each C{[format_id, global_id, branch]}.
        """
        return self._submit(prepared.recover, user)

    # Durable topic subscriptions (meshroute.store.subscriptions).

    def record_subscription(self, queue: str, client_id: str, name: str, pattern: str,
                            shared: bool, user: str | None, copies=(), if_new: bool = False):
        """
        Record durable subscription C{queue} (of C{client_id}, named
        C{name}) to C{pattern}; one recorded with another pattern is
        replaced and its entries deleted.  In the same transaction, the
        retained messages C{copies} are placed into its queue (with
        C{if_new}, only if it was created or replaced).

        @return: Deferred firing, once durable, with C{(what, deleted,
            placed)} (L{meshroute.store.topics.record}; C{placed}: the
            copies placed).
        """
        copies = list(copies)
        d = self._submit(topics.record, queue, client_id, name, pattern, shared, user,
                         self._now(), copies, if_new)
        d.addCallback(self._mirror.emptied_if_replaced, queue)
        d.addCallback(lambda result: (*result[:2], self._mirror.copies_placed(
            (result[2], {}), [(copy, True) for copy in copies])))
        return d

    def forget_subscription(self, queue: str):
        """
        Delete durable subscription C{queue} and its entries.

        @return: Deferred firing, once durable, with how many entries went.
        """
        d = self._submit(topics.forget, queue)
        d.addCallback(self._mirror.emptied, queue)
        return d

    def place_copies(self, copies, entry_ids, retained_entries=()):
        """
        The topic fan-out's persistent C{copies} (messages), each placed
        unless its id is held or was enqueued here, the deletion of the
        queue entries C{entry_ids}, and the retained messages
        C{retained_entries} saved, in one transaction.

        @return: Deferred firing, once durable, with the copies placed.
        """
        is_local = self._is_local
        calls = [(message, is_local(message)) for message in copies]
        d = self._submit(topics.place_copies, calls, json.dumps(list(entry_ids)), self._now(),
                         list(retained_entries))
        d.addCallback(self._mirror.copies_placed, calls)
        return d

    def save_retained(self, entries):
        """
        Save retained messages (L{meshroute.topics.retained.RetainedEntry}),
        each unless a newer one of its topic is saved; expired ones go.
        """
        return self._submit(retained.save, list(entries), int(self._now() * 1000))

    def retained_messages(self):
        """
        Fires with the saved retained messages not expired, by topic.
        """
        return self._submit(retained.read_all, int(self._now() * 1000))

    def save_interest(self, advertisements):
        """
        Save other routers' topic interest, each C{(origin, version,
        patterns)} (newest version wins).
        """
        return self._submit(topics.save_interest, list(advertisements))

    def topic_interest(self):
        """
        Fires with the saved topic interest of other routers, each
        C{(origin, version, patterns)}.
        """
        return self._submit(topics.read_interest)

    def durable_subscriptions(self):
        """
        Fires with every durable subscription, oldest first, as
        L{meshroute.store.topics.read_all} gives them.
        """
        return self._submit(topics.read_all)

    def _sends(self, sends) -> list:
        """
        C{(message, duplicate_id)} pairs as the accepting functions take
        them: C{(message, duplicate_id, local)}.
        """
        is_local = self._is_local
        return [(message, duplicate_id, is_local(message)) for message, duplicate_id in sends]

    def duplicate_of(self, duplicate_id: str):
        """
        Fires with the C{msg_id} of the message accepted with
        C{duplicate_id} within the last C{duplicate_id_window_s}, or None.
        """
        return self._submit(accepting.duplicate_of, duplicate_id,
                            self._now() - self.duplicate_id_window_s)

    # Links: what they bring in (meshroute.store.inbox) and take out
    # (meshroute.store.outbox).

    def receive(self, peer: str, seq: int, message: Message, local: bool, previous: int = 0,
                claim=None):
        if local:
            d = self._submit(inbox.receive_local, peer, seq, previous, message, self._now(),
                             claim)
        else:
            d = self._submit(inbox.receive_backlog, peer, seq, previous, message)
        d.addCallback(self._mirror.received, peer, seq, message, local)
        return d

    def receive_many(self, peer: str, previous: int, items, claims=None):
        """
        L{receive} for each of C{items} (C{(seq, message, local)} in link
        order, C{previous} the highest sequence known received before the
        first; C{claims}, if given, the claim of each or None) in one store
        call and one transaction.

        @return: Deferred firing with the outcome of each, as L{receive}
            gives it; failing (nothing stored) with
            L{meshroute.store.MissingTransfer} when C{previous} is not
            stored.
        """
        d = self._submit(inbox.receive_many, peer, previous, items, self._now(), claims)
        d.addCallback(self._mirror.received_many, peer, items)
        return d

    def last_received(self, peer: str) -> int:
        return self._mirror.last_received(peer)

    def peer_store_id(self, peer: str) -> str:
        return self._mirror.peer_store_id(peer)

    def record_peer_store(self, peer: str, store_id: str, forget_received: bool):
        d = self._submit(inbox.record_peer_store, peer, store_id, forget_received)
        d.addCallback(self._mirror.recorded_peer_store, peer, store_id, forget_received)
        return d

    def assign(self, peer: str, dest_routers, limit: int, max_bytes: int | None = None):
        d = self._submit(outbox.assign, peer, dest_routers, limit, max_bytes)
        d.addCallback(self._mirror.assigned, peer)
        return d

    def reserve_seqs(self, peer: str, count: int):
        return self._submit(outbox.reserve_seqs, peer, count)

    def accept_to_outbox(self, peer: str, assigned):
        d = self._submit(accepting.accept_to_outbox, peer, assigned)
        d.addCallback(self._mirror.entered_outbox, peer, assigned)
        return d

    def outbox(self, peer: str, after_seq: int):
        return self._submit(outbox.read_outbox, peer, after_seq)

    def acknowledge(self, peer: str, up_to_seq: int):
        d = self._submit(outbox.acknowledge, peer, up_to_seq)
        d.addCallback(self._mirror.acknowledged, peer)
        return d

    def return_outbox(self, peer: str):
        d = self._submit(outbox.return_outbox, peer)
        d.addCallback(self._mirror.returned, peer)
        return d

    def outbox_peers(self) -> list[str]:
        """
        Synchronous: the peers whose outbox holds messages (not yet
        acknowledged), sorted.  At start the message engine returns the
        outboxes of peers that do not come back to the backlog.
        """
        return self._mirror.outbox_peers()

    def outbox_depths(self) -> dict[str, dict[str, int]]:
        """
        Synchronous: C{{peer: {dest_router: messages}}} for the messages in
        each peer's outbox (not yet acknowledged).  The message engine
        keeps a destination's new messages behind those still in the
        outbox of a peer that is no longer its next hop.
        """
        return self._mirror.outbox_depths()

    # Local queues (meshroute.store.queue_entries).

    def fetch(self, queue: str, after_entry: int, limit: int, mark: int = 0):
        """
        See L{IMessageStore.fetch}: with C{mark}, the first C{mark}
        entries fetched that are not flagged redelivered are flagged in
        the same transaction (their rows show them unflagged, as they
        were): the deliveries a consumer's credit already awaits need no
        L{mark_redelivered} commit of their own.
        """
        if mark:
            return self._submit(queue_entries.fetch_marking, queue, after_entry, limit, mark)
        return self._submit(queue_entries.fetch, queue, after_entry, limit)

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
        d = self._submit(queue_entries.consume, json.dumps(list(entry_ids)))
        d.addCallback(self._mirror.consumed)
        return d

    def mark_redelivered(self, entry_ids):
        """
        Flag these queue entries redelivered.  Fires with the number
        flagged (ids not in any queue are ignored).
        """
        return self._submit(queue_entries.mark_redelivered, json.dumps(list(entry_ids)))

    def backlog_depths(self) -> dict[str, int]:
        return self._mirror.backlog_depths()

    def backlog_depth(self, router: str) -> int:
        return self._mirror.backlog_depth(router)

    def queue_depths(self) -> dict[str, int]:
        return self._mirror.queue_depths()

    def queue_depth(self, queue: str) -> int:
        return self._mirror.queue_depth(queue)

    # Setting messages aside (meshroute.store.set_aside).

    def dead_letter(self, message: Message, reason: str):
        """
        Store C{message} in the dead-letter queue with C{reason} in header
        L{meshroute.store.DEAD_LETTER_REASON} and its address in
        L{meshroute.store.DEAD_LETTER_ADDRESS}.
        If this router holds it already (backlog, outbox or a queue), it
        is moved there; if it is already dead-lettered, nothing changes.
        Its id is recorded as enqueued here, so later copies are
        duplicates.  Fires with None when durable.
        """
        d = self._submit(set_aside.dead_letter, message, reason,
                         self.router or message.dest_router, self._now())
        d.addCallback(self._mirror.dead_lettered)
        return d

    def expire(self, messages):
        """
        Move C{messages}, whose time to live ran out, from where this
        router holds them (a queue, the backlog or an outbox) to the local
        queue L{meshroute.messages.EXPIRED_QUEUE}, their address in header
        L{meshroute.store.DEAD_LETTER_ADDRESS}, in one transaction.  One this router no
        longer holds (consumed meanwhile) is left alone.  Fires with the
        messages moved.
        """
        d = self._submit(set_aside.expire, list(messages), self.router, self._now())
        d.addCallback(self._mirror.expired)
        return d

    def sweep_expired(self, now_ms: int, busy_queues, limit: int):
        """
        Move at most C{limit} entries whose expiry is at or before
        C{now_ms} from the queues (except C{busy_queues}, whose entries
        consumers may hold in memory) and the backlog to
        L{meshroute.messages.EXPIRED_QUEUE}, as L{expire} does, the soonest
        expired first.
        Fires with the messages moved.
        """
        d = self._submit(set_aside.sweep_expired, now_ms, json.dumps(sorted(busy_queues)),
                         limit, self.router, self._now())
        d.addCallback(self._mirror.expired)
        return d

    # Forgetting expired ids (meshroute.store.pruning).

    def prune(self, limit: int | None = None):
        """
        Forget the ids of messages enqueued more than C{dedup_window_s}
        ago, the oldest first, at most C{limit} of them (default: all).
        Fires with the number forgotten.
        """
        return self._submit(pruning.prune_enqueued_ids, self._now() - self.dedup_window_s,
                            -1 if limit is None else limit)

    def prune_duplicate_ids(self, limit: int | None = None):
        """
        Forget the duplicate ids and the committed xids recorded more than
        C{duplicate_id_window_s} ago, the oldest first, at most C{limit}
        of each (default: all).  Fires with the larger number forgotten.
        """
        return self._submit(pruning.prune_duplicate_ids,
                            self._now() - self.duplicate_id_window_s,
                            -1 if limit is None else limit)


def _open(connection, path: str, router: str | None, cutoff: float, duplicates_cutoff: float,
          prune: bool):
    """
    L{SQLiteStore.open} on the store's connection, outside any
    transaction: the schema upgraded (and the WAL checkpointed after
    it), the store claimed for C{router},
    (with C{prune}) one chunk of the expired ids forgotten, and the
    mirror read, in one transaction; returns the schema version, the
    versions applied, the store's id and the mirror.
    """
    execute = connection.execute
    latest, applied = upgrade_schema(connection, path)
    if applied:
        # The steps wrote the schema into the WAL, a transaction each (a
        # new store's are dozens of pages): it starts empty again, so that
        # the executor's checkpoints keep it within its bound from here.
        execute("PRAGMA wal_checkpoint(TRUNCATE)")
    execute("BEGIN IMMEDIATE")
    try:
        store_id = claim(connection, path, router)
        if prune:
            pruning.prune_one_chunk(connection, cutoff, duplicates_cutoff)
        mirror = StoreMirror.read(connection)
        execute("COMMIT")
    except BaseException:
        if connection.in_transaction:
            execute("ROLLBACK")
        raise
    return latest, applied, store_id, mirror
