"""
MQTT's own rules for topic names and topic filters (3.1.1 and 5.0
section 4.7), independent of the mesh: what the codec checks in every
PUBLISH, will, SUBSCRIBE and UNSUBSCRIBE.

A topic is levels separated by C{/}; a level may be empty (C{a//b},
C{/a}).  A topic name has no wildcard.  In a topic filter C{+} is a whole
level (one level, any), and C{#} a whole level that is the last (the
parent level and any number below).  A topic starting with C{$} is the
server's (C{$SYS/...}): a filter starting with a wildcard does not match
it [MQTT-4.7.2-1].  A filter C{$share/NAME/FILTER} is a 5.0 shared
subscription (section 4.8.2), L{shared_subscription}.
"""

LEVEL_SEPARATOR = "/"
SINGLE_LEVEL = "+"
MULTI_LEVEL = "#"
SHARE_PREFIX = "$share/"


def topic_name_problem(name: str) -> str | None:
    """
    What is wrong with C{name} as a topic name, or C{None}: it is at
    least one character [MQTT-4.7.3-1] without a wildcard
    [MQTT-4.7.1-1].
    """
    if not name:
        return "a topic name is at least one character"
    if SINGLE_LEVEL in name or MULTI_LEVEL in name:
        return f"a topic name has no wildcard: {name!r}"
    return None


def topic_filter_problem(topic_filter: str) -> str | None:
    """
    What is wrong with C{topic_filter} as a topic filter, or C{None}: at
    least one character, each wildcard a whole level, C{#} the last
    [MQTT-4.7.1-2, -3]; a shared subscription's share name at least one
    character without wildcards, followed by a filter
    [MQTT-4.8.2-1, -2].
    """
    if not topic_filter:
        return "a topic filter is at least one character"
    shared = shared_subscription(topic_filter)
    if topic_filter.startswith(SHARE_PREFIX) and shared is None:
        return (f"a shared subscription is $share/NAME/FILTER, NAME without "
                f"'+' or '#': {topic_filter!r}")
    levels = (shared[1] if shared else topic_filter).split(LEVEL_SEPARATOR)
    for index, level in enumerate(levels):
        if level in (SINGLE_LEVEL, MULTI_LEVEL):
            if level == MULTI_LEVEL and index != len(levels) - 1:
                return f"'#' is the last level of a topic filter: {topic_filter!r}"
        elif SINGLE_LEVEL in level or MULTI_LEVEL in level:
            return f"a wildcard is a whole level of a topic filter: {topic_filter!r}"
    return None


def shared_subscription(topic_filter: str) -> tuple[str, str] | None:
    """
    The share name and the filter of shared subscription C{topic_filter}
    (C{$share/NAME/FILTER}), or C{None} if it is not a well-formed one.
    """
    if not topic_filter.startswith(SHARE_PREFIX):
        return None
    share_name, separator, rest = topic_filter[len(SHARE_PREFIX):].partition(LEVEL_SEPARATOR)
    if (not separator or not share_name or not rest
            or SINGLE_LEVEL in share_name or MULTI_LEVEL in share_name):
        return None
    return share_name, rest


def is_server_topic(name: str) -> bool:
    """
    Whether topic C{name} is one of the server's (starts with C{$}),
    which no filter starting with a wildcard matches.
    """
    return name.startswith("$")
