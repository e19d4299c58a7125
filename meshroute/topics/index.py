"""
The subscriptions of a router by pattern, to match a publication
against all of them at once (L{PatternIndex}).

A trie of the patterns' words, as RabbitMQ's topic exchange keeps one: a
publication walks it once, following at each node the child of its
next word, the C{*} child, and the C{#} child (which may take any number
of words), so the cost grows with the topic's length and the patterns
that share its prefixes, not with the number of subscriptions.
"""

from collections.abc import Hashable

from meshroute.topics.patterns import ANY, ONE


class _Node:
    __slots__ = ("children", "values")

    def __init__(self) -> None:
        self.children: dict[str, _Node] = {}
        self.values: set = set()


class PatternIndex:
    """
    Values (subscriptions, peers) under parsed patterns; L{match} gives
    every value whose pattern matches a topic.
    """

    def __init__(self) -> None:
        self._root = _Node()
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def add(self, pattern: tuple[str, ...], value: Hashable) -> None:
        node = self._root
        for word in pattern:
            node = node.children.setdefault(word, _Node())
        if value not in node.values:
            node.values.add(value)
            self._count += 1

    def remove(self, pattern: tuple[str, ...], value: Hashable) -> None:
        """
        Remove C{value} from C{pattern}, and the nodes left empty.
        """
        path = [self._root]
        for word in pattern:
            child = path[-1].children.get(word)
            if child is None:
                return
            path.append(child)
        if value not in path[-1].values:
            return
        path[-1].values.discard(value)
        self._count -= 1
        for depth in range(len(pattern), 0, -1):
            node = path[depth]
            if node.values or node.children:
                break
            del path[depth - 1].children[pattern[depth - 1]]

    def match(self, topic: tuple[str, ...]) -> set:
        """
        Every value whose pattern matches C{topic} (parsed).
        """
        found: set = set()
        seen: set[tuple[int, int]] = set()
        stack = [(self._root, 0)]
        while stack:
            node, i = stack.pop()
            key = (id(node), i)
            if key in seen:
                continue
            seen.add(key)
            hash_child = node.children.get(ANY)
            if hash_child is not None:
                # '#' takes none, some or all of the words left.
                stack.extend((hash_child, k) for k in range(i, len(topic) + 1))
            if i == len(topic):
                found |= node.values
                continue
            for word in (topic[i], ONE):
                child = node.children.get(word)
                if child is not None:
                    stack.append((child, i + 1))
        return found
