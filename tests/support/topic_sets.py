"""
The reference topic patterns are checked against: every short word
sequence, and which of them a pattern matches, as the bits of an integer
(cached per pattern), so that "every topic this pattern matches, one of
those matches" is one mask operation.
"""

import functools
import itertools

from meshroute.topics import patterns as p

#: Every sequence of up to seven words over two named words and one other
#: (long enough to tell apart any patterns of up to three words), the
#: empty one first.
SEQUENCES = [words for n in range(8) for words in itertools.product(["a", "b", "c"], repeat=n)]

#: The bit of the empty sequence, which no topic is.
EMPTY = 1


@functools.cache
def matched(pattern: tuple[str, ...]) -> int:
    """
    The sequences of L{SEQUENCES} C{pattern} (parsed) matches, as bits.
    """
    return sum(1 << i for i, words in enumerate(SEQUENCES) if p.matches(pattern, words))


def matched_by_any(patterns) -> int:
    """
    The sequences one of C{patterns} matches, as bits.
    """
    union = 0
    for pattern in patterns:
        union |= matched(pattern)
    return union


@functools.cache
def short_patterns(most_words: int) -> list[tuple[str, ...]]:
    """
    Every normal-form pattern of up to C{most_words} words over two named
    words and the wildcards.
    """
    return sorted({p.normal_form(words) for n in range(1, most_words + 1)
                   for words in itertools.product(["a", "b", p.ONE, p.ANY], repeat=n)})
