"""
Topic names and patterns (L{meshroute.topics.patterns}) against a
reference matcher (a regular expression per pattern), and the cover
relation and aggregation that interest advertisements rest on.
"""

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from meshroute.topics import patterns as p

WORDS = ["a", "b", "c"]
topics = st.lists(st.sampled_from(WORDS), min_size=1, max_size=6).map(tuple)
pattern_words = st.lists(st.sampled_from(WORDS + [p.ONE, p.ANY]), min_size=1, max_size=6)
parsed_patterns = pattern_words.map(p.normal_form)


def reference(pattern, topic) -> bool:
    """
    A regular expression over "." + the topic: a word is itself, '*' one
    word, '#' any number of words.
    """
    regex = "".join(r"(?:\.[^.]+)*" if word == p.ANY else r"\.[^.]+" if word == p.ONE
                    else r"\." + re.escape(word) for word in pattern)
    return re.fullmatch(regex, "." + ".".join(topic)) is not None


@given(pattern_words, topics)
def test_matches_agrees_with_the_reference(words, topic):
    assert p.matches(p.normal_form(words), topic) == reference(words, topic)


@given(pattern_words, topics)
def test_the_normal_form_matches_the_same_topics(words, topic):
    assert reference(p.normal_form(words), topic) == reference(words, topic)


@given(parsed_patterns, parsed_patterns, topics)
@settings(max_examples=500)
def test_covers_is_sound(broad, narrow, topic):
    if p.covers(broad, narrow) and p.matches(narrow, topic):
        assert p.matches(broad, topic)


def test_covers_is_exact_over_short_patterns():
    """
    Every pair of normal-form patterns up to three words over two words
    and the wildcards: covers says yes exactly when every topic of up to
    seven words that the narrow one matches, the broad one matches.
    """
    alphabet = ["a", "b", p.ONE, p.ANY]
    shapes = {p.normal_form(words) for n in range(1, 4)
              for words in _products(alphabet, n)}
    every_topic = [t for n in range(0, 8) for t in _products(["a", "b", "c"], n)]
    for broad in shapes:
        for narrow in shapes:
            truth = all(p.matches(broad, t) for t in every_topic if p.matches(narrow, t))
            assert p.covers(broad, narrow) == truth, (broad, narrow)


def _products(alphabet, n):
    if n == 0:
        return [()]
    return [(*rest, word) for rest in _products(alphabet, n - 1) for word in alphabet]


@given(st.lists(parsed_patterns, max_size=8), topics)
def test_aggregation_keeps_every_match_and_drops_only_covered_patterns(given_patterns, topic):
    kept = p.aggregate(given_patterns)
    assert kept <= set(given_patterns)
    assert any(p.matches(k, topic) for k in kept) == any(
        p.matches(g, topic) for g in given_patterns)
    for pattern in kept:
        assert not any(p.covers(other, pattern) and other != pattern
                       and not p.covers(pattern, other) for other in kept)


def test_aggregation_examples():
    parse = p.parse_pattern
    assert p.aggregate([parse("prices.#"), parse("prices.eu.gbp"), parse("prices.*.gbp"),
                        parse("news.*")]) == {parse("prices.#"), parse("news.*")}
    assert p.aggregate([parse("#"), parse("a")]) == {parse("#")}


@pytest.mark.parametrize("text", ["prices.eu.gbp", "a", "A-b_9.x", "a." * 127 + "b"])
def test_topic_names(text):
    assert p.format_words(p.parse_topic(text)) == text


@pytest.mark.parametrize("text,fragment", [
    ("", "words separated by dots"), ("a..b", "not ''"), ("a.b*", "not 'b*'"),
    ("prices.*", "not '*'"), ("a" * 256, "at most 255"), ("a b", "not 'a b'"),
])
def test_bad_topic_names_say_why(text, fragment):
    with pytest.raises(p.BadTopic, match=re.escape(fragment)):
        p.parse_topic(text)


@pytest.mark.parametrize("text,normal", [
    ("prices.*.gbp", "prices.*.gbp"), ("#", "#"), ("#.*", "*.#"), ("#.#.a", "#.a"),
    ("a.#.*.*.b", "a.*.*.#.b"),
])
def test_patterns_in_normal_form(text, normal):
    assert p.format_words(p.parse_pattern(text)) == normal


@pytest.mark.parametrize("text", ["a.**", "a.#b", "", "a..#"])
def test_bad_patterns(text):
    with pytest.raises(p.BadTopic):
        p.parse_pattern(text)
