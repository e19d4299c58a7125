"""
The backup's replica (L{meshroute.ha.replica}), and the round trip that
replication promises: a real store's batches, applied to a replica on
another file (from the start, or from a snapshot taken on the way), give
the same rows at the same position.
"""

import errno
import os
import random
import sqlite3
import tempfile

import pytest
import pytest_twisted
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from twisted.internet import defer, reactor, task
from twisted.python.failure import Failure

from meshroute.ha import replica as replica_module
from meshroute.ha.gate import ReplicationGate
from meshroute.ha.replica import Replica, ReplicaGap
from meshroute.ha.source import ReplicationSource, take_snapshot
from meshroute.harules.quorum import ORIGIN, LogPosition, VoterRecord
from meshroute.store import (
    DuplicateMessage,
    InlineExecutor,
    MissingTransfer,
    SQLiteStore,
    ThreadedExecutor,
    TurnExecutor,
)
from meshroute.store.changes import ChangeBatch
from meshroute.store.prepared import DuplicateXid
from support.replicated_stores import message, rows
from support.store_testing import ROUTER

PEERS = ("router-b", "router-c")


def result(d: defer.Deferred):
    """
    What an already-fired Deferred (inline executors) fired with.
    """
    outcome = []
    d.addBoth(outcome.append)
    assert outcome, "not fired"
    if isinstance(outcome[0], Failure):
        outcome[0].raiseException()
    return outcome[0]


def refused(failure: Failure) -> None:
    """
    A store call refused as it may be: an outcome like any other.
    """
    failure.trap(DuplicateMessage, DuplicateXid, MissingTransfer)


class Primary:
    """
    An active's store behind an alone gate, recording what it ships.
    """

    def __init__(self, directory: str, executor_factory) -> None:
        self.path = os.path.join(directory, "primary.db")
        self.clock = task.Clock()
        self.clock.advance(10000)
        self.source = ReplicationSource(reactor, self.path, "", ORIGIN)
        self.gate = ReplicationGate(self.source, 1)
        self.shipped: list[ChangeBatch] = []
        self.source.subscribe(self.shipped.append)
        self._executor_factory = executor_factory
        self.store = self.new_store()

    def new_store(self) -> SQLiteStore:
        return SQLiteStore(self.path, "normal", self._executor_factory(self.gate),
                           router=ROUTER, clock=self.clock, dedup_window_s=100,
                           duplicate_id_window_s=50)

    def opened(self) -> None:
        self.source.store_id = self.store.store_id

    def run(self, op) -> defer.Deferred:
        """
        Start the store operation C{op} (a tuple); expected refusals are
        outcomes too.
        """
        store = self.store
        kind = op[0]
        if kind == "accept":
            d = store.accept(message(op[1], op[2]))
        elif kind == "accept_once":
            d = store.accept_once(message(op[1], op[2]), f"dup-{op[3]}")
        elif kind == "commit":
            d = store.fetch("q", 0, op[2])
            d.addCallback(lambda entries: store.commit(
                [(message(n, True), "") for n in op[1]], [e for e, _, _ in entries]))
        elif kind == "receive":
            _, peer, n, local, again = op
            last = store.last_received(peer)
            seq = last if again and last else last + 1
            d = store.receive(peer, seq, message(n, local, origin=peer), local,
                              seq - 1 if seq > last else last)
        elif kind == "receive_many":
            _, peer, items, again = op
            last = store.last_received(peer)
            first = last if again and last else last + 1
            d = store.receive_many(
                peer, first - 1 if first > last else last,
                [(first + i, message(n, local, origin=peer), local)
                 for i, (n, local) in enumerate(items)])
        elif kind == "assign":
            d = store.assign(op[1], ["router-d"], op[2], op[3])
        elif kind == "acknowledge":
            d = store.acknowledge(op[1], op[2])
        elif kind == "return_outbox":
            d = store.return_outbox(op[1])
        elif kind == "consume":
            d = store.fetch("q", 0, op[1])
            d.addCallback(lambda entries: store.consume([e for e, _, _ in entries]))
        elif kind == "mark_redelivered":
            d = store.fetch("q", 0, op[1])
            d.addCallback(lambda entries: store.mark_redelivered([e for e, _, _ in entries]))
        elif kind == "dead_letter":
            d = store.dead_letter(message(op[1], op[2]), "expired")
        elif kind == "prune":
            self.clock.advance(op[1])
            d = store.prune(op[2])
        elif kind == "prune_duplicate_ids":
            self.clock.advance(op[1])
            d = store.prune_duplicate_ids(op[2])
        elif kind == "record_peer_store":
            d = store.record_peer_store(op[1], op[2], op[3])
        elif kind == "restart":
            # Its open prunes what expired meanwhile, and its new executor
            # goes on from the stored position.
            self.clock.advance(op[1])
            d = store.close()
            self.store = self.new_store()
            d.addCallback(lambda _: self.store.open())
        elif kind == "voter":
            d = store.save_voter_record(op[1], VoterRecord(op[2], "x/primary"), 3000)
        elif kind == "prepare":
            # A two-phase transaction: its send and the entries it locks.
            d = store.fetch("q", 0, op[2])
            d.addCallback(lambda entries: store.prepare(
                (1, f"g{op[1]}", ""), None, "tm", [("q", b"x", {}, True, "", 0, False, "")],
                [e for e, _, _ in entries]))
        elif kind == "decide":
            d = store.find_xid((1, f"g{op[1]}", ""))
            d.addCallback(self.decide, op[1], op[2], op[3])
        else:
            raise AssertionError(op)
        return d.addErrback(refused)

    def decide(self, found, xid: int, commit: bool, n: int) -> defer.Deferred | None:
        """
        Commit (accepting message C{n}) or roll back prepared transaction
        C{xid}, if it is prepared.
        """
        if found is None or found[0] != "prepared":
            return None
        if commit:
            return self.store.commit_prepared(found[1], (1, f"g{xid}", ""), None,
                                              [(message(n, True), "")])
        return self.store.rollback_prepared(found[1])


n = st.integers(0, 12)
peer = st.sampled_from(PEERS)
operations = st.one_of(
    st.tuples(st.just("accept"), n, st.booleans()),
    st.tuples(st.just("accept_once"), n, st.booleans(), st.integers(0, 3)),
    st.tuples(st.just("commit"), st.lists(n, max_size=3, unique=True), st.integers(0, 3)),
    st.tuples(st.just("receive"), peer, n, st.booleans(), st.booleans()),
    st.tuples(st.just("receive_many"), peer,
              st.lists(st.tuples(n, st.booleans()), min_size=1, max_size=4), st.booleans()),
    st.tuples(st.just("assign"), peer, st.integers(0, 4), st.sampled_from([None, 10])),
    st.tuples(st.just("acknowledge"), peer, st.integers(0, 6)),
    st.tuples(st.just("return_outbox"), peer),
    st.tuples(st.just("consume"), st.integers(0, 3)),
    st.tuples(st.just("mark_redelivered"), st.integers(0, 3)),
    st.tuples(st.just("dead_letter"), n, st.booleans()),
    st.tuples(st.just("prune"), st.sampled_from([0, 40]), st.sampled_from([None, 1])),
    st.tuples(st.just("prune_duplicate_ids"), st.sampled_from([0, 40]),
              st.sampled_from([None, 1])),
    st.tuples(st.just("record_peer_store"), peer, st.sampled_from(["s1", "s2"]),
              st.booleans()),
    st.tuples(st.just("voter"), st.sampled_from(["g1", "g2"]), st.integers(1, 5)),
    st.tuples(st.just("restart"), st.sampled_from([0, 200])),
    st.tuples(st.just("prepare"), st.integers(0, 2), st.integers(0, 3)),
    st.tuples(st.just("decide"), st.integers(0, 2), st.booleans(), n),
)


def replica_from(directory: str, snapshot_path: str, shipped: list) -> Replica:
    """
    A new replica in C{directory}: installs the snapshot, then applies the
    shipped batches after it (in chunks, as a follower would).
    """
    os.mkdir(directory)
    replica = Replica(directory, InlineExecutor, sync="normal")
    assert result(replica.open()).position == 0
    at = result(replica.install_snapshot(snapshot_path))
    later = [b for b in shipped if b.position > at.position]
    for start in range(0, len(later), 3):
        result(replica.apply(later[start:start + 3]))
    return replica


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@example(ops=[("accept", 1, True), ("accept_once", 1, True, 0), ("commit", [2, 1], 0),
              ("accept", 3, False), ("restart", 200), ("accept", 4, True)], snapshot_at=3)
@example(ops=[("accept", 1, True), ("accept", 2, True), ("prepare", 0, 1), ("prepare", 1, 1),
              ("decide", 0, True, 5), ("decide", 1, False, 6), ("prepare", 0, 2)],
         snapshot_at=3)
@given(ops=st.lists(operations, max_size=40), snapshot_at=st.integers(0, 40))
def test_a_replica_holds_the_primarys_rows_at_its_position(ops, snapshot_at):
    with tempfile.TemporaryDirectory() as directory:
        primary = Primary(directory, InlineExecutor)
        result(primary.store.open())
        primary.opened()
        snapshots = [take_snapshot(primary.path, directory)]
        for index, op in enumerate(ops):
            if index == snapshot_at:
                snapshots.append(take_snapshot(primary.path, directory))
            result(primary.run(op))
        result(primary.store.close())
        head = primary.source.head
        assert [b.position for b in primary.shipped] == list(range(1, head.position + 1))
        expected = rows(primary.path)
        assert expected["replication_state"] == [(1, head.epoch, head.position, 0, 0, "")]
        for number, snapshot in enumerate(snapshots):
            replica = replica_from(os.path.join(directory, f"replica{number}"), snapshot.path,
                                   primary.shipped)
            assert replica.position() == head
            assert replica.store_id == primary.store.store_id
            result(replica.close())
            assert rows(replica.path) == expected


@pytest_twisted.ensureDeferred
async def test_group_commits_of_a_threaded_store_replicate_row_for_row(tmp_path):
    """
    Concurrent operations, so that transactions group many functions,
    batched forms fall back to one by one, and some functions fail.
    """
    primary = Primary(str(tmp_path), lambda gate: ThreadedExecutor(reactor, gate))
    await primary.store.open()
    primary.opened()
    snapshot = await primary.source.snapshot()
    choose = random.Random(8)
    for _ in range(30):
        ops = []
        for _ in range(choose.randrange(1, 25)):
            kind = choose.choice(["accept", "accept", "receives", "assign", "acknowledge",
                                  "consume", "dead_letter", "return_outbox", "prune"])
            if kind == "accept":
                ops.append(("accept", choose.randrange(200), choose.random() < 0.5))
            elif kind == "receives":
                # Consecutive receives of one peer: the batched form.
                peer = choose.choice(PEERS)
                last = primary.store.last_received(peer)
                local = choose.random() < 0.5
                for seq in range(last + 1, last + 1 + choose.randrange(1, 5)):
                    ops.append(("receive_seq", peer, seq, choose.randrange(200), local))
            elif kind == "assign":
                ops.append(("assign", choose.choice(PEERS), choose.randrange(1, 6), None))
            elif kind == "acknowledge":
                ops.append(("acknowledge", choose.choice(PEERS), choose.randrange(0, 30)))
            elif kind == "consume":
                ops.append(("consume", choose.randrange(0, 4)))
            elif kind == "dead_letter":
                ops.append(("dead_letter", choose.randrange(200), choose.random() < 0.5))
            elif kind == "return_outbox":
                ops.append(("return_outbox", choose.choice(PEERS)))
            else:
                ops.append(("prune", 30, None))
        started = []
        for op in ops:
            if op[0] == "receive_seq":
                _, peer, seq, number, local = op
                started.append(primary.store.receive(
                    peer, seq, message(number, local, origin=peer), local, seq - 1
                ).addErrback(refused))
            else:
                started.append(primary.run(op))
        await defer.gatherResults(started)
    await primary.store.close()
    assert primary.store.executor.commits < len(primary.shipped) + 40  # grouped
    replica = replica_from(str(tmp_path / "replica"), snapshot.path, primary.shipped)
    assert replica.position() == primary.source.head
    result(replica.close())
    assert rows(replica.path) == rows(primary.path)


# The replica alone.


def batch(position: int, epoch: int = 1, value: str = "v") -> ChangeBatch:
    return ChangeBatch(epoch, position, (
        ("INSERT INTO meta (key, value) VALUES (?, ?)", (f"k{position}", value)),
    ))


def opened(directory, **kwargs) -> Replica:
    replica = Replica(str(directory), InlineExecutor, **kwargs)
    result(replica.open())
    return replica


def test_a_batch_that_does_not_follow_is_refused_and_nothing_of_its_call_is_applied(tmp_path):
    replica = opened(tmp_path)
    assert result(replica.apply([batch(1), batch(2)])) == LogPosition(1, 2)
    with pytest.raises(ReplicaGap):
        result(replica.apply([batch(3), batch(5)]))
    with pytest.raises(ReplicaGap):
        result(replica.apply([batch(2)]))
    assert replica.position() == LogPosition(1, 2)
    assert result(replica.apply([batch(3, epoch=2)])) == LogPosition(2, 3)
    result(replica.close())
    keys = [k for (k,) in sqlite3.connect(replica.path).execute(
        "SELECT key FROM meta WHERE key LIKE 'k%' ORDER BY key")]
    assert keys == ["k1", "k2", "k3"]
    # Reopened, it is where it was.
    assert opened(tmp_path).position() == LogPosition(2, 3)


@pytest.mark.parametrize("sync, level", [("full", 2), ("normal", 1)])
def test_replica_sync_sets_synchronous(tmp_path, sync, level):
    replica = opened(tmp_path, sync=sync)
    assert result(replica._executor.run(
        lambda c: c.execute("PRAGMA synchronous").fetchone()[0])) == level
    result(replica.close())


def snapshot_of(directory, position: int, epoch: int = 5) -> str:
    """
    A snapshot file of another store ("the active's") at C{(epoch,
    position)}.
    """
    os.makedirs(directory, exist_ok=True)
    active = opened(directory)
    result(active.apply([batch(p, epoch, "active") for p in range(1, position + 1)]))
    result(active.close())
    return take_snapshot(active.path, str(directory)).path


def test_divergent_data_is_kept_in_oldreplica_n_at_most_max_saved(tmp_path, observe_errors):
    data_dir = tmp_path / "backup"
    data_dir.mkdir()
    replica = opened(data_dir, max_saved=2)
    for round_ in range(1, 4):
        # The replica diverged: batches of its own the active never had.
        at = replica.position().position
        result(replica.apply([batch(at + 1, epoch=round_, value=f"mine {round_}")]))
        position = result(replica.install_snapshot(
            snapshot_of(tmp_path / f"active{round_}", at + 2)))
        assert position == LogPosition(5, at + 2)
    saved = sorted(p.name for p in data_dir.iterdir() if p.name.startswith("oldreplica"))
    assert saved == ["oldreplica.2", "oldreplica.3"]
    with sqlite3.connect(data_dir / "oldreplica.3" / "store.db") as connection:
        assert connection.execute(
            "SELECT value FROM meta WHERE key LIKE 'k%' ORDER BY key DESC LIMIT 1"
        ).fetchone() == ("mine 3",)
    assert replica.store_id == sqlite3.connect(tmp_path / "active3" / "store.db").execute(
        "SELECT value FROM meta WHERE key = 'store_id'").fetchone()[0]
    result(replica.close())


def test_a_new_replica_or_an_exact_copy_is_replaced_without_saving(tmp_path):
    data_dir = tmp_path / "backup"
    data_dir.mkdir()
    replica = opened(data_dir)
    first = snapshot_of(tmp_path / "active", 2)
    assert result(replica.install_snapshot(first)) == LogPosition(5, 2)
    again = take_snapshot(str(tmp_path / "active" / "store.db"), str(tmp_path))
    assert result(replica.install_snapshot(again.path)) == LogPosition(5, 2)
    assert not [p for p in data_dir.iterdir() if p.name.startswith("oldreplica")]
    result(replica.close())


def test_a_snapshot_is_on_disk_before_it_replaces_the_store_and_the_rename_after(
        tmp_path, monkeypatch):
    """
    The position is acknowledged once installed: an OS crash after that
    must find the snapshot's pages, and its name, on disk.
    """
    data_dir = tmp_path / "backup"
    data_dir.mkdir()
    replica = opened(data_dir)
    snapshot = snapshot_of(tmp_path / "active", 2)
    synced = []
    monkeypatch.setattr(replica_module, "sync_file", lambda path: synced.append(
        ("file", path, os.path.exists(path))))
    monkeypatch.setattr(replica_module, "sync_directory", lambda path: synced.append(
        ("directory", path, os.path.exists(snapshot))))
    assert result(replica.install_snapshot(snapshot)) == LogPosition(5, 2)
    assert synced == [("file", snapshot, True), ("directory", str(data_dir), False)]
    result(replica.close())


def test_a_replica_closed_while_a_snapshot_is_installed_closes_the_snapshot_s_store(
        tmp_path):
    """
    The backup is promoted (or stops) while a snapshot it received is
    being installed: the close waits until it is in place, so the store
    closed, and the position read after, are the snapshot's, and no
    store is opened after the close.
    """
    clock = task.Clock()
    executors = []

    def executor():
        executors.append(TurnExecutor(clock))
        return executors[-1]

    data_dir = tmp_path / "backup"
    data_dir.mkdir()
    replica = Replica(str(data_dir), executor)
    opening = replica.open()
    clock.advance(0)
    assert result(opening) == ORIGIN
    installing = replica.install_snapshot(snapshot_of(tmp_path / "active", 2))
    closed = []
    replica.close().addCallback(lambda _: closed.append(replica.position()))
    for _ in range(5):
        clock.advance(0)
    assert result(installing) == LogPosition(5, 2)
    assert closed == [LogPosition(5, 2)]
    assert len(executors) == 2 and executors[-1]._closed


def test_a_replacement_that_fails_after_the_rename_leaves_the_replica_open(
        tmp_path, monkeypatch):
    """
    A disk error once the snapshot is renamed into place: the install
    fails (its connection closes), and the replica still serves, from
    the store now in place, for the next connection to follow from.
    """
    data_dir = tmp_path / "backup"
    data_dir.mkdir()
    replica = opened(data_dir)

    def failing(path):
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(replica_module, "sync_directory", failing)
    with pytest.raises(OSError):
        result(replica.install_snapshot(snapshot_of(tmp_path / "active", 2)))
    assert replica.position() == LogPosition(5, 2)
    assert result(replica.apply([batch(3, 5, "active")])) == LogPosition(5, 3)
    result(replica.close())


def test_with_max_saved_zero_divergent_data_is_deleted(tmp_path):
    data_dir = tmp_path / "backup"
    data_dir.mkdir()
    replica = opened(data_dir, max_saved=0)
    result(replica.apply([batch(1, value="mine")]))
    result(replica.install_snapshot(snapshot_of(tmp_path / "active", 3)))
    assert sorted(p.name for p in data_dir.iterdir() if "oldreplica" in p.name) == []
    assert replica.position() == LogPosition(5, 3)
    result(replica.close())
