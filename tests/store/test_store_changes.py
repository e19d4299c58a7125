"""
Change batches and their recording by the store's executors
(L{meshroute.store.changes}, "Replication" in L{meshroute.store.transactions}).
"""

import sqlite3

import msgpack
import pytest
import pytest_twisted
from twisted.internet import defer, reactor

from meshroute.store import DuplicateMessage, InlineExecutor, SQLiteStore, ThreadedExecutor
from meshroute.store.changes import (
    BadChangeBatch,
    ChangeBatch,
    RecordingConnection,
    apply_statements,
)
from support.fakes import RecordingReplication
from support.store_testing import ROUTER, hold_writer, msg


def test_a_batch_survives_msgpack_as_plain_lists():
    batch = ChangeBatch(3, 17, (
        ("INSERT INTO t VALUES (?, ?, ?, ?)", (1, "a", b"\x00\xff", None)),
        ("UPDATE t SET x = ?", (2.5,)),
        ("INSERT INTO u VALUES (?, ?)", [(1, True), (2, False)]),
        ("DELETE FROM t WHERE a = :a", {"a": 1}),
        ("DELETE FROM v", ()),
    ))
    packed = msgpack.packb(batch.to_plain())
    assert ChangeBatch.from_plain(msgpack.unpackb(packed)) == batch
    assert batch.packed_size == len(packed)


@pytest.mark.parametrize("plain", [
    None, [1, 2], [1, 0, []], [-1, 1, []], ["1", 1, []], [1, 1, [["x"]]],
    [1, 1, [[1, [], False]]], [1, 1, [["x", 3, False]]], [1, 1, [["x", [3], True]]],
])
def test_a_plain_form_that_is_no_batch_is_refused_with_one_error(plain):
    with pytest.raises(BadChangeBatch):
        ChangeBatch.from_plain(plain)


def test_the_recorder_keeps_writes_with_their_parameters_and_not_reads():
    connection = sqlite3.connect(":memory:", isolation_level=None)
    recording = RecordingConnection(connection)
    recording.execute("CREATE TABLE t (id INTEGER PRIMARY KEY AUTOINCREMENT, v)")
    cursor = recording.execute("INSERT INTO t (v) VALUES (?)", ["a"])
    assert cursor.lastrowid == 1
    recording.executemany("INSERT INTO t (v) VALUES (?)", ((v,) for v in "bc"))
    assert recording.execute("SELECT count(*) FROM t").fetchone() == (3,)
    assert recording.execute("  select v FROM t WHERE id = ?", (2,)).fetchone() == ("b",)
    returned = recording.execute("DELETE FROM t WHERE id > ? RETURNING v", (1,)).fetchall()
    assert sorted(returned) == [("b",), ("c",)]
    mark = len(recording.statements)
    recording.execute("UPDATE t SET v = ?", ("z",))
    recording.drop_after(mark)
    with pytest.raises(sqlite3.OperationalError):
        recording.execute("INSERT INTO missing VALUES (1)")
    recording.executemany("INSERT INTO t (v) VALUES (?)", [])
    assert recording.take() == (
        ("CREATE TABLE t (id INTEGER PRIMARY KEY AUTOINCREMENT, v)", ()),
        ("INSERT INTO t (v) VALUES (?)", ("a",)),
        ("INSERT INTO t (v) VALUES (?)", [("b",), ("c",)]),
        ("DELETE FROM t WHERE id > ? RETURNING v", (1,)),
    )
    assert recording.statements == []
    # Replayed on another database, they make the same rows.
    other = sqlite3.connect(":memory:", isolation_level=None)
    apply_statements(other, (
        ("CREATE TABLE t (id INTEGER PRIMARY KEY AUTOINCREMENT, v)", ()),
        ("INSERT INTO t (v) VALUES (?)", ("a",)),
        ("INSERT INTO t (v) VALUES (?)", [("b",), ("c",)]),
    ))
    assert other.execute("SELECT id, v FROM t").fetchall() == [(1, "a"), (2, "b"), (3, "c")]


def state(path) -> tuple:
    with sqlite3.connect(path) as connection:
        return connection.execute("SELECT epoch, position FROM replication_state").fetchone()


def open_inline(tmp_path, replication, name="store.db"):
    store = SQLiteStore(str(tmp_path / name), "normal", InlineExecutor(replication),
                        router=ROUTER)
    store.open()
    return store


def test_each_write_transaction_is_one_batch_and_moves_the_position(tmp_path):
    replication = RecordingReplication(epoch=4)
    store = open_inline(tmp_path, replication)
    # Opening: the schema (no batch), then the open-time prune (a batch).
    assert replication.batches[0] is None
    assert replication.writes()[0].position == 1
    replication.batches.clear()
    store.accept(msg(1))
    store.fetch("q", 0, 10)  # reads only: no batch
    replication.epoch = 5
    store.accept(msg(2))
    first, read, second = replication.batches
    assert read is None
    assert (first.epoch, first.position) == (4, 2)
    assert (second.epoch, second.position) == (5, 3)
    assert [sql for sql, _ in first.statements] == ["INSERT INTO messages (msg_id, origin, "
                                                    "dest_router, dest_queue, body, headers, "
                                                    "hops, accepted_at, expires_ms, state) "
                                                    "SELECT ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, "
                                                    "'backlog' WHERE "
                                                    "NOT EXISTS (SELECT 1 FROM enqueued_ids "
                                                    "WHERE msg_id = ?1)"]
    assert first.statements[0][1][:3] == ("m1", ROUTER, "router-c")
    store.close()
    assert state(tmp_path / "store.db") == (5, 3)


def test_the_callers_learn_of_a_commit_only_when_the_gate_fires(tmp_path):
    replication = RecordingReplication(holding=True)
    store = open_inline(tmp_path, replication)
    opened = [fire for fire in replication.held]
    for fire in opened:
        fire()
    replication.held.clear()
    fired = []
    store.accept(msg(1)).addCallback(fired.append)
    assert fired == [] and store.backlog_depths() == {}
    replication.held.pop()()
    assert fired == [None] and store.backlog_depths() == {"router-c": 1}
    store.close()


def write_then_fail(connection):
    connection.execute("INSERT INTO meta (key, value) VALUES ('undone', 1)")
    raise ZeroDivisionError()


def test_a_function_that_raised_leaves_no_statement_and_a_failed_alone_no_batch(tmp_path):
    replication = RecordingReplication()
    store = open_inline(tmp_path, replication)
    store.accept(msg(1))
    before = len(replication.batches)
    failures = []
    store.accept(msg(1)).addErrback(failures.append)
    store.executor.submit(write_then_fail).addErrback(failures.append)
    store.fetch("q", 0, 1)
    store.accept(msg(2))
    assert failures[0].check(DuplicateMessage) and failures[1].check(ZeroDivisionError)
    assert replication.batches[before:-1] == [None, None, None]
    assert [params[0] for _, params in replication.batches[-1].statements] == ["m2"]
    store.close()
    assert state(tmp_path / "store.db")[1] == replication.writes()[-1].position


def test_without_replication_the_position_stays_at_zero(tmp_path):
    store = open_inline(tmp_path, None)
    store.accept(msg(1))
    store.close()
    assert state(tmp_path / "store.db") == (0, 0)


@pytest_twisted.ensureDeferred
async def test_a_group_transaction_drops_only_what_its_failed_functions_ran(tmp_path):
    replication = RecordingReplication(epoch=2)
    store = SQLiteStore(str(tmp_path / "store.db"), "normal",
                        ThreadedExecutor(reactor, replication), router=ROUTER)
    await store.open()
    await store.accept(msg(5))
    await store.accept(msg(50, dest_router=ROUTER))
    go, held = hold_writer(store)
    before = len(replication.batches)
    # The backlog batch meets m5 and runs one by one; m50 fails alone.
    sent = [store.accept(msg(n)) for n in range(1, 8)]
    sent.append(store.accept(msg(50, dest_router=ROUTER)))
    sent.append(store.accept(msg(60, dest_router=ROUTER)))
    sent.append(store.executor.submit(write_then_fail))
    go.set()
    await held
    outcomes = await defer.DeferredList(sent, consumeErrors=True)
    assert [ok for ok, _ in outcomes] == [True] * 4 + [False] + [True] * 2 + [False, True, False]
    # The hold's transaction read nothing, then one batch for the rest.
    assert replication.batches[before] is None
    (batch,) = replication.batches[before + 1:]
    inserted = [params[0] for sql, params in batch.statements if "INTO messages" in sql]
    assert inserted == ["m1", "m2", "m3", "m4", "m6", "m7", "m60"]
    assert not [sql for sql, _ in batch.statements if "meta" in sql]
    # From the writer thread, each batch reached the gate before its commit.
    assert replication.prepared_batches == replication.writes()
    for written in replication.writes():
        assert (replication.calls.index(("prepared", written))
                < replication.calls.index(("committed", written)))
    await store.close()
    assert state(tmp_path / "store.db") == (2, batch.position)


def test_a_batch_is_prepared_before_its_commit_and_abandoned_when_the_commit_fails(tmp_path):
    """
    The gate gets each batch before its COMMIT, so the backup can take it
    while the store syncs; a COMMIT that fails (here a deferred foreign
    key, which SQLite checks only then) hands the batch back as
    abandoned, and the transaction's callers fail.
    """
    replication = RecordingReplication()
    store = open_inline(tmp_path, replication)
    store.accept(msg(1))
    assert replication.prepared_batches[-1] is replication.batches[-1]

    def deferred_key(connection) -> None:
        connection.execute("PRAGMA foreign_keys = ON")
        connection.execute("CREATE TABLE parent (id INTEGER PRIMARY KEY)")
        connection.execute("CREATE TABLE child (parent INTEGER REFERENCES parent (id) "
                           "DEFERRABLE INITIALLY DEFERRED)")

    store.executor.run(deferred_key)
    failures = []
    store.executor.submit(
        lambda connection: connection.execute("INSERT INTO child VALUES (7)")).addErrback(
        failures.append)
    (abandoned,) = replication.abandoned_batches
    assert abandoned is replication.prepared_batches[-1]
    assert replication.batches[-1] is None and failures[0].check(sqlite3.IntegrityError)
    # Nothing of it is in the store: its position is the one before.
    store.accept(msg(2))
    assert replication.batches[-1].position == abandoned.position
    store.close()
    assert state(tmp_path / "store.db")[1] == abandoned.position
