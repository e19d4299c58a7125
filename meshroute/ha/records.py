"""
An HA instance's own records: C{DATA-DIR/ha.db}.

C{store.db} is replicated whole between the two instances of a pair;
what belongs to one instance alone lives beside it in C{ha.db}, which is
never replicated:

 - its own voter record, for its own group (the rows of
   C{ha_voter_records}, with the columns of the store's table of schema
   004 and 010), which its own L{meshroute.router.witness.Witness} answers from
   (each instance of the pair is its own voter: a copy of the peer's
   record would be a second vote);
 - who it is (C{instance}: router name, group, configured role), written
   at each start, so that C{meshroute ha force-activate}, which is given
   only a data dir, can name the instance and log under its router name;
 - a forced activation (C{force_activate}: who asked, when), written by
   C{meshroute ha force-activate --accept-data-loss} while the instance
   is stopped, carried out and cleared by the instance at its next start.

The records the instance keeps as a witness for OTHER groups belong to
the router, not the instance: they live in C{store.db}, replicated, so
that the instance taking over knows every epoch the other one granted.
L{InstanceVoterRecords} routes each group to its file.

The schema is small and versioned with SQLite's C{user_version}; a
version this code does not know is refused rather than misread.  The
same functions run on the instance's executor (off the reactor thread)
and, for the command, on a plain connection.
"""

import os
import sqlite3
from dataclasses import dataclass
from importlib.resources import files

from twisted.internet.defer import Deferred, fail
from zope.interface import implementer

from meshroute.errors import MeshrouteError, NotServing
from meshroute.interfaces import IVoterRecords
from meshroute.store.transactions import atomic
from meshroute.store.voter_records import read_records, save_record

#: The file, in the data dir.
HA_DB = "ha.db"

SCHEMA_VERSION = 2

_SCHEMA = """
CREATE TABLE instance (
    only INTEGER PRIMARY KEY CHECK (only = 1),
    router TEXT NOT NULL,
    group_name TEXT NOT NULL,
    role TEXT NOT NULL
);
CREATE TABLE force_activate (
    only INTEGER PRIMARY KEY CHECK (only = 1),
    requested_by TEXT NOT NULL,
    requested_at REAL NOT NULL
);
"""


class RecordsError(MeshrouteError):
    """
    C{ha.db} cannot be used: a newer schema, or a data dir in use.
    """


@dataclass(frozen=True)
class InstanceIdentity:
    """
    Who an instance is: C{router.name}, C{ha.group-name}, C{ha.role}.
    """

    router: str
    group: str
    role: str


@dataclass(frozen=True)
class ForcedActivation:
    """
    A forced activation waiting for the instance's next start.

    @ivar requested_by: C{user@host} of the command.
    @ivar requested_at: epoch seconds.
    """

    requested_by: str
    requested_at: float


def connect(path: str) -> sqlite3.Connection:
    """
    Open C{ha.db} as the executors want it (they issue their own
    transactions), fsyncing every commit: a voter record must be durable
    before the answer that rests on it is sent.
    """
    # Not checked for one thread: the adaptive executor uses it on the
    # reactor thread too, never at the same time as its writer thread.
    connection = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    try:
        connection.execute("PRAGMA busy_timeout = 5000")
        connection.execute("PRAGMA synchronous = FULL")
    except BaseException:
        connection.close()
        raise
    return connection


def _store_schema(name: str) -> str:
    """
    One of the store's schema steps: the voter records' table is the
    store's own, so that both files read and write those rows alike.
    """
    return files("meshroute.store").joinpath("schema", name).read_text()


def _upgrade_steps() -> list[tuple[int, str]]:
    """
    C{ha.db}'s upgrade steps, in order: the version each makes, and its
    SQL from the version before.
    """
    return [
        (1, _store_schema("004-ha-voter-records.sql") + _SCHEMA),
        (2, _store_schema("010-ha-voter-learned.sql")),
    ]


def _create(connection, identity: InstanceIdentity | None) -> None:
    """
    Create the schema, or upgrade the existing one (refusing a newer one),
    and, given C{identity}, write it, in one transaction.
    """
    version = connection.execute("PRAGMA user_version").fetchone()[0]
    if version > SCHEMA_VERSION:
        raise RecordsError(f"ha.db has schema version {version}; this meshroute knows "
                           f"{SCHEMA_VERSION}: it was written by a newer meshroute")
    connection.execute("BEGIN IMMEDIATE")
    try:
        for step, sql in _upgrade_steps():
            if step > version:
                for statement in sql.split(";"):
                    if statement.strip():
                        connection.execute(statement)
        if version < SCHEMA_VERSION:
            connection.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        if identity is not None:
            connection.execute(
                "INSERT OR REPLACE INTO instance (only, router, group_name, role) "
                "VALUES (1, ?, ?, ?)", (identity.router, identity.group, identity.role))
        connection.execute("COMMIT")
    except BaseException:
        connection.execute("ROLLBACK")
        raise


def _identity(connection) -> InstanceIdentity | None:
    row = connection.execute("SELECT router, group_name, role FROM instance").fetchone()
    return None if row is None else InstanceIdentity(*row)


def _forced_activation(connection) -> ForcedActivation | None:
    row = connection.execute(
        "SELECT requested_by, requested_at FROM force_activate").fetchone()
    return None if row is None else ForcedActivation(*row)


@atomic
def _force_activation(connection, marker: ForcedActivation) -> None:
    connection.execute(
        "INSERT OR REPLACE INTO force_activate (only, requested_by, requested_at) "
        "VALUES (1, ?, ?)", (marker.requested_by, marker.requested_at))


@atomic
def _clear_forced_activation(connection) -> None:
    connection.execute("DELETE FROM force_activate")


@implementer(IVoterRecords)
class HARecords:
    """
    C{ha.db} of a running instance, its SQL on C{executor}
    (L{meshroute.store.transactions}: a L{ThreadedExecutor} without
    replication, or an L{InlineExecutor} in tests).
    """

    def __init__(self, path: str, executor) -> None:
        self.path = path
        self._executor = executor

    def open(self, identity: InstanceIdentity) -> Deferred:
        """
        Open (creating if needed) and write who this instance is; fires
        with None when ready.
        """
        d = self._executor.start(lambda: connect(self.path))
        d.addCallback(lambda _: self._executor.run(_create, identity))
        return d

    def close(self) -> Deferred:
        """
        Finish every write and close; fires with None.
        """
        return self._executor.stop()

    def voter_records(self) -> Deferred:
        return self._executor.submit(read_records)

    def save_voter_record(self, group: str, record, lease_timeout_ms: int) -> Deferred:
        return self._executor.submit(save_record, group, record, lease_timeout_ms)

    def forced_activation(self) -> Deferred:
        """
        Fires with the L{ForcedActivation} waiting, or None.
        """
        return self._executor.submit(_forced_activation)

    def clear_forced_activation(self) -> Deferred:
        """
        The forced activation was carried out: forget it (durably).
        """
        return self._executor.submit(_clear_forced_activation)


@implementer(IVoterRecords)
class InstanceVoterRecords:
    """
    The voter records an HA instance's L{meshroute.router.witness.Witness}
    answers from, routed by group name.

    Its own group's record is the instance's alone (C{ha.db}, never
    replicated: each instance is one voter of its group).  Every other
    group's record is the router's, in the serving router's C{store.db}:
    written through that store, it is replicated before the answer that
    rests on it goes out (the gate fires a write once the backup has
    it), so that the instance taking over never grants an epoch the
    other already granted.  Only the active instance has that store
    (L{serve}); a follower holds, and answers, no other group.

    @param own_group: C{ha.group-name}.
    @param own: the instance's L{HARecords}.
    """

    def __init__(self, own_group: str, own: HARecords) -> None:
        self._own_group = own_group
        self._own = own
        self._store = None

    def serve(self, store) -> None:
        """
        The instance is active, on C{store} (an L{IVoterRecords}): other
        groups' records are read from and saved there.
        """
        self._store = store

    def stop_serving(self) -> None:
        """
        The instance no longer serves: other groups' records are the next
        active's.
        """
        self._store = None

    def owns(self, group: str) -> bool:
        """
        Whether C{group}'s record is this instance's own (kept in C{ha.db}).
        """
        return group == self._own_group

    def voter_records(self) -> Deferred:
        """
        The own group's record from C{ha.db}, and, while serving, every
        other group's from C{store.db} (a group's row in the other file,
        written before this routing, is not read).
        """
        own = self._own.voter_records().addCallback(self._select, True)
        if self._store is None:
            return own
        others = self._store.voter_records().addCallback(self._select, False)
        return own.addCallback(lambda mine: others.addCallback(lambda theirs: mine | theirs))

    def _select(self, records: dict, own: bool) -> dict:
        return {group: record for group, record in records.items() if self.owns(group) == own}

    def save_voter_record(self, group: str, record, lease_timeout_ms: int) -> Deferred:
        if self.owns(group):
            return self._own.save_voter_record(group, record, lease_timeout_ms)
        if self._store is None:
            return fail(NotServing(f"not active: no voter record of group {group!r} is kept"))
        return self._store.save_voter_record(group, record, lease_timeout_ms)


def read_identity(data_dir: str) -> InstanceIdentity | None:
    """
    Who the instance of C{data_dir} is, or None when it has no C{ha.db}
    (it never ran as an HA instance).  Creates nothing.
    """
    path = os.path.join(data_dir, HA_DB)
    if not os.path.exists(path):
        return None
    connection = connect(path)
    try:
        return _identity(connection) if _has_schema(connection) else None
    finally:
        connection.close()


def _has_schema(connection) -> bool:
    return connection.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'instance'"
    ).fetchone() is not None


def record_forced_activation(data_dir: str, marker: ForcedActivation) -> None:
    """
    Write C{marker} into C{data_dir}'s C{ha.db}, durably.  The caller
    holds the data dir (L{meshroute.data_dir_lock.hold_data_dir}).
    """
    connection = connect(os.path.join(data_dir, HA_DB))
    try:
        _create(connection, None)
        _force_activation(connection, marker)
    finally:
        connection.close()
