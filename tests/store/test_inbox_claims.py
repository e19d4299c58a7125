"""
Tests for the claim of an arrival at its receive (L{meshroute.store.inbox};
docs/routing.md, "An arrival handed to a waiting consumer from its
receive"): the store claims it, flagged redelivered and answered by its
entry id, only if a read from the claim's C{after_entry} would return it
first; else it is stored as any arrival.  On each executor: the batched
receives (C{receive_local.batch}) as the single ones.
"""

import pytest_twisted
from twisted.internet import defer

from meshroute.store import CLAIMED
from support.store_testing import ROUTER, msg, store  # noqa: F401 (store: a fixture)


def local(n, queue="q"):
    return msg(n, dest_router=ROUTER, dest_queue=queue)


async def flags(store, queue="q") -> list:
    return [(m.msg_id, redelivered) for _, m, redelivered in await store.fetch(queue, 0, 100)]


@pytest_twisted.ensureDeferred
async def test_a_claimed_arrival_is_stored_flagged_and_answered_by_its_entry(store):
    """
    Nothing above C{after_entry}: claimed, flagged as the read that
    fetches it for a consumer would flag it, and its entry id answered.
    """
    outcome = await store.receive("peer-b", 1, local(1), True, 0, (0, ()))
    [(entry, _, _)] = await store.fetch("q", 0, 10)
    assert outcome == (CLAIMED, entry)
    assert await flags(store) == [("m1", True)]
    assert store.queue_depths() == {"q": 1}
    assert store.last_received("peer-b") == 1


@pytest_twisted.ensureDeferred
async def test_a_claim_behind_an_unread_entry_is_declined(store):
    """
    An entry the router has not read lies above C{after_entry} (in any
    queue but this one it would not matter): stored as any arrival,
    unflagged, for the read to find in its place.
    """
    await store.receive("peer-b", 1, local(1), True)
    await store.receive("peer-b", 2, local(2, queue="other"), True)
    assert await store.receive("peer-b", 3, local(3), True, 2, (0, ())) == "stored"
    assert await flags(store) == [("m1", False), ("m3", False)]
    [(read, _, _)] = await store.fetch("q", 0, 1)
    outcome = await store.receive("peer-b", 4, local(4, queue="other"), True, 3, (0, ()))
    assert outcome == "stored"  # m2 is above 0 in "other"
    # Above what the router read, the queue is clear: claimed.
    [(_, _, _), (m3, _, _)] = await store.fetch("q", 0, 10)
    outcome = await store.receive("peer-b", 5, local(5), True, 4, (m3, ()))
    assert outcome[0] == CLAIMED and outcome[1] > m3 > read


@pytest_twisted.ensureDeferred
async def test_claims_in_a_row_name_the_ones_before_them(store):
    """
    A claim made while those before it are in flight names their message
    ids (pending): claimed behind them (submitted together, they run
    batched on the executors that group them, with the same outcomes);
    one that does not name them is declined.
    """
    outcomes = await defer.gatherResults([
        store.receive("peer-b", 1, local(1), True, 0, (0, ())),
        store.receive("peer-b", 2, local(2), True, 1, (0, ("m1",))),
        store.receive("peer-b", 3, local(3), True, 2, (0, ("m1", "m2"))),
    ])
    assert [outcome[0] for outcome in outcomes] == [CLAIMED] * 3
    assert sorted(outcome[1] for outcome in outcomes) == [outcome[1] for outcome in outcomes]
    assert await store.receive("peer-b", 4, local(4), True, 3, (0, ("m1", "m2"))) == "stored"
    assert await flags(store) == [("m1", True), ("m2", True), ("m3", True), ("m4", False)]


@pytest_twisted.ensureDeferred
async def test_receive_many_claims_in_link_order(store):
    """
    A batch with claimed arrivals (a clean one, and one that goes one by
    one for a held id): each claimed one answered by its entry, in link
    order; one behind an arrival of its queue that was not claimed is
    declined; backlog arrivals unchanged.
    """
    items = [(1, local(1), True), (2, msg(2), False), (3, local(3), True),
             (4, local(4), True), (5, local(5, queue="other"), True)]
    claims = [(0, ()), None, None, (0, ("m1",)), (0, ("m1",))]
    outcomes = await store.receive_many("peer-b", 0, items, claims)
    entries = [entry for entry, _, _ in await store.fetch("q", 0, 10)]
    [(other, _, _)] = await store.fetch("other", 0, 10)
    assert outcomes == [(CLAIMED, entries[0]), "stored", "stored", "stored", (CLAIMED, other)]
    assert await flags(store) == [("m1", True), ("m3", False), ("m4", False)]
    assert store.backlog_depths() == {"router-c": 1}
    await store.accept(msg(7))
    items = [(6, local(6), True), (7, msg(7), False), (8, local(8), True)]
    outcomes = await store.receive_many("peer-b", 5, items, [(entries[-1], ()), None,
                                                              (entries[-1], ("m6",))])
    assert [o if type(o) is str else o[0] for o in outcomes] == [CLAIMED, "duplicate-id",
                                                                 CLAIMED]
    assert await flags(store) == [("m1", True), ("m3", False), ("m4", False), ("m6", True),
                                  ("m8", True)]
