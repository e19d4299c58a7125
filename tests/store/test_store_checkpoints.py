"""
WAL checkpoints off the commit path (L{meshroute.store.checkpoints}): the
executors' commits leave the WAL alone, the writer (thread or reactor)
checkpoints when idle and due or past a size, and none of it is
replicated.

The database file itself grows only when a checkpoint copies the WAL into
it, which is how these tests see checkpoints happen (or not).
"""

import os
import time
from dataclasses import replace

import pytest
import pytest_twisted
from twisted.internet import defer, reactor, task

from meshroute.store import InlineExecutor, SQLiteStore, ThreadedExecutor, TurnExecutor
from meshroute.store.checkpoints import WalCheckpoints
from support.fakes import RecordingReplication
from support.store_testing import ROUTER, msg

#: SQLite's default wal_autocheckpoint, which used to run inside commits.
OLD_AUTOCHECKPOINT_PAGES = 1000
BODY = b"x" * 4096  # at least one page of its own per message
FAR = 3600.0  # a checkpoint interval no test reaches


async def until(check, deadline_s: float = 20.0) -> None:
    """
    Poll C{check()} on the reactor until it is true, failing after
    C{deadline_s}.
    """
    end = time.monotonic() + deadline_s
    while not check():
        assert time.monotonic() < end, "not true before the deadline"
        await task.deferLater(reactor, 0.01, lambda: None)


def big(n: int):
    return replace(msg(n), body=BODY)


#: The executors that checkpoint on their own, by C{[store] writer}.
WRITERS = {"thread": ThreadedExecutor, "reactor": TurnExecutor}


@pytest.fixture(params=sorted(WRITERS))
def writer(request):
    return WRITERS[request.param]


async def open_writing(tmp_path, executor, checkpoints, replication=None,
                       sync="normal") -> SQLiteStore:
    store = SQLiteStore(str(tmp_path / "store.db"), sync,
                        executor(reactor, replication, checkpoints), router=ROUTER)
    await store.open()
    return store


async def accept_all(store: SQLiteStore, first: int, count: int, group: int = 50) -> None:
    """
    Accept C{count} big messages, C{group} at a time (each group in about
    one transaction).
    """
    for start in range(first, first + count, group):
        await defer.gatherResults(
            [store.accept(big(n)) for n in range(start, min(start + group, first + count))],
            consumeErrors=True)


def db_size(store: SQLiteStore) -> int:
    return os.path.getsize(store.path)


def wal_size(store: SQLiteStore) -> int:
    return os.path.getsize(store.path + "-wal")


@pytest_twisted.ensureDeferred
async def test_commits_leave_the_wal_growing_past_the_old_autocheckpoint(tmp_path, writer):
    checkpoints = WalCheckpoints(interval_s=FAR)
    store = await open_writing(tmp_path, writer, checkpoints)
    try:
        before = db_size(store)
        await accept_all(store, 0, 1500)
        assert wal_size(store) > OLD_AUTOCHECKPOINT_PAGES * 4096
        assert db_size(store) == before
        assert checkpoints.checkpoints == 0
    finally:
        await store.close()


@pytest_twisted.ensureDeferred
async def test_an_idle_writer_checkpoints_once_the_interval_is_due(tmp_path, writer):
    checkpoints = WalCheckpoints(interval_s=0.2)
    store = await open_writing(tmp_path, writer, checkpoints)
    try:
        before = db_size(store)
        await accept_all(store, 0, 20)
        await until(lambda: db_size(store) > before)
        assert checkpoints.checkpoints >= 1
        # Nothing new written: no more checkpoints.
        done = checkpoints.checkpoints
        await task.deferLater(reactor, 0.5, lambda: None)
        assert checkpoints.checkpoints == done
    finally:
        await store.close()


@pytest_twisted.ensureDeferred
async def test_a_writer_that_is_never_idle_checkpoints_past_the_wal_size(tmp_path, writer):
    limit = 256 * 1024
    checkpoints = WalCheckpoints(interval_s=FAR, wal_max_bytes=limit)
    store = await open_writing(tmp_path, writer, checkpoints)
    try:
        before = db_size(store)
        for first in range(0, 600, 50):
            await accept_all(store, first, 50)
            # At most one group's worth past the limit, ever.
            assert wal_size(store) < limit + 50 * 3 * 4096
        assert checkpoints.checkpoints >= 2
        assert db_size(store) > before + 300 * 4096
    finally:
        await store.close()


def test_the_inline_executor_checkpoints_past_the_wal_size(tmp_path):
    limit = 128 * 1024
    store = SQLiteStore(str(tmp_path / "store.db"), "normal",
                        InlineExecutor(checkpoints=WalCheckpoints(wal_max_bytes=limit)),
                        router=ROUTER)
    store.open()
    try:
        for n in range(200):
            store.accept(big(n))
            # At most one transaction (a few pages) past the limit, ever.
            assert wal_size(store) < limit + 16 * 4096
    finally:
        store.close()


@pytest_twisted.ensureDeferred
async def test_checkpoints_are_not_replicated(tmp_path, writer):
    replication = RecordingReplication()
    checkpoints = WalCheckpoints(interval_s=0.1)
    store = await open_writing(tmp_path, writer, checkpoints, replication)
    try:
        handed = len(replication.batches)
        before = db_size(store)
        for n in range(5):
            await store.accept(big(n))
        await until(lambda: db_size(store) > before)
        # One hand-over per accept, each with its INSERT; the checkpoint
        # is neither a transaction nor a statement of one.
        assert len(replication.batches) == handed + 5
        statements = [sql for batch in replication.writes() for sql, _ in batch.statements]
        assert not [sql for sql in statements if "checkpoint" in sql.lower()
                    or sql.lstrip().upper().startswith("PRAGMA")]
    finally:
        await store.close()
