"""
The active's replication source (L{meshroute.ha.source}): the retained
log, subscriptions, snapshots.
"""

import os
import sqlite3
import threading

import pytest
import pytest_twisted
from twisted.internet import defer, reactor, threads

from meshroute.ha import source as source_module
from meshroute.ha.gate import ReplicationGate
from meshroute.ha.source import NoRoomForSnapshot, ReplicationSource, Snapshot
from meshroute.harules.quorum import LogPosition
from meshroute.store import SQLiteStore, ThreadedExecutor
from meshroute.store.changes import ChangeBatch
from support.replicated_stores import rows
from support.small_disk import fill, small_disk
from support.store_testing import ROUTER, msg


def batch(position: int, epoch: int = 1, size: int = 10) -> ChangeBatch:
    return ChangeBatch(epoch, position, (("INSERT INTO t VALUES (?)", (b"x" * size,)),))


def source_at(head=LogPosition(1, 10), **kwargs) -> ReplicationSource:
    return ReplicationSource(reactor, "/nonexistent/store.db", "id", head, **kwargs)


def test_since_gives_the_batches_after_a_position_it_covers():
    source = source_at()
    for position in range(11, 15):
        source.append(batch(position, epoch=1 if position < 13 else 2))
    assert source.head == LogPosition(2, 14)
    assert [b.position for b in source.since(1, 10)] == [11, 12, 13, 14]
    assert [b.position for b in source.since(1, 12)] == [13, 14]
    assert [b.position for b in source.since(2, 13)] == [14]
    assert source.since(2, 14) == []


def test_since_is_none_for_a_follower_that_diverged_or_is_ahead_or_too_far_behind():
    source = source_at()
    for position in range(11, 15):
        source.append(batch(position, epoch=1 if position < 13 else 2))
    assert source.since(2, 12) is None  # its batch 12 is not ours (epoch 1)
    assert source.since(3, 14) is None  # same position, another epoch
    assert source.since(1, 10) is not None and source.since(0, 10) is None
    assert source.since(2, 15) is None  # ahead of us
    assert source.since(1, 9) is None  # before the log


def test_the_log_is_bounded_in_bytes_and_drops_the_oldest():
    source = source_at(retained_bytes=200)
    for position in range(11, 21):
        source.append(batch(position, size=40))
    batches, size = source.retained
    assert size <= 200 and batches < 10
    oldest = 20 - batches
    assert source.since(1, oldest - 1) is None
    assert [b.position for b in source.since(1, oldest)] == list(range(oldest + 1, 21))


def test_a_batch_out_of_order_is_refused():
    source = source_at()
    with pytest.raises(ValueError):
        source.append(batch(12))


def test_subscribers_get_each_batch_until_they_unsubscribe():
    source = source_at()
    seen = []
    source.subscribe(seen.append)
    source.append(batch(11))
    source.unsubscribe(seen.append)
    source.unsubscribe(seen.append)  # twice is harmless
    source.append(batch(12))
    assert [b.position for b in seen] == [11]


async def replicated_store(tmp_path):
    """
    A threaded store behind an alone gate and its source.
    """
    source = ReplicationSource(reactor, str(tmp_path / "store.db"), "", LogPosition(0, 0))
    gate = ReplicationGate(source, 1)
    store = SQLiteStore(str(tmp_path / "store.db"), "normal", ThreadedExecutor(reactor, gate),
                        router=ROUTER)
    await store.open()
    source.store_id = store.store_id
    return store, source


@pytest_twisted.ensureDeferred
async def test_a_snapshot_is_the_store_at_its_own_position(tmp_path):
    store, source = await replicated_store(tmp_path)
    await defer.gatherResults([store.accept(msg(n)) for n in range(20)])
    snapshot = await source.snapshot()
    await store.close()
    assert isinstance(snapshot, Snapshot) and snapshot.path.startswith(str(tmp_path))
    assert (snapshot.epoch, snapshot.position) == (source.head.epoch, source.head.position)
    assert rows(snapshot.path) == rows(tmp_path / "store.db")


@pytest_twisted.ensureDeferred
async def test_writes_go_on_while_a_snapshot_reads(tmp_path, monkeypatch):
    store, source = await replicated_store(tmp_path)
    await store.accept(msg(1))
    before = source.head
    reading = threading.Event()
    go_on = threading.Event()
    copy = source_module._copy

    def slow_copy(connection, target):
        reading.set()
        assert go_on.wait(timeout=30)
        copy(connection, target)

    monkeypatch.setattr(source_module, "_copy", slow_copy)
    taken = source.snapshot()
    await threads.deferToThread(reading.wait, 30)
    # The snapshot's read transaction is open: the writer commits anyway.
    await defer.gatherResults([store.accept(msg(n)) for n in range(2, 50)])
    assert source.head.position > before.position
    assert not taken.called
    go_on.set()
    snapshot = await taken
    assert (snapshot.epoch, snapshot.position) == (before.epoch, before.position)
    ids = {m for (m,) in sqlite3.connect(snapshot.path).execute("SELECT msg_id FROM messages")}
    assert ids == {"m1"}
    await store.close()


@pytest_twisted.ensureDeferred
async def test_snapshots_are_taken_one_at_a_time(tmp_path, monkeypatch):
    """
    A follower that dialled again while its last copy was being taken
    asks for another: it is taken after the first, so that its room is
    checked with the first one written, not beside it.
    """
    store, source = await replicated_store(tmp_path)
    await store.accept(msg(1))
    copying = threading.Event()
    go_on = threading.Event()
    copies = []
    copy = source_module._copy

    def held_copy(connection, target):
        copies.append(len([n for n in os.listdir(tmp_path) if n.startswith("snapshot-")]))
        copying.set()
        assert go_on.wait(timeout=30)
        copy(connection, target)

    monkeypatch.setattr(source_module, "_copy", held_copy)
    first, second = source.snapshot(), source.snapshot()
    await threads.deferToThread(copying.wait, 30)
    await defer.gatherResults([store.accept(msg(n)) for n in range(2, 10)])
    assert copies == [1] and not first.called and not second.called
    go_on.set()
    taken = [await first, await second]
    assert copies == [1, 2]  # the second began with the first written
    assert [t.position for t in taken] == [2, source.head.position]
    await store.close()


def test_a_failed_snapshot_leaves_no_file(tmp_path):
    (tmp_path / "store.db").write_bytes(b"not a database at all" * 100)
    with pytest.raises(sqlite3.DatabaseError):
        source_module.take_snapshot(str(tmp_path / "store.db"), str(tmp_path))
    assert [p.name for p in tmp_path.iterdir()] == ["store.db"]


def store_of(path, size: int) -> None:
    """
    A store file of about C{size} bytes at C{path}, at position (2, 7).
    """
    with sqlite3.connect(path) as connection:
        connection.execute("CREATE TABLE replication_state (epoch INTEGER, position INTEGER)")
        connection.execute("INSERT INTO replication_state VALUES (2, 7)")
        connection.execute("CREATE TABLE t (body BLOB)")
        connection.executemany("INSERT INTO t VALUES (?)",
                               [(os.urandom(1000),) for _ in range(size // 1000)])
    connection.close()


def test_a_snapshot_that_would_not_fit_beside_min_free_disk_is_not_taken(tmp_path):
    """
    A copy that would fill the disk the active's own commits need is
    refused before a byte of it is written; with room it is taken.
    """
    with small_disk(tmp_path / "disk", "4m") as disk:
        store = str(disk / "store.db")
        store_of(store, 1_000_000)
        filler = fill(disk)
        os.truncate(filler, os.path.getsize(filler) - 900_000)  # less room than the store
        with pytest.raises(NoRoomForSnapshot) as refused:
            source_module.take_snapshot(store, str(disk))
        assert "does not fit" in str(refused.value)
        assert sorted(os.listdir(disk)) == ["filler", "store.db"]
        os.unlink(filler)  # ~2.9 MB free: it fits, but not beside 2.5 MB kept free
        with pytest.raises(NoRoomForSnapshot):
            source_module.take_snapshot(store, str(disk), keep_free=2_500_000)
        snapshot = source_module.take_snapshot(store, str(disk), keep_free=1_000_000)
        assert (snapshot.epoch, snapshot.position) == (2, 7)
        assert rows(snapshot.path) == rows(store)
