"""
The SQLite store against L{IMessageStore}'s contract, through the three
executors: L{InlineExecutor} (everything fires at once),
L{ThreadedExecutor} (the writer thread with group commit) and
L{TurnExecutor} (group commit at the end of the reactor turn), the last
two on the real reactor run by pytest-twisted.

Grouping is made deterministic without sleeping: a first submitted
function blocks the writer thread on a L{threading.Event} until the test
has queued everything it wants in one transaction.  How the executors
run the store's SQL is tested beside them: C{test_transactions.py} and
one file per executor.
"""

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
from dataclasses import replace
from pathlib import Path

import pytest
import pytest_twisted
from twisted.internet import defer, task
from zope.interface.verify import verifyObject

from meshroute.errors import MeshrouteError
from meshroute.interfaces import IMessageStore
from meshroute.messages import DEAD_LETTER_QUEUE
from meshroute.store import (
    DEAD_LETTER_ADDRESS,
    DEAD_LETTER_REASON,
    SYNC_MODES,
    DuplicateMessage,
    MissingTransfer,
    ExecutorStopped,
    InlineExecutor,
    SQLiteStore,
    StoreError,
)
from meshroute.store.database import migrations
from support.store_testing import (  # noqa: F401 (fixtures)
    ROUTER,
    msg,
    ids,
    opener,
    store,
    threaded,
    hold_writer,
)

ROOT = Path(__file__).resolve().parents[2]
# The contract, method by method.


@pytest_twisted.ensureDeferred
async def test_provides_the_interface(store):
    assert verifyObject(IMessageStore, store)
    assert SYNC_MODES == ("full", "normal")
    assert issubclass(DuplicateMessage, MeshrouteError)


@pytest_twisted.ensureDeferred
async def test_accept_puts_remote_messages_in_the_backlog_and_local_ones_in_their_queue(store):
    assert await store.accept(msg(1)) is None
    await store.accept(msg(2, dest_router="router-b"))
    await store.accept(msg(3, dest_router=ROUTER, dest_queue="orders"))
    assert store.backlog_depths() == {"router-c": 1, "router-b": 1}
    assert store.queue_depths() == {"orders": 1}
    [(entry, message, redelivered)] = await store.fetch("orders", 0, 10)
    assert message == msg(3, dest_router=ROUTER, dest_queue="orders")
    assert redelivered is False
    assert await store.fetch("q", 0, 10) == []


@pytest_twisted.ensureDeferred
async def test_messages_come_back_whole(store):
    sent = msg(1, headers={"k": "v", "n": [1, 2]}, hops=3)
    await store.accept(sent)
    [(seq, message)] = await store.assign("peer-b", ["router-c"], 10)
    assert message == sent


@pytest_twisted.ensureDeferred
async def test_accept_refuses_an_id_held_here(store):
    await store.accept(msg(1))
    await store.accept(msg(2, dest_router=ROUTER))
    with pytest.raises(DuplicateMessage) as raised:
        await store.accept(msg(1))
    assert raised.value.msg_id == "m1"
    with pytest.raises(DuplicateMessage):
        await store.accept(msg(2, dest_router=ROUTER))
    # Held in the backlog, offered for a local queue (and vice versa).
    with pytest.raises(DuplicateMessage):
        await store.accept(msg(1, dest_router=ROUTER))
    with pytest.raises(DuplicateMessage):
        await store.accept(msg(2))
    assert store.backlog_depths() == {"router-c": 1}
    assert store.queue_depths() == {"q": 1}


@pytest_twisted.ensureDeferred
async def test_accept_refuses_an_id_already_enqueued_and_consumed_here(store):
    await store.accept(msg(1, dest_router=ROUTER))
    [(entry, _, _)] = await store.fetch("q", 0, 10)
    await store.consume([entry])
    assert store.queue_depths() == {}
    with pytest.raises(DuplicateMessage):
        await store.accept(msg(1, dest_router=ROUTER))
    with pytest.raises(DuplicateMessage):
        await store.accept(msg(1))
    assert store.queue_depths() == {} and store.backlog_depths() == {}


@pytest_twisted.ensureDeferred
async def test_receive_stores_and_records_the_seq(store):
    assert store.last_received("peer-b") == 0
    assert await store.receive("peer-b", 1, msg(1), False) == "stored"
    assert await store.receive("peer-b", 2, msg(2, dest_router=ROUTER), True) == "stored"
    assert store.last_received("peer-b") == 2
    assert store.last_received("peer-c") == 0
    assert store.backlog_depths() == {"router-c": 1}
    assert store.queue_depths() == {"q": 1}


@pytest_twisted.ensureDeferred
async def test_receive_of_an_old_seq_changes_nothing(store):
    await store.receive("peer-b", 5, msg(1), False)
    assert await store.receive("peer-b", 5, msg(2), False) == "duplicate-seq"
    assert await store.receive("peer-b", 3, msg(3, dest_router=ROUTER), True) == "duplicate-seq"
    assert store.last_received("peer-b") == 5
    assert store.backlog_depths() == {"router-c": 1}
    assert store.queue_depths() == {}
    # Sequences are per peer.
    assert await store.receive("peer-c", 1, msg(4), False) == "stored"


@pytest_twisted.ensureDeferred
async def test_receive_of_a_held_id_records_the_seq_and_drops_the_copy(store):
    await store.accept(msg(1))
    await store.receive("peer-b", 1, msg(2, dest_router=ROUTER), True)
    assert await store.receive("peer-b", 2, msg(1), False) == "duplicate-id"
    assert store.last_received("peer-b") == 2
    assert await store.receive("peer-c", 7, msg(2, dest_router=ROUTER), True) == "duplicate-id"
    assert store.last_received("peer-c") == 7
    # Held in the backlog, arriving for a local queue: still a duplicate.
    assert await store.receive("peer-c", 8, msg(1, dest_router=ROUTER), True) == "duplicate-id"
    assert store.backlog_depths() == {"router-c": 1}
    assert store.queue_depths() == {"q": 1}


@pytest_twisted.ensureDeferred
async def test_receive_local_of_an_id_already_enqueued_is_a_duplicate_and_advances_the_seq(store):
    await store.receive("peer-b", 1, msg(1, dest_router=ROUTER), True)
    [(entry, _, _)] = await store.fetch("q", 0, 10)
    await store.consume([entry])
    # The same message again, over another link after a reroute.
    assert await store.receive("peer-c", 4, msg(1, dest_router=ROUTER), True) == "duplicate-id"
    assert store.last_received("peer-c") == 4
    assert store.queue_depths() == {}
    assert await store.fetch("q", 0, 10) == []
    # ...and it is still a duplicate after the first copy's record: the
    # held check undid nothing it should not have.
    assert await store.receive("peer-b", 2, msg(1, dest_router=ROUTER), True) == "duplicate-id"
    # Forwarding it on is refused too.
    assert await store.receive("peer-b", 3, msg(1), False) == "duplicate-id"
    assert store.backlog_depths() == {}


@pytest_twisted.ensureDeferred
async def test_assign_moves_the_oldest_backlog_messages_with_the_next_seqs(store):
    for n in range(1, 8):
        await store.accept(msg(n, dest_router="router-c" if n % 3 else "router-d"))
    # m3 and m6 are for router-d.
    first = await store.assign("peer-b", ["router-c"], 3)
    assert [seq for seq, _ in first] == [1, 2, 3]
    assert ids(first) == ["m1", "m2", "m4"]
    assert store.backlog_depths() == {"router-c": 2, "router-d": 2}
    second = await store.assign("peer-b", ["router-c", "router-d", "router-x"], 10)
    assert [seq for seq, _ in second] == [4, 5, 6, 7]
    assert ids(second) == ["m3", "m5", "m6", "m7"]
    assert store.backlog_depths() == {}
    assert await store.assign("peer-b", ["router-c"], 10) == []
    # Another peer has its own sequence.
    await store.accept(msg(8))
    assert [seq for seq, _ in await store.assign("peer-c", ["router-c"], 10)] == [1]


@pytest_twisted.ensureDeferred
async def test_assign_takes_the_oldest_across_destinations_up_to_the_limit(store):
    for n, dest in enumerate(["router-d", "router-c", "router-d", "router-c", "router-e"]):
        await store.accept(msg(n, dest_router=dest))
    assigned = await store.assign("peer-b", {"router-c", "router-d", "router-e"}, 3)
    assert ids(assigned) == ["m0", "m1", "m2"]
    assert await store.assign("peer-b", ["router-c"], 0) == []
    assert store.backlog_depths() == {"router-c": 1, "router-e": 1}


@pytest_twisted.ensureDeferred
async def test_assign_stops_at_max_bytes_but_always_takes_one(store):
    for n, size in enumerate([300, 300, 500, 100]):
        await store.accept(replace(msg(n), body=b"x" * size))
    assert ids(await store.assign("peer-b", ["router-c"], 10, max_bytes=700)) == ["m0", "m1"]
    # The next alone is larger than the room: it moves all the same.
    assert ids(await store.assign("peer-b", ["router-c"], 10, max_bytes=10)) == ["m2"]
    assert ids(await store.assign("peer-b", ["router-c"], 10, max_bytes=100)) == ["m3"]
    assert store.backlog_depths() == {}
    assert store.outbox_depths() == {"peer-b": {"router-c": 4}}


@pytest_twisted.ensureDeferred
async def test_outbox_replays_above_a_seq_in_seq_order(store):
    for n in range(1, 6):
        await store.accept(msg(n))
    await store.assign("peer-b", ["router-c"], 2)
    await store.assign("peer-b", ["router-c"], 3)
    everything = await store.outbox("peer-b", 0)
    assert [seq for seq, _ in everything] == [1, 2, 3, 4, 5]
    assert ids(everything) == ["m1", "m2", "m3", "m4", "m5"]
    assert [seq for seq, _ in await store.outbox("peer-b", 3)] == [4, 5]
    assert await store.outbox("peer-b", 5) == []
    assert await store.outbox("peer-c", 0) == []


@pytest_twisted.ensureDeferred
async def test_acknowledge_drops_only_up_to_the_seq_for_that_peer(store):
    for n in range(1, 7):
        await store.accept(msg(n))
    await store.assign("peer-b", ["router-c"], 3)
    await store.assign("peer-c", ["router-c"], 3)
    assert await store.acknowledge("peer-b", 2) == 2
    assert [seq for seq, _ in await store.outbox("peer-b", 0)] == [3]
    assert [seq for seq, _ in await store.outbox("peer-c", 0)] == [1, 2, 3]
    assert await store.acknowledge("peer-b", 2) == 0
    assert await store.acknowledge("peer-b", 10) == 1
    assert await store.outbox("peer-b", 0) == []
    assert store.backlog_depths() == {}


@pytest_twisted.ensureDeferred
async def test_return_outbox_puts_messages_back_in_order_before_newer_ones(store):
    for n in range(1, 5):
        await store.accept(msg(n))
    await store.assign("peer-b", ["router-c"], 3)
    await store.acknowledge("peer-b", 1)
    assert await store.return_outbox("peer-b") == 2
    assert await store.outbox("peer-b", 0) == []
    assert store.backlog_depths() == {"router-c": 3}
    await store.accept(msg(5))
    rerouted = await store.assign("peer-c", ["router-c"], 10)
    assert ids(rerouted) == ["m2", "m3", "m4", "m5"]
    assert [seq for seq, _ in rerouted] == [1, 2, 3, 4]
    assert await store.return_outbox("peer-b") == 0
    # peer-b's sequence is not reused.
    await store.accept(msg(6))
    assert [seq for seq, _ in await store.assign("peer-b", ["router-c"], 10)] == [4]


@pytest_twisted.ensureDeferred
async def test_fetch_pages_a_queue_oldest_first(store):
    for n in range(1, 6):
        await store.accept(msg(n, dest_router=ROUTER, dest_queue="q" if n != 3 else "other"))
    page = await store.fetch("q", 0, 2)
    assert ids(page) == ["m1", "m2"]
    entries = [entry for entry, _, _ in page]
    assert entries == sorted(entries)
    rest = await store.fetch("q", entries[-1], 10)
    assert ids(rest) == ["m4", "m5"]
    assert ids(await store.fetch("other", 0, 10)) == ["m3"]
    assert store.queue_depths() == {"q": 4, "other": 1}


@pytest_twisted.ensureDeferred
async def test_consume_deletes_entries_and_mark_redelivered_flags_them(store):
    for n in range(1, 5):
        await store.accept(msg(n, dest_router=ROUTER))
    entries = [entry for entry, _, _ in await store.fetch("q", 0, 10)]
    assert await store.mark_redelivered(entries[1:3]) == 2
    fetched = await store.fetch("q", 0, 10)
    assert [redelivered for _, _, redelivered in fetched] == [False, True, True, False]
    assert await store.consume([entries[0], entries[2], 999_999]) == 2
    assert store.queue_depths() == {"q": 2}
    assert [(e, r) for e, _, r in await store.fetch("q", 0, 10)] == [
        (entries[1], True),
        (entries[3], False),
    ]
    assert await store.consume(entries) == 2
    assert store.queue_depths() == {}
    assert await store.mark_redelivered(entries) == 0


@pytest_twisted.ensureDeferred
async def test_fetch_flags_the_first_unflagged_entries_it_is_asked_to(store):
    """
    C{fetch(..., mark=n)} flags the first C{n} entries it reads that are
    not flagged yet, in its own transaction; its rows show the flags as
    they were.
    """
    for n in range(1, 6):
        await store.accept(msg(n, dest_router=ROUTER))
    entries = [entry for entry, _, _ in await store.fetch("q", 0, 10)]
    await store.mark_redelivered(entries[:1])
    commits = store.executor.commits
    fetched = await store.fetch("q", 0, 4, mark=2)
    assert store.executor.commits == commits + 1
    assert [(e, r) for e, _, r in fetched] == [
        (entries[0], True), (entries[1], False), (entries[2], False), (entries[3], False)]
    assert [r for _, _, r in await store.fetch("q", 0, 10)] == [True, True, True, False, False]


@pytest_twisted.ensureDeferred
async def test_an_assign_submitted_behind_an_accept_takes_it_in_one_commit(threaded):
    """
    What the engine does at the origin: the accept and the link's assign,
    submitted in the same turn, are one group commit (one fsync), and
    the assign takes the message the accept stores.
    """
    store = await threaded.open()
    go, held = hold_writer(store)
    accepted = store.accept(msg(1))
    assigned = store.assign("peer-b", ["router-c"], 10)
    before = store.executor.commits
    go.set()
    _, _, taken = await defer.gatherResults([held, accepted, assigned])
    # The accept's with the assign (the hold ran alone).
    assert store.executor.commits == before + 1
    assert [(seq, m.msg_id) for seq, m in taken] == [(1, "m1")]
    assert store.backlog_depths() == {}
    assert store.outbox_depths() == {"peer-b": {"router-c": 1}}


@pytest_twisted.ensureDeferred
async def test_entry_ids_are_never_reused(opener):
    store = await opener.open()
    await store.accept(msg(1, dest_router=ROUTER))
    [(first, _, _)] = await store.fetch("q", 0, 10)
    await store.consume([first])
    await store.accept(msg(2, dest_router=ROUTER))
    [(second, _, _)] = await store.fetch("q", 0, 10)
    assert second > first
    await store.consume([second])
    store = await opener.reopen(store)
    await store.accept(msg(3, dest_router=ROUTER))
    [(third, _, _)] = await store.fetch("q", second, 10)
    assert third > second


@pytest_twisted.ensureDeferred
async def test_dead_letter_stores_in_the_dead_letter_queue_with_the_reason(store):
    await store.accept(msg(0, dest_router=ROUTER, dest_queue=DEAD_LETTER_QUEUE))
    assert await store.dead_letter(msg(1, headers={"k": 1}, hops=17), "max-hops") is None
    assert store.queue_depths() == {DEAD_LETTER_QUEUE: 2}
    [_, (entry, message, redelivered)] = await store.fetch(DEAD_LETTER_QUEUE, 0, 10)
    assert message.msg_id == "m1"
    assert message.dest_queue == DEAD_LETTER_QUEUE
    assert message.dest_router == ROUTER
    assert message.hops == 17
    assert message.body == b"body 1"
    assert message.headers == {
        "k": 1,
        DEAD_LETTER_REASON: "max-hops",
        DEAD_LETTER_ADDRESS: "q@router-c",
    }
    # A later copy is a duplicate: it reached its resting place here.
    assert await store.receive("peer-b", 1, msg(1), False) == "duplicate-id"


@pytest_twisted.ensureDeferred
async def test_dead_letter_of_a_held_message_moves_it(store):
    await store.accept(msg(1))
    await store.accept(msg(2, dest_router=ROUTER))
    await store.accept(msg(3, dest_router=ROUTER, dest_queue=DEAD_LETTER_QUEUE))
    await store.dead_letter(msg(1), "max-hops")
    assert store.backlog_depths() == {}
    await store.dead_letter(msg(2, dest_router=ROUTER), "poison")
    assert store.queue_depths() == {DEAD_LETTER_QUEUE: 3}
    # Already there: nothing changes.
    await store.dead_letter(msg(2, dest_router=ROUTER), "poison")
    assert store.queue_depths() == {DEAD_LETTER_QUEUE: 3}
    dead = await store.fetch(DEAD_LETTER_QUEUE, 0, 10)
    # Moved entries are the newest of the dead-letter queue.
    assert ids(dead) == ["m3", "m1", "m2"]
    assert [m.headers.get(DEAD_LETTER_REASON) for _, m, _ in dead] == [None, "max-hops", "poison"]
    assert await store.fetch("q", 0, 10) == []


@pytest_twisted.ensureDeferred
async def test_outbox_peers_lists_the_peers_with_unacknowledged_messages(opener):
    store = await opener.open()
    for n in range(1, 6):
        await store.accept(msg(n))
    assert store.outbox_peers() == []
    await store.assign("peer-c", ["router-c"], 2)
    await store.assign("peer-b", ["router-c"], 2)
    assert store.outbox_peers() == ["peer-b", "peer-c"]
    await store.acknowledge("peer-c", 1)
    assert store.outbox_peers() == ["peer-b", "peer-c"]
    await store.acknowledge("peer-c", 2)
    assert store.outbox_peers() == ["peer-b"]
    store = await opener.reopen(store)
    assert store.outbox_peers() == ["peer-b"]
    await store.return_outbox("peer-b")
    assert store.outbox_peers() == []
    [(_, message)] = await store.assign("peer-d", ["router-c"], 1)
    assert store.outbox_peers() == ["peer-d"]
    await store.dead_letter(message, "poison")
    assert store.outbox_peers() == []


@pytest_twisted.ensureDeferred
async def test_a_reserved_block_is_never_numbered_again_even_after_a_reopen(opener):
    """
    reserve_seqs hands out a block of link sequence numbers; assigns, and
    blocks reserved later, number above it, also once the store is
    reopened (a restart after a crash that lost early sends' commits).
    """
    store = await opener.open()
    assert await store.reserve_seqs("peer-b", 100) == 1
    await store.accept(msg(1))
    assert [seq for seq, _ in await store.assign("peer-b", ["router-c"], 10)] == [101]
    assert await store.reserve_seqs("peer-b", 100) == 102
    store = await opener.reopen(store)
    await store.accept(msg(2))
    assert [seq for seq, _ in await store.assign("peer-b", ["router-c"], 10)] == [202]
    # Each peer has its own numbers.
    assert await store.reserve_seqs("peer-c", 10) == 1


@pytest_twisted.ensureDeferred
async def test_accept_to_outbox_puts_sends_in_the_outbox_with_their_numbers(opener):
    """
    Early sends are accepted straight into the peer's outbox with the
    numbers they left with: the outbox counts them, replays them, and an
    acknowledgement deletes them, as for assigned ones; a message id
    already held refuses the whole call.
    """
    store = await opener.open()
    first = await store.reserve_seqs("peer-b", 10)
    await store.accept_to_outbox("peer-b", [(first, msg(1)), (first + 1, msg(2))])
    assert store.backlog_depths() == {}
    assert store.outbox_depths() == {"peer-b": {"router-c": 2}}
    store = await opener.reopen(store)
    assert store.outbox_depths() == {"peer-b": {"router-c": 2}}
    assert [(seq, m.msg_id) for seq, m in await store.outbox("peer-b", 0)] == [
        (first, "m1"), (first + 1, "m2")]
    with pytest.raises(DuplicateMessage):
        await store.accept_to_outbox("peer-b", [(first + 2, msg(3)), (first + 3, msg(1))])
    assert store.outbox_depths() == {"peer-b": {"router-c": 2}}
    assert await store.acknowledge("peer-b", first + 1) == 2
    assert store.outbox_depths() == {}


@pytest_twisted.ensureDeferred
async def test_outbox_depths_count_each_peers_messages_per_destination(opener):
    store = await opener.open()
    for n in range(1, 4):
        await store.accept(msg(n))
    await store.accept(msg(4, dest_router="router-d"))
    await store.assign("peer-b", ["router-c", "router-d"], 3)
    await store.assign("peer-e", ["router-d"], 1)
    assert store.outbox_depths() == {"peer-b": {"router-c": 3}, "peer-e": {"router-d": 1}}
    assert await store.acknowledge("peer-b", 2) == 2
    assert store.outbox_depths() == {"peer-b": {"router-c": 1}, "peer-e": {"router-d": 1}}
    store = await opener.reopen(store)
    assert store.outbox_depths() == {"peer-b": {"router-c": 1}, "peer-e": {"router-d": 1}}
    await store.return_outbox("peer-e")
    assert store.outbox_depths() == {"peer-b": {"router-c": 1}}
    [(_, message)] = await store.outbox("peer-b", 0)
    await store.dead_letter(message, "poison")
    assert store.outbox_depths() == {}


@pytest_twisted.ensureDeferred
async def test_without_a_router_name_accept_takes_the_origin_for_this_router(opener):
    store = await opener.open(router=None)
    await store.accept(msg(1, dest_router=ROUTER))
    await store.accept(msg(2))
    assert store.queue_depths() == {"q": 1}
    assert store.backlog_depths() == {"router-c": 1}
    await store.dead_letter(msg(3), "max-hops")
    [(_, message, _)] = await store.fetch(DEAD_LETTER_QUEUE, 0, 10)
    assert (message.dest_router, message.dest_queue) == ("router-c", DEAD_LETTER_QUEUE)
    # No name recorded, so any name may open it later.
    store = await opener.reopen(store, router="router-z")
    assert store.queue_depths() == {"q": 1, DEAD_LETTER_QUEUE: 1}


@pytest_twisted.ensureDeferred
async def test_depth_accessors_are_copies(store):
    await store.accept(msg(1))
    store.backlog_depths()["router-c"] = 99
    store.queue_depths()["q"] = 99
    assert store.backlog_depths() == {"router-c": 1}
    assert store.queue_depths() == {}


# Durability, schema, configuration.


@pytest_twisted.ensureDeferred
async def test_everything_survives_close_and_reopen(opener):
    store = await opener.open()
    for n in range(1, 7):
        await store.accept(msg(n))
    await store.assign("peer-b", ["router-c"], 4)
    await store.acknowledge("peer-b", 2)  # m1, m2 gone; m3, m4 in the outbox
    await store.receive("peer-b", 9, msg(10, dest_router=ROUTER), True)
    await store.receive("peer-c", 4, msg(11, dest_router=ROUTER, headers={"h": "x"}), True)
    await store.receive("peer-c", 5, msg(12, dest_router=ROUTER), True)
    await store.receive("peer-c", 6, msg(13, dest_router="router-d"), False)
    entries = [entry for entry, _, _ in await store.fetch("q", 0, 10)]
    await store.mark_redelivered(entries[1:2])
    await store.consume(entries[:1])  # m10 consumed: its id stays recorded
    before = (
        store.backlog_depths(),
        store.queue_depths(),
        await store.outbox("peer-b", 0),
        await store.fetch("q", 0, 10),
    )

    store = await opener.reopen(store)
    assert store.applied_versions == []
    after = (
        store.backlog_depths(),
        store.queue_depths(),
        await store.outbox("peer-b", 0),
        await store.fetch("q", 0, 10),
    )
    assert after == before
    assert before[0] == {"router-c": 2, "router-d": 1}
    assert before[1] == {"q": 2}
    assert ids(before[2]) == ["m3", "m4"]
    assert [(m.msg_id, r) for _, m, r in before[3]] == [("m11", True), ("m12", False)]
    assert before[3][0][1].headers == {"h": "x"}
    assert store.last_received("peer-b") == 9
    assert store.last_received("peer-c") == 6
    assert await store.receive("peer-c", 6, msg(14), False) == "duplicate-seq"
    assert await store.receive("peer-b", 10, msg(10, dest_router=ROUTER), True) == "duplicate-id"
    with pytest.raises(DuplicateMessage):
        await store.accept(msg(10, dest_router=ROUTER))
    # next_seq continues past everything ever assigned to peer-b.
    assert [seq for seq, _ in await store.assign("peer-b", ["router-c"], 10)] == [5, 6]
    assert await store.return_outbox("peer-b") == 4
    assert [seq for seq, _ in await store.assign("peer-b", ["router-c"], 10)] == [7, 8, 9, 10]


@pytest_twisted.ensureDeferred
async def test_schema_version_is_recorded_and_not_reapplied(opener):
    store = await opener.open()
    latest = migrations()[-1][0]
    assert migrations()[0][1] == "001-initial.sql"
    assert store.schema_version == latest
    assert store.applied_versions == list(range(1, latest + 1))
    store = await opener.reopen(store)
    assert store.schema_version == latest
    assert store.applied_versions == []
    await store.close()
    with sqlite3.connect(store.path) as connection:
        assert connection.execute(
            "SELECT value FROM meta WHERE key = 'schema_version'"
        ).fetchone() == (latest,)
        assert connection.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    connection.close()


@pytest_twisted.ensureDeferred
async def test_a_newer_schema_is_refused(opener):
    store = await opener.open()
    await store.close()
    connection = sqlite3.connect(store.path)
    with connection:
        connection.execute("UPDATE meta SET value = 999 WHERE key = 'schema_version'")
    connection.close()
    with pytest.raises(StoreError, match="schema version 999 is newer"):
        await opener.open()


@pytest_twisted.ensureDeferred
async def test_the_store_of_another_router_is_refused(opener):
    store = await opener.open()
    await store.close()
    with pytest.raises(StoreError, match="router-a"):
        await opener.open(router="router-z")


@pytest.mark.parametrize("sync, level", [("full", 2), ("normal", 1)])
@pytest_twisted.ensureDeferred
async def test_sync_mode_sets_synchronous_in_wal_mode(opener, sync, level):
    store = await opener.open(sync=sync)

    def pragmas(connection):
        return tuple(
            connection.execute(f"PRAGMA {name}").fetchone()[0]
            for name in ("synchronous", "journal_mode")
        )

    assert await store.executor.submit(pragmas) == (level, "wal")


def test_unknown_sync_mode_is_refused(tmp_path):
    with pytest.raises(ValueError, match="sync"):
        SQLiteStore(str(tmp_path / "s.db"), "fast", InlineExecutor(), router=ROUTER)


@pytest_twisted.ensureDeferred
async def test_enqueued_ids_are_pruned_after_the_dedup_window(opener):
    clock = task.Clock()
    clock.advance(1000)
    store = await opener.open(dedup_window_s=60, clock=clock)
    await store.receive("peer-b", 1, msg(1, dest_router=ROUTER), True)
    clock.advance(30)
    await store.accept(msg(2, dest_router=ROUTER))
    entries = [entry for entry, _, _ in await store.fetch("q", 0, 10)]
    await store.consume(entries)
    clock.advance(31)  # m1 is 61 s old, m2 31 s
    assert await store.prune() == 1
    assert await store.prune() == 0
    # Past the window a copy is no longer recognised (so the window must
    # outlast any message's time in the mesh).
    assert await store.receive("peer-b", 2, msg(1, dest_router=ROUTER), True) == "stored"
    assert await store.receive("peer-b", 3, msg(2, dest_router=ROUTER), True) == "duplicate-id"
    clock.advance(61)
    store = await opener.reopen(store, dedup_window_s=60, clock=clock)  # prunes at open
    assert await store.receive("peer-b", 4, msg(2, dest_router=ROUTER), True) == "stored"


@pytest_twisted.ensureDeferred
async def test_a_closed_store_refuses_work(opener):
    store = await opener.open()
    await store.close()
    with pytest.raises(ExecutorStopped):
        await store.accept(msg(1))
    await store.close()


def test_the_schema_ships_as_package_data():
    assert [name for _, name, _ in migrations()][0] == "001-initial.sql"
    assert all(sql.strip() for _, _, sql in migrations())


# Closing.


@pytest_twisted.ensureDeferred
async def test_close_finishes_pending_writes(opener):
    store = await opener.open()
    accepts = [store.accept(msg(n)) for n in range(50)]
    closed = store.close()
    await defer.gatherResults(accepts)
    await closed
    store = await opener.open()
    assert store.backlog_depths() == {"router-c": 50}


# A router killed mid-way loses nothing it confirmed.

CHILD = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, sys.argv[1])
    from twisted.internet import defer, task
    from meshroute.messages import Message
    from meshroute.store import SQLiteStore, ThreadedExecutor, TurnExecutor
    from meshroute.store.checkpoints import WalCheckpoints

    path, sync, interval_s = sys.argv[2], sys.argv[3], float(sys.argv[4])
    writer = ThreadedExecutor if sys.argv[5] == "thread" else TurnExecutor

    async def main(reactor):
        executor = writer(reactor, checkpoints=WalCheckpoints(interval_s))
        store = SQLiteStore(path, sync, executor, router="router-a")
        await store.open()
        print("open", flush=True)
        forever = defer.Deferred()
        count = iter(range(10**9))

        def one():
            n = next(count)
            dest = "router-a" if n % 2 else "router-c"
            m = Message(f"m{n}", "router-a", dest, "q", b"x" * 100)
            store.accept(m).addCallback(confirmed, n)

        def confirmed(_, n):
            sys.stdout.write(f"{n}\\n")
            sys.stdout.flush()
            one()

        for _ in range(200):
            one()
        await forever

    task.react(lambda reactor: defer.ensureDeferred(main(reactor)))
    """
)


@pytest.mark.parametrize("sync", SYNC_MODES)
@pytest.mark.parametrize("checkpoint_interval_s", [0.05, 3600.0])
@pytest.mark.parametrize("writer", ["thread", "reactor"])
def test_sigkill_loses_no_confirmed_message(tmp_path, sync, checkpoint_interval_s, writer):
    """
    Killed while writing, the store keeps every confirmed message: with
    checkpoints running meanwhile, and with none at all (what was confirmed
    is then only in the WAL, replayed by the next open).
    """
    path = tmp_path / "store.db"
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(ROOT), str(path), sync, str(checkpoint_interval_s),
         writer],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout.readline() == "open\n", child.stderr.read()
        confirmed = []
        while len(confirmed) < 3000:
            line = child.stdout.readline()
            assert line, f"the child died: {child.stderr.read()}"
            confirmed.append(int(line))
        child.send_signal(signal.SIGKILL)
        # Lines written before the kill are confirmations too.
        rest = child.stdout.read().splitlines(keepends=True)
        confirmed += [int(line) for line in rest if line.endswith("\n")]
    finally:
        child.kill()
        child.wait()
        child.stdout.close()
        child.stderr.close()
    assert child.returncode == -signal.SIGKILL
    if checkpoint_interval_s > 60:
        # Never checkpointed: the messages are in the WAL alone.
        assert os.path.getsize(f"{path}-wal") > 100 * 4096

    connection = sqlite3.connect(path)
    try:
        assert connection.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        held = {msg_id for (msg_id,) in connection.execute("SELECT msg_id FROM messages")}
    finally:
        connection.close()
    assert {f"m{n}" for n in confirmed} <= held

    store = SQLiteStore(str(path), sync, InlineExecutor(), router=ROUTER)
    store.open()
    local = sum(1 for msg_id in held if int(msg_id[1:]) % 2)
    assert store.queue_depths() == {"q": local}
    assert store.backlog_depths() == {"router-c": len(held) - local}
    store.close()


@pytest_twisted.ensureDeferred
async def test_receive_refuses_a_transfer_after_one_that_was_not_stored(store):
    """
    Transfer 2 was never stored (its write failed): 3, which follows it on
    the link, is refused, so no acknowledgement of 3 can cover 2.
    """
    assert await store.receive("peer-b", 1, msg(1), False, 0) == "stored"
    with pytest.raises(MissingTransfer):
        await store.receive("peer-b", 3, msg(3), False, 2)
    assert store.last_received("peer-b") == 1
    assert await store.receive("peer-b", 2, msg(2), False, 1) == "stored"
    assert await store.receive("peer-b", 3, msg(3), False, 2) == "stored"


@pytest_twisted.ensureDeferred
async def test_store_id_is_kept_and_a_new_peer_store_forgets_what_was_received(store):
    assert len(store.store_id) == 32
    await store.receive("peer-b", 7, msg(1), False)
    await store.record_peer_store("peer-b", "old", forget_received=False)
    assert (store.peer_store_id("peer-b"), store.last_received("peer-b")) == ("old", 7)
    await store.record_peer_store("peer-b", "new", forget_received=True)
    assert (store.peer_store_id("peer-b"), store.last_received("peer-b")) == ("new", 0)
    assert await store.receive("peer-b", 1, msg(2), False) == "stored"


@pytest_twisted.ensureDeferred
async def test_receive_recalls_a_copy_waiting_in_an_outbox(store):
    """
    A copy of m1 comes back (from any peer) while ours waits in peer-b's
    outbox: ours goes back to the backlog with the new hop count, so
    peer-b's acknowledgement no longer deletes it.
    """
    await store.accept(msg(1))
    await store.assign("peer-b", ["router-c"], 1)
    assert await store.receive("peer-b", 1, msg(1, hops=2), False) == "recalled"
    assert (store.backlog_depths(), store.outbox_peers()) == ({"router-c": 1}, [])
    assert await store.acknowledge("peer-b", 1) == 0
    ((_, back),) = await store.assign("peer-c", ["router-c"], 5)
    assert (back.msg_id, back.hops) == ("m1", 2)
    assert await store.receive("peer-b", 2, msg(1), False) == "recalled"
    assert await store.receive("peer-b", 3, msg(1), False) == "duplicate-id"


async def test_a_recall_takes_back_the_rest_of_that_outbox_too(store):
    """
    A copy of m2 comes back while m1..m4 wait in peer-c's outbox: m2 and
    everything after it in that outbox go back to the backlog, in their
    order, so the recovery that replays the outbox (m1 only) and then
    takes the backlog cannot send m3 before m2.
    """
    for n in range(1, 5):
        await store.accept(msg(n))
    await store.assign("peer-c", ["router-c"], 4)
    assert await store.receive("peer-a", 1, msg(2), False) == "recalled"
    assert [m.msg_id for _, m in await store.outbox("peer-c", 0)] == ["m1"]
    assert store.outbox_depths() == {"peer-c": {"router-c": 1}}
    assert store.backlog_depths() == {"router-c": 3}
    again = await store.assign("peer-c", ["router-c"], 5)
    assert [m.msg_id for _, m in again] == ["m2", "m3", "m4"]


# -- receive_many: a link's whole batch in one call ------------------------------


@pytest_twisted.ensureDeferred
async def test_receive_many_stores_a_batch_in_one_transaction(store):
    """
    A clean batch (the common case): one commit, every message stored,
    the last seq recorded, the counts kept.
    """
    before = store.executor.commits
    items = [(n, msg(n), False) for n in range(1, 6)]
    items += [(n, msg(n, dest_router=ROUTER), True) for n in range(6, 9)]
    assert await store.receive_many("peer-b", 0, items) == ["stored"] * 8
    assert store.executor.commits - before == 1
    assert store.last_received("peer-b") == 8
    assert store.backlog_depths() == {"router-c": 5}
    assert store.queue_depths() == {"q": 3}
    assert [m.msg_id for _, m, _ in await store.fetch("q", 0, 10)] == ["m6", "m7", "m8"]
    assert [m.msg_id for _, m in await store.assign("peer-c", ["router-c"], 10)] == [
        f"m{n}" for n in range(1, 6)]


@pytest_twisted.ensureDeferred
async def test_receive_many_gives_each_message_the_outcome_receive_gives_it(store):
    """
    A batch with what is unusual (a replayed seq, a held id, an enqueued
    id, a copy waiting in an outbox, the same id twice) gets, per
    message, what L{SQLiteStore.receive} answers one by one.
    """
    await store.accept(msg(3))
    await store.accept(msg(4))
    await store.assign("peer-c", ["router-c"], 1, None)  # m3 waits in peer-c's outbox
    await store.receive("peer-b", 2, msg(100, dest_router=ROUTER), True)
    items = [
        (2, msg(1), False),  # seq already received
        (3, msg(2), False),
        (4, msg(4), False),  # held in the backlog
        (5, msg(100, dest_router=ROUTER), True),  # enqueued here
        (6, msg(3, hops=2), False),  # ours waits in an outbox: recalled
        (7, msg(7, dest_router=ROUTER), True),
        (8, msg(7, dest_router=ROUTER), True),  # twice in one batch
    ]
    assert await store.receive_many("peer-b", 1, items) == [
        "duplicate-seq", "stored", "duplicate-id", "duplicate-id", "recalled", "stored",
        "duplicate-id"]
    assert store.last_received("peer-b") == 8
    assert store.backlog_depths() == {"router-c": 3}
    assert store.outbox_peers() == []
    assert store.queue_depths() == {"q": 2}


@pytest_twisted.ensureDeferred
async def test_receive_many_refuses_a_batch_after_one_that_was_not_stored(store):
    """
    The batch before (up to seq 4) was not stored: this one, which
    follows it, is refused whole, so no acknowledgement covers the gap.
    """
    assert await store.receive_many("peer-b", 0, [(1, msg(1), False)]) == ["stored"]
    with pytest.raises(MissingTransfer):
        await store.receive_many("peer-b", 4, [(5, msg(5), False), (6, msg(6), False)])
    assert store.last_received("peer-b") == 1
    assert store.backlog_depths() == {"router-c": 1}
    assert await store.receive_many("peer-b", 1, [(2, msg(2), False), (3, msg(3), False)]) == [
        "stored", "stored"]


@pytest_twisted.ensureDeferred
async def test_receive_many_takes_a_gap_in_the_sequence(store):
    """
    A sender may skip sequence numbers (a message dead-lettered there):
    the batch after the gap follows the last one received.
    """
    assert await store.receive_many("peer-b", 0, [(1, msg(1), False)]) == ["stored"]
    assert await store.receive_many("peer-b", 1, [(3, msg(3), False), (4, msg(4), False)]) == [
        "stored", "stored"]
    assert store.last_received("peer-b") == 4
