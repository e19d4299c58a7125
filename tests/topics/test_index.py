"""
The pattern index (L{meshroute.topics.index}): what it matches is what
matching every pattern one by one gives, through adds and removes.
"""

from hypothesis import given
from hypothesis import strategies as st

from meshroute.topics.index import PatternIndex
from meshroute.topics.patterns import ANY, ONE, matches, normal_form, parse_pattern, parse_topic

WORDS = ["a", "b", "c"]
topics = st.lists(st.sampled_from(WORDS), min_size=1, max_size=6).map(tuple)
patterns = st.lists(st.sampled_from(WORDS + [ONE, ANY]), min_size=1,
                    max_size=5).map(normal_form)
operations = st.lists(st.tuples(st.booleans(), patterns, st.integers(0, 3)), max_size=30)


@given(operations, st.lists(topics, min_size=1, max_size=5))
def test_the_index_matches_as_the_patterns_do(ops, probe_topics):
    index, truth = PatternIndex(), set()
    for adding, pattern, value in ops:
        if adding:
            index.add(pattern, value)
            truth.add((pattern, value))
        else:
            index.remove(pattern, value)
            truth.discard((pattern, value))
    assert len(index) == len(truth)
    for topic in probe_topics:
        assert index.match(topic) == {v for pattern, v in truth if matches(pattern, topic)}


def test_removing_the_last_value_prunes_the_trie():
    index = PatternIndex()
    index.add(parse_pattern("prices.#"), "s1")
    index.add(parse_pattern("prices.*.gbp"), "s2")
    index.remove(parse_pattern("prices.*.gbp"), "s2")
    index.remove(parse_pattern("prices.#"), "s1")
    assert len(index) == 0 and index.match(parse_topic("prices.eu.gbp")) == set()
    assert index._root.children == {}
