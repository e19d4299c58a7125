"""
Topic names and subscription patterns, and which topics a pattern
matches: the AMQP (RabbitMQ) topic rules that STOMP users know.

A topic name is words separated by dots (C{prices.eu.gbp}), each word
C{[A-Za-z0-9_-]+}, at most L{MAX_LENGTH} characters in all.  A pattern is
the same with two wildcards as whole words: C{*} matches exactly one
word, C{#} matches zero or more words (C{prices.*.gbp}, C{prices.#},
C{#}).

Patterns are kept in a normal form (L{parse_pattern}): in each run of
consecutive wildcards the C{*}s come first and at most one C{#} follows
(C{#.*} and C{*.#} match the same topics, and so do C{#.#} and C{#}), so
that two ways of writing one subscription are one pattern.
"""

import re

#: The longest topic name or pattern, in characters.
MAX_LENGTH = 255
ONE = "*"
ANY = "#"
_WORD = re.compile(r"[A-Za-z0-9_-]+")


class BadTopic(ValueError):
    """
    Not a topic name, or not a pattern: the message says why.
    """


def _words(text: str, what: str) -> list[str]:
    if not isinstance(text, str) or not text:
        raise BadTopic(f"a {what} is words separated by dots, got {text!r}")
    if len(text) > MAX_LENGTH:
        raise BadTopic(f"a {what} has at most {MAX_LENGTH} characters, got {len(text)}")
    return text.split(".")


def parse_topic(name: str) -> tuple[str, ...]:
    """
    The words of topic name C{name}.

    @raise BadTopic: for anything else (a wildcard included: one
        publishes to a topic, not to a pattern).
    """
    words = _words(name, "topic name")
    for word in words:
        if not _WORD.fullmatch(word):
            raise BadTopic(f"{name!r}: each word of a topic name is [A-Za-z0-9_-]+, "
                           f"not {word!r}")
    return tuple(words)


def parse_pattern(pattern: str) -> tuple[str, ...]:
    """
    The words of subscription pattern C{pattern}, in normal form (the
    module docstring).

    @raise BadTopic: for anything that is not a pattern.
    """
    words = _words(pattern, "topic pattern")
    for word in words:
        if word not in (ONE, ANY) and not _WORD.fullmatch(word):
            raise BadTopic(f"{pattern!r}: each word of a pattern is [A-Za-z0-9_-]+, "
                           f"'*' or '#', not {word!r}")
    return normal_form(words)


def normal_form(words) -> tuple[str, ...]:
    """
    C{words} with each run of wildcards written as its C{*}s, then one
    C{#} if the run had any: the same topics matched.
    """
    out: list[str] = []
    stars, any_ = 0, False
    for word in [*words, None]:
        if word == ONE:
            stars += 1
        elif word == ANY:
            any_ = True
        else:
            out.extend([ONE] * stars + ([ANY] if any_ else []))
            stars, any_ = 0, False
            if word is not None:
                out.append(word)
    return tuple(out)


def format_words(words) -> str:
    return ".".join(words)


def matches(pattern: tuple[str, ...], topic: tuple[str, ...]) -> bool:
    """
    Whether C{pattern} (parsed) matches C{topic} (parsed).

    The positions of the pattern a prefix of the topic can have reached
    are carried along the topic's words: linear in the product of the
    lengths, never exponential in the number of C{#}s.
    """
    reached = _closure(pattern, {0})
    for word in topic:
        reached = _step(pattern, reached, word)
        if not reached:
            return False
    return len(pattern) in reached


def _step(pattern: tuple[str, ...], positions, word: str) -> frozenset[int]:
    """
    The positions of C{pattern} reached from C{positions} by one more
    word of the topic.
    """
    after: set[int] = set()
    for i in positions:
        if i == len(pattern):
            continue
        token = pattern[i]
        if token == ANY:
            after.add(i)  # '#' takes this word and may take more
        elif token == ONE or token == word:
            after.add(i + 1)
    return _closure(pattern, after)


def _closure(pattern: tuple[str, ...], positions) -> frozenset[int]:
    """
    C{positions}, and those reached from them by letting a C{#} match no
    word.
    """
    closed = set(positions)
    for i in positions:
        while i < len(pattern) and pattern[i] == ANY:
            i += 1
            closed.add(i)
    return frozenset(closed)


#: A word that is no pattern's literal (it is not a valid word): in
#: L{covers_together}, every word the patterns do not name where they are.
_OTHER = "\0"


def covers(broad: tuple[str, ...], narrow: tuple[str, ...]) -> bool:
    """
    Whether every topic C{narrow} matches is matched by C{broad} too (both
    parsed): then a router that advertises C{broad} need not advertise
    C{narrow}.
    """
    return covers_together((broad,), narrow)


#: The most work L{covers_together} does before answering "not known to
#: cover": each step one pattern follows one word, or one combination is
#: compared with one already explored.  Patterns of everyday length take
#: a few thousand steps at most; this bounds what a client's pattern of
#: 255 characters, built to be hard, can cost the reactor (some 0.1 s).
MAX_COVER_STEPS = 50_000


def covers_together(broads, narrow: tuple[str, ...]) -> bool:
    """
    Whether every topic C{narrow} matches is matched by at least one of
    C{broads} (all parsed): a pattern that several cover only together
    (C{prices.*} and C{prices.*.*.#} cover C{prices.*.#}) is covered, as
    a permission must judge a subscription against every pattern it
    allows.

    Exact: the patterns are read as automata, and every combination of
    positions a word sequence can lead them to is explored; C{narrow} is
    covered unless some sequence leaves it matched and every one of
    C{broads} not.  From each combination only the words its positions
    name are tried, and one word standing for all others, as every other
    word leads where that one does; none is tried once a broad pattern
    matches whatever follows, nor from a combination whose broad
    positions include those of one already explored at the same narrow
    positions (what that one covers, this one covers too).  The empty
    sequence counts as one, though no topic is empty: only C{#} matches
    it.

    Past L{MAX_COVER_STEPS} the answer is C{False}, not known to cover:
    the safe answer for each use (a router advertises C{narrow} too; a
    permission refuses the subscription).
    """
    broads = tuple(broads)
    start_broads = tuple(_closure(broad, {0}) for broad in broads)
    start = (_closure(narrow, {0}), start_broads)
    explored = {start[0]: [start_broads]}
    pending = [start]
    steps = 0
    while pending:
        in_narrow, in_broads = pending.pop()
        if len(narrow) in in_narrow and not any(
                len(broad) in reached for broad, reached in zip(broads, in_broads)):
            return False
        if any(_matches_any_rest(broad, reached) for broad, reached in zip(broads, in_broads)):
            continue
        words = _named(narrow, in_narrow).union(
            *(_named(broad, reached) for broad, reached in zip(broads, in_broads)))
        for word in words | {_OTHER}:
            after_narrow = _step(narrow, in_narrow, word)
            steps += 1
            if not after_narrow:
                continue
            after_broads = tuple(_step(broad, reached, word)
                                 for broad, reached in zip(broads, in_broads))
            known = explored.setdefault(after_narrow, [])
            steps += len(broads) + len(known)
            if steps > MAX_COVER_STEPS:
                return False
            if any(all(old <= new for old, new in zip(before, after_broads))
                   for before in known):
                continue
            known.append(after_broads)
            pending.append((after_narrow, after_broads))
    return True


def _matches_any_rest(pattern: tuple[str, ...], positions) -> bool:
    """
    Whether C{pattern}, at C{positions}, matches however the sequence
    goes on: it reached its last word, a C{#}.
    """
    return pattern[-1:] == (ANY,) and len(pattern) - 1 in positions


def _named(pattern: tuple[str, ...], positions) -> set[str]:
    """
    The words C{pattern} names at C{positions}: the only ones that lead
    from there elsewhere than any other word does.
    """
    return {pattern[i] for i in positions
            if i < len(pattern) and pattern[i] not in (ONE, ANY)}


def subsumes(broad: tuple[str, ...], narrow: tuple[str, ...]) -> bool:
    """
    Whether C{broad} covers C{narrow} (both parsed) word by word: each
    word of C{narrow} is matched by the C{broad} word it lines up with (a
    word by itself or C{*}; C{*} by C{*}; anything, any number, by
    C{#}).  Sound (then L{covers} holds too) and quick (the product of
    the lengths), but not complete: C{#.a.*.#} covers C{a.#.a} without
    subsuming it.  What aggregation judges by: a pattern it keeps
    needlessly costs a line of an advertisement, a judgement per change
    that took milliseconds would stall the reactor on every subscribe.
    """
    # reach[j]: broad's words so far can line up with narrow's first j.
    reach = [True] + [False] * len(narrow)
    for word in broad:
        if word == ANY:
            for j in range(1, len(narrow) + 1):
                reach[j] = reach[j] or reach[j - 1]
        else:
            reach = [False] + [reach[j - 1] and narrow[j - 1] != ANY
                               and (word == ONE or word == narrow[j - 1])
                               and not (word != ONE and narrow[j - 1] == ONE)
                               for j in range(1, len(narrow) + 1)]
    return reach[len(narrow)]


def aggregate(patterns) -> set[tuple[str, ...]]:
    """
    The patterns of C{patterns} (parsed) that no other one subsumes: what
    a router advertises for them (of two that subsume each other, the one
    that sorts first).
    """
    unique = sorted(set(patterns))
    kept: list[tuple[str, ...]] = []
    for index, pattern in enumerate(unique):
        if any(subsumes(other, pattern)
               and (not subsumes(pattern, other) or other_index < index)
               for other_index, other in enumerate(unique) if other_index != index):
            continue
        kept.append(pattern)
    return set(kept)
