"""
The audit of topics (meshroute.audit.topic_views): a synthetic mesh
whose every copy's fate is known (support.audit_meshes.topic_mesh) gives
exactly those figures per durable subscription, per pair of routers and
per router; a run of whole routers in memory, publishing to durable
subscriptions across three routers with a link cut, audits exactly once.
"""

import pytest
from pyspark.sql import functions as F

from support.spark import spark  # noqa: F401 (a fixture)
from support.audit_meshes import A, ALL, B, C, D, GBP, KEEP, PRICES, topic_mesh
from support.audit_testing import audit
from support.mesh_testing import assert_confirmed, line
from support.topic_testing import TopicConsumer, publish

from meshroute.audit import topic_views
from meshroute.audit.running import EXIT_BROKEN_PROMISES, EXIT_OK
from meshroute.audit.tables import TABLES
from meshroute.testing.memory_mesh import MemoryMesh
from meshroute.topics.patterns import matches, parse_pattern, parse_topic


@pytest.fixture(scope="module")
def topics(spark, tmp_path_factory):  # noqa: F811
    directory = tmp_path_factory.mktemp("topics")
    topic_mesh(directory / "logs")
    out = directory / "audit"
    code, stdout, stderr, summary = audit(spark, [directory / "logs"], out)
    tables = {name: [row.asDict(recursive=True) for row in
                     spark.read.parquet(str(out / "tables" / name)).collect()]
              for name in TABLES}
    return code, stdout, summary, tables, out


def by(rows, *keys):
    if len(keys) == 1:
        return {row[keys[0]]: row for row in rows}
    return {tuple(row[key] for key in keys): row for row in rows}


def test_each_durable_subscription_is_proved_copy_by_copy(topics):
    code, stdout, summary, tables, out = topics
    found = by(tables["subscriptions"], "router", "queue", "period")
    assert set(found) == {(C, PRICES, 1), (C, GBP, 1), (C, GBP, 2), (D, ALL, 1), (C, KEEP, 0)}
    expected = {
        # 16 due: one doubled, one left waiting.
        (C, PRICES, 1): dict(due=16, enqueued=16, consumed=15, waiting=1, duplicated=1,
                             duplicate_copies=1),
        # Forgotten at +100 holding one; the non-persistent publication's vanished.
        (C, GBP, 1): dict(due=14, enqueued=13, consumed=12, deleted=1, lost_non_persistent=1),
        # A copy after it was forgotten.
        (C, GBP, 2): dict(due=1, enqueued=1, consumed=1, outside=1),
        # One due never enqueued; one lost on the way from B, which it missed;
        # one consumed whose enqueue record is missing counts as enqueued.
        (D, ALL, 1): dict(due=16, enqueued=15, consumed=15, lost=1, missed=1),
        # Made before the logs began.
        (C, KEEP, 0): dict(due=1, enqueued=1, consumed=1),
    }
    for key, figures in expected.items():
        row = found[key]
        for name in ("due", "enqueued", "consumed", "waiting", "deleted", "expired", "dropped",
                     "in_flight", "lost", "lost_non_persistent", "duplicated",
                     "duplicate_copies", "without_fan_out", "outside", "missed"):
            assert row[name] == figures.get(name, 0), (key, name)
    assert (found[(C, GBP, 1)]["ended_by"], found[(C, GBP, 2)]["exists"]) == ("forgotten", False)
    assert (found[(C, PRICES, 1)]["pattern"], found[(C, PRICES, 1)]["client_id"],
            found[(C, PRICES, 1)]["name"]) == ("prices.#", "app", "prices")
    assert found[(C, KEEP, 0)]["exists"] and found[(C, KEEP, 0)]["since"] is None


def test_copies_between_routers_arrive_and_are_fanned_out_once(topics):
    code, stdout, summary, tables, out = topics
    found = by(tables["topic_links"], "router", "hop")
    assert set(found) == {(A, B), (B, C), (B, D)}
    expected = {
        # The last one is still on its way; one arrived at B, whose record is missing.
        (A, B): dict(sent=19, fanned_out=17, arrived=1, in_flight=1),
        # B's record of one is missing, but C took it; one arrived at C without C's record.
        (B, C): dict(sent=17, fanned_out=17, arrived=1, without_fan_out=1),
        (B, D): dict(sent=17, fanned_out=16, lost=1, duplicated=1, duplicate_copies=1),
    }
    for key, figures in expected.items():
        for name in ("sent", "fanned_out", "arrived", "in_flight", "lost", "lost_non_persistent",
                     "dropped", "expired", "dead_lettered", "unobserved", "duplicated",
                     "duplicate_copies", "without_fan_out"):
            assert found[key][name] == figures.get(name, 0), (key, name)


def test_per_router_fan_outs_and_non_durable_deliveries_and_drops(topics):
    code, stdout, summary, tables, out = topics
    found = by(tables["topic_routers"], "router")
    assert (found[A]["publications"], found[A]["copies_taken"], found[A]["copies_sent"]) == (
        19, 0, 19)
    assert (found[B]["copies_taken"], found[B]["copies_sent"]) == (17, 34)
    assert (found[B]["non_durable_due"], found[B]["non_durable_delivered"],
            found[B]["non_durable_dropped"], found[B]["non_durable_dropped_max_depth"]) == (
        16, 15, 1, 1)
    assert (found[C]["copies_taken"], found[C]["durable_due"]) == (17, 32)
    assert (found[D]["copies_taken"], found[D]["durable_due"]) == (17, 16)
    plain = summary["topics"]["non_durable"]
    assert (plain["due"], plain["delivered"], plain["dropped"]) == (16, 15, 1)
    assert plain["dropped_by_reason"]["max-depth"] == 1


def test_the_verdict_names_what_broke_and_the_routes_have_no_copies(topics):
    code, stdout, summary, tables, out = topics
    assert code == EXIT_BROKEN_PROMISES
    reasons = " | ".join(summary["reasons"])
    for text in ("1 persistent copy(ies) due to durable subscriptions lost",
                 f"{ALL}@{D}: 1",
                 "1 copy(ies) enqueued or consumed more than once in durable subscriptions",
                 "1 copy(ies) reached durable subscriptions before they were made or after",
                 f"1 persistent copy(ies) between routers lost on the way ({B} → {D}: 1); "
                 f"missed by {ALL}@{D}: 1",
                 "1 copy(ies) between routers fanned out more than once"):
        assert text in reasons
    assert len(summary["reasons"]) == 5
    warnings = " | ".join(summary["warnings"])
    for text in ("1 topic copy(ies) still in flight", "2 copy(ies) between routers arrived "
                 "without", "1 topic copy(ies) seen without the topic.fanned-out",
                 "1 copy(ies) to non-durable subscriptions dropped (max-depth 1)",
                 "1 non-persistent topic copy(ies) never arrived"):
        assert text in warnings
    # Publications are the routes' messages; their copies are not orphans.
    messages = summary["messages"]
    assert messages["accepted"] == messages["enqueued"] == messages["consumed"] == 19
    assert messages["orphans"] == 0
    assert {(r["origin"], r["dest"]) for r in summary["routes"]} == {
        (A, "topic:prices.eu.gbp"), (A, "topic:prices.us.usd"), (A, "topic:other.x")}
    assert "topics: 19 publication(s); 4 durable subscription(s): due 48" in stdout
    fates = sorted((p["kind"], p["fate"], p["duplicated"]) for p in tables["topic_problems"])
    assert fates == [("link", "fanned-out", True), ("link", "lost", False),
                     ("subscription", "consumed", True), ("subscription", "lost", False),
                     ("subscription", "lost-non-persistent", False)]
    page = (out / "report.html").read_text()
    assert "Topics: durable subscriptions" in page and f"{ALL}" in page


def test_the_pattern_regex_matches_as_the_routers_do(spark):  # noqa: F811
    patterns = ["#", "a", "a.#", "#.a", "a.*", "*.a", "a.#.b", "*", "*.*", "a.*.#", "#.#",
                "a-b_c.*"]
    topics = ["a", "b", "a.a", "a.b", "b.a", "a.x.b", "a.x.y.b", "a.b.c", "a-b_c.d", "x.y.z"]
    rows = [(p, t) for p in patterns for t in topics]
    frame = spark.createDataFrame(rows, "pattern string, topic string").select(
        "pattern", "topic", topic_views.pattern_regex(F.col("pattern")).alias("re"))
    found = {(r["pattern"], r["topic"]) for r in frame.where(
        F.expr("concat('.', topic) rlike re")).collect()}
    assert found == {(p, t) for p, t in rows if matches(parse_pattern(p), parse_topic(t))}


# -- whole routers in memory --------------------------------------------------------


@pytest.fixture(scope="module")
def memory_topics(spark, tmp_path_factory):  # noqa: F811
    """
    Line A–B–C in memory, durable subscriptions at B (C{prices.#}) and C
    (C{prices.*.gbp}, and C{#} shared by two consumers), a non-durable
    one at A: 400 persistent publications at A, B partitioned for a
    while (both its links cut: the copies for C wait in A's backlog,
    addressed to C), C crashed and restarted in the middle; every
    router stopped; audited.
    """
    directory = tmp_path_factory.mktemp("memory-topics")
    mesh = MemoryMesh(directory / "logs")
    line(mesh)
    at_b = TopicConsumer(mesh.routers[B], "prices.#", client_id="app", durable="all")
    durable_c = dict(client_id="app", durable="gbp")
    at_c = [TopicConsumer(mesh.routers[C], "prices.*.gbp", **durable_c)]
    shared = [TopicConsumer(mesh.routers[C], "#", client_id="ops", durable="every", shared=True)
              for _ in range(2)]
    local = TopicConsumer(mesh.routers[A], "prices.eu.*")
    mesh.run(1)
    sent = publish(mesh, A, "prices.eu.gbp", 100)
    mesh.run(1)
    mesh.partition(B)
    sent += publish(mesh, A, "prices.eu.gbp", 100, 100)
    mesh.run(5)
    mesh.heal(B)
    mesh.run(5)
    sent += publish(mesh, A, "prices.eu.gbp", 100, 200)
    mesh.network.flush()
    config = mesh.routers[C].config
    mesh.crash(C)
    sent += publish(mesh, A, "prices.eu.gbp", 100, 300)
    mesh.run(2)
    mesh.start(config)
    mesh.run(5)
    at_c.append(TopicConsumer(mesh.routers[C], "prices.*.gbp", **durable_c))
    shared += [TopicConsumer(mesh.routers[C], "#", client_id="ops", durable="every",
                             shared=True)]
    mesh.run(10)
    assert_confirmed(sent)
    received = {"b": at_b.bodies, "c": [b for consumer in at_c for b in consumer.bodies],
                "shared": [b for consumer in shared for b in consumer.bodies],
                "local": local.bodies}
    mesh.stop_all()
    out = directory / "audit"
    code, stdout, stderr, summary = audit(spark, [directory / "logs"], out, in_flight_grace_s=0.0,
                                          keepalive_limit=100.0)
    subscriptions = [row.asDict() for row in
                     spark.read.parquet(str(out / "tables" / "subscriptions")).collect()]
    return received, code, stdout, summary, subscriptions


def test_memory_mesh_durable_subscriptions_get_each_publication_exactly_once(memory_topics):
    received, code, stdout, summary, subscriptions = memory_topics
    everything = sorted(b"%d" % i for i in range(400))
    for name in ("b", "c", "shared"):
        assert sorted(received[name]) == everything, name
    assert code == EXIT_OK, stdout
    assert summary["ok"] and summary["reasons"] == []
    durable = summary["topics"]["durable"]
    assert durable["subscriptions"] == 3
    assert durable["due"] == durable["enqueued"] == durable["consumed"] == 1200
    for key in ("waiting", "deleted", "lost", "lost_non_persistent", "duplicated", "outside",
                "missed", "in_flight", "without_fan_out"):
        assert durable[key] == 0, key
    assert {(row["router"], row["queue"]): (row["due"], row["consumed"], row["exists"])
            for row in subscriptions} == {
        (B, "$durable:app:all"): (400, 400, True), (C, "$durable:app:gbp"): (400, 400, True),
        (C, "$durable:ops:every"): (400, 400, True)}
    between = summary["topics"]["links"]
    assert between["sent"] == between["fanned_out"] >= 800
    for key in ("lost", "in_flight", "duplicated", "arrived", "without_fan_out"):
        assert between[key] == 0, key
    plain = summary["topics"]["non_durable"]
    assert plain["due"] == plain["delivered"] == len(received["local"]) == 400
    assert plain["dropped"] == 0
    assert summary["topics"]["publications"] == summary["messages"]["accepted"] == 400
    assert summary["messages"]["orphans"] == 0
    assert summary["links"]["closes"].get("keepalive", 0) >= 1  # the cut
