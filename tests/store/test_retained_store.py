"""
The store's retained topic messages (schema 14): the newest of each
topic kept whatever order saves come in, expired ones deleted, kept
across a reopen and an upgrade from schema 13; saved in the fan-out's
transaction, and given to a durable subscription in the transaction
that records it.
"""

import sqlite3

import pytest
from twisted.internet.task import Clock

from meshroute.messages import Message
from meshroute.store import InlineExecutor, SQLiteStore
from meshroute.store.topics import CREATED, EXISTING
from meshroute.topics.retained import RetainedEntry

from support.client_testing import result_of
from support.store_testing import LATEST_SCHEMA, ROUTER, msg, rewind_schema

QUEUE = "$durable:app:sub"
NOW_S = 10_000


def entry(topic: str, stamp: int, body: bytes = b"x", origin: str = "router-b",
          expires_at_ms: int = 0) -> RetainedEntry:
    return RetainedEntry(topic, stamp, origin, f"pub-{topic}-{stamp}", body,
                         {"x-topic": topic, "x-retain": "true"}, True, expires_at_ms)


def opened(path) -> SQLiteStore:
    clock = Clock()
    clock.advance(NOW_S)
    store = SQLiteStore(str(path), "normal", InlineExecutor(), router=ROUTER, clock=clock)
    store.open()
    return store


@pytest.fixture
def store(tmp_path):
    store = opened(tmp_path / "store.db")
    yield store
    store.close()


def test_the_newest_of_each_topic_is_kept_whatever_the_order_of_saves(store):
    result_of(store.save_retained([entry("a", 2, b"two"), entry("b", 1)]))
    result_of(store.save_retained([entry("a", 1, b"one")]))
    result_of(store.save_retained([entry("a", 2, b"same stamp", origin="router-a")]))
    saved = {e.topic: e for e in result_of(store.retained_messages())}
    assert saved["a"].body == b"two" and saved["a"].origin == "router-b"
    assert saved["a"].headers == {"x-topic": "a", "x-retain": "true"}
    result_of(store.save_retained([entry("a", 3, b"")]))
    assert [(e.topic, e.body) for e in result_of(store.retained_messages())] == [
        ("a", b""), ("b", b"x")]


def test_expired_entries_are_not_read_and_are_deleted_by_the_next_save(store):
    now_ms = NOW_S * 1000
    result_of(store.save_retained([entry("gone", 1, expires_at_ms=now_ms - 1),
                                   entry("kept", 1, expires_at_ms=now_ms + 1000)]))
    assert [e.topic for e in result_of(store.retained_messages())] == ["kept"]
    result_of(store.save_retained([]))
    with sqlite3.connect(store.path) as connection:
        assert connection.execute("SELECT topic FROM retained_messages").fetchall() == [
            ("kept",)]


def test_they_are_kept_across_a_reopen_and_an_upgrade_from_13(tmp_path):
    path = tmp_path / "store.db"
    store = opened(path)
    store.close()
    with sqlite3.connect(path) as connection:
        rewind_schema(connection, 13)
    store = opened(path)
    try:
        assert store.applied_versions == list(range(14, LATEST_SCHEMA + 1))
        result_of(store.save_retained([entry("t", 5, b"kept")]))
    finally:
        store.close()
    store = opened(path)
    try:
        [saved] = result_of(store.retained_messages())
        assert (saved.topic, saved.stamp, saved.body) == ("t", 5, b"kept")
    finally:
        store.close()


def test_the_fan_out_saves_them_with_its_copies_in_one_transaction(store):
    result_of(store.accept(msg(1, dest_router=ROUTER, dest_queue="$topic")))
    [(entry_id, _, _)] = result_of(store.fetch("$topic", 0, 10))
    onward = msg(2, dest_router="router-c", dest_queue="$topic")
    assert result_of(store.place_copies([onward], [entry_id], [entry("t", 1)])) == [onward]
    assert [e.topic for e in result_of(store.retained_messages())] == ["t"]
    assert result_of(store.fetch("$topic", 0, 10)) == []


def copy(n: int, msg_id: str | None = None) -> Message:
    return Message(msg_id or f"pub{n}/{QUEUE}@{ROUTER}", "router-b", ROUTER, QUEUE,
                   b"retained %d" % n, {"x-retained": "true"}, accepted_at=1.0)


def test_a_durable_subscription_is_given_its_copies_in_the_transaction_recording_it(store):
    copies = [copy(1), copy(2)]
    what, deleted, placed = result_of(store.record_subscription(
        QUEUE, "app", "sub", "t.#", False, None, copies))
    assert (what, deleted, placed) == (CREATED, 0, copies)
    assert store.queue_depths()[QUEUE] == 2
    # The live copy of one of them, coming second, is left out.
    assert result_of(store.place_copies([copy(1)], [])) == []
    # if-new: an existing subscription is given none.
    again = [copy(3)]
    assert result_of(store.record_subscription(
        QUEUE, "app", "sub", "t.#", False, None, again, if_new=True)) == (EXISTING, 0, [])
    assert result_of(store.record_subscription(
        QUEUE, "app", "sub", "t.#", False, None, again)) == (EXISTING, 0, again)
    bodies = [message.body for _, message, _ in result_of(store.fetch(QUEUE, 0, 10))]
    assert bodies == [b"retained 1", b"retained 2", b"retained 3"]
