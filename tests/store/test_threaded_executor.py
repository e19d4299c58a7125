"""
The threaded executor (L{meshroute.store.threaded_executor}): a writer
thread of its own, group commit, and relaxed writes that wait for the
next commit to go with, on the real reactor run by pytest-twisted.
"""

import pytest
import pytest_twisted
from twisted.internet import defer, reactor, task

from meshroute.store import ThreadedExecutor
from support.store_testing import (  # noqa: F401 (fixtures)
    commit_syncs,
    msg,
    threaded,
    three_in_an_outbox,
)


@pytest_twisted.ensureDeferred
async def test_concurrent_accepts_are_group_committed(threaded):
    store = await threaded.open()
    before = store.executor.commits
    await defer.gatherResults([store.accept(msg(n)) for n in range(1000)])
    assert store.executor.commits - before < 1000 / 5
    assert store.backlog_depths() == {"router-c": 1000}
    assert [seq for seq, _ in await store.assign("peer-b", ["router-c"], 2000)] == list(
        range(1, 1001)
    )


@pytest_twisted.ensureDeferred
async def test_a_relaxed_write_waits_for_the_next_commit_to_go_with(threaded):
    """
    A relaxed write does not wake the writer: the next write that does
    takes it along, in its place, in one transaction.
    """
    store = await threaded.open()
    await three_in_an_outbox(store)
    syncs = commit_syncs(store)
    before = store.executor.commits
    acknowledged = store.acknowledge("peer-b", 2)
    await task.deferLater(reactor, 0, lambda: None)
    assert not acknowledged.called
    assigned = store.assign("peer-b", ["router-c"], 10)
    accepted = store.accept(msg(4))
    counts = await defer.gatherResults([acknowledged, assigned, accepted])
    assert counts[0] == 2
    assert store.executor.commits == before + 1
    assert syncs() == ["FULL"]


@pytest_twisted.ensureDeferred
async def test_a_relaxed_write_alone_is_committed_after_a_short_delay(threaded):
    store = await threaded.open()
    await three_in_an_outbox(store)
    before = store.executor.commits
    assert await store.acknowledge("peer-b", 3) == 3
    assert store.executor.commits == before + 1
    assert store.outbox_depths() == {}


def test_the_threaded_executor_needs_a_real_reactor():
    with pytest.raises(TypeError, match="InlineExecutor"):
        ThreadedExecutor(task.Clock())
