"""
MQTT topics on the mesh's topics (docs/mqtt.md, "Topics"): the MQTT
topic C{a/b/c} is the mesh topic C{a.b.c}; in a filter C{+} is C{*} and
C{#} is C{#}, as RabbitMQ's MQTT plugin maps them onto AMQP's.

Each level of an MQTT topic becomes a word of a mesh topic, so it must
be one (L{meshroute.topics.patterns}: C{[A-Za-z0-9_-]+}); what is not,
is refused with L{UnmappableTopic}, never escaped:

 - a level with any other character: a dot (C{spBv1.0}), a space, a
   colon, a C{$}, anything beyond ASCII;
 - an empty level (C{a//b}, C{/a}, C{a/});
 - a topic starting with C{$} (C{$SYS/...}), MQTT's server topics: the
   mesh publishes none, and a client may not publish one of its own; a
   shared subscription's C{$share/NAME/} is the listener's to take off
   first (L{meshroute.mqtt.topic_syntax.shared_subscription});
 - more than 255 characters in all.

Why refused, not escaped: the mesh's words are exactly
C{[A-Za-z0-9_-]+}, all of them meaningful, so a map from MQTT levels to
words that left every such level as it is could not be one to one for
any other level; an escape would have to rewrite some ordinary words too
(C{_} and C{-} are common in device topics), and a native or STOMP
client would see rewritten names.  Refusing keeps both directions the
identity on every name they share, and the refusal says which level and
why.

The map is exact where it applies: a filter matches a topic in MQTT
exactly when its pattern matches the topic's name on the mesh (C{a/#}
matches C{a} in both; C{+} matches one level, never an empty one, as no
mapped topic has one; no mapped topic starts with C{$}, so the rule that
a leading wildcard does not match one holds trivially).  The other way,
every mesh topic name is an MQTT topic (L{mqtt_topic}), and a pattern is
a filter unless a C{#} stands before its last word (L{mqtt_filter}).
"""

from meshroute.mqtt.topic_syntax import (
    LEVEL_SEPARATOR,
    MULTI_LEVEL,
    SINGLE_LEVEL,
    topic_filter_problem,
    topic_name_problem,
)
from meshroute.topics.patterns import (
    ANY,
    MAX_LENGTH,
    ONE,
    BadTopic,
    format_words,
    parse_pattern,
    parse_topic,
)

_WILDCARDS_TO_MESH = {SINGLE_LEVEL: ONE, MULTI_LEVEL: ANY}
_WILDCARDS_TO_MQTT = {ONE: SINGLE_LEVEL, ANY: MULTI_LEVEL}


class UnmappableTopic(BadTopic):
    """
    An MQTT topic or filter that is no mesh topic or pattern, or a mesh
    pattern that is no MQTT filter: the message says which level and
    why.
    """


def mesh_topic(mqtt_name: str) -> str:
    """
    The mesh topic name of MQTT topic name C{mqtt_name} (C{a/b/c} is
    C{a.b.c}).

    @raise UnmappableTopic: for what the module docstring lists, and for
        what is no MQTT topic name (a wildcard, empty).
    """
    problem = topic_name_problem(mqtt_name)
    if problem is not None:
        raise UnmappableTopic(problem)
    levels = _mappable_levels(mqtt_name, "topic")
    return _checked(parse_topic, format_words(levels), mqtt_name)


def mesh_pattern(mqtt_filter: str) -> str:
    """
    The mesh pattern of MQTT topic filter C{mqtt_filter} (C{a/+/#} is
    C{a.*.#}).

    @raise UnmappableTopic: for what the module docstring lists, and for
        what is no MQTT topic filter.
    """
    problem = topic_filter_problem(mqtt_filter)
    if problem is not None:
        raise UnmappableTopic(problem)
    levels = _mappable_levels(mqtt_filter, "topic filter")
    words = [_WILDCARDS_TO_MESH.get(level, level) for level in levels]
    return _checked(parse_pattern, format_words(words), mqtt_filter)


def mqtt_topic(mesh_name: str) -> str:
    """
    The MQTT topic name of mesh topic C{mesh_name} (C{a.b.c} is
    C{a/b/c}): every mesh topic has one.

    @raise BadTopic: if C{mesh_name} is no mesh topic name.
    """
    return LEVEL_SEPARATOR.join(parse_topic(mesh_name))


def mqtt_filter(mesh_pattern_: str) -> str:
    """
    The MQTT topic filter of mesh pattern C{mesh_pattern_} (C{a.*.#} is
    C{a/+/#}).

    @raise BadTopic: if it is no mesh pattern.
    @raise UnmappableTopic: if a C{#} stands before its last word
        (C{a.#.b}), which MQTT cannot say.
    """
    words = parse_pattern(mesh_pattern_)
    if ANY in words[:-1]:
        raise UnmappableTopic(
            f"{mesh_pattern_!r}: an MQTT filter has '#' only as its last level")
    return LEVEL_SEPARATOR.join(_WILDCARDS_TO_MQTT.get(word, word) for word in words)


def _mappable_levels(text: str, what: str) -> list[str]:
    if text.startswith("$"):
        raise UnmappableTopic(
            f"{text!r}: an MQTT {what} starting with '$' is the server's, and the mesh "
            f"has none")
    if len(text) > MAX_LENGTH:
        raise UnmappableTopic(f"a mesh topic has at most {MAX_LENGTH} characters, and this "
                              f"MQTT {what} {len(text)}")
    levels = text.split(LEVEL_SEPARATOR)
    for index, level in enumerate(levels, 1):
        if not level:
            raise UnmappableTopic(
                f"{text!r}: level {index} is empty, and a mesh topic's words are not")
        if level in _WILDCARDS_TO_MESH:
            continue
        if "." in level:
            raise UnmappableTopic(
                f"{text!r}: level {index}, {level!r}, holds a dot, the mesh's separator")
        try:
            parse_topic(level)
        except BadTopic:
            raise UnmappableTopic(
                f"{text!r}: level {index}, {level!r}, is not a mesh topic's word "
                f"([A-Za-z0-9_-]+)") from None
    return levels


def _checked(parse, mapped: str, original: str) -> str:
    try:
        return format_words(parse(mapped))
    except BadTopic as problem:
        raise UnmappableTopic(f"{original!r} is no mesh topic as {mapped!r}: {problem}") from None
