"""
The turn executor (L{meshroute.store.turn_executor}): group commit at the
end of each reactor turn, on a L{task.Clock}.
"""

import socket
import sqlite3

import pytest_twisted
from twisted.internet import task
from twisted.internet.defer import Deferred

from meshroute.store import ExecutorStopped, SQLiteStore, TurnExecutor
from meshroute.store.transactions import RELAXED_DELAY_S
from support.store_testing import ROUTER, msg


def test_the_turn_executor_commits_a_turns_submissions_once_when_it_ends(tmp_path):
    """
    Everything submitted in one turn shares one transaction, run when the
    turn ends (C{callLater(0)}), and fires then, in order; what the
    callbacks submit goes into the next turn's transaction.
    """
    clock = task.Clock()
    store = SQLiteStore(str(tmp_path / "s.db"), executor=TurnExecutor(clock), router=ROUTER)
    assert store.open().called
    clock.advance(0)
    before = store.executor.commits
    fired = []
    accepted = [store.accept(msg(n)) for n in range(3)]
    for n, d in enumerate(accepted):
        d.addCallback(lambda _, n=n: fired.append(n))
    accepted[0].addCallback(lambda _: store.accept(msg(3)).addCallback(
        lambda _: fired.append(3)))
    assert fired == [] and store.executor.commits == before
    # (task.Clock runs at once a call scheduled for now by a call it runs.)
    clock.advance(0)
    assert fired == [0, 1, 2, 3]
    assert store.executor.commits == before + 2
    assert store.close().called


def test_the_turn_executor_lets_relaxed_work_wait_for_other_work(tmp_path):
    """
    A relaxed function alone waits up to RELAXED_DELAY_S; one that is not
    relaxed takes it along at the end of its turn.
    """
    clock = task.Clock()
    store = SQLiteStore(str(tmp_path / "s.db"), executor=TurnExecutor(clock), router=ROUTER)
    store.open()
    clock.advance(0)
    for n in (1, 2):
        store.accept(msg(n, dest_router=ROUTER))
    rows = []
    store.fetch("q", 0, 10).addCallback(rows.extend)
    clock.advance(0)
    (first, _, _), (second, _, _) = rows
    before = store.executor.commits
    consumed = store.consume([first])
    clock.advance(0)
    assert not consumed.called
    clock.advance(RELAXED_DELAY_S)
    assert consumed.called and store.executor.commits == before + 1
    consumed = store.consume([second])
    accepted = store.accept(msg(3))
    clock.advance(0)
    assert consumed.called and accepted.called
    assert store.executor.commits == before + 2
    assert store.close().called


def test_the_turn_executor_runs_what_is_queued_when_it_stops(tmp_path):
    clock = task.Clock()
    store = SQLiteStore(str(tmp_path / "s.db"), executor=TurnExecutor(clock), router=ROUTER)
    store.open()
    clock.advance(0)
    accepted = store.accept(msg(1))
    assert store.close().called
    assert accepted.called
    assert clock.getDelayedCalls() == []
    failed = store.accept(msg(2))
    assert failed.called
    failed.addErrback(lambda f: f.trap(ExecutorStopped))


def test_a_guard_that_raises_fails_the_whole_batch_and_writes_nothing(tmp_path):
    """
    The executor checks its guard (a shared-store instance's lock) before
    each batch: when it raises, every submission of the batch fails with
    its error and nothing of the batch is written; when it passes again,
    work runs again.
    """
    clock = task.Clock()
    lost = []

    def guard():
        if lost:
            raise RuntimeError("the lock is gone")

    store = SQLiteStore(str(tmp_path / "s.db"), executor=TurnExecutor(clock, guard=guard),
                        router=ROUTER)
    assert store.open().called
    clock.advance(0)
    lost.append(True)
    refused = [store.accept(msg(n)) for n in range(2)]
    clock.advance(0)
    errors = []
    for d in refused:
        d.addErrback(lambda f: errors.append(f.getErrorMessage()))
    assert errors == ["the lock is gone"] * 2
    lost.clear()
    accepted = store.accept(msg(5))
    clock.advance(0)
    assert accepted.called
    assert store.close().called
    with sqlite3.connect(str(tmp_path / "s.db")) as connection:
        assert connection.execute("SELECT msg_id FROM messages").fetchall() == [("m5",)]


@pytest_twisted.ensureDeferred
async def test_a_turns_writes_reach_the_socket_before_its_commit(tmp_path):
    """
    On the real reactor, what a turn that read input writes to a transport
    is sent before the turn's transaction runs: an origin's early send
    leaves while its commit is in flight, not after it.  (A transport's
    write only buffers, and the reactor sends when it next polls; with
    the transaction scheduled by one C{callLater(0)} it ran before that
    poll.)
    """
    from twisted.internet import reactor
    from twisted.internet.endpoints import serverFromString
    from twisted.internet.protocol import Factory, Protocol

    store = SQLiteStore(str(tmp_path / "s.db"), executor=TurnExecutor(reactor), router=ROUTER)
    await store.open()
    seen_in_commit = []
    committed = Deferred()

    def in_commit(connection):
        try:
            seen_in_commit.append(peer.recv(16))
        except BlockingIOError:
            seen_in_commit.append(b"")

    class Forwarding(Protocol):
        def dataReceived(self, data):
            # What an origin does with a send: write it on, accept it.
            self.transport.write(b"early")
            store.executor.submit(in_commit).chainDeferred(committed)

    port = await serverFromString(reactor, "tcp:0:interface=127.0.0.1").listen(
        Factory.forProtocol(Forwarding))
    peer = socket.create_connection(("127.0.0.1", port.getHost().port))
    try:
        peer.setblocking(False)
        peer.send(b"send")
        await committed
        assert seen_in_commit == [b"early"]
    finally:
        await store.close()
        peer.close()
        await port.stopListening()
