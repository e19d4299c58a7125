"""
The backup instance's side of replication: its copy of the active's store.

A L{Replica} holds C{store.db} in the instance's data dir while the
instance follows the active.  It applies the active's L{ChangeBatch}es in
position order, each batch's statements and the C{replication_state} row
naming it in one transaction, so that its data and its position always
agree, also after a crash.  C{replica-sync} says when an applied batch
counts as held:

  - C{"full"} (C{synchronous=FULL}): the WAL is fsynced at the commit,
    before L{Replica.apply}'s Deferred fires (and so before the follower
    acknowledges it).  A confirmed change is lost only if both machines
    lose it.
  - C{"normal"} (C{synchronous=NORMAL}): applied and committed, not
    fsynced.  A crash of the backup process loses nothing; a power loss
    or OS crash of the backup's machine may lose the last batches it
    acknowledged, and if the active's machine is lost too before the
    backup caught up again, changes confirmed to clients are gone.

A follower too far behind, or diverged (see L{meshroute.ha.source}), gets
a snapshot instead: L{Replica.install_snapshot} replaces the store with
it.  The store it replaces is kept, when it may hold changes the snapshot
lacks (any data but an exact copy of the snapshot's position of the same
store: a store behind the snapshot may have diverged before it fell
behind, which its position cannot show), in C{oldreplica.N/} in the data
dir, N counting up; at most C{max_saved} of them are kept, the oldest
deleted.  Those changes were never confirmed to anyone (a diverged
instance's own batches were never acknowledged by a majority), but an
operator may want to look at them.
"""

import os
import re
import shutil
import sqlite3

from twisted.internet.defer import Deferred, fail, succeed
from twisted.logger import Logger
from twisted.python.failure import Failure

from meshroute.durable_files import sync_directory, sync_file
from meshroute.errors import MeshrouteError
from meshroute.ha.epoch_starts import READ_EPOCH_STARTS, EpochStarts
from meshroute.harules.quorum import ORIGIN, LogPosition
from meshroute.store.changes import (READ_REPLICATION_STATE, SET_REPLICATION_STATE,
                                     apply_statements)
from meshroute.store.database import SYNC_MODES, connect, upgrade_schema
from meshroute.store.transactions import lengthy

log = Logger()

#: The replica's store, in the data dir: the same file the instance
#: serves from when it becomes the active.
STORE_NAME = "store.db"
#: A store file's companions in WAL mode.
_SUFFIXES = ("", "-wal", "-shm")
_SAVED = re.compile(r"oldreplica\.(\d+)\Z")
_READ_STORE_ID = "SELECT value FROM meta WHERE key = 'store_id'"


class ReplicaGap(MeshrouteError):
    """
    A batch does not follow the replica's position: something in between
    is missing (the follower must ask again from its position).
    """

    def __init__(self, held: int, position: int) -> None:
        self.held = held
        self.position = position
        super().__init__(f"batch {position} does not follow the replica's position {held}")


class Replica:
    """
    The backup's copy of the active's store.  Called on the reactor thread
    only.

    @ivar store_id: the id of the store it holds (after L{open}): the
        active's when it holds a copy of the active's store.
    """

    def __init__(self, data_dir: str, executor_factory, sync: str = "full",
                 max_saved: int = 2) -> None:
        """
        @param data_dir: the instance's data dir.
        @param executor_factory: makes a new, unstarted store executor
            (C{InlineExecutor}, or C{lambda: ThreadedExecutor(reactor)}):
            one per opening of the store.
        @param sync: C{replica-sync}, one of L{SYNC_MODES}.
        @param max_saved: C{max-saved-replicated-journals-size}: how many
            C{oldreplica.N/} directories are kept.
        """
        if sync not in SYNC_MODES:
            raise ValueError(f"sync must be one of {SYNC_MODES}, not {sync!r}")
        self.data_dir = data_dir
        self.path = os.path.join(data_dir, STORE_NAME)
        self.sync = sync
        self.max_saved = max_saved
        self.store_id = ""
        self._executor_factory = executor_factory
        self._executor = None
        self._position = ORIGIN
        self._starts = EpochStarts()
        #: While a snapshot is being installed: the closes waiting for it.
        self._installing: list[Deferred] | None = None

    def open(self):
        """
        Open the store (creating it, or upgrading its schema, if needed).
        Fires with its L{position}.
        """
        executor = self._executor = self._executor_factory()
        d = executor.start(lambda: connect(self.path, self.sync))
        d.addCallback(lambda _: executor.run(_open, self.path))
        d.addCallback(self._opened)
        return d

    def _opened(self, state) -> LogPosition:
        (self._position, self.store_id), self._starts = state
        return self._position

    def position(self) -> LogPosition:
        """
        The epoch and position of the last batch the replica holds (as far
        as the Deferreds of L{apply} have fired).  Its epoch is that
        batch's: the epoch the instance may claim for its data in a vote
        (L{meshroute.harules.quorum}) follows from L{epoch_starts}.
        """
        return self._position

    def epoch_starts(self) -> EpochStarts:
        """
        What the newest epoch starts the replica holds said (as far as the
        Deferreds of L{apply} have fired): from it the instance knows the
        epoch it may claim for its data.
        """
        return self._starts

    def apply(self, batches):
        """
        Apply C{batches} (L{ChangeBatch}es, in position order, the first
        following the replica's position) in one transaction.

        @return: Deferred firing with the new L{position} once committed
            (fsynced with C{sync = "full"}); failing with L{ReplicaGap}
            (nothing applied) when a batch does not follow the one before.
        """
        batches = list(batches)
        if not batches:
            return succeed(self._position)
        d = self._executor.submit(_apply, batches)
        d.addCallback(self._applied)
        return d

    def _applied(self, state) -> LogPosition:
        self._position, self._starts = state
        return self._position

    def install_snapshot(self, path: str):
        """
        Replace the store with the snapshot at C{path} (moved, not
        copied), keeping the replaced store in C{oldreplica.N/} when it
        may hold changes the snapshot lacks.  Everything submitted before
        is finished first, and the snapshot written to disk: the move is
        durable before the position is answered.  Call it on an open
        replica.

        @return: Deferred firing with the new L{position}.
        """
        try:
            position, store_id = _state(path)
        except sqlite3.Error:
            return fail()
        self._installing = []
        d = self._executor.submit(_write_to_disk, path)
        d.addCallback(lambda _: self._executor.stop())
        d.addCallback(lambda _: self._replace_and_open(path, position, store_id))
        d.addBoth(self._installed)
        return d

    def _replace_and_open(self, snapshot: str, position: LogPosition, store_id: str):
        """
        Replace the closed store, then open the store in its place, even
        when the replacement failed half-way (a disk error after the
        rename, say): whichever store it left is opened, so that the
        replica serves on, and the failure is passed on once it is open.
        """
        try:
            self._replace(snapshot, position, store_id)
        except BaseException:
            failure = Failure()
            return self.open().addCallback(lambda _: failure)
        return self.open()

    def _installed(self, outcome):
        closes, self._installing = self._installing, None
        for close in closes:
            close.callback(None)
        return outcome

    def _replace(self, snapshot: str, position: LogPosition, store_id: str) -> None:
        held = self._position
        if held.position > 0 and (held != position or self.store_id != store_id):
            self._save(held, position)
        for suffix in _SUFFIXES:
            if os.path.exists(self.path + suffix):
                os.unlink(self.path + suffix)
        os.replace(snapshot, self.path)
        sync_directory(self.data_dir)

    def _save(self, held: LogPosition, position: LogPosition) -> None:
        """
        Move the store into a new C{oldreplica.N/}, then delete the oldest
        ones beyond C{max_saved}.
        """
        saved = sorted(int(m.group(1)) for m in map(_SAVED.match, os.listdir(self.data_dir))
                       if m and os.path.isdir(os.path.join(self.data_dir, m.group(0))))
        number = (saved[-1] if saved else 0) + 1
        directory = os.path.join(self.data_dir, f"oldreplica.{number}")
        if self.max_saved > 0:
            os.mkdir(directory)
            for suffix in _SUFFIXES:
                if os.path.exists(self.path + suffix):
                    os.replace(self.path + suffix,
                               os.path.join(directory, STORE_NAME + suffix))
            sync_directory(directory)
            saved.append(number)
        for old in saved[:max(0, len(saved) - self.max_saved)]:
            shutil.rmtree(os.path.join(self.data_dir, f"oldreplica.{old}"))
        log.warn(
            "replica store at ({held.epoch}, {held.position}) replaced by a snapshot at "
            "({position.epoch}, {position.position}): "
            + ("kept in {directory}" if self.max_saved > 0 else "deleted (max-saved is 0)"),
            held=held, position=position, directory=directory,
        )

    def close(self):
        """
        Finish what was submitted and close the store: once a snapshot
        being installed is in place, so that the store closed (and the
        position the caller reads next) is the snapshot's.
        """
        if self._installing is not None:
            installed = Deferred()
            self._installing.append(installed)
            return installed.addCallback(lambda _: self.close())
        if self._executor is None:
            return succeed(None)
        return self._executor.stop()


# On the replica's store connection.


def _open(connection: sqlite3.Connection, path: str):
    upgrade_schema(connection, path)
    return _read(connection), _starts(connection)


def _starts(connection: sqlite3.Connection) -> EpochStarts:
    return EpochStarts(*connection.execute(READ_EPOCH_STARTS).fetchone())


def _read(connection: sqlite3.Connection) -> tuple[LogPosition, str]:
    epoch, position = connection.execute(READ_REPLICATION_STATE).fetchone()
    return LogPosition(epoch, position), connection.execute(_READ_STORE_ID).fetchone()[0]


def _state(path: str) -> tuple[LogPosition, str]:
    """
    The position and store id of the database at C{path}.
    """
    connection = sqlite3.connect(path)
    try:
        return _read(connection)
    finally:
        connection.close()


@lengthy
def _write_to_disk(connection: sqlite3.Connection, path: str) -> None:
    """
    Write the snapshot at C{path} to disk before it replaces the store
    (in the replica's writer: its thread, or the reactor's with C{writer
    = "reactor"}, as for its commits): renamed unwritten,
    an OS crash could leave a store of pages never written where the
    active was told the replica held them.
    """
    sync_file(path)


@lengthy
def _apply(connection: sqlite3.Connection, batches: list) -> tuple[LogPosition, EpochStarts]:
    epoch, position = connection.execute(READ_REPLICATION_STATE).fetchone()
    for batch in batches:
        if batch.position != position + 1:
            raise ReplicaGap(position, batch.position)
        apply_statements(connection, batch.statements)
        epoch, position = batch.epoch, batch.position
    connection.execute(SET_REPLICATION_STATE, (epoch, position))
    return LogPosition(epoch, position), _starts(connection)
