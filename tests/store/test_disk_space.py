"""
The free space of the store's disk against [store] min-free-disk
(meshroute.store.disk_space): read when made, then every 100 ms on the
clock while started; a disk that becomes low, and has room again, is
said once each in the log, and squeezes the store's WAL while low; the
store's free pages count as free; and a write that SQLite refuses because
the disk is full fails as StoreFull.
"""

from dataclasses import replace

import pytest_twisted
from twisted.internet.task import Clock
from twisted.logger import globalLogPublisher

from meshroute.errors import StoreFull
from meshroute.store.disk_space import CHECK_INTERVAL_S, DiskSpace, free_bytes
from support.store_testing import ROUTER, msg, store  # noqa: F401 (store: a fixture)

MiB = 1024**2


class Disk:
    def __init__(self, free):
        self.free = free
        self.reads = 0

    def __call__(self, path):
        self.reads += 1
        if isinstance(self.free, Exception):
            raise self.free
        return self.free


def logged(test):
    events = []
    globalLogPublisher.addObserver(events.append)
    try:
        test()
    finally:
        globalLogPublisher.removeObserver(events.append)
    return [e["log_format"] for e in events if e.get("log_namespace") == "meshroute.store.disk_space"]


def test_the_free_space_is_read_at_once_then_every_interval():
    clock, disk = Clock(), Disk(100 * MiB)
    space = DiskSpace("/data", 64 * MiB, clock, disk)
    assert (space.low, space.free, disk.reads) == (False, 100 * MiB, 1)
    space.start()
    clock.advance(CHECK_INTERVAL_S * 0.9)
    assert disk.reads == 1
    disk.free = 10 * MiB
    clock.advance(CHECK_INTERVAL_S * 0.1)
    assert (space.low, space.free, disk.reads) == (True, 10 * MiB, 2)
    space.stop()
    disk.free = 100 * MiB
    clock.advance(10 * CHECK_INTERVAL_S)
    assert (space.low, disk.reads) == (True, 2)


def test_low_is_under_the_bound_not_at_it():
    disk = Disk(64 * MiB)
    space = DiskSpace("/data", 64 * MiB, Clock(), disk)
    assert not space.low
    disk.free -= 1
    space.check()
    assert space.low


def test_becoming_low_and_having_room_again_are_each_said_once():
    disk = Disk(10 * MiB)
    space = None

    def go():
        nonlocal space
        space = DiskSpace("/data", 64 * MiB, Clock(), disk)
        space.check()
        disk.free = 200 * MiB
        space.check()
        space.check()

    said = logged(go)
    assert len(said) == 2
    assert "under [store] min-free-disk" in said[0] and "disk-full" in said[0]
    assert "free again" in said[1]
    assert not space.low


def test_a_reading_that_fails_keeps_what_was_known_and_is_said_once():
    disk = Disk(10 * MiB)
    space = DiskSpace("/data", 64 * MiB, Clock(), disk)
    disk.free = OSError(5, "Input/output error")

    def fail_twice():
        space.check()
        space.check()

    said = logged(fail_twice)
    assert space.low and space.free is None
    assert len(said) == 1 and "cannot read the free space" in said[0]
    assert "unknown" in space.describe()
    disk.free = 10 * MiB
    space.check()
    disk.free = OSError(5, "Input/output error")
    assert len(logged(space.check)) == 1


def test_no_bound_never_reads_nor_becomes_low():
    clock, disk = Clock(), Disk(0)
    space = DiskSpace("/data", 0, clock, disk)
    space.start()
    clock.advance(10 * CHECK_INTERVAL_S)
    assert (space.low, disk.reads) == (False, 0)


def test_what_a_refused_client_is_told():
    space = DiskSpace("/data", 64 * MiB, Clock(), Disk(int(12.5 * MiB)))
    assert space.describe() == ("the router's disk has 12.5 MiB free, under its min-free-disk "
                                "(64.0 MiB): no new message is taken until it has more")


def test_the_free_space_of_a_real_directory(tmp_path):
    assert free_bytes(str(tmp_path)) > 0


def test_the_stores_reusable_pages_count_as_free_but_not_all_of_it():
    reusable = [0]
    disk = Disk(20 * MiB)
    space = DiskSpace("/data", 64 * MiB, Clock(), disk, lambda: reusable[0])
    assert space.low
    reusable[0] = 60 * MiB
    space.check()
    assert not space.low and space.free == 80 * MiB
    # The WAL and the event log write to the file system itself: a quarter
    # of the bound must be free there, however many pages the store has.
    disk.free, reusable[0] = 16 * MiB - 1, 500 * MiB
    space.check()
    assert space.low


def test_only_the_file_system_decides_the_squeeze():
    from meshroute.store.checkpoints import WAL_MAX_BYTES

    calls = []
    disk = Disk(64 * MiB + WAL_MAX_BYTES - 1)
    space = DiskSpace("/data", 64 * MiB, Clock(), disk, lambda: 500 * MiB, calls.append)
    assert space.squeezed and not space.low and calls == [True]


def test_a_checkpoint_learns_the_room_deleted_rows_left(tmp_path):
    import sqlite3

    from meshroute.store.checkpoints import WalCheckpoints

    connection = sqlite3.connect(str(tmp_path / "store.db"), isolation_level=None)
    connection.execute("PRAGMA journal_mode = WAL")
    checkpoints = WalCheckpoints()
    checkpoints.opened(connection)
    assert checkpoints.reusable_bytes == 0
    connection.execute("CREATE TABLE messages (id INTEGER PRIMARY KEY, body BLOB)")
    connection.executemany("INSERT INTO messages (body) VALUES (?)",
                           [(b"x" * 1024,) for _ in range(1000)])
    checkpoints.checkpoint(connection)
    assert checkpoints.reusable_bytes == 0
    connection.execute("DELETE FROM messages")
    checkpoints.checkpoint(connection)
    assert checkpoints.reusable_bytes > 1000 * 1024


def _fill_to(connection, spare_pages):
    pages = connection.execute("PRAGMA page_count").fetchone()[0]
    connection.execute(f"PRAGMA max_page_count = {pages + spare_pages}")


@pytest_twisted.ensureDeferred
async def test_a_write_the_full_disk_refuses_fails_as_store_full(store):
    """
    SQLite's "database or disk is full" (made here with max_page_count)
    fails the writes it refused with StoreFull, which has no code (a
    client is told internal-error: a send that left early may have
    arrived) and says what SQLite said, through every executor; what fit
    is stored.
    """
    await store._executor.submit(_fill_to, 8)
    outcomes = []
    for i in range(40):
        d = store.accept(replace(msg(i, dest_router=ROUTER, dest_queue="q"), body=b"x" * 4096))
        d.addCallbacks(lambda _: outcomes.append("ok"), lambda f: outcomes.append(f.value))
        await d
    refused = [o for o in outcomes if o != "ok"]
    assert refused and all(isinstance(o, StoreFull) for o in refused)
    assert not hasattr(refused[0], "code")
    assert "disk is full" in str(refused[0]) and "database or disk is full" in str(
        refused[0].__cause__)
    assert store.queue_depths() == {"q": outcomes.count("ok")}


@pytest_twisted.ensureDeferred
async def test_a_squeezed_store_checkpoints_after_its_writes(store):
    """
    Squeezed, the store checkpoints what it wrote at once (the adaptive
    executor's writer thread, woken for it, a moment later); not
    squeezed, only after the idle interval (a second) or a large WAL.
    """
    from twisted.internet import reactor, task

    from meshroute.store.checkpoints import CHECKPOINT_INTERVAL_S

    checkpoints = store._executor.checkpoints
    counts = []
    for squeezed in (False, True, False):
        store.squeeze_wal(squeezed)
        before = checkpoints.checkpoints
        for i in range(3):
            await store.accept(msg(len(counts) * 3 + i, dest_router=ROUTER, dest_queue="q"))
        # Well within the idle interval: what checkpoints by then was
        # squeezed out.
        deadline = reactor.seconds() + CHECKPOINT_INTERVAL_S / 2
        while squeezed and checkpoints.idle_wait_s() is not None and reactor.seconds() < deadline:
            await task.deferLater(reactor, 0.01, lambda: None)
        counts.append(checkpoints.checkpoints - before)
    assert counts[0] == counts[2] == 0 and counts[1] >= 1
    assert checkpoints.squeezed is False


def test_the_store_is_squeezed_below_the_bound_plus_the_wals():
    from meshroute.store.checkpoints import WAL_MAX_BYTES

    calls = []
    disk = Disk(64 * MiB + WAL_MAX_BYTES)
    space = DiskSpace("/data", 64 * MiB, Clock(), disk, squeeze=calls.append)
    assert (space.squeezed, space.low, calls) == (False, False, [])
    disk.free -= 1
    space.check()
    assert (space.squeezed, space.low, calls) == (True, False, [True])
    disk.free = 64 * MiB - 1
    space.check()
    assert (space.squeezed, space.low, calls) == (True, True, [True])
    disk.free = 64 * MiB + WAL_MAX_BYTES
    space.check()
    assert (space.squeezed, space.low, calls) == (False, False, [True, False])


def test_room_again_is_called_once_when_low_ends():
    rooms = []
    disk = Disk(10 * MiB)
    space = DiskSpace("/data", 64 * MiB, Clock(), disk, room=lambda: rooms.append(space.low))
    space.check()
    assert rooms == []
    disk.free = 100 * MiB
    space.check()
    space.check()
    assert rooms == [False]
