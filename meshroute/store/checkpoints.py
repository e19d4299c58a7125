"""
WAL checkpoints off the commit path.

In WAL mode SQLite appends every committed page to the C{-wal} file and,
by default, copies the WAL back into the database ("checkpoints") inside
the commit that takes the WAL past 1,000 pages: that commit, and every
caller waiting for it, pays for copying and fsyncing megabytes, which set
the store's p99.  Here the store's connection runs with
C{wal_autocheckpoint = 0} and its executor checkpoints instead, after
the Deferreds of what it committed have been handed to the reactor (on
the writer thread; the turn executor checkpoints when idle on a second
connection in the reactor's thread pool, beside its commits):

  - when the writer is idle (nothing queued) and C{interval_s} has passed
    since the first write the last checkpoint did not cover: a PASSIVE
    checkpoint, so a steady low rate never waits for one;
  - at once, after a batch that took the C{-wal} file past
    C{wal_max_bytes} (a writer that is never idle): also PASSIVE.

PASSIVE never waits for a reader (an HA snapshot reading the store on
its own connection): what it cannot copy yet waits for the next one.  The
connection's C{journal_size_limit} is C{wal_max_bytes}, so once a
checkpoint has copied everything, the next write restarts the WAL at its
beginning and truncates a file that had grown larger back to that size;
TRUNCATE checkpoints, which wait (up to the busy timeout) for readers,
are not needed.

Checkpointing often matters for the fsyncs too: a commit that appends to
a growing WAL costs the file system more than one that overwrites the
start of a WAL reused after a complete checkpoint.

Checkpoints change no row: they are not transactions and nothing of them
is recorded for HA replication.  A process killed at any moment loses
nothing committed: the WAL is the durable log, and the next open replays
whatever was not yet checkpointed.
"""

import os
import sqlite3
import time

from twisted.logger import Logger

#: Default of C{interval_s}: how long after a write an idle writer
#: checkpoints it.
CHECKPOINT_INTERVAL_S = 1.0
#: Default of C{wal_max_bytes}: the WAL size past which a writer that is
#: never idle checkpoints anyway.
WAL_MAX_BYTES = 64 * 1024 * 1024

_log = Logger()


class WalCheckpoints:
    """
    When one connection's WAL is checkpointed; called by one thread at a
    time (the executor's, or the adaptive executor's two while they hold
    its lock).

    @ivar checkpoints: checkpoints run so far (for tests and benchmarks).
    @ivar reusable_bytes: the free pages of the database file, in bytes,
        as of its opening or the last checkpoint (read from any thread):
        L{_measure_reusable}.
    @ivar squeezed: whether every batch is checkpointed, so that the
        C{-wal} file is reused rather than grown: set (from any thread)
        while the disk is nearly full (L{meshroute.store.disk_space}).
    """

    def __init__(
        self,
        interval_s: float = CHECKPOINT_INTERVAL_S,
        wal_max_bytes: int = WAL_MAX_BYTES,
        monotonic=time.monotonic,
    ) -> None:
        """
        @param interval_s: how long after the first write it has not
            covered an idle writer checkpoints.
        @param wal_max_bytes: the C{-wal} file size past which a
            checkpoint runs after the batch that passed it.
        @param monotonic: the clock of C{interval_s}.
        """
        if interval_s <= 0 or wal_max_bytes <= 0:
            raise ValueError("interval_s and wal_max_bytes must be positive")
        self.interval_s = interval_s
        self.wal_max_bytes = wal_max_bytes
        self._monotonic = monotonic
        self._wal_path: str | None = None
        #: The database file, once opened (None: in memory).
        self.database: str | None = None
        self._writes = 0
        self._due: float | None = None  # None: nothing written since the last checkpoint
        self._threshold = wal_max_bytes
        self.checkpoints = 0
        self.reusable_bytes = 0
        self.squeezed = False

    def opened(self, connection: sqlite3.Connection) -> None:
        """
        C{connection} was just opened: take the checkpoints off its
        commits, and learn where its WAL is.
        """
        connection.execute("PRAGMA wal_autocheckpoint = 0")
        connection.execute(f"PRAGMA journal_size_limit = {int(self.wal_max_bytes)}")
        self._measure_reusable(connection)
        for _, name, path in connection.execute("PRAGMA database_list"):
            if name == "main" and path:
                self.database = path
                self._wal_path = path + "-wal"

    def wrote(self, connection: sqlite3.Connection) -> None:
        """
        A batch of work ran: start the idle timer, and checkpoint now if
        the WAL has passed its size.
        """
        if self.written():
            self.checkpoint(connection)

    def written(self) -> bool:
        """
        A batch of work ran, and its caller checkpoints elsewhere: start
        the idle timer, and say whether the WAL has passed its size (then
        make the checkpoint due now, L{idle_wait_s} 0).
        """
        self._writes += 1
        if self._due is None:
            self._due = self._monotonic() + self.interval_s
        if self.squeezed or self._wal_size() > self._threshold:
            self._due = self._monotonic()
            return True
        return False

    def idle_wait_s(self) -> float | None:
        """
        How long an idle writer may wait for work before it checkpoints
        (0: now), or None when there is nothing to checkpoint.
        """
        if self._due is None:
            return None
        return max(0.0, self._due - self._monotonic())

    def checkpoint(self, connection: sqlite3.Connection) -> None:
        """
        Run a PASSIVE checkpoint now, on C{connection}.
        """
        self.ended(self.begin(), self.run(connection))

    def begin(self) -> int:
        """
        A checkpoint starts (on this or another connection): returns what
        L{ended} takes to learn whether anything was written meanwhile.
        """
        self.checkpoints += 1
        return self._writes

    def run(self, connection: sqlite3.Connection) -> tuple[int, int, int]:
        """
        Run a PASSIVE checkpoint on C{connection} (in any thread): SQLite's
        C{(busy, log frames, frames copied)}, or C{(1, 0, -1)} when it
        failed (logged).
        """
        try:
            result = connection.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
            self._measure_reusable(connection)
            return result
        except sqlite3.Error as e:
            _log.warn("WAL checkpoint of {path} failed, retried later: {error}",
                      path=self._wal_path, error=e)
            return 1, 0, -1

    def _measure_reusable(self, connection: sqlite3.Connection) -> None:
        """
        Learn how many bytes of the database file are free pages: the room
        the rows deleted since left, which new rows take before the file
        grows (L{meshroute.store.disk_space} counts it as free).  The
        C{-wal} file's room is not counted: it is reused for the WAL's own
        frames only, while what they bring lands in the database file.
        """
        pages = connection.execute("PRAGMA freelist_count").fetchone()[0]
        self.reusable_bytes = pages * connection.execute("PRAGMA page_size").fetchone()[0]

    def ended(self, began: int, result: tuple[int, int, int]) -> None:
        """
        The checkpoint L{begin} returned C{began} for ended with C{result}
        (L{run}'s).  One that could not copy everything (a reader holds an
        older snapshot) is retried after another C{interval_s}, and the
        size trigger moves up by C{wal_max_bytes} so that it does not run
        after every batch meanwhile; writes made while it ran (on another
        connection) are due after C{interval_s} too.
        """
        busy, log, copied = result
        if busy == 0 and log == copied:
            self._due = None
            self._threshold = self.wal_max_bytes
        else:
            self._due = self._monotonic() + self.interval_s
            self._threshold = self._wal_size() + self.wal_max_bytes
        if self._writes != began and self._due is None:
            self._due = self._monotonic() + self.interval_s

    def _wal_size(self) -> int:
        if self._wal_path is None:
            return 0
        try:
            return os.stat(self._wal_path).st_size
        except OSError:
            return 0
