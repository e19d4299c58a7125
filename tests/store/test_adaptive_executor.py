"""
The adaptive executor (L{meshroute.store.adaptive_executor}): a small turn
commits on the reactor thread while the writer thread is idle, the rest
on the writer thread, and the outcomes fire in submission order across
both; on the real reactor run by pytest-twisted.  (The store's behaviour
on it is tested with every executor: the C{store} and C{opener} fixtures
of L{support.store_testing}.)
"""

import threading
import time

import pytest
import pytest_twisted
from twisted.internet import defer, reactor, task

from meshroute.store import AdaptiveExecutor, ExecutorStopped, SQLiteStore
from meshroute.store.checkpoints import WalCheckpoints
from meshroute.store.transactions import RELAXED_DELAY_S, lengthy
from support.fakes import RecordingReplication
from support.store_testing import ROUTER, commit_syncs, hold_writer, msg, three_in_an_outbox

MAIN = threading.get_ident()


async def opened(tmp_path, **kwargs) -> SQLiteStore:
    """
    A store on an adaptive executor whose writer thread is idle: a turn
    that brings little now runs on the reactor thread.  Its checkpoints
    wait an hour unless C{kwargs} say otherwise, so that none takes the
    writer thread during a test.
    """
    kwargs.setdefault("checkpoints", WalCheckpoints(interval_s=3600.0))
    store = SQLiteStore(str(tmp_path / "s.db"), "full", AdaptiveExecutor(reactor, **kwargs),
                        router=ROUTER)
    await store.open()
    await idle(store.executor)
    return store


async def idle(executor: AdaptiveExecutor, timeout_s: float = 10.0) -> None:
    """
    Wait until a turn of one probe runs on the reactor thread (the writer
    thread was done with what came before it).
    """
    deadline = time.monotonic() + timeout_s
    while True:
        here = executor.batches_here
        await executor.submit(lambda connection: None)
        if executor.batches_here > here:
            return
        assert time.monotonic() < deadline, "the writer thread stayed busy"
        await task.deferLater(reactor, 0.005, lambda: None)


def where(ran: list, name: str):
    """
    A store function that records C{(name, "reactor" | "writer")}: which
    thread ran it.
    """
    def fn(connection):
        ran.append((name, "reactor" if threading.get_ident() == MAIN else "writer"))
        return name

    return fn


async def until(predicate, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        await task.deferLater(reactor, 0.005, lambda: None)


@pytest_twisted.ensureDeferred
async def test_a_turn_that_brings_little_commits_on_the_reactor_thread(tmp_path):
    store = await opened(tmp_path)
    executor = store.executor
    ran: list = []
    here, before = executor.batches_here, executor.commits
    submitted = [executor.submit(where(ran, n)) for n in range(executor.inline_max_items)]
    assert ran == []  # at the turn's end, not at once
    assert await defer.gatherResults(submitted) == list(range(executor.inline_max_items))
    assert ran == [(n, "reactor") for n in range(executor.inline_max_items)]
    assert (executor.batches_here, executor.commits) == (here + 1, before + 1)
    await store.close()


@pytest_twisted.ensureDeferred
async def test_a_turn_that_brings_more_commits_on_the_writer_thread(tmp_path):
    store = await opened(tmp_path)
    executor = store.executor
    ran: list = []
    count = executor.inline_max_items + 1
    before = executor.commits
    assert await defer.gatherResults([executor.submit(where(ran, n)) for n in range(count)]) \
        == list(range(count))
    assert ran == [(n, "writer") for n in range(count)]
    assert executor.commits == before + 1
    await store.close()


@pytest_twisted.ensureDeferred
async def test_while_the_writer_is_busy_everything_goes_to_it_in_order(tmp_path):
    """
    What is submitted while the writer thread has work outstanding goes
    to it too, in one transaction; once its outcomes are back, a small
    turn commits on the reactor again.  Outcomes fire in submission order.
    """
    store = await opened(tmp_path)
    executor = store.executor
    ran: list = []
    fired: list = []
    go, held = hold_writer(store)
    first = [executor.submit(where(ran, n)) for n in (1, 2)]
    before = executor.commits
    go.set()
    for d in first:
        d.addCallback(fired.append)
    # Submitted by the first outcome's callback: after the other one.
    first[0].addCallback(lambda _: executor.submit(where(ran, 3)).addCallback(fired.append))
    await held
    await until(lambda: len(fired) == 3)
    assert fired == [1, 2, 3]
    assert ran == [(1, "writer"), (2, "writer"), (3, "reactor")]
    assert executor.commits == before + 2
    await store.close()


@pytest_twisted.ensureDeferred
async def test_a_function_run_alone_takes_what_waits_for_the_turn_along_first(tmp_path):
    store = await opened(tmp_path)
    executor = store.executor
    ran: list = []
    gathered = executor.submit(where(ran, "gathered"))
    alone = executor.run(where(ran, "alone"))
    assert await defer.gatherResults([gathered, alone]) == ["gathered", "alone"]
    assert ran == [("gathered", "writer"), ("alone", "writer")]
    await store.close()


@pytest_twisted.ensureDeferred
async def test_a_turn_waits_for_the_writer_thread_that_holds_the_connection(tmp_path):
    """
    While the writer thread holds the connection (a checkpoint, say), a
    small turn goes to it rather than wait on the reactor thread.
    """
    store = await opened(tmp_path)
    executor = store.executor
    ran: list = []
    executor._writing.acquire()  # as the writer thread does
    turn = executor.submit(where(ran, "turn"))
    try:
        await until(lambda: executor._on_thread == 1)
    finally:
        executor._writing.release()
    assert await turn == "turn"
    assert ran == [("turn", "writer")]
    await store.close()


@pytest_twisted.ensureDeferred
async def test_a_relaxed_write_alone_commits_on_the_reactor_after_the_delay_without_fsync(
        tmp_path):
    store = await opened(tmp_path)
    await three_in_an_outbox(store)
    syncs = commit_syncs(store)
    await store.executor.run(lambda connection: None)  # the trace is on
    here = store.executor.batches_here
    began = time.monotonic()
    assert await store.acknowledge("peer-b", 3) == 3
    assert time.monotonic() - began >= RELAXED_DELAY_S * 0.9
    assert store.executor.batches_here == here + 1
    assert syncs() == ["NORMAL"]
    await store.close()


@pytest_twisted.ensureDeferred
async def test_what_waits_for_the_turn_at_a_stop_is_committed_first(tmp_path):
    store = await opened(tmp_path)
    accepted = store.accept(msg(1))
    await store.close()
    assert accepted.called
    assert store.executor._on_thread == 0  # the stop itself came back
    reopened = await opened(tmp_path)
    assert reopened.backlog_depths() == {"router-c": 1}
    await reopened.close()


@pytest_twisted.ensureDeferred
async def test_replication_is_handed_each_batch_before_its_commit_on_either_thread(tmp_path):
    """
    A turn committed on the reactor hands its batch to the gate by a
    call; one on the writer thread through the reactor: either way
    C{prepared} comes before C{committed}, on the reactor thread, and
    the positions follow the commits.
    """
    replication = RecordingReplication(epoch=3)
    threads: list = []
    prepared = replication.prepared

    def recording(batch):
        threads.append(threading.get_ident() == MAIN)
        prepared(batch)

    replication.prepared = recording
    store = await opened(tmp_path, replication=replication)
    executor = store.executor
    replication.calls.clear()
    threads.clear()
    here, on_thread = executor.batches_here, executor.batches_on_thread
    await store.accept(msg(1))
    assert executor.batches_here == here + 1
    await defer.gatherResults([store.accept(msg(n)) for n in range(2, 12)])
    assert executor.batches_on_thread == on_thread + 1
    kinds = [kind for kind, _ in replication.calls]
    assert kinds == ["prepared", "committed"] * 2
    first, second = replication.prepared_batches
    assert (first.epoch, second.epoch) == (3, 3)
    assert second.position == first.position + 1
    assert threads == [True, True]
    await store.close()


@pytest_twisted.ensureDeferred
async def test_a_holding_gate_releases_both_threads_outcomes_in_submission_order(tmp_path):
    """
    With a gate that holds each transaction's outcomes (an HA active's,
    waiting for its backup), a turn committed here, one on the writer
    thread and one after it reach the gate in submission order, at
    consecutive positions, and nothing fires until the gate lets it, then
    in that order.
    """
    replication = RecordingReplication(epoch=3)
    store = await opened(tmp_path, replication=replication)
    executor = store.executor
    replication.holding = True
    replication.calls.clear()
    here, on_thread = executor.batches_here, executor.batches_on_thread
    fired: list = []

    def accepted(numbers) -> None:
        for n in numbers:
            store.accept(msg(n)).addCallback(lambda _, n=n: fired.append(n))

    accepted([1])
    await until(lambda: len(replication.held) == 1)
    assert executor.batches_here == here + 1
    accepted(range(2, 12))  # more than a turn may bring here
    await until(lambda: len(replication.held) == 2)
    assert executor.batches_on_thread == on_thread + 1
    accepted([12])
    await until(lambda: len(replication.held) == 3)
    assert fired == []
    assert [kind for kind, _ in replication.calls] == ["prepared", "committed"] * 3
    positions = [batch.position for batch in replication.prepared_batches]
    assert positions == list(range(positions[0], positions[0] + 3))
    for n, fire in enumerate(replication.held):
        fire()
        assert fired == list(range(1, [2, 12, 13][n]))
    await store.close()


@pytest_twisted.ensureDeferred
async def test_a_turn_committed_here_has_the_writer_thread_checkpoint(tmp_path):
    """
    The reactor thread never checkpoints: a turn that makes a checkpoint
    due wakes the writer thread, which runs it after the interval, or at
    once when the WAL has passed its size.
    """
    checkpoints = WalCheckpoints(interval_s=0.05)
    store = await opened(tmp_path, checkpoints=checkpoints)
    executor = store.executor
    await until(lambda: checkpoints.idle_wait_s() is None)
    ran: list = []
    done = checkpoints.checkpoints
    await executor.submit(where(ran, "turn"))
    assert ran == [("turn", "reactor")]
    await until(lambda: checkpoints.checkpoints > done)
    assert checkpoints.idle_wait_s() is None
    # A checkpoint due in an hour (the writer thread waits for it), then a
    # turn that takes the WAL past its size: the thread runs it at once.
    checkpoints.interval_s = 3600.0
    await executor.submit(where(ran, "due in an hour"))
    assert ran[-1] == ("due in an hour", "reactor")
    assert checkpoints.idle_wait_s() > 60
    checkpoints.wal_max_bytes = checkpoints._threshold = 1
    done = checkpoints.checkpoints
    await executor.submit(where(ran, "past the size"))
    assert ran[-1] == ("past the size", "reactor")
    await until(lambda: checkpoints.checkpoints > done)
    await store.close()


@pytest_twisted.ensureDeferred
async def test_a_lengthy_function_goes_to_the_writer_thread_however_few(tmp_path):
    store = await opened(tmp_path)
    ran: list = []
    assert await store.executor.submit(lengthy(where(ran, "prune"))) == "prune"
    assert ran == [("prune", "writer")]
    await store.close()


@pytest_twisted.ensureDeferred
async def test_what_waits_for_the_turn_fails_when_the_store_cannot_open(tmp_path):
    executor = AdaptiveExecutor(reactor)

    def cannot_open():
        raise OSError("no such disk")

    started = executor.start(cannot_open)
    waiting = executor.submit(lambda connection: None)
    with pytest.raises(OSError):
        await started
    with pytest.raises(ExecutorStopped):
        await waiting
    await executor.stop()
