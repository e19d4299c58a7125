"""
The link-state route table, alone and in a simulated mesh.

L{Mesh} floods advertisements between L{RouteTable}s over a set of up
links, the way the link layer will: link up sends both ends' own
advertisement to all their neighbours and each end's whole database to
the other; whatever C{received} returns goes on to the other neighbours
(a router's own refreshed advertisement to all of them).
"""

from collections import deque

from hypothesis import given, settings
from hypothesis import strategies as st
from twisted.internet.task import Clock
from zope.interface.verify import verifyObject

from meshroute.interfaces import IRouteTable
from meshroute.routing import Advertisement, RouteTable


def clock_at(seconds: float) -> Clock:
    clock = Clock()
    clock.advance(seconds)
    return clock


class Mesh:
    """
    RouteTables exchanging advertisements over the links that are up.
    """

    def __init__(self, names, clock=None) -> None:
        self.clock = clock if clock is not None else Clock()
        self.tables = {name: RouteTable(name, self.clock) for name in names}
        self.links: set[frozenset[str]] = set()
        self.pending: deque = deque()

    def peers(self, name: str) -> set[str]:
        return {other for link in self.links if name in link for other in link - {name}}

    def _flood(self, sender: str, advertisements, exclude: str | None = None) -> None:
        for adv in advertisements:
            for peer in self.peers(sender):
                if peer != exclude or adv.origin == sender:
                    self.pending.append((sender, peer, adv))

    def up(self, a: str, b: str) -> None:
        self.links.add(frozenset((a, b)))
        self._flood(a, self.tables[a].link_up(b))
        self._flood(b, self.tables[b].link_up(a))
        for x, y in ((a, b), (b, a)):
            for adv in self.tables[x].advertisements():
                self.pending.append((x, y, adv))

    def down(self, a: str, b: str) -> None:
        self.links.discard(frozenset((a, b)))
        self.pending = deque(
            (s, r, adv) for s, r, adv in self.pending if {s, r} != {a, b}
        )
        self._flood(a, self.tables[a].link_down(b))
        self._flood(b, self.tables[b].link_down(a))

    def restart(self, name: str, clock) -> None:
        """
        C{name} dies (all its links go down) and a new incarnation with
        an empty database starts, on C{clock}.
        """
        for peer in sorted(self.peers(name)):
            self.down(name, peer)
        self.tables[name] = RouteTable(name, clock)

    def settle(self, limit: int = 100_000) -> int:
        """
        Deliver until quiet.  @return: the number of deliveries.
        """
        count = 0
        while self.pending:
            sender, receiver, adv = self.pending.popleft()
            if frozenset((sender, receiver)) not in self.links:
                continue
            self._flood(receiver, self.tables[receiver].received(adv), exclude=sender)
            count += 1
            assert count < limit, "flooding did not stop"
        return count

    def build(self, edges) -> "Mesh":
        for a, b in edges:
            self.up(a, b)
        self.settle()
        return self


def mesh(names, edges) -> Mesh:
    return Mesh(names).build(edges)


def bfs(names, links, source) -> dict[str, int]:
    adjacency = {n: set() for n in names}
    for a, b in (tuple(link) for link in links):
        adjacency[a].add(b)
        adjacency[b].add(a)
    distance = {source: 0}
    queue = deque([source])
    while queue:
        node = queue.popleft()
        for other in adjacency[node]:
            if other not in distance:
                distance[other] = distance[node] + 1
                queue.append(other)
    return distance


def check_converged(m: Mesh) -> None:
    """
    Every pair: following next hops reaches the destination in exactly
    the BFS distance, with no repeated router, through the smallest
    next hop at each step; unreachable pairs give None.
    """
    names = sorted(m.tables)
    for source in names:
        distances = bfs(names, m.links, source)
        table = m.tables[source]
        assert table.routes() == {
            d: (table.next_hop(d), distances[d]) for d in distances if d != source
        }
        for dest in names:
            if dest == source:
                assert m.tables[source].next_hop(dest) is None
                continue
            if dest not in distances:
                assert m.tables[source].next_hop(dest) is None
                continue
            path = [source]
            while path[-1] != dest:
                here = path[-1]
                hop = m.tables[here].next_hop(dest)
                assert hop is not None and frozenset((here, hop)) in m.links
                to_dest = bfs(names, m.links, dest)
                best = min(p for p in m.peers(here) if to_dest.get(p) == to_dest[here] - 1)
                assert hop == best
                assert hop not in path
                path.append(hop)
            assert len(path) - 1 == distances[dest]


# The table alone.


def test_provides_interface():
    assert verifyObject(IRouteTable, RouteTable("a", Clock()))


def test_advertisement_neighbors_are_sorted_and_unique():
    assert Advertisement("a", 1, ("c", "b", "c")).neighbors == ("b", "c")


def test_sequence_follows_clock_and_always_grows():
    clock = clock_at(5)
    table = RouteTable("a", clock)
    assert table.own.seq == 5000
    [own] = table.link_up("b")
    assert own == Advertisement("a", 5001, ("b",))
    clock.advance(10)
    [own] = table.link_down("b")
    assert own == Advertisement("a", 15000, ())


def test_link_up_again_and_unknown_link_down_change_nothing():
    table = RouteTable("a", clock_at(1))
    [first] = table.link_up("b")
    assert table.link_up("b") == [first]
    assert table.link_down("c") == [first]


def test_link_to_self_is_refused():
    table = RouteTable("a", Clock())
    try:
        table.link_up("a")
    except ValueError:
        pass
    else:
        raise AssertionError("linked to itself")


def test_received_stores_only_newer():
    table = RouteTable("a", Clock())
    old = Advertisement("b", 3, ("a",))
    assert table.received(old) == [old]
    assert table.received(old) == []
    assert table.received(Advertisement("b", 2, ())) == []
    newer = Advertisement("b", 4, ("a", "c"))
    assert table.received(newer) == [newer]
    assert table.advertisements() == [table.own, newer]


def test_own_older_advertisement_is_ignored():
    table = RouteTable("a", clock_at(10))
    assert table.received(Advertisement("a", 1, ("x",))) == []
    assert table.own.neighbors == ()


def test_own_newer_advertisement_makes_us_jump_above_it():
    table = RouteTable("a", clock_at(10))
    table.link_up("b")
    [own] = table.received(Advertisement("a", 99_999, ("x",)))
    assert own == table.own == Advertisement("a", 100_000, ("b",))


def test_direct_peer_needs_its_advertisement_listing_us():
    table = RouteTable("a", Clock())
    table.link_up("b")
    assert table.next_hop("b") is None
    assert table.known("b")
    table.received(Advertisement("b", 1, ("a",)))
    assert table.routes() == {"b": ("b", 1)}


def test_one_sided_advertisement_gives_no_route():
    """
    A lists B but B does not list A: no edge, from anyone's view.
    """
    table = RouteTable("c", Clock())
    table.link_up("a")
    table.received(Advertisement("a", 1, ("b", "c")))
    table.received(Advertisement("b", 1, ()))
    assert table.routes() == {"a": ("a", 1)}
    assert table.next_hop("b") is None
    assert table.known("b")


def test_known():
    table = RouteTable("a", Clock())
    assert table.known("a")
    assert not table.known("b")
    table.link_up("b")
    table.link_down("b")
    assert table.known("b")
    table.received(Advertisement("c", 1, ("d",)))
    assert table.known("c") and table.known("d")
    assert not table.known("e")


def test_remembered_routers_are_known_and_news_is_what_was_first_heard():
    table = RouteTable("a", Clock())
    table.remember({"c"})
    assert table.known("c") and table.newly_heard() == set()
    table.link_up("b")
    table.received(Advertisement("b", 1, ("a", "c", "d")))
    assert table.newly_heard() == {"b", "d"}  # c was remembered, a is us
    table.received(Advertisement("b", 2, ("a", "d")))
    assert table.newly_heard() == set()


def test_routes_are_by_router_name():
    m = mesh("edcba", ["ed", "dc", "cb", "ba", "ae"])
    assert list(m.tables["c"].routes()) == ["a", "b", "d", "e"]


def test_routes_is_a_copy():
    m = mesh("ab", ["ab"])
    m.tables["a"].routes().clear()
    assert m.tables["a"].routes() == {"b": ("b", 1)}


# Topologies.


def test_line():
    m = mesh("abc", ["ab", "bc"])
    assert m.tables["a"].routes() == {"b": ("b", 1), "c": ("b", 2)}
    assert m.tables["c"].routes() == {"b": ("b", 1), "a": ("b", 2)}
    assert m.tables["b"].routes() == {"a": ("a", 1), "c": ("c", 1)}
    check_converged(m)


def test_every_router_holds_every_advertisement():
    m = mesh("abc", ["ab", "bc"])
    everything = {t.own for t in m.tables.values()}
    for table in m.tables.values():
        assert set(table.advertisements()) == everything


def test_ring_of_three():
    m = mesh("abc", ["ab", "bc", "ca"])
    assert m.tables["a"].routes() == {"b": ("b", 1), "c": ("c", 1)}
    check_converged(m)


def test_ring_of_five():
    m = mesh("abcde", ["ab", "bc", "cd", "de", "ea"])
    assert m.tables["a"].routes() == {
        "b": ("b", 1),
        "c": ("b", 2),
        "d": ("e", 2),
        "e": ("e", 1),
    }
    check_converged(m)


def test_equal_paths_take_smallest_next_hop():
    m = mesh("abcd", ["ac", "ab", "cd", "bd"])
    assert m.tables["a"].next_hop("d") == "b"
    assert m.tables["d"].next_hop("a") == "b"
    check_converged(m)


def test_full_mesh_of_four():
    names = "abcd"
    m = mesh(names, [a + b for a in names for b in names if a < b])
    for name, table in m.tables.items():
        assert table.routes() == {o: (o, 1) for o in names if o != name}
    check_converged(m)


def test_star():
    m = mesh("hwxyz", ["hw", "hx", "hy", "hz"])
    assert m.tables["w"].routes() == {"h": ("h", 1), "x": ("h", 2), "y": ("h", 2), "z": ("h", 2)}
    check_converged(m)


# Failures.


def test_link_failure_moves_to_the_alternative_path():
    m = mesh("abc", ["ab", "bc", "ca"])
    assert m.tables["a"].next_hop("b") == "b"
    m.down("a", "b")
    m.settle()
    assert m.tables["a"].routes() == {"b": ("c", 2), "c": ("c", 1)}
    assert m.tables["b"].next_hop("a") == "c"
    check_converged(m)


def test_either_ends_advertisement_is_enough_to_drop_the_edge():
    m = mesh("abc", ["ab", "bc", "ca"])
    m.tables["c"].received(m.tables["a"].link_down("b")[0])
    assert m.tables["c"].next_hop("b") == "b"
    assert m.tables["a"].next_hop("b") == "c"


def test_link_failure_without_alternative_makes_unreachable_but_known():
    m = mesh("abc", ["ab", "bc"])
    m.down("b", "c")
    m.settle()
    assert m.tables["a"].next_hop("c") is None
    assert m.tables["a"].known("c")
    assert m.tables["a"].routes() == {"b": ("b", 1)}
    assert m.tables["c"].routes() == {}
    assert m.tables["c"].known("a")
    check_converged(m)


def test_partition_and_heal():
    m = mesh("abcdef", ["ab", "bc", "cd", "de", "ef", "fa"])
    m.down("a", "b")
    m.down("d", "e")
    m.settle()
    assert m.tables["a"].next_hop("b") is None
    assert m.tables["a"].next_hop("e") == "f"
    assert m.tables["b"].next_hop("d") == "c"
    check_converged(m)
    m.up("d", "e")
    m.settle()
    assert m.tables["a"].routes()["b"] == ("f", 5)
    check_converged(m)
    m.up("a", "b")
    m.settle()
    assert m.tables["a"].routes()["b"] == ("b", 1)
    check_converged(m)


def test_restart_with_later_clock_supersedes_the_old_advertisement():
    m = mesh("abc", ["ab", "bc", "ca"])
    stale = m.tables["b"].own
    m.restart("b", clock_at(100))
    m.up("b", "c")
    m.settle()
    fresh = m.tables["b"].own
    assert fresh.seq > stale.seq and fresh.neighbors == ("c",)
    for table in m.tables.values():
        assert fresh in table.advertisements()
        assert stale not in table.advertisements()
    assert m.tables["a"].next_hop("b") == "c"
    check_converged(m)
    m.up("a", "b")
    m.settle()
    check_converged(m)


def test_restart_with_earlier_clock_jumps_above_its_previous_incarnation():
    clock = clock_at(1000)
    m = Mesh("abc", clock).build(["ab", "bc"])
    for _ in range(3):
        m.down("a", "b")
        m.up("a", "b")
    m.settle()
    stale = m.tables["b"].own
    m.restart("b", clock_at(1))
    m.up("a", "b")
    m.settle()
    fresh = m.tables["b"].own
    assert fresh.seq > stale.seq and fresh.neighbors == ("a",)
    assert fresh in m.tables["a"].advertisements()
    # c is cut off: it still holds the stale one until the link heals.
    assert stale in m.tables["c"].advertisements()
    assert m.tables["a"].next_hop("c") is None
    check_converged(m)
    m.up("b", "c")
    m.settle()
    for table in m.tables.values():
        assert m.tables["b"].own in table.advertisements()
        assert stale not in table.advertisements()
    assert m.tables["a"].next_hop("c") == "b"
    check_converged(m)


def test_flooding_stops():
    m = Mesh("abcde")
    m.build(["ab", "bc", "cd", "de", "ea", "ac"])
    assert m.settle() == 0


# Random graphs.

NAMES = [f"r{i:02d}" for i in range(12)]


@st.composite
def graphs(draw):
    names = NAMES[: draw(st.integers(min_value=1, max_value=12))]
    pairs = [(a, b) for a in names for b in names if a < b]
    edges = draw(st.lists(st.sampled_from(pairs), unique=True, max_size=30)) if pairs else []
    return names, edges


@settings(max_examples=150, deadline=None)
@given(graphs())
def test_random_graphs_converge_to_shortest_paths(graph):
    names, edges = graph
    check_converged(mesh(names, edges))


@settings(max_examples=100, deadline=None)
@given(graphs(), st.data())
def test_random_failures_converge_to_shortest_paths(graph, data):
    names, edges = graph
    m = mesh(names, edges)
    failing = data.draw(st.lists(st.sampled_from(edges), unique=True) if edges else st.just([]))
    for a, b in failing:
        m.down(a, b)
    m.settle()
    check_converged(m)
    healing = data.draw(st.lists(st.sampled_from(failing), unique=True) if failing else st.just([]))
    for a, b in healing:
        m.up(a, b)
    m.settle()
    check_converged(m)


# Epochs: the instances of an HA pair share one router name; the newer
# epoch's advertisements win whatever their sequence numbers.


def test_a_higher_epoch_wins_with_a_lower_seq():
    """
    A new instance numbers from its own clock, which may be behind the
    old one's: its epoch decides.
    """
    table = RouteTable("a", Clock())
    old = Advertisement("b", 9_000, ("a",), epoch=1)
    assert table.received(old) == [old]
    new = Advertisement("b", 5, ("a", "c"), epoch=2)
    assert table.received(new) == [new]
    assert table.advertisements() == [table.own, new]


def test_a_lower_epoch_loses_with_a_higher_seq():
    table = RouteTable("a", Clock())
    new = Advertisement("b", 5, ("a",), epoch=2)
    table.received(new)
    assert table.received(Advertisement("b", 9_000, (), epoch=1)) == []
    assert table.advertisements() == [table.own, new]


def test_within_one_epoch_seq_decides():
    table = RouteTable("a", Clock())
    table.received(Advertisement("b", 5, ("a",), epoch=2))
    assert table.received(Advertisement("b", 4, (), epoch=2)) == []
    newer = Advertisement("b", 6, (), epoch=2)
    assert table.received(newer) == [newer]


def test_own_advertisements_carry_the_epoch():
    table = RouteTable("a", clock_at(1), epoch=7)
    assert table.own.epoch == 7
    [own] = table.link_up("b")
    assert own == Advertisement("a", 1001, ("b",), epoch=7)


def test_a_newer_instance_of_ourselves_is_not_fought():
    """
    An advertisement about us from a higher epoch is the instance that
    took our place: we do not jump above it (we would win nothing: its
    epoch is higher) nor flood anything.
    """
    table = RouteTable("a", clock_at(10), epoch=1)
    table.link_up("b")
    own = table.own
    assert table.received(Advertisement("a", 5, ("c",), epoch=2)) == []
    assert table.own == own


def test_a_stale_instance_of_ourselves_is_ignored_whatever_its_seq():
    table = RouteTable("a", clock_at(10), epoch=2)
    own = table.own
    assert table.received(Advertisement("a", 99_999, ("x",), epoch=1)) == []
    assert table.own == own


def test_routes_follow_the_new_epoch_in_a_mesh():
    """
    The old instance of b (epoch 1, its clock ahead) and the new one
    (epoch 2) both advertise b; every router keeps the new one's view.
    """
    m = mesh("abc", ["ab", "bc"])
    for name in "ac":
        m.tables[name].received(Advertisement("b", 10**9, (), epoch=1))
    assert m.tables["a"].next_hop("c") is None
    new_b = Advertisement("b", 1, ("a", "c"), epoch=2)
    for name in "ac":
        m.tables[name].received(new_b)
        m.tables[name].received(Advertisement("b", 10**9 + 1, (), epoch=1))
    assert m.tables["a"].routes() == {"b": ("b", 1), "c": ("b", 2)}


def test_changes_are_when_each_routers_links_last_changed():
    clock = Clock()
    clock.advance(100)
    table = RouteTable("a", clock)
    assert table.changes() == {"a": 100}
    clock.advance(1)
    table.link_up("b")
    table.received(Advertisement("b", 1, ("a",)))
    assert table.changes() == {"a": 101, "b": 101}
    assert table.heard() == {"a", "b"}
    clock.advance(1)
    # A newer advertisement with the same neighbours changes nothing.
    table.received(Advertisement("b", 2, ("a",)))
    assert table.changes()["b"] == 101
    table.received(Advertisement("b", 3, ("a", "c")))
    table.link_down("b")
    assert table.changes() == {"a": 102, "b": 102}
    assert table.heard() == {"a", "b", "c"}


def test_adjacencies_are_the_graph_and_the_links_one_end_still_advertises():
    """
    What the topology page draws: a silent router (frozen, say) keeps its
    last advertisement in the mesh, so its links that the other ends
    closed stay listed by it alone.
    """
    m = mesh("abc", ["ab", "bc", "ca"])
    assert m.tables["a"].adjacencies() == {("a", "b"): True, ("a", "c"): True,
                                           ("b", "c"): True}
    # b falls silent: a and c close their links to it, b says nothing.
    m.tables["c"].received(m.tables["a"].link_down("b")[0])
    m.tables["a"].received(m.tables["c"].link_down("b")[0])

    assert m.tables["a"].adjacencies() == {("a", "b"): False, ("a", "c"): True,
                                           ("b", "c"): False}
