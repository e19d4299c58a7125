"""
Interest advertisements and fan-out (L{meshroute.topics.interest}): the
newest version wins whatever order advertisements arrive in, withdrawal
and forgetting stop matches, and a publication's targets are split by
next hop without loss or overlap.
"""

from hypothesis import given
from hypothesis import strategies as st

from meshroute.topics.interest import InterestTable, LocalInterest, fan_out
from meshroute.topics.patterns import aggregate, matches, parse_pattern, parse_topic

ROUTERS = ["router-a", "router-b", "router-c"]
PATTERNS = [parse_pattern(p) for p in ("prices.#", "prices.*.gbp", "news.eu", "#")]
adverts = st.tuples(st.sampled_from(ROUTERS), st.integers(1, 6),
                    st.frozensets(st.sampled_from(PATTERNS), max_size=3))


@given(st.lists(adverts, max_size=20), st.randoms())
def test_whatever_order_advertisements_arrive_in_the_newest_wins(sent, random):
    """
    Delivered in any order (links race), the table ends with each
    router's newest advertisement; advertisements of one version are the
    same advertisement (a router raises its version with every change).
    """
    newest: dict[str, tuple[int, frozenset]] = {}
    unique: dict[tuple[str, int], frozenset] = {}
    for router, version, patterns in sent:
        unique.setdefault((router, version), patterns)
    for (router, version), patterns in unique.items():
        if router not in newest or version > newest[router][0]:
            newest[router] = (version, patterns)
    order = list(unique.items())
    random.shuffle(order)
    table = InterestTable()
    for (router, version), patterns in order:
        table.advertised(router, version, patterns)
    for router in ROUTERS:
        version, patterns = newest.get(router, (0, frozenset()))
        assert (table.version(router), table.patterns(router)) == (version, patterns)
    for topic in ("prices.eu.gbp", "news.eu", "weather"):
        parsed = parse_topic(topic)
        assert table.interested(parsed) == {
            router for router, (_, patterns) in newest.items()
            if any(matches(p, parsed) for p in patterns)}


def test_withdrawal_and_forgetting_stop_the_flow():
    table = InterestTable()
    prices = parse_topic("prices.eu.gbp")
    assert table.advertised("router-b", 1, {parse_pattern("prices.#")})
    assert table.interested(prices) == {"router-b"}
    assert table.advertised("router-b", 2, set())  # the last subscription ended
    assert table.interested(prices) == set()
    assert not table.advertised("router-b", 1, {parse_pattern("prices.#")})  # late, old
    assert table.interested(prices) == set()
    table.advertised("router-c", 4, {parse_pattern("#")})
    table.forget("router-c")
    assert table.interested(prices) == set() and table.version("router-c") == 0


@given(st.dictionaries(st.sampled_from(["b", "c", "d", "e", "f"]),
                       st.one_of(st.none(), st.sampled_from(["link-1", "link-2"]))))
def test_fan_out_splits_the_targets_by_next_hop_without_loss_or_overlap(routes):
    groups = fan_out(routes, routes.get)
    assert set(groups) == {hop for hop in routes.values() if hop is not None}
    reached = [target for group in groups.values() for target in group]
    assert sorted(reached) == sorted(t for t, hop in routes.items() if hop is not None)
    for hop, group in groups.items():
        assert all(routes[t] == hop for t in group)


@given(st.lists(st.tuples(st.booleans(), st.sampled_from(PATTERNS)), max_size=30))
def test_the_local_advertisement_is_the_aggregation_of_live_subscriptions(steps):
    """
    After any sequence of subscriptions beginning and ending, what the
    router advertises is the aggregation of the patterns still
    subscribed, and its version rose exactly when that changed; a table
    elsewhere that hears every change matches as the subscriptions do.
    """
    local, live, elsewhere = LocalInterest(), [], InterestTable()
    for subscribing, pattern in steps:
        before = (local.version, local.advertised)
        if subscribing:
            changed = local.subscribed(pattern)
            live.append(pattern)
        elif pattern in live:
            changed = local.unsubscribed(pattern)
            live.remove(pattern)
        else:
            continue
        assert local.advertised == frozenset(aggregate(live))
        assert changed == (local.advertised != before[1])
        assert local.version == before[0] + (1 if changed else 0)
        if changed:
            elsewhere.advertised("router-a", local.version, local.advertised)
    for topic in ("prices.eu.gbp", "news.eu", "weather.uk"):
        parsed = parse_topic(topic)
        assert (elsewhere.interested(parsed) == {"router-a"}) == any(
            matches(p, parsed) for p in live)


def test_a_covered_subscription_is_not_advertised_again():
    local = LocalInterest()
    assert local.subscribed(parse_pattern("prices.#"))
    assert not local.subscribed(parse_pattern("prices.*.gbp"))  # covered: nothing new
    assert not local.unsubscribed(parse_pattern("prices.*.gbp"))
    assert local.subscribed(parse_pattern("prices.#")) is False  # a second subscriber
    assert not local.unsubscribed(parse_pattern("prices.#"))
    assert local.unsubscribed(parse_pattern("prices.#"))  # the last one: withdrawn
    assert local.advertised == frozenset() and local.version == 2
