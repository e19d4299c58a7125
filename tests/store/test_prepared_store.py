"""
Tests for the store's prepared (two-phase) transactions
(L{meshroute.store.prepared}, schema version 11) on an inline SQLite
store: what a prepare writes and locks, what a commit and a rollback do
with it (all or nothing), the xids an xid may not take, the committed
xids kept for the duplicate-id window and pruned after it, and recovery
by user.
"""

import pytest
from twisted.internet.task import Clock

from meshroute.store import DuplicateMessage, InlineExecutor, SQLiteStore
from meshroute.store.prepared import DuplicateXid

from support.client_testing import failure_of, result_of
from support.store_testing import ROUTER, msg

XID = (1, "g-1", "b")
WINDOW_S = 60.0
SEND = ("q", b"out", {"k": "v"}, True, "dup-1", 0, False, "")


@pytest.fixture
def clock():
    clock = Clock()
    clock.advance(10_000)
    return clock


@pytest.fixture
def store(tmp_path, clock):
    store = SQLiteStore(str(tmp_path / "store.db"), "normal", InlineExecutor(), router=ROUTER,
                        clock=clock, duplicate_id_window_s=WINDOW_S)
    store.open()
    yield store
    store.close()


def queued(store, *numbers: int) -> list[int]:
    """
    Accept C{m<n>} into local queue q for each of C{numbers}; their entry
    ids.
    """
    for n in numbers:
        result_of(store.accept(msg(n, dest_router=ROUTER)))
    return [entry for entry, _, _ in result_of(store.fetch("q", 0, 100))][-len(numbers):]


def prepared_id(store, xid=XID) -> int:
    kind, prepared, _ = result_of(store.find_xid(xid))
    assert kind == "prepared"
    return prepared


def test_a_prepare_stores_the_sends_as_sent_and_locks_the_entries(store):
    entries = queued(store, 1, 2)
    assert result_of(store.prepare(XID, "app", "tm", [SEND], [entries[0], 999])) is None
    assert store.queue_depths() == {"q": 1}
    assert [m.msg_id for _, m, _ in result_of(store.fetch("q", 0, 10))] == ["m2"]
    assert result_of(store.find_xid(XID)) == ("prepared", prepared_id(store), "app")
    assert result_of(store.prepared_sends(prepared_id(store))) == [SEND]
    # Nothing of the send is accepted yet: its duplicate id is free.
    assert result_of(store.duplicate_of("dup-1")) is None


def test_locked_entries_are_not_swept_when_they_expire(store):
    result_of(store.accept(msg(1, dest_router=ROUTER, headers={"x-expires-ms": "1"})))
    ((entry, _, _),) = result_of(store.fetch("q", 0, 10))
    result_of(store.prepare(XID, None, "tm", [], [entry]))
    assert result_of(store.sweep_expired(2**40, [], 100)) == []


def test_a_commit_accepts_the_sends_deletes_the_locked_entries_and_records_the_xid(store):
    entries = queued(store, 1)
    result_of(store.prepare(XID, None, "tm", [SEND], entries))
    outcomes, consumed, missing = result_of(store.commit_prepared(
        prepared_id(store), XID, None, [(msg(9, dest_router=ROUTER), "dup-1")]))
    assert (outcomes, missing) == ([None], 0)
    assert [(entry, m.msg_id) for entry, m, _ in consumed] == [(entries[0], "m1")]
    assert store.queue_depths() == {"q": 1}
    assert result_of(store.duplicate_of("dup-1")) == "m9"
    assert result_of(store.find_xid(XID)) == ("committed", None, None)
    assert result_of(store.recover(None)) == []


def test_a_commit_checks_duplicate_ids_when_it_accepts(store):
    result_of(store.accept_once(msg(5, dest_router=ROUTER), "dup-1"))
    result_of(store.prepare(XID, None, "tm", [SEND], []))
    outcomes, _, _ = result_of(store.commit_prepared(
        prepared_id(store), XID, None, [(msg(9, dest_router=ROUTER), "dup-1")]))
    assert outcomes == ["m5"]
    assert store.queue_depths() == {"q": 1}


def test_a_commit_that_fails_leaves_it_prepared(store):
    entries = queued(store, 1)
    result_of(store.prepare(XID, None, "tm", [SEND], entries))
    # m1 is held here already: the accept fails, and nothing of the call is done.
    failed = store.commit_prepared(prepared_id(store), XID, None,
                                   [(msg(1, dest_router=ROUTER), "")])
    assert isinstance(failure_of(failed), DuplicateMessage)
    assert result_of(store.recover(None)) == [list(XID)]
    assert store.queue_depths() == {}


def test_a_rollback_puts_the_entries_back_flagged_and_forgets_it(store):
    entries = queued(store, 1, 2)
    result_of(store.prepare(XID, None, "tm", [SEND], entries))
    back, missing = result_of(store.rollback_prepared(prepared_id(store)))
    assert ([entry for entry, _ in back], missing) == (entries, 0)
    assert store.queue_depths() == {"q": 2}
    assert [r for _, _, r in result_of(store.fetch("q", 0, 10))] == [True, True]
    assert result_of(store.find_xid(XID)) is None


def test_entries_gone_from_a_prepared_transaction_are_counted_missing(store, tmp_path):
    import sqlite3

    entries = queued(store, 1, 2)
    result_of(store.prepare(XID, None, "tm", [], entries))
    with sqlite3.connect(store.path) as db:
        db.execute("DELETE FROM messages WHERE id = ?", (entries[0],))
    back, missing = result_of(store.rollback_prepared(prepared_id(store)))
    assert (len(back), missing) == (1, 1)


def test_an_xid_prepared_or_committed_within_the_window_is_taken(store, clock):
    result_of(store.prepare(XID, None, "tm", [], []))
    assert isinstance(failure_of(store.prepare(XID, None, "tm", [], [])), DuplicateXid)
    assert isinstance(failure_of(store.commit([], [], XID)), DuplicateXid)
    result_of(store.commit_prepared(prepared_id(store), XID, None, []))
    assert isinstance(failure_of(store.prepare(XID, None, "tm", [SEND], queued(store, 1))),
                      DuplicateXid)
    # The failed prepare changed nothing.
    assert store.queue_depths() == {"q": 1}
    clock.advance(WINDOW_S + 1)
    assert result_of(store.find_xid(XID)) is None
    assert result_of(store.prepare(XID, None, "tm", [], [])) is None


def test_a_one_phase_commit_records_its_xid(store):
    result_of(store.commit([(msg(1, dest_router=ROUTER), "")], [], XID, "app"))
    assert result_of(store.find_xid(XID)) == ("committed", None, "app")
    assert store.queue_depths() == {"q": 1}


def test_committed_xids_are_pruned_with_the_duplicate_ids(store, clock):
    result_of(store.commit([], [], XID))
    result_of(store.commit([], [], (1, "g-2", "b")))
    assert result_of(store.prune_duplicate_ids()) == 0
    clock.advance(WINDOW_S + 1)
    assert result_of(store.prune_duplicate_ids(limit=1)) == 1
    assert result_of(store.prune_duplicate_ids()) == 1
    assert result_of(store.prune_duplicate_ids()) == 0


def test_recover_lists_a_user_s_transactions_oldest_first(store):
    for n, user in enumerate(["app", "other", "app"]):
        result_of(store.prepare((0, f"g-{n}", ""), user, "tm", [], []))
    assert result_of(store.recover("app")) == [[0, "g-0", ""], [0, "g-2", ""]]
    assert result_of(store.recover(None)) == [[0, "g-0", ""], [0, "g-1", ""], [0, "g-2", ""]]


def test_the_transactions_in_doubt_are_counted_across_a_reopening(store, clock, tmp_path):
    for n in range(3):
        result_of(store.prepare((0, f"g-{n}", ""), None, "tm", [], []))
    result_of(store.commit_prepared(prepared_id(store, (0, "g-0", "")), (0, "g-0", ""), None, []))
    result_of(store.rollback_prepared(prepared_id(store, (0, "g-1", ""))))
    assert store.prepared_count() == 1
    result_of(store.close())
    again = SQLiteStore(store.path, "normal", InlineExecutor(), router=ROUTER, clock=clock)
    result_of(again.open())
    try:
        assert again.prepared_count() == 1
    finally:
        again.close()
