"""
The active instance's side of replication: what a follower catches up from.

A follower names the last batch it holds, C{(epoch, position)}.  When the
retained log still holds everything after it, and the batch the log has
at that position carries the same epoch, it gets those batches
(L{ReplicationSource.since}) and then the live stream
(L{ReplicationSource.subscribe}).  Otherwise it needs a snapshot
(L{ReplicationSource.snapshot}): the log does not reach back that far, or
the follower holds a batch the active never had at that position (it
diverged: it served, or followed another active, in an epoch whose
changes were never confirmed to anyone), or it is ahead of the active.

A follower whose store is another store altogether (its C{store_id},
L{meshroute.store.SQLiteStore.store_id}, is not L{store_id}: a new,
empty replica) has none of the active's data, whatever its position says:
it needs a snapshot too.  That check is the caller's (the follow request
carries the store id).

To lose nothing between a snapshot and the stream, subscribe first, then
take the snapshot, and send the subscribed batches above the snapshot's
position after it.

The log is bounded in bytes (the batches' msgpack size): the oldest
batches go first.  The snapshot is SQLite's online backup of the store
file, read through its own connection in a thread: in WAL mode a reader
never blocks the store's writer (nor the writer it), so the active keeps
committing while a snapshot of any size is taken.  Its position is the
one its own C{replication_state} row holds, so its data and its position
agree.
"""

import os
import sqlite3
import tempfile
from collections import deque
from dataclasses import dataclass
from itertools import islice

from twisted.internet.defer import Deferred, succeed
from twisted.internet.threads import deferToThreadPool
from twisted.logger import Logger

from meshroute.errors import MeshrouteError
from meshroute.harules.quorum import LogPosition
from meshroute.store.changes import READ_REPLICATION_STATE, ChangeBatch
from meshroute.store.disk_space import free_bytes

log = Logger()

#: How a snapshot's file is named (in the data dir), until the follower
#: has it; one an earlier run left is deleted at start
#: (L{meshroute.ha.store_replication.StoreReplication.remove_left_snapshots}).
SNAPSHOT_PREFIX = "snapshot-"

#: The retained log's default bound: enough for a backup that was away
#: for a few seconds under load to catch up without a snapshot.
DEFAULT_RETAINED_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True)
class Snapshot:
    """
    A consistent copy of the active's store.

    @ivar path: the copy, a database file the caller now owns (and
        deletes).
    @ivar epoch: the epoch of the last batch it holds.
    @ivar position: the position of the last batch it holds.
    """

    path: str
    epoch: int
    position: int


class ReplicationSource:
    """
    The retained log, the live subscriptions and snapshots of one active
    store.  Called on the reactor thread only.
    """

    def __init__(self, reactor, store_path: str, store_id: str, head: LogPosition,
                 retained_bytes: int = DEFAULT_RETAINED_BYTES,
                 snapshot_directory: str | None = None, keep_free: int = 0) -> None:
        """
        @param reactor: runs the snapshots in its thread pool.
        @param store_path: the active's store file.
        @param store_id: that store's id.
        @param head: the epoch and position of the last batch the store
            holds when the source starts (its C{replication_state} row).
        @param retained_bytes: the retained log's bound.
        @param snapshot_directory: where snapshots are written (default:
            the store's directory).
        @param keep_free: the bytes a snapshot must leave free on that
            directory's disk (C{[store] min-free-disk}).
        """
        self.store_id = store_id
        self._reactor = reactor
        self._path = store_path
        self._directory = snapshot_directory or os.path.dirname(os.path.abspath(store_path))
        self._retained_bytes = retained_bytes
        self._keep_free = keep_free
        # Fires once the last snapshot asked for is taken (or failed).
        self._taking: Deferred = succeed(None)
        # The log holds the batches after _base, each with its size.
        self._log: deque = deque()
        self._log_bytes = 0
        self._base = head
        self._head = head
        self._subscribers: list = []

    @property
    def head(self) -> LogPosition:
        """
        The epoch and position of the last batch appended.
        """
        return self._head

    @property
    def retained(self) -> tuple[int, int]:
        """
        C{(batches, bytes)} in the retained log.
        """
        return len(self._log), self._log_bytes

    def append(self, batch: ChangeBatch) -> None:
        """
        The store committed C{batch} (the gate calls this in commit
        order): retain it and pass it to every subscriber.
        """
        if batch.position != self._head.position + 1:
            raise ValueError(f"batch {batch.position} does not follow {self._head.position}")
        size = batch.packed_size
        self._log.append((batch, size))
        self._log_bytes += size
        self._head = LogPosition(batch.epoch, batch.position)
        while self._log_bytes > self._retained_bytes:
            oldest, oldest_size = self._log.popleft()
            self._log_bytes -= oldest_size
            self._base = LogPosition(oldest.epoch, oldest.position)
        for subscriber in list(self._subscribers):
            subscriber(batch)

    def since(self, epoch: int, position: int) -> list[ChangeBatch] | None:
        """
        The batches after C{position} for a follower whose last batch is
        C{(epoch, position)}, oldest first (empty when it holds them all),
        or None when it needs a snapshot: the log no longer covers that
        position, or the follower is ahead, or the batch at that position
        has another epoch here (the follower diverged).
        """
        head, base = self._head, self._base
        if position > head.position or position < base.position:
            return None
        if position == base.position:
            known = base.epoch
        else:
            known = self._log[position - base.position - 1][0].epoch
        if known != epoch:
            return None
        return [batch for batch, _ in islice(self._log, position - base.position, None)]

    def subscribe(self, callback) -> None:
        """
        Call C{callback(batch)} with every batch appended from now on.
        """
        self._subscribers.append(callback)

    def unsubscribe(self, callback) -> None:
        """
        Stop calling C{callback} (one that is not subscribed is ignored).
        """
        if callback in self._subscribers:
            self._subscribers.remove(callback)

    def snapshot(self):
        """
        A consistent copy of the store, taken in a thread once the copies
        asked for before are taken: one at a time, so that each checks
        the disk's room with the ones before it written.  (A follower
        that dialled again while its last copy was taken asks anew; that
        copy is deleted once taken, its connection gone.)

        @return: Deferred firing with a L{Snapshot}.
        """
        taken = Deferred()

        def take(_) -> Deferred:
            taking = deferToThreadPool(self._reactor, self._reactor.getThreadPool(),
                                       take_snapshot, self._path, self._directory,
                                       self._keep_free)
            taking.chainDeferred(taken)
            return taking

        self._taking = self._taking.addCallback(take)
        return taken


def take_snapshot(store_path: str, directory: str, keep_free: int = 0) -> Snapshot:
    """
    Copy the store at C{store_path} into a new file in C{directory} with
    SQLite's online backup, through a read transaction of its own (so the
    copy is one consistent state, and the store's writer goes on).  Blocks:
    run it in a thread.

    @param keep_free: the bytes the copy must leave free on C{directory}'s
        file system (C{[store] min-free-disk}).
    @raise NoRoomForSnapshot: the copy would not fit beside them.
    """
    source = sqlite3.connect(store_path, isolation_level=None)
    try:
        # The read transaction starts at the first read: from then on
        # this connection sees one state of the store, which the copy
        # takes whole.
        source.execute("BEGIN")
        source.execute(READ_REPLICATION_STATE).fetchone()
        _check_room(source, directory, keep_free)
        descriptor, path = tempfile.mkstemp(prefix=SNAPSHOT_PREFIX, suffix=".db", dir=directory)
        os.close(descriptor)
        try:
            target = sqlite3.connect(path, isolation_level=None)
            try:
                _copy(source, target)
                epoch, position = target.execute(READ_REPLICATION_STATE).fetchone()
            finally:
                target.close()
            source.execute("COMMIT")
        except BaseException:
            os.unlink(path)
            raise
    finally:
        source.close()
    log.info("snapshot of {store} at ({epoch}, {position}) in {path}", store=store_path,
             epoch=epoch, position=position, path=path)
    return Snapshot(path, epoch, position)


class NoRoomForSnapshot(MeshrouteError):
    """
    A snapshot would not fit on the active's disk beside what
    C{min-free-disk} keeps free.  Taken regardless, it would fill the disk
    that the active's own commits need, and an active whose commit fails
    stops serving (docs/ha.md): so none is taken, and the backup waits.
    """

    def __init__(self, directory: str, needed: int, free: int, keep_free: int) -> None:
        self.needed = needed
        super().__init__(
            f"a snapshot of {needed} bytes does not fit in {directory}: {free} bytes are "
            f"free, and [store] min-free-disk keeps {keep_free} of them free")


def _check_room(source: sqlite3.Connection, directory: str, keep_free: int) -> None:
    """
    Raise L{NoRoomForSnapshot} unless a copy of the store that C{source}
    reads (every page of it, as the online backup copies) fits in
    C{directory} with C{keep_free} bytes to spare.
    """
    pages = source.execute("PRAGMA page_count").fetchone()[0]
    needed = pages * source.execute("PRAGMA page_size").fetchone()[0]
    free = free_bytes(directory)
    if needed + keep_free > free:
        raise NoRoomForSnapshot(directory, needed, free, keep_free)


def _copy(source: sqlite3.Connection, target: sqlite3.Connection) -> None:
    """
    Copy every page of C{source}'s database, as its open read transaction
    sees it, into C{target}'s.
    """
    source.backup(target)
