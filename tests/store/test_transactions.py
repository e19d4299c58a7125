"""
How the store's SQL runs in transactions (L{meshroute.store.transactions}):
each function in a savepoint of its own, so that one that raises is
undone alone; consecutive calls of a function with a batch form in one
call, each still getting its own outcome; reads after the writes
submitted before them; and relaxed commits, which need no fsync of
their own.

Grouping is made deterministic on the threaded executor without
sleeping: a first submitted function blocks the writer thread on a
L{threading.Event} until the test has queued everything it wants in one
transaction.
"""

import pytest
import pytest_twisted
from twisted.internet import defer

from meshroute.store import DuplicateMessage
from support.store_testing import (  # noqa: F401 (fixtures)
    ROUTER,
    commit_syncs,
    hold_writer,
    msg,
    opener,
    threaded,
    three_in_an_outbox,
)


@pytest_twisted.ensureDeferred
async def test_one_failing_function_does_not_undo_the_others_in_its_transaction(threaded):
    store = await threaded.open()
    executor = store.executor

    def write(value, fail=False):
        def fn(connection):
            connection.execute("INSERT INTO meta (key, value) VALUES (?, 1)", (value,))
            if fail:
                raise ZeroDivisionError(value)
            return value

        return fn

    go, held = hold_writer(store)
    before = executor.commits
    results = [
        executor.submit(write("one")),
        executor.submit(write("two", fail=True)),
        executor.submit(write("three")),
    ]
    go.set()
    await held
    assert await results[0] == "one"
    with pytest.raises(ZeroDivisionError):
        await results[1]
    assert await results[2] == "three"
    assert executor.commits - before == 1  # one for all three (the hold ran alone)
    keys = await executor.submit(lambda c: [k for (k,) in c.execute("SELECT key FROM meta")])
    assert "one" in keys and "three" in keys and "two" not in keys


@pytest_twisted.ensureDeferred
async def test_batched_accepts_with_a_duplicate_fail_only_the_duplicate(threaded):
    store = await threaded.open()
    await store.accept(msg(5))
    await store.accept(msg(50, dest_router=ROUTER))
    go, held = hold_writer(store)
    remote = [store.accept(msg(n)) for n in range(1, 10)]  # m5 is held
    local = [store.accept(msg(n, dest_router=ROUTER)) for n in range(10, 20)]
    local.append(store.accept(msg(50, dest_router=ROUTER)))
    local.append(store.accept(msg(11, dest_router=ROUTER)))  # twice in one batch
    go.set()
    await held
    outcomes = await defer.DeferredList(remote + local, consumeErrors=True)
    failed = [i for i, (ok, _) in enumerate(outcomes) if not ok]
    assert failed == [4, 19, 20]
    assert all(outcomes[i][1].check(DuplicateMessage) for i in failed)
    assert store.backlog_depths() == {"router-c": 9}
    assert store.queue_depths() == {"q": 11}
    assert [m.msg_id for _, m, _ in await store.fetch("q", 0, 100)] == ["m50"] + [
        f"m{n}" for n in range(10, 20)
    ]


@pytest_twisted.ensureDeferred
async def test_batched_receives_give_each_its_own_outcome(threaded):
    store = await threaded.open()
    await store.accept(msg(3))
    await store.receive("peer-b", 1, msg(100, dest_router=ROUTER), True)
    go, held = hold_writer(store)
    calls = [
        store.receive("peer-b", 2, msg(1), False),
        store.receive("peer-b", 3, msg(2), False),
        store.receive("peer-b", 4, msg(3), False),  # held: duplicate-id
        store.receive("peer-b", 4, msg(4), False),  # seq again: duplicate-seq
        store.receive("peer-c", 1, msg(5), False),
        store.receive("peer-b", 5, msg(6), False),
        store.receive("peer-b", 6, msg(10, dest_router=ROUTER), True),
        store.receive("peer-b", 7, msg(100, dest_router=ROUTER), True),  # enqueued: duplicate-id
        store.receive("peer-c", 2, msg(11, dest_router=ROUTER), True),
        store.receive("peer-c", 2, msg(12, dest_router=ROUTER), True),  # duplicate-seq
    ]
    go.set()
    await held
    assert await defer.gatherResults(calls) == [
        "stored",
        "stored",
        "duplicate-id",
        "duplicate-seq",
        "stored",
        "stored",
        "stored",
        "duplicate-id",
        "stored",
        "duplicate-seq",
    ]
    assert store.last_received("peer-b") == 7
    assert store.last_received("peer-c") == 2
    assert store.backlog_depths() == {"router-c": 5}
    assert store.queue_depths() == {"q": 3}
    # And clean batches (the common case) are stored whole.
    go, held = hold_writer(store)
    calls = [store.receive("peer-d", n, msg(200 + n), False) for n in range(1, 51)]
    calls += [
        store.receive("peer-d", n, msg(300 + n, dest_router=ROUTER), True) for n in range(51, 101)
    ]
    go.set()
    await held
    assert set(await defer.gatherResults(calls)) == {"stored"}
    assert store.last_received("peer-d") == 100
    assert store.backlog_depths() == {"router-c": 55}
    assert store.queue_depths() == {"q": 53}


@pytest_twisted.ensureDeferred
async def test_reads_see_the_writes_submitted_before_them(threaded):
    store = await threaded.open()
    accepts = [store.accept(msg(n, dest_router=ROUTER)) for n in range(20)]
    fetched = store.fetch("q", 0, 100)
    await defer.gatherResults(accepts)
    assert len(await fetched) == 20


@pytest_twisted.ensureDeferred
async def test_consuming_commits_without_an_fsync(opener):
    """
    A consumer's acknowledgement is never confirmed to it: its deletion
    is made durable by the next fsynced commit.
    """
    store = await opener.open()
    await store.accept(msg(1, dest_router=ROUTER))
    [(entry, _, _)] = await store.fetch("q", 0, 10)
    syncs = commit_syncs(store)
    assert await store.consume([entry]) == 1
    await store.accept(msg(2, dest_router=ROUTER))
    assert syncs() == ["NORMAL", "FULL"]
    assert store.queue_depths() == {"q": 1}


@pytest_twisted.ensureDeferred
async def test_forgetting_acknowledged_transfers_commits_without_an_fsync(opener):
    store = await opener.open()
    await three_in_an_outbox(store)
    syncs = commit_syncs(store)
    assert await store.acknowledge("peer-b", 2) == 2
    await store.accept(msg(4))
    assert syncs() == ["NORMAL", "FULL"]
    assert store.outbox_depths() == {"peer-b": {"router-c": 1}}


@pytest_twisted.ensureDeferred
async def test_a_transaction_with_anything_else_is_fsynced(threaded):
    store = await threaded.open()
    await three_in_an_outbox(store)
    syncs = commit_syncs(store)
    go, held = hold_writer(store)
    acknowledged = store.acknowledge("peer-b", 3)
    accepted = store.accept(msg(4))
    before = store.executor.commits
    go.set()
    await defer.gatherResults([held, acknowledged, accepted])
    # The acknowledgement's with the accept (the hold ran alone).
    assert store.executor.commits == before + 1
    assert syncs() == ["FULL"]


@pytest_twisted.ensureDeferred
async def test_with_sync_normal_nothing_changes_the_level(opener):
    store = await opener.open(sync="normal")
    await store.accept(msg(1))
    await store.assign("peer-b", ["router-c"], 1)
    statements: list[str] = []
    store.executor.run(lambda connection: connection.set_trace_callback(statements.append))
    await store.acknowledge("peer-b", 1)
    assert "COMMIT" in statements
    assert not [s for s in statements if s.startswith("PRAGMA synchronous")]
