"""
The security policy's pattern rules (queues, and topics to publish to and
subscribe to) and the SCRAM credentials a router keeps.
"""

import base64

import pytest
from hypothesis import given, settings, strategies as st

from meshroute.security.credentials import derive, password_matches
from meshroute.security.policy import _CACHE_SIZE, Permission, Security, SecurityPolicy
from meshroute.topics.patterns import BadTopic, parse_pattern

from support.topic_sets import EMPTY, matched, matched_by_any

NAME = st.text("abcxyz019._-", min_size=1, max_size=12)


def policy(*permissions: Permission) -> SecurityPolicy:
    return SecurityPolicy("router-a", {}, permissions)


def test_rfc7677_credentials_check_the_password():
    salt = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
    credentials = derive("pencil", salt=salt)
    assert password_matches(credentials, "pencil")
    assert not password_matches(credentials, "pencil ")
    assert derive("pencil").salt != derive("pencil").salt


def test_star_matches_a_run_of_name_characters_never_an_at():
    p = policy(Permission(("app",), send=("orders@*",), consume=("orders-*",)))
    assert p.may_send("app", "orders@router-b")
    assert not p.may_send("app", "orders@x@y")
    assert not p.may_send("app", "orders2@router-b")
    assert p.may_consume("app", "orders-eu")
    assert p.may_consume("app", "orders-")
    assert not p.may_consume("app", "orders")


def test_a_send_pattern_without_a_router_means_this_router():
    p = policy(Permission(("app",), send=("audit",)))
    assert p.may_send("app", "audit@router-a")
    assert not p.may_send("app", "audit@router-b")


def test_a_user_may_do_what_any_entry_allows_and_nothing_else():
    p = policy(Permission(("a",), send=("x@*",)), Permission(("a", "b"), consume=("q",)))
    assert p.may_send("a", "x@r") and p.may_consume("a", "q")
    assert not p.may_send("b", "x@r") and p.may_consume("b", "q")
    assert not p.may_send("c", "x@r") and not p.may_consume("c", "q")


@given(NAME, NAME)
def test_a_pattern_without_star_matches_only_itself(pattern, name):
    p = policy(Permission(("u",), consume=(pattern,)))
    assert p.may_consume("u", name) == (pattern == name)


def test_replacing_the_policy_tells_the_observers():
    first, second = policy(), policy(Permission(("u",), consume=("q",)))
    security = Security(first)
    seen = []
    security.observe(lambda old, new: seen.append((old, new)))
    security.replace(second)
    assert security.policy is second and seen == [(first, second)]


def test_a_user_publishes_where_a_pattern_matches_the_topic():
    p = policy(Permission(("feed-*",), publish=("prices.*.gbp", "news.#")),
               Permission(("ops",), publish=("#",)))
    assert p.may_publish("feed-1", "prices.eu.gbp")
    assert not p.may_publish("feed-1", "prices.eu.usd")
    assert not p.may_publish("feed-1", "prices.gbp")
    assert p.may_publish("feed-1", "news") and p.may_publish("feed-1", "news.a.b.c")
    assert p.may_publish("ops", "anything.at.all")
    assert not p.may_publish("other", "news")


def test_a_subscription_must_stay_within_the_allowed_patterns():
    p = policy(Permission(("app",), subscribe=("prices.eu.*",)))
    assert p.may_subscribe("app", "prices.eu.gbp")
    assert p.may_subscribe("app", "prices.eu.*")
    assert not p.may_subscribe("app", "prices.#")
    assert not p.may_subscribe("app", "prices.eu.#")  # prices.eu itself, and deeper
    assert not p.may_subscribe("app", "prices.*.gbp")
    assert not p.may_subscribe("other", "prices.eu.gbp")


def test_a_subscription_covered_only_by_several_patterns_together():
    p = policy(Permission(("app",), subscribe=("prices.*",)),
               Permission(("app",), subscribe=("prices.*.*.#",)))
    assert p.may_subscribe("app", "prices.*.#")
    assert not p.may_subscribe("app", "prices.#")  # prices alone is allowed by neither


def test_hash_alone_is_every_topic():
    """
    '#' alone matches no more topics than '*.#' (a topic has a word at
    least), so a user allowed either may subscribe with either.
    """
    for allowed in ("#", "*.#", "#.*"):
        p = policy(Permission(("u",), subscribe=(allowed,)))
        assert p.may_subscribe("u", "#") and p.may_subscribe("u", "*.#"), allowed
    assert not policy(Permission(("u",), subscribe=("*.*.#",))).may_subscribe("u", "#")


def test_publish_and_subscribe_are_separate_rights():
    p = policy(Permission(("u",), publish=("a",), send=("a",), consume=("a",)))
    assert p.may_publish("u", "a") and not p.may_subscribe("u", "a")
    p = policy(Permission(("u",), subscribe=("a",)))
    assert p.may_subscribe("u", "a") and not p.may_publish("u", "a")


def test_names_that_are_not_topics_are_refused_as_such():
    p = policy(Permission(("u",), publish=("#",), subscribe=("#",)))
    for topic in ("prices.*", "", "a..b", "a" * 256):
        with pytest.raises(BadTopic):
            p.may_publish("u", topic)
    for pattern in ("a.**", "", "a b"):
        with pytest.raises(BadTopic):
            p.may_subscribe("u", pattern)


def test_a_bad_topic_pattern_fails_the_snapshot():
    with pytest.raises(BadTopic, match="not 'b c'"):
        policy(Permission(("u",), subscribe=("a.b c",)))
    with pytest.raises(BadTopic):
        policy(Permission(("u",), publish=("a..b",)))


def test_answers_are_remembered_and_bounded():
    p = policy(Permission(("u",), publish=("t.*",), subscribe=("t.*",)))
    assert p.may_publish("u", "t.x") and p.may_subscribe("u", "t.x")
    assert p._answers == {("publish", "u", "t.x"): True, ("subscribe", "u", "t.x"): True}
    for index in range(3 * _CACHE_SIZE):
        assert p.may_publish("u", f"t.{index}")
        assert len(p._answers) <= _CACHE_SIZE


TOPIC_PATTERN = st.lists(st.sampled_from(["a", "b", "*", "#"]), min_size=1, max_size=3).map(
    ".".join)
#: Permissions for user patterns that name "u", and for one that does not.
NAMES_U = {"u": True, "u*": True, "v": False}


@given(st.lists(st.tuples(st.sampled_from(sorted(NAMES_U)), st.lists(TOPIC_PATTERN, max_size=3)),
                max_size=3),
       TOPIC_PATTERN)
@settings(max_examples=300, deadline=None)
def test_a_subscription_is_allowed_exactly_when_every_topic_it_matches_is(granted, wanted):
    """
    The reference: every topic of up to seven words (L{support.topic_sets})
    the wanted pattern matches, tried against the subscribe patterns of
    the permissions that name the user.
    """
    p = policy(*(Permission((who,), subscribe=tuple(patterns)) for who, patterns in granted))
    allowed = matched_by_any(parse_pattern(pattern) for who, patterns in granted if NAMES_U[who]
                             for pattern in patterns)
    truth = matched(parse_pattern(wanted)) & ~EMPTY & ~allowed == 0
    assert p.may_subscribe("u", wanted) == truth
