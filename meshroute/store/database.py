"""
The store's database file: how it is connected to, brought to the
schema this meshroute knows, and claimed by one router.

The schema is versioned: C{schema/NNN-*.sql}, shipped as package data,
each file the upgrade step from the version before; the C{meta} table
holds C{schema_version} (and the name of the router owning the store,
and the store's random id).  A router's store (L{meshroute.store.sqlite})
and an HA backup's replica of it (L{meshroute.ha.replica}) open their
databases the same way, with L{connect} and L{upgrade_schema}.
"""

import re
import sqlite3
from importlib.resources import files

from meshroute.errors import MeshrouteError

#: The C{sync} settings, as in the C{[store] sync} configuration key.
SYNC_MODES = ("full", "normal")


class StoreError(MeshrouteError):
    """
    The store cannot be opened: a schema from a newer meshroute, a failed
    upgrade step, or a database belonging to another router.
    """


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


def connect(path: str, sync: str) -> sqlite3.Connection:
    """
    A connection to the store database at C{path} as the executors need
    it (no implicit transactions), in WAL mode with C{sync} (one of
    L{SYNC_MODES}) as C{PRAGMA synchronous}.
    """
    # Not checked for one thread: the adaptive executor uses it on the
    # reactor thread too, never at the same time as its writer thread.
    connection = sqlite3.connect(path, isolation_level=None, cached_statements=256,
                                 check_same_thread=False)
    try:
        connection.execute("PRAGMA busy_timeout = 5000")
        connection.execute("PRAGMA journal_mode = WAL")
        connection.execute(f"PRAGMA synchronous = {sync.upper()}")
        connection.execute("PRAGMA temp_store = MEMORY")
    except BaseException:
        connection.close()
        raise
    return connection


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


def claim(connection: sqlite3.Connection, path: str, router: str | None) -> str:
    """
    In a transaction: the database at C{path} belongs to C{router},
    recorded at the first open given one (None: no claim); return the
    store's id.

    @raise StoreError: it is the store of another router.
    """
    execute = connection.execute
    row = execute("SELECT value FROM meta WHERE key = 'router'").fetchone()
    if router is None:
        pass
    elif row is None:
        execute("INSERT INTO meta (key, value) VALUES ('router', ?)", (router,))
    elif row[0] != router:
        raise StoreError(f"{path} is the store of router {row[0]!r}, not {router!r}")
    return execute("SELECT value FROM meta WHERE key = 'store_id'").fetchone()[0]
