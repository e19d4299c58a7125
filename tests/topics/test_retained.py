"""
The retained messages' table, pure: the latest of each topic by an
order every router computes alike, whatever order entries come in;
stamps above what is held; tombstones; limits; expiry.
"""

import itertools

from hypothesis import given
from hypothesis import strategies as st

from meshroute.topics.patterns import parse_pattern
from meshroute.topics.retained import (
    REFUSED,
    STALE,
    TAKEN,
    RetainedEntry,
    RetainedTable,
    wants_retain,
)


def entry(topic="t", stamp=1, origin="router-a", body=b"x", expires=0) -> RetainedEntry:
    # One publication, one body: the id names both.
    return RetainedEntry(topic, stamp, origin, f"{origin}:{stamp}:{body!r}", body, {}, True,
                         expires)


entries = st.builds(entry, topic=st.sampled_from(["a", "b", "a.b"]),
                    stamp=st.integers(1, 5), origin=st.sampled_from(["router-a", "router-b"]),
                    body=st.sampled_from([b"", b"x", b"yy"]))


@given(st.lists(entries, max_size=12), st.randoms())
def test_every_order_of_arrival_ends_at_the_same_table(offered, random):
    shuffled = list(offered)
    random.shuffle(shuffled)
    one, other = RetainedTable(), RetainedTable()
    for e in offered:
        one.offer(e, 0)
    for e in shuffled:
        other.offer(e, 0)
    assert one.entries == other.entries
    assert (one.count, one.bytes) == (other.count, other.bytes)
    assert one.count == sum(1 for e in one.entries.values() if e.body)


def test_newer_wins_by_stamp_then_router_then_publication():
    table = RetainedTable()
    assert table.offer(entry(stamp=2), 0) == TAKEN
    assert table.offer(entry(stamp=1, origin="router-z"), 0) == STALE
    assert table.offer(entry(stamp=2), 0) == STALE
    assert table.offer(entry(stamp=2, origin="router-b"), 0) == TAKEN
    assert table.entries["t"].origin == "router-b"


def test_a_stamp_is_above_what_is_held_whatever_the_clock():
    table = RetainedTable()
    assert table.stamp("t", 100) == 100
    table.offer(entry(stamp=500), 0)
    assert table.stamp("t", 100) == 501
    assert table.stamp("t", 900) == 900
    assert table.stamp("other", 100) == 100


def test_a_tombstone_counts_in_no_limit_and_matches_nothing():
    table = RetainedTable(max_count=1)
    table.offer(entry(body=b"abc"), 0)
    assert (table.count, table.bytes) == (1, 3)
    table.offer(entry(stamp=2, body=b""), 0)
    assert (table.count, table.bytes) == (0, 0)
    assert table.matching(parse_pattern("#"), 0) == []
    assert table.offer(entry(topic="u"), 0) == TAKEN


def test_past_a_limit_a_new_topic_is_refused_and_a_held_one_replaced():
    table = RetainedTable(max_count=2, max_bytes=4)
    assert table.offer(entry(topic="a", body=b"12"), 0) == TAKEN
    assert table.offer(entry(topic="b", body=b"345"), 0) == REFUSED
    assert table.offer(entry(topic="b", body=b"34"), 0) == TAKEN
    assert table.offer(entry(topic="c", body=b""), 0) == TAKEN  # a tombstone
    assert table.offer(entry(topic="d"), 0) == REFUSED
    assert table.offer(entry(topic="a", stamp=2, body=b"9"), 0) == TAKEN
    assert (table.count, table.bytes) == (2, 3)


def test_expired_entries_are_stale_unmatched_and_forgotten():
    table = RetainedTable()
    assert table.offer(entry(expires=10), 10) == STALE
    table.offer(entry(topic="a", expires=10), 0)
    table.offer(entry(topic="b"), 0)
    assert [e.topic for e in table.matching(parse_pattern("#"), 10)] == ["b"]
    assert [e.topic for e in table.expire(10)] == ["a"]
    assert set(table.entries) == {"b"}


def test_matching_is_by_pattern_and_topic_order():
    table = RetainedTable()
    for n, topic in zip(itertools.count(1), ["p.eu.gbp", "p.us.usd", "p.eu", "q"]):
        table.offer(entry(topic=topic, stamp=n), 0)
    assert [e.topic for e in table.matching(parse_pattern("p.#"), 0)] == [
        "p.eu", "p.eu.gbp", "p.us.usd"]
    assert [e.topic for e in table.matching(parse_pattern("p.*.gbp"), 0)] == ["p.eu.gbp"]


def test_only_true_asks_to_be_retained():
    assert wants_retain({"x-retain": "true"}) and wants_retain({"x-retain": "True"})
    assert not wants_retain({"x-retain": "1"}) and not wants_retain({})
