"""
The stores the store tests open, and what other tests borrow from them: a
message maker (L{msg}), an L{Opener} of stores with each executor (the
parametrized C{opener} fixture), a way to hold the writer thread so
that everything submitted meanwhile goes into one transaction, and a
way to see which commits had an fsync (L{commit_syncs}).
"""

import threading
from pathlib import Path
import pytest_twisted
from twisted.internet import defer, reactor
from meshroute.messages import Message
from meshroute.store import (
    AdaptiveExecutor, InlineExecutor, SQLiteStore, ThreadedExecutor, TurnExecutor)


ROUTER = "router-a"


def msg(n, dest_router="router-c", dest_queue="q", **fields) -> Message:
    """
    Message C{m<n>} from router-a.
    """
    return Message(
        f"m{n}", ROUTER, dest_router, dest_queue, f"body {n}".encode(),
        accepted_at=1000.0 + n, **fields,
    )


def ids(pairs) -> list:
    """
    The msg_ids of C{(x, message, ...)} tuples.
    """
    return [p[1].msg_id for p in pairs]


#: The executors on the reactor, by the names the fixtures' parameters use.
EXECUTORS = {"threaded": ThreadedExecutor, "turn": TurnExecutor, "adaptive": AdaptiveExecutor}


class Opener:
    """
    Opens stores with one kind of executor, and closes them all at the end.
    """

    def __init__(self, kind: str, directory: Path) -> None:
        self.kind = kind
        self.directory = directory
        self.stores: list[SQLiteStore] = []

    def executor(self):
        if self.kind == "inline":
            return InlineExecutor()
        return EXECUTORS[self.kind](reactor)

    async def open(self, name="store.db", sync="full", router=ROUTER, **kwargs) -> SQLiteStore:
        store = SQLiteStore(
            str(self.directory / name), sync, self.executor(), router=router, **kwargs
        )
        self.stores.append(store)
        await store.open()
        return store

    async def reopen(self, store: SQLiteStore, **kwargs) -> SQLiteStore:
        await store.close()
        return await self.open(Path(store.path).name, store.sync, **kwargs)


@pytest_twisted.async_yield_fixture(params=["inline", "threaded", "turn", "adaptive"])
async def opener(request, tmp_path):
    opener = Opener(request.param, tmp_path)
    yield opener
    for store in opener.stores:
        await store.close()


@pytest_twisted.async_yield_fixture(params=["inline", "threaded", "turn", "adaptive"])
async def store(request, tmp_path):
    opener = Opener(request.param, tmp_path)
    yield await opener.open()
    for store in opener.stores:
        await store.close()


@pytest_twisted.async_yield_fixture()
async def threaded(tmp_path):
    opener = Opener("threaded", tmp_path)
    yield opener
    for store in opener.stores:
        await store.close()


def hold_writer(store: SQLiteStore) -> tuple[threading.Event, defer.Deferred]:
    """
    Block C{store}'s writer thread (a threaded or adaptive executor's)
    until the returned event is set, so that everything submitted
    meanwhile goes into one transaction.  The hold runs alone (C{run}):
    an adaptive executor would run a function submitted alone in its
    turn on the reactor thread.
    """
    started = threading.Event()
    go = threading.Event()

    def hold(connection) -> None:
        started.set()
        go.wait()

    held = store.executor.run(hold)
    # The writer thread is inside the hold before anything else is queued
    # (blocking the reactor thread for that moment is harmless here).
    assert started.wait(timeout=30)
    return go, held


def commit_syncs(store: SQLiteStore):
    """
    Start tracing C{store}'s connection; returns a function giving the
    C{synchronous} level (C{"FULL"} or C{"NORMAL"}) of each COMMIT since.
    """
    statements: list[str] = []
    store.executor.run(lambda connection: connection.set_trace_callback(statements.append))

    def syncs() -> list[str]:
        level, found = "FULL", []
        for statement in statements:
            if statement.startswith("PRAGMA synchronous = "):
                level = statement.rpartition(" ")[2]
            elif statement == "COMMIT":
                found.append(level)
        return found

    return syncs


async def three_in_an_outbox(store: SQLiteStore) -> None:
    for n in range(1, 4):
        await store.accept(msg(n))
    await store.assign("peer-b", ["router-c"], 3)


#: How to undo each schema step (meshroute/store/schema/) that a test
#: takes a store back over, newest last: what each step created goes.
_UNDO_STEPS = {
    4: ["DROP TABLE ha_voter_records"],
    5: ["DROP TABLE replication_state"],
    6: ["DROP TABLE peer_epochs"],
    7: ["DROP TABLE known_routers"],
    8: [f"ALTER TABLE replication_state DROP COLUMN {column}"
        for column in ("replicated_epoch", "alone_epoch", "alone_instance")],
    9: ["DROP INDEX messages_expiring", "ALTER TABLE messages DROP COLUMN expires_ms"],
    10: ["ALTER TABLE ha_voter_records DROP COLUMN learned"],
    11: [f"DROP TABLE {table}" for table in ("prepared_transactions", "prepared_sends",
                                             "prepared_acks", "committed_xids")],
    12: ["DROP TABLE durable_subscriptions"],
    13: ["DROP TABLE topic_interest"],
    14: ["DROP TABLE retained_messages"],
}


#: The newest schema step: what an upgrade from any version ends at.
LATEST_SCHEMA = max(_UNDO_STEPS)


def rewind_schema(connection, version: int) -> None:
    """
    Take a store (its C{sqlite3} connection) back to schema C{version},
    undoing every later step, newest first, for tests of an upgrade from
    that version.
    """
    (current,) = connection.execute(
        "SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    if int(current) > LATEST_SCHEMA:
        raise AssertionError(f"schema step {current} is new: say how to undo it in _UNDO_STEPS")
    for step in range(int(current), version, -1):
        for statement in _UNDO_STEPS[step]:
            connection.execute(statement)
    connection.execute(f"UPDATE meta SET value = {version} WHERE key = 'schema_version'")
