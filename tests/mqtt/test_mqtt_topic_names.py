"""
MQTT topics and filters mapped onto the mesh's topics and patterns:
exact against a reference MQTT matcher written from the specification,
the identity both ways on every name both sides share, and a clear
refusal of everything else; and MQTT's own topic syntax.
"""

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from meshroute.mqtt.topic_names import (
    UnmappableTopic,
    mesh_pattern,
    mesh_topic,
    mqtt_filter,
    mqtt_topic,
)
from meshroute.mqtt.topic_syntax import (
    is_server_topic,
    shared_subscription,
    topic_filter_problem,
    topic_name_problem,
)
from meshroute.topics.patterns import BadTopic, matches, parse_pattern, parse_topic


def reference_matches(topic_filter: str, topic: str) -> bool:
    """
    Whether MQTT filter C{topic_filter} matches topic name C{topic},
    level by level as section 4.7 of MQTT 5.0 says.
    """
    if is_server_topic(topic) and topic_filter[:1] in ("+", "#"):
        return False  # [MQTT-4.7.2-1]

    def match(filters: list[str], levels: list[str]) -> bool:
        if not filters:
            return not levels
        head, rest = filters[0], filters[1:]
        if head == "#":
            return True  # this level's parent and any number below
        if not levels:
            return False
        return (head == "+" or head == levels[0]) and match(rest, levels[1:])
    return match(topic_filter.split("/"), topic.split("/"))


_MESH_WORD = re.compile(r"[A-Za-z0-9_-]+")
# A few ordinary words, and characters a device may use that the mesh's
# words do not hold.
words = st.sampled_from(["a", "b", "sensor_1", "temp-C", "A9"])
levels = words | st.sampled_from(["", ".", "a.b", "$SYS", "x y", "\u00e9", "spBv1.0"])


def topics_of(levels):
    return st.lists(levels, min_size=1, max_size=5).map("/".join).filter(bool)


def filters_of(levels):
    return st.builds(
        lambda chosen, last: "/".join(chosen + ([last] if last else [])),
        st.lists(levels | st.just("+"), max_size=5), st.sampled_from([None, "#", "+"]),
    ).filter(bool)


topics, filters = topics_of(levels), filters_of(levels)


def mappable(text: str) -> bool:
    """The reference's judgement: every level is a mesh word or a wildcard."""
    return (len(text) <= 255 and not text.startswith("$")
            and all(_MESH_WORD.fullmatch(level) or level in ("+", "#")
                    for level in text.split("/")))


@given(filters_of(words), topics_of(words))
def test_a_mapped_filter_matches_exactly_the_mapped_topics_it_matches_in_mqtt(topic_filter, topic):
    pattern, name = mesh_pattern(topic_filter), mesh_topic(topic)
    assert matches(parse_pattern(pattern), parse_topic(name)) \
        == reference_matches(topic_filter, topic)


@given(topics)
def test_a_topic_is_mapped_when_every_level_is_a_mesh_word_and_refused_otherwise(topic):
    if mappable(topic):
        assert mesh_topic(topic) == topic.replace("/", ".")
        assert mqtt_topic(mesh_topic(topic)) == topic
    else:
        with pytest.raises(UnmappableTopic):
            mesh_topic(topic)


@given(filters)
def test_a_filter_is_mapped_when_every_level_is_a_mesh_word_and_refused_otherwise(topic_filter):
    if mappable(topic_filter):
        assert mqtt_filter(mesh_pattern(topic_filter)) == topic_filter
    else:
        with pytest.raises(UnmappableTopic):
            mesh_pattern(topic_filter)


@given(st.lists(st.from_regex(_MESH_WORD, fullmatch=True).filter(lambda w: len(w) < 20),
                min_size=1, max_size=6))
def test_every_mesh_topic_is_an_mqtt_topic_and_back(words):
    name = ".".join(words)
    assert mesh_topic(mqtt_topic(name)) == name


@pytest.mark.parametrize("mqtt, mesh", [
    ("a/b/c", "a.b.c"), ("+", "*"), ("#", "#"), ("a/+/#", "a.*.#"), ("a/#", "a.#"),
    ("+/+/x", "*.*.x"), ("home/living_room/temp-1", "home.living_room.temp-1"),
])
def test_filters_as_rabbitmq_maps_them(mqtt, mesh):
    assert mesh_pattern(mqtt) == mesh
    assert mqtt_filter(mesh) == mqtt


@pytest.mark.parametrize("topic, why", [
    ("spBv1.0/group", "holds a dot"),
    ("a.b", "holds a dot"),
    ("/a", "level 1 is empty"),
    ("a//b", "level 2 is empty"),
    ("a/", "level 2 is empty"),
    ("$SYS/broker/uptime", "starting with '$'"),
    ("homie/$state", "'$state', is not a mesh topic's word"),
    ("a b", "is not a mesh topic's word"),
    ("caf\u00e9", "is not a mesh topic's word"),
    ("x" * 256, "at most 255 characters"),
    ("a/+", "no wildcard"),
    ("", "at least one character"),
])
def test_unmappable_topics_are_refused_saying_why(topic, why):
    with pytest.raises(UnmappableTopic, match=re.escape(why)):
        mesh_topic(topic)


@pytest.mark.parametrize("topic_filter, why", [
    ("$SYS/#", "starting with '$'"),
    ("$share/group/a/+", "starting with '$'"),
    ("+/a.b", "holds a dot"),
    ("a//#", "level 2 is empty"),
    ("a/#/b", "'#' is the last level"),
    ("a+", "a wildcard is a whole level"),
])
def test_unmappable_filters_are_refused_saying_why(topic_filter, why):
    with pytest.raises(UnmappableTopic, match=re.escape(why)):
        mesh_pattern(topic_filter)


def test_a_refusal_is_a_bad_topic():
    assert issubclass(UnmappableTopic, BadTopic)


def test_a_mesh_pattern_with_a_multi_level_wildcard_before_its_end_is_no_mqtt_filter():
    with pytest.raises(UnmappableTopic):
        mqtt_filter("a.#.b")
    with pytest.raises(BadTopic):
        mqtt_topic("a..b")


# -- MQTT's own syntax ---------------------------------------------------------------


@pytest.mark.parametrize("name", ["a", "/", "a//b", "$SYS/x", " ", "a/b/"])
def test_topic_names_the_spec_allows(name):
    assert topic_name_problem(name) is None


@pytest.mark.parametrize("name", ["", "a/+", "#", "a#"])
def test_topic_names_the_spec_refuses(name):
    assert topic_name_problem(name)


def test_shared_subscriptions_are_taken_apart():
    assert shared_subscription("$share/g/a/+") == ("g", "a/+")
    assert shared_subscription("$share/g/#") == ("g", "#")
    for malformed in ("$share/g", "$share//a", "$share/g/", "$share/g#/a", "$shared/g/a"):
        assert shared_subscription(malformed) is None
    assert topic_filter_problem("$share/g/a/+") is None
    assert topic_filter_problem("$share/g")


def test_a_filter_starting_with_a_wildcard_does_not_match_server_topics():
    assert not reference_matches("#", "$SYS/x")
    assert not reference_matches("+/x", "$SYS/x")
    assert reference_matches("$SYS/#", "$SYS/x")
