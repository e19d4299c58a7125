"""
Retained topic messages across whole routers linked in memory
(docs/topics.md, "Retained messages"): kept at every router, given to a
later subscriber anywhere once and before live copies, replaced by a
newer one, cleared by an empty one, through restarts and links that
come back, the same winner everywhere when two routers retain one topic
at once, whatever their clocks; bounded, and expiring.
"""

import dataclasses

import pytest

from meshroute.messages import PUBLICATION_HEADER, TARGETS_HEADER, TOPIC_QUEUE
from meshroute.router.views import describe_topics
from meshroute.testing.memory_mesh import MemoryMesh
from meshroute.topics.retained import RETAIN_HEADER, RETAINED_HEADER
from support.mesh_testing import assert_confirmed, events_of, mesh  # noqa: F401 (mesh: a fixture)
from support.topic_testing import TopicConsumer, publish, star

ROUTERS = ("router-a", "router-b", "router-c", "router-d", "router-e")
RETAIN = {RETAIN_HEADER: "true"}


def retain(mesh, router: str, topic: str, body: bytes, persistent=True, headers=()):
    engine = mesh.routers[router].engine
    return engine.submit(f"topic:{topic}", body, {**RETAIN, **dict(headers)}, persistent)


def tables(mesh, routers=ROUTERS) -> dict:
    """
    Each router's retained table: topic -> (body, origin, stamp).
    """
    return {name: {topic: (entry.body, entry.origin, entry.stamp)
                   for topic, entry in mesh.routers[name].engine.retained.table.entries.items()}
            for name in routers}


def all_equal(mesh, routers=ROUTERS) -> dict:
    found = tables(mesh, routers)
    first = found[routers[0]]
    assert all(table == first for table in found.values()), found
    return first


def assert_winner(mesh, topic: str, body: bytes, origin: str) -> None:
    "Every router holds C{topic}'s retained message C{body} published at C{origin}."
    assert all_equal(mesh)[topic][:2] == (body, origin)


@pytest.mark.parametrize("persistent", [True, False])
def test_a_later_subscriber_on_another_router_gets_it_once_and_first(mesh, persistent):
    star(mesh)
    routers = mesh.routers
    assert_confirmed([retain(mesh, "router-a", "prices.eu.gbp", b"1.17", persistent)])
    mesh.run(1)
    assert all_equal(mesh)["prices.eu.gbp"][:2] == (b"1.17", "router-a")
    subscriber = TopicConsumer(routers["router-c"], "prices.#", retained="all")
    plain = TopicConsumer(routers["router-c"], "prices.#")
    mesh.run(1)
    assert_confirmed(publish(mesh, "router-a", "prices.eu.gbp", 2, persistent=persistent))
    mesh.run(1)
    assert subscriber.bodies == [b"1.17", b"0", b"1"]
    first = subscriber.received[0]
    assert first.headers[RETAINED_HEADER] == "true" and first.headers[RETAIN_HEADER] == "true"
    assert first.origin == "router-a"
    assert RETAINED_HEADER not in subscriber.received[1].headers
    assert plain.bodies == [b"0", b"1"]


def test_its_live_copy_is_not_given_again_to_a_subscription_given_it_retained(mesh):
    star(mesh)
    routers = mesh.routers
    TopicConsumer(routers["router-c"], "t")  # c's interest: a live copy comes to c
    mesh.run(1)
    assert_confirmed([retain(mesh, "router-a", "t", b"kept", persistent=False)])
    mesh.run(1)
    subscriber = TopicConsumer(routers["router-c"], "t", retained="all")
    mesh.run(0.1)
    assert subscriber.bodies == [b"kept"]
    # The live copy of that publication reaches c's fan-out now (as it
    # would had it been slower than the flood): left out.
    [(publication, entry)] = [(e.publication, e) for e in
                              routers["router-c"].engine.retained.table.entries.values()]
    live = dataclasses.replace(
        subscriber.received[0], msg_id=f"{publication}>router-a:x", dest_queue=TOPIC_QUEUE,
        persistent=False,
        headers={**entry.headers, TARGETS_HEADER: "router-c", PUBLICATION_HEADER: publication})
    routers["router-c"].engine.queues.put_transient(TOPIC_QUEUE, live)
    mesh.run(1)
    assert subscriber.bodies == [b"kept"]


def test_live_copies_keep_the_retain_header_and_a_client_sets_no_retained_flag(mesh):
    star(mesh)
    subscriber = TopicConsumer(mesh.routers["router-e"], "t")
    mesh.run(1)
    assert_confirmed([retain(mesh, "router-a", "t", b"live",
                             headers={RETAINED_HEADER: "true"})])
    mesh.run(1)
    [copy] = subscriber.received
    assert copy.headers[RETAIN_HEADER] == "true" and RETAINED_HEADER not in copy.headers


def test_a_newer_one_replaces_it_wherever_it_was_published(mesh):
    star(mesh)
    assert_confirmed([retain(mesh, "router-a", "t", b"old")])
    mesh.run(1)
    assert_confirmed([retain(mesh, "router-e", "t", b"new")])
    mesh.run(1)
    assert_winner(mesh, "t", b"new", "router-e")
    subscriber = TopicConsumer(mesh.routers["router-c"], "#", retained="all")
    mesh.run(1)
    assert subscriber.bodies == [b"new"]
    assert [e["topic"] for e in events_of(mesh.routers["router-c"], "topic.retained")] == [
        "t", "t"]


def test_an_empty_one_clears_it_and_is_delivered_to_nobody(mesh):
    star(mesh)
    live = TopicConsumer(mesh.routers["router-d"], "t")
    mesh.run(1)
    assert_confirmed([retain(mesh, "router-a", "t", b"kept")])
    mesh.run(1)
    assert_confirmed([retain(mesh, "router-c", "t", b"")])
    mesh.run(1)
    assert live.bodies == [b"kept"]
    # A tombstone everywhere: an older entry arriving late cannot bring it back.
    assert_winner(mesh, "t", b"", "router-c")
    assert all(mesh.routers[name].engine.retained.describe()["count"] == 0
               for name in ROUTERS)
    later = TopicConsumer(mesh.routers["router-e"], "t", retained="all")
    mesh.run(1)
    assert later.bodies == []
    [cleared] = events_of(mesh.routers["router-b"], "topic.retained-cleared")
    assert (cleared["topic"], cleared["origin"]) == ("t", "router-c")


def test_it_survives_a_restart_and_reaches_a_router_that_was_away(mesh):
    star(mesh)
    mesh.stop("router-e")
    assert_confirmed([retain(mesh, "router-a", "t", b"kept")])
    mesh.run(1)
    mesh.stop("router-c")
    mesh.add("router-c", connect_to=["router-b"])
    mesh.add("router-e", connect_to=["router-d"])
    # c read it from its store, before any link brought it again.
    assert mesh.routers["router-c"].engine.retained.table.entries["t"].body == b"kept"
    mesh.run(2)
    assert_winner(mesh, "t", b"kept", "router-a")
    subscriber = TopicConsumer(mesh.routers["router-e"], "t", retained="all")
    mesh.run(1)
    assert subscriber.bodies == [b"kept"]


def test_two_routers_retaining_one_topic_at_once_agree_on_the_winner(mesh):
    star(mesh)
    # Both before either hears of the other's.
    assert_confirmed([retain(mesh, "router-a", "t", b"from a"),
                      retain(mesh, "router-e", "t", b"from e")])
    mesh.run(2)
    # One clock: equal stamps, the router name decides.
    assert_winner(mesh, "t", b"from e", "router-e")


class SkewedMesh(MemoryMesh):
    """
    A mesh whose router C{slow} reads its clock C{behind_s} behind the
    others' (timers still run on the mesh's).
    """

    slow, behind_s = "router-e", 60.0

    def router_clock(self, name: str):
        return _Behind(self.clock, self.behind_s) if name == self.slow else self.clock


class _Behind:
    def __init__(self, clock, behind_s: float) -> None:
        self._clock, self._behind_s = clock, behind_s

    def seconds(self) -> float:
        return self._clock.seconds() - self._behind_s

    def callLater(self, delay, f, *args, **kwargs):
        return self._clock.callLater(delay, f, *args, **kwargs)

    def getDelayedCalls(self) -> list:
        return self._clock.getDelayedCalls()


@pytest.fixture
def skewed(tmp_path):
    mesh = SkewedMesh(tmp_path)
    mesh.clock.advance(1_000_000)
    yield mesh
    mesh.stop_all()


def test_a_retain_made_after_another_was_seen_wins_whatever_the_clocks(skewed):
    star(skewed)
    assert_confirmed([retain(skewed, "router-a", "t", b"first")])
    skewed.run(1)
    # e's clock is a minute behind, but e has seen a's: its own is newer.
    assert_confirmed([retain(skewed, "router-e", "t", b"second")])
    skewed.run(1)
    assert_winner(skewed, "t", b"second", "router-e")
    # Concurrent ones: the clock that reads later wins, everywhere.
    assert_confirmed([retain(skewed, "router-a", "u", b"from a"),
                      retain(skewed, "router-e", "u", b"from e")])
    skewed.run(2)
    assert_winner(skewed, "u", b"from a", "router-a")


def test_if_new_gives_none_to_a_durable_subscription_that_exists(mesh):
    star(mesh)
    assert_confirmed([retain(mesh, "router-a", "t", b"kept")])
    mesh.run(1)
    router = mesh.routers["router-c"]
    first = TopicConsumer(router, "t", client_id="app", durable="sub", retained="if-new")
    mesh.run(1)
    assert first.bodies == [b"kept"] and first.received[0].persistent
    first.subscription.cancel()
    again = TopicConsumer(router, "t", client_id="app", durable="sub", retained="if-new")
    mesh.run(1)
    assert again.bodies == []
    again.subscription.cancel()
    # all: given again, under a new id.
    third = TopicConsumer(router, "t", client_id="app", durable="sub", retained="all")
    mesh.run(1)
    assert third.bodies == [b"kept"]
    assert third.received[0].msg_id != first.received[0].msg_id


def test_a_durable_subscription_gets_them_through_its_router_s_restart(mesh):
    star(mesh)
    assert_confirmed([retain(mesh, "router-a", "t.x", b"x"), retain(mesh, "router-a", "t.y",
                                                                     b"y")])
    mesh.run(1)
    router = mesh.routers["router-c"]
    first = TopicConsumer(router, "t.#", credit=0, client_id="app", durable="sub",
                          retained="all")
    mesh.run(1)
    assert first.failure == [] and first.bodies == []
    first.subscription.cancel()
    mesh.stop("router-c")
    mesh.add("router-c", connect_to=["router-b"])
    mesh.run(1)
    again = TopicConsumer(mesh.routers["router-c"], "t.#", client_id="app", durable="sub")
    mesh.run(1)
    assert again.bodies == [b"x", b"y"]


def test_past_max_retained_a_new_topic_is_refused_there_and_still_delivered(mesh):
    mesh.add("router-a", connect_to=["router-b"])
    config = mesh.config("router-b")
    mesh.start(dataclasses.replace(config, routing=dataclasses.replace(config.routing,
                                                                       max_retained=1)))
    mesh.add("router-c", connect_to=["router-b"])
    mesh.run(1)
    live = TopicConsumer(mesh.routers["router-b"], "#")
    mesh.run(1)
    assert_confirmed([retain(mesh, "router-a", "t1", b"1"), retain(mesh, "router-a", "t2", b"2")])
    mesh.run(1)
    assert set(tables(mesh, ["router-a"])["router-a"]) == {"t1", "t2"}
    assert set(tables(mesh, ["router-b"])["router-b"]) == {"t1"}
    # Passed on, once, for the routers beyond.
    assert set(tables(mesh, ["router-c"])["router-c"]) == {"t1", "t2"}
    [refused] = events_of(mesh.routers["router-b"], "topic.retained-refused")
    assert (refused["topic"], refused["reason"]) == ("t2", "max-retained")
    assert live.bodies == [b"1", b"2"]
    # Replacing a topic held is not refused.
    assert_confirmed([retain(mesh, "router-a", "t1", b"new")])
    mesh.run(1)
    assert tables(mesh, ["router-b"])["router-b"]["t1"][0] == b"new"


def test_the_topics_view_shows_what_is_held(mesh):
    star(mesh)
    assert_confirmed([retain(mesh, "router-a", "a", b"12"), retain(mesh, "router-a", "b", b""),
                      retain(mesh, "router-a", "c", b"345")])
    mesh.run(1)
    assert describe_topics(mesh.routers["router-e"].engine)["retained"] == {
        "count": 2, "bytes": 5, "cleared": 1, "max_count": 10_000,
        "max_bytes": 64 * 1024 * 1024}


def test_one_with_a_time_to_live_expires(mesh):
    star(mesh)
    expires_ms = int((mesh.clock.seconds() + 5) * 1000)
    d = mesh.routers["router-a"].engine.submit("topic:t", b"brief", RETAIN, True,
                                               expires_ms=expires_ms)
    assert_confirmed([d])
    mesh.run(1)
    assert all_equal(mesh)["t"][0] == b"brief"
    assert all(mesh.routers[n].engine.retained.table.entries["t"].expires_at_ms == expires_ms
               for n in ROUTERS)
    mesh.run(5)
    subscriber = TopicConsumer(mesh.routers["router-c"], "t", retained="all")
    mesh.run(1)
    assert subscriber.bodies == []
    mesh.run(60)
    assert all_equal(mesh) == {}


@pytest.mark.timeout(60)
def test_routers_at_their_limits_pass_a_refused_one_on_once_round_a_loop(mesh):
    # b, c and d, in a ring, hold none: each passes it on once, not round and round.
    mesh.add("router-a", connect_to=["router-b"])
    for name, peers in (("router-b", ["router-c"]), ("router-c", ["router-d"]),
                        ("router-d", ["router-b"])):
        config = mesh.config(name, connect_to=peers)
        mesh.start(dataclasses.replace(config, routing=dataclasses.replace(config.routing,
                                                                           max_retained=0)))
    mesh.run(1)
    assert_confirmed([retain(mesh, "router-a", "t", b"x")])
    mesh.run(2)
    for name in ("router-b", "router-c", "router-d"):
        assert 1 <= len(events_of(mesh.routers[name], "topic.retained-refused")) <= 2
