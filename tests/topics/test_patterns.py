"""
Topic names and patterns (L{meshroute.topics.patterns}) against a
reference matcher (a regular expression per pattern), and the cover
relation and aggregation that interest advertisements rest on.
"""

import itertools
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from meshroute.topics import patterns as p

from support.topic_sets import matched, matched_by_any, short_patterns

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


def covered_in_truth(broads, narrow) -> bool:
    """
    Whether every short sequence C{narrow} matches, one of C{broads} does.
    """
    return matched(narrow) & ~matched_by_any(broads) == 0


def test_covers_is_exact_over_short_patterns():
    """
    Every pair of normal-form patterns up to three words over two words
    and the wildcards: covers says yes exactly when every topic of up to
    seven words that the narrow one matches, the broad one matches.
    """
    for broad in short_patterns(3):
        for narrow in short_patterns(3):
            assert p.covers(broad, narrow) == covered_in_truth([broad], narrow), (broad, narrow)


def test_covers_together_is_exact_over_pairs_of_short_patterns():
    """
    Every pattern of up to two words against every pair of up to three:
    the pair covers it together exactly when every sequence of up to
    seven words that it matches, one of the pair matches (some are
    covered by neither alone: C{#.a} by C{*} and C{*.#.a}).
    """
    together_only = 0
    for narrow in short_patterns(2):
        for broads in itertools.combinations_with_replacement(short_patterns(3), 2):
            truth = covered_in_truth(broads, narrow)
            assert p.covers_together(broads, narrow) == truth, (broads, narrow)
            together_only += truth and not any(p.covers(b, narrow) for b in broads)
    assert together_only > 0


SHORT_PATTERNS = st.lists(st.sampled_from(["a", "b", p.ONE, p.ANY]), min_size=1,
                          max_size=3).map(p.normal_form)


@given(SHORT_PATTERNS, st.lists(SHORT_PATTERNS, max_size=4))
@settings(max_examples=200, deadline=None)
def test_covers_together_is_exact_over_more_patterns(narrow, broads):
    assert p.covers_together(broads, narrow) == covered_in_truth(broads, narrow)


def test_patterns_that_cover_only_together():
    parse = p.parse_pattern
    one, more = parse("prices.*"), parse("prices.*.*.#")
    wanted = parse("prices.*.#")
    assert not p.covers(one, wanted) and not p.covers(more, wanted)
    assert p.covers_together([one, more], wanted)
    assert not p.covers_together([one, parse("prices.*.*")], wanted)
    assert not p.covers_together([], wanted)


@given(st.lists(parsed_patterns, max_size=8), topics)
def test_aggregation_keeps_every_match_and_drops_only_covered_patterns(given_patterns, topic):
    kept = p.aggregate(given_patterns)
    assert kept <= set(given_patterns)
    assert any(p.matches(k, topic) for k in kept) == any(
        p.matches(g, topic) for g in given_patterns)
    for pattern in kept:
        assert not any(p.subsumes(other, pattern) and other != pattern
                       and not p.subsumes(pattern, other) for other in kept)


@given(parsed_patterns, parsed_patterns, topics)
@settings(max_examples=500)
def test_subsumes_is_sound(broad, narrow, topic):
    if p.subsumes(broad, narrow):
        assert p.covers(broad, narrow)
        if p.matches(narrow, topic):
            assert p.matches(broad, topic)


def test_subsumes_is_word_by_word_and_so_not_complete():
    parse = p.parse_pattern
    assert p.subsumes(parse("prices.#"), parse("prices.*.gbp"))
    assert p.subsumes(parse("#"), parse("a.#.b"))
    assert p.subsumes(parse("*.a"), parse("*.a"))
    assert not p.subsumes(parse("a.*"), parse("a.#"))
    assert not p.subsumes(parse("a"), parse("*"))
    # Every topic of a.#.a has an a, but no word-by-word line-up shows it.
    assert p.covers(parse("#.a.*.#"), parse("a.#.a"))
    assert not p.subsumes(parse("#.a.*.#"), parse("a.#.a"))


def test_aggregation_examples():
    parse = p.parse_pattern
    assert p.aggregate([parse("prices.#"), parse("prices.eu.gbp"), parse("prices.*.gbp"),
                        parse("news.*")]) == {parse("prices.#"), parse("news.*")}
    assert p.aggregate([parse("#"), parse("a")]) == {parse("#")}


def test_past_its_budget_the_search_answers_not_known_to_cover(monkeypatch):
    """
    A pattern built to be hard costs the search L{p.MAX_COVER_STEPS} at
    most, and the answer is then the safe one.
    """
    parse = p.parse_pattern
    ends_in_b = [parse("*.#.b")]
    hard = parse(".".join(["*", "#", "a", "b"] * 31))
    assert p.covers_together(ends_in_b, hard)
    monkeypatch.setattr(p, "MAX_COVER_STEPS", 100)
    assert not p.covers_together(ends_in_b, hard)
    assert p.covers_together(ends_in_b, parse("a.x.b"))


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
