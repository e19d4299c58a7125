"""
Tests for the store's side of topics (L{meshroute.store.topics}, schema
version 12) on an inline SQLite store: durable subscriptions recorded,
replaced with their entries when their pattern changes, forgotten with
their entries, kept across a reopen; the fan-out's copies placed with
the deletion of what they copy, a copy already held or enqueued left
out.
"""

import dataclasses

import pytest
from twisted.internet.task import Clock

from meshroute.store import InlineExecutor, SQLiteStore
from meshroute.store.topics import CREATED, EXISTING, REPLACED

from support.client_testing import result_of
from support.store_testing import ROUTER, msg

QUEUE = "$durable:app:sub"


@pytest.fixture
def store(tmp_path):
    clock = Clock()
    clock.advance(10_000)
    store = SQLiteStore(str(tmp_path / "store.db"), "normal", InlineExecutor(), router=ROUTER,
                        clock=clock)
    store.open()
    yield store
    store.close()


def held(store, *numbers: int, queue: str = QUEUE) -> None:
    for n in numbers:
        result_of(store.accept(msg(n, dest_router=ROUTER, dest_queue=queue)))


def opened(path) -> SQLiteStore:
    store = SQLiteStore(str(path), "normal", InlineExecutor(), router=ROUTER, clock=Clock())
    store.open()
    return store


def test_a_durable_subscription_is_recorded_and_kept_across_a_reopen(tmp_path):
    store = opened(tmp_path / "store.db")
    assert result_of(store.record_subscription(QUEUE, "app", "sub", "t.#", False, "alice")) \
        == (CREATED, 0, [])
    assert result_of(store.record_subscription(QUEUE, "app", "sub", "t.#", True, "alice")) \
        == (EXISTING, 0, [])
    store.close()
    again = opened(tmp_path / "store.db")
    try:
        [row] = result_of(again.durable_subscriptions())
        assert row[:6] == (QUEUE, "app", "sub", "t.#", True, "alice")
    finally:
        again.close()


def test_another_pattern_replaces_it_and_deletes_what_it_held(store):
    result_of(store.record_subscription(QUEUE, "app", "sub", "t.#", False, None))
    held(store, 1, 2)
    held(store, 3, queue="other")
    assert store.queue_depths()[QUEUE] == 2
    assert result_of(store.record_subscription(QUEUE, "app", "sub", "u.*", False, None)) \
        == (REPLACED, 2, [])
    assert QUEUE not in store.queue_depths() and store.queue_depths()["other"] == 1
    [row] = result_of(store.durable_subscriptions())
    assert row[3] == "u.*"


def test_forgetting_it_deletes_what_it_held(store):
    result_of(store.record_subscription(QUEUE, "app", "sub", "t.#", False, None))
    held(store, 1, 2, 3)
    assert result_of(store.forget_subscription(QUEUE)) == 3
    assert result_of(store.durable_subscriptions()) == []
    assert QUEUE not in store.queue_depths()
    assert result_of(store.forget_subscription(QUEUE)) == 0


def test_copies_are_placed_with_the_deletion_of_what_they_copy(store):
    result_of(store.record_subscription(QUEUE, "app", "sub", "t.#", False, None))
    held(store, 1, queue="$topic")
    [(entry, _, _)] = result_of(store.fetch("$topic", 0, 10))
    local = msg(2, dest_router=ROUTER, dest_queue=QUEUE)
    onward = msg(3, dest_router="router-c", dest_queue="$topic")
    placed = result_of(store.place_copies([local, onward], [entry]))
    assert placed == [local, onward]
    assert store.queue_depths() == {QUEUE: 1}
    assert store.backlog_depths() == {"router-c": 1}
    # The same copies again (a publication fanned out twice): left out.
    held(store, 4, queue="$topic")
    [(entry, _, _)] = result_of(store.fetch("$topic", 0, 10))
    again = dataclasses.replace(local, body=b"again")
    new = msg(5, dest_router=ROUTER, dest_queue=QUEUE)
    assert result_of(store.place_copies([again, onward, new], [entry])) == [new]
    assert store.queue_depths() == {QUEUE: 2}
    assert store.backlog_depths() == {"router-c": 1}


def test_a_copy_enqueued_before_and_consumed_is_still_left_out(store):
    result_of(store.record_subscription(QUEUE, "app", "sub", "t.#", False, None))
    local = msg(2, dest_router=ROUTER, dest_queue=QUEUE)
    assert result_of(store.place_copies([local], [])) == [local]
    [(entry, _, _)] = result_of(store.fetch(QUEUE, 0, 10))
    result_of(store.consume([entry]))
    assert result_of(store.place_copies([local], [])) == []
    assert store.queue_depths() == {}


def test_a_copy_for_a_subscription_forgotten_since_it_was_made_is_left_out(store):
    result_of(store.record_subscription(QUEUE, "app", "sub", "t.#", False, None))
    result_of(store.forget_subscription(QUEUE))
    assert result_of(store.place_copies([msg(2, dest_router=ROUTER, dest_queue=QUEUE)], [])) \
        == []
    assert store.queue_depths() == {}
