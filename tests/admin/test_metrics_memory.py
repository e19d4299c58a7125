"""
Tests for L{meshroute.admin.metrics} on the in-memory mesh: the figures a
scrape shows follow the traffic exactly (the counters equal the messages
sent, a closed link's reason is counted once, link counters only grow
across reconnections), parsed with prometheus-client's own parser.
"""

import os

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from meshroute import __version__
from meshroute.admin.metrics import HA_STATES, LINK_STAGES, RouterCollector
from meshroute.events import read_events
from meshroute.events.writer import RETRY_S
from meshroute.ha.status import SharedStoreStatus
from meshroute.harules import shared_store
from meshroute.harules.settings import BACKUP, PRIMARY
from meshroute.messages import Message
from meshroute.testing.memory_mesh import MemoryMesh
from support.ha_pair import Pair, send as send_to_pair, start_both
from support.small_disk import fill, small_disk
from support.topic_testing import TopicConsumer, star

N = 300


@pytest.fixture
def mesh(tmp_path):
    mesh = MemoryMesh(tmp_path)
    yield mesh
    mesh.stop_all()


def scrape(router, ha=None) -> dict:
    """
    C{(sample name, labels)} → value, for every sample of C{router}'s
    figures (or of the HA instance C{ha}'s) as a scrape shows them.
    """
    registry = CollectorRegistry()
    registry.register(RouterCollector(lambda: router if ha is None else ha.router, ha))
    samples = {}
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        for sample in family.samples:
            key = (sample.name, frozenset(sample.labels.items()))
            assert key not in samples, f"{key} appears twice"
            samples[key] = sample.value
    return samples


def value(samples: dict, name: str, **labels) -> float | None:
    return samples.get((name, frozenset(labels.items())))


def labelled(samples: dict, name: str) -> dict:
    """
    Labels → value of every sample named C{name}.
    """
    return {labels: v for (sample, labels), v in samples.items() if sample == name}


class Consumer:
    """
    Acknowledges everything from one queue, and can stop doing so.
    """

    def __init__(self, router, queue: str, acknowledge: bool = True) -> None:
        self.acknowledge = acknowledge
        self.received = []
        self._subscription = router.engine.queues.subscribe(queue, self._deliver, 0)
        self._subscription.add_credit(10 * N)

    def _deliver(self, delivery) -> None:
        self.received.append(delivery)
        if self.acknowledge:
            self._subscription.ack([delivery.delivery_id])


def pair(mesh):
    mesh.add("router-a", connect_to=["router-b"])
    mesh.add("router-b")
    mesh.run(1)
    return mesh.routers["router-a"], mesh.routers["router-b"]


def send(router, address: str, count: int, persistent: bool = True) -> None:
    for i in range(count):
        router.engine.submit(address, b"%d" % i, {}, persistent)


MESSAGE_COUNTERS = ("accepted", "forwarded", "enqueued", "consumed", "duplicates_refused")


def message_counts(samples: dict) -> dict:
    return {name: value(samples, f"meshroute_messages_{name}_total")
            for name in MESSAGE_COUNTERS}


def test_message_counters_equal_the_messages_sent(mesh):
    """
    N persistent and N non-persistent messages from A to a queue on B,
    consumed there: A accepted and forwarded 2N, B enqueued and consumed
    2N, and neither counts anything else.
    """
    a, b = pair(mesh)
    Consumer(b, "orders")
    send(a, "orders@router-b", N)
    send(a, "orders@router-b", N, persistent=False)
    mesh.run(1)
    assert message_counts(scrape(a)) == {
        "accepted": 2 * N, "forwarded": 2 * N, "enqueued": 0, "consumed": 0,
        "duplicates_refused": 0}
    assert message_counts(scrape(b)) == {
        "accepted": 0, "forwarded": 0, "enqueued": 2 * N, "consumed": 2 * N,
        "duplicates_refused": 0}


def test_two_phase_transactions_are_counted_and_those_in_doubt_shown(mesh, observe_errors):
    """
    Three transactions prepared on B: one committed, one rolled back, one
    left in doubt; a rollback of the committed one is a heuristic outcome.
    """
    _, b = pair(mesh)
    prepared = b.engine.prepared
    for n in range(3):
        prepared.prepare((1, f"g-{n}", ""), None, "tm", [], b.engine.queues.transaction(),
                         lambda msg_ids: None)
    mesh.run(1)
    assert value(scrape(b), "meshroute_prepared_transactions") == 3
    prepared.commit((1, "g-0", ""), None)
    prepared.rollback((1, "g-1", ""), None)
    prepared.rollback((1, "g-0", ""), None).addErrback(lambda failure: None)
    mesh.run(1)
    samples = scrape(b)
    assert value(samples, "meshroute_prepared_transactions") == 1
    assert {name: value(samples, f"meshroute_transactions_{name}_total")
            for name in ("prepared", "committed", "rolled_back", "heuristic")} == {
        "prepared": 3, "committed": 1, "rolled_back": 1, "heuristic": 1}
    assert observe_errors.take(lambda e: "heuristic" in e.get("log_format", ""))


def test_link_counters_count_what_crossed_the_link(mesh):
    """
    What A's link sent, B's received, message for message and byte for
    byte; nothing is left in flight; both links are in delivery.
    """
    a, b = pair(mesh)
    Consumer(b, "orders")
    send(a, "orders@router-b", N)
    mesh.run(1)
    at_a, at_b = scrape(a), scrape(b)
    to_b = {"peer": "router-b", "direction": "connector"}
    to_a = {"peer": "router-a", "direction": "listener"}
    assert value(at_a, "meshroute_link_sent_messages_total", **to_b) == N
    assert value(at_b, "meshroute_link_received_messages_total", **to_a) == N
    assert value(at_b, "meshroute_link_sent_messages_total", **to_a) == 0
    for sent, received in (("sent", "received"), ("received", "sent")):
        assert (value(at_a, f"meshroute_link_{sent}_bytes_total", **to_b)
                == value(at_b, f"meshroute_link_{received}_bytes_total", **to_a) > 0)
    assert value(at_a, "meshroute_link_in_flight_messages", **to_b) == 0
    for stage in LINK_STAGES:
        assert value(at_a, "meshroute_link_stage", **to_b, stage=stage) == (stage == "delivery")
    assert value(at_a, "meshroute_link_keepalive_interval_seconds", **to_b) == 0.2
    assert value(at_a, "meshroute_link_keepalives_left", **to_b) > 0


def test_a_closed_links_reason_is_counted_once(mesh):
    """
    B stops: A's link closes, reason peer-closed, counted once however
    long B stays away (A's retries find nobody listening) and after the
    link is back.  A's link counters keep growing across the two links,
    and while none is open, the peer's stages all show 0.
    """
    a, b = pair(mesh)
    send(a, "orders@router-b", N)
    mesh.run(1)
    mesh.stop("router-b")
    mesh.run(5)
    samples = scrape(a)
    to_b = {"peer": "router-b", "direction": "connector"}
    assert labelled(samples, "meshroute_link_closes_total") == {
        frozenset({("reason", "peer-closed")}): 1}
    assert {value(samples, "meshroute_link_stage", **to_b, stage=stage)
            for stage in LINK_STAGES} == {0}
    assert value(samples, "meshroute_link_sent_messages_total", **to_b) == N
    mesh.add("router-b")
    mesh.run(2)
    send(a, "orders@router-b", N)
    mesh.run(1)
    samples = scrape(a)
    assert labelled(samples, "meshroute_link_closes_total") == {
        frozenset({("reason", "peer-closed")}): 1}
    assert value(samples, "meshroute_link_stage", **to_b, stage="delivery") == 1
    assert value(samples, "meshroute_link_sent_messages_total", **to_b) == 2 * N
    a.events.flush()
    closed = [e for e in read_events(a.events.data_dir) if e["event"] == "link.closed"]
    assert [e["reason"] for e in closed] == ["peer-closed"]


def test_backlog_queues_and_store_commits(mesh):
    """
    With B away, A's messages for it wait in A's backlog; B's queue shows
    its depth, consumer and unacknowledged deliveries; the commit-time
    histogram has one observation per store commit.
    """
    a, b = pair(mesh)
    consumer = Consumer(b, "orders", acknowledge=False)
    send(a, "orders@router-b", N)
    mesh.run(1)
    at_b = scrape(b)
    assert value(at_b, "meshroute_queue_messages", queue="orders") == N
    assert value(at_b, "meshroute_queue_consumers", queue="orders") == 1
    assert value(at_b, "meshroute_queue_unacknowledged_messages", queue="orders") == N
    assert len(consumer.received) == N
    mesh.stop("router-b")
    send(a, "orders@router-b", 7)
    send(a, "orders@router-b", 3, persistent=False)
    mesh.run(1)
    at_a = scrape(a)
    assert labelled(at_a, "meshroute_backlog_messages") == {
        frozenset({("router", "router-b")}): 7}
    assert labelled(at_a, "meshroute_backlog_non_persistent_messages") == {
        frozenset({("router", "router-b")}): 3}
    assert value(at_a, "meshroute_store_commit_seconds_count") == a.store.executor.commits > 0
    assert value(at_a, "meshroute_store_commit_seconds_bucket", le="+Inf") == a.store.executor.commits


def test_duplicates_refused_and_messages_dropped_by_reason(mesh):
    """
    A send repeating a duplicate id is refused and counted; a
    non-persistent message that has no room waiting for its destination
    is dropped, counted by its reason.
    """
    mesh.add("router-a", connect_to=["router-b"], max_transient_backlog=2)
    mesh.add("router-b")
    mesh.run(1)
    a = mesh.routers["router-a"]
    for _ in range(2):
        a.engine.submit("orders@router-a", b"once", {}, True, duplicate_id="order-1")
    mesh.run(1)
    mesh.stop("router-b")
    mesh.run(1)
    for i in range(4):
        a.engine.arrived_transient(Message(
            msg_id=f"router-c-{i}", origin="router-c", dest_router="router-b",
            dest_queue="orders", body=b"x", headers={}, hops=1, persistent=False,
            accepted_at=0.0))
    samples = scrape(a)
    assert value(samples, "meshroute_messages_duplicates_refused_total") == 1
    assert value(samples, "meshroute_messages_accepted_total") == 1
    assert labelled(samples, "meshroute_messages_dropped_total") == {
        frozenset({("reason", "max-backlog")}): 2}


def test_sessions_by_protocol_and_state(mesh):
    """
    Sessions are counted by protocol (native when a session names none)
    and state, with a series for every state.
    """
    a, _b = pair(mesh)
    a.describe_sessions = lambda: [
        {"state": "open"}, {"state": "open", "protocol": "stomp"},
        {"state": "disconnected"}, {"state": "open"}]
    assert labelled(scrape(a), "meshroute_client_sessions") == {
        frozenset({("protocol", "native"), ("state", "open")}): 2,
        frozenset({("protocol", "native"), ("state", "disconnected")}): 1,
        frozenset({("protocol", "native"), ("state", "closing")}): 0,
        frozenset({("protocol", "stomp"), ("state", "open")}): 1,
        frozenset({("protocol", "stomp"), ("state", "disconnected")}): 0,
        frozenset({("protocol", "stomp"), ("state", "closing")}): 0,
    }


def link_messages(samples: dict, way: str) -> dict:
    """
    Peer → messages the links to it carried C{way} (C{sent}, C{received}).
    """
    return {dict(labels)["peer"]: v for labels, v
            in labelled(samples, f"meshroute_link_{way}_messages_total").items()}


def test_topics_publications_copies_subscriptions_and_drops(mesh, monkeypatch):
    """
    In the star a–b–{c, d–e}, a subscriber at c only: A's publications
    are counted in at A and as copies toward B, B passes one copy of each
    to C and none to D (the per-link counters), C counts them into its
    subscriptions.  A non-durable subscription has no series of its own
    (a new name for each); its drops, at max-depth and when it ends, are
    counted by reason.
    """
    star(mesh)
    a, b, c = (mesh.routers[name] for name in ("router-a", "router-b", "router-c"))
    durable = TopicConsumer(c, "prices.#", client_id="app", durable="prices")
    slow = TopicConsumer(c, "orders.*", credit=0)
    mesh.run(1)
    durable.subscription.cancel()
    monkeypatch.setattr(c.engine.queues, "_max_transient", 2)
    sent, received = link_messages(scrape(b), "sent"), link_messages(scrape(b), "received")
    send(a, "topic:prices.eu.gbp", 3)
    send(a, "topic:orders.eu", 5, persistent=False)
    send(a, "topic:nobody.listens", 4)
    mesh.run(1)

    at_a, at_b, at_c = scrape(a), scrape(b), scrape(c)
    assert labelled(at_a, "meshroute_topic_publications_total") == {
        frozenset({("source", "client")}): 12, frozenset({("source", "link")}): 0}
    assert labelled(at_a, "meshroute_topic_copies_total") == {
        frozenset({("kind", "durable")}): 0, frozenset({("kind", "non-durable")}): 0,
        frozenset({("kind", "link")}): 8}
    assert value(at_b, "meshroute_topic_publications_total", source="link") == 8
    assert value(at_b, "meshroute_topic_copies_total", kind="link") == 8
    # The per-link counters: to c what is for c, to d nothing.
    grew = {peer: n - sent.get(peer, 0) for peer, n in link_messages(at_b, "sent").items()}
    assert grew == {"router-a": 0, "router-c": 8, "router-d": 0}
    assert link_messages(at_b, "received")["router-a"] - received["router-a"] == 8
    assert value(at_c, "meshroute_topic_publications_total", source="link") == 8
    assert value(at_c, "meshroute_topic_copies_total", kind="durable") == 3
    assert value(at_c, "meshroute_topic_copies_total", kind="non-durable") == 5
    assert labelled(at_c, "meshroute_topic_subscriptions") == {
        frozenset({("kind", "durable")}): 1, frozenset({("kind", "non-durable")}): 1}
    assert labelled(at_c, "meshroute_topic_durable_subscription_messages") == {
        frozenset({("queue", "$durable:app:prices")}): 3}
    assert value(at_c, "meshroute_topic_non_durable_messages") == 2
    assert labelled(at_c, "meshroute_messages_dropped_total") == {
        frozenset({("reason", "max-depth")}): 3}
    assert value(at_c, "meshroute_topic_interest_patterns", router="router-c") == 2
    assert value(at_a, "meshroute_topic_interest_patterns", router="router-c") == 2
    assert value(at_c, "meshroute_topic_publishers_held") == 0
    assert value(at_c, "meshroute_topic_retained_messages") == 0
    # A queue series for the durable subscription, as for any queue; none
    # for the non-durable one.
    assert value(at_c, "meshroute_queue_messages", queue="$durable:app:prices") == 3
    assert not [labels for (name, labels) in at_c if name.startswith("meshroute_queue_")
                and any(v.startswith("$subscriber:") for _, v in labels)]

    slow.subscription.cancel()
    at_c = scrape(c)
    assert labelled(at_c, "meshroute_messages_dropped_total") == {
        frozenset({("reason", "max-depth")}): 3, frozenset({("reason", "unsubscribed")}): 2}
    assert value(at_c, "meshroute_topic_subscriptions", kind="non-durable") == 0
    assert value(at_c, "meshroute_topic_non_durable_messages") == 0


@pytest.fixture
def ha_pair(tmp_path):
    ha_pair = Pair(tmp_path)
    yield ha_pair
    ha_pair.shut()


def test_an_ha_pair_shows_role_state_epoch_and_lag(ha_pair):
    """
    The active instance shows its HA state, epoch and replication lag
    beside its router's figures; the backup its own state, and no router.
    """
    primary, backup = start_both(ha_pair)
    sends = send_to_pair(primary, 5)
    ha_pair.run_until(lambda: all(d.called for d in sends), 5.0)
    at_primary, at_backup = scrape(None, ha=primary), scrape(None, ha=backup)
    # Each series names its instance (one process may run several).
    of_primary, of_backup = ("ha_instance", "router-b/primary"), ("ha_instance", "router-b/backup")
    assert {labels: v for labels, v in labelled(at_primary, "meshroute_ha_state").items()
            if v} == {frozenset({of_primary, ("role", PRIMARY),
                                 ("state", "active-replicated")}): 1}
    assert len(labelled(at_primary, "meshroute_ha_state")) == len(HA_STATES)
    assert {labels: v for labels, v in labelled(at_backup, "meshroute_ha_state").items()
            if v} == {frozenset({of_backup, ("role", BACKUP), ("state", "backup-in-sync")}): 1}
    assert value(at_primary, "meshroute_ha_epoch", ha_instance="router-b/primary") == (
        primary.ha_status().epoch) > 0
    # The backup's is the epoch it follows: the active's.
    assert value(at_backup, "meshroute_ha_epoch", ha_instance="router-b/backup") == (
        backup.ha_status().epoch) == primary.ha_status().epoch
    assert value(at_primary, "meshroute_ha_replication_lag_transactions",
                 ha_instance="router-b/primary") == 0
    assert value(at_primary, "meshroute_ha_peer_connected", ha_instance="router-b/primary") == 1
    assert value(at_primary, "meshroute_messages_accepted_total") == 5
    assert value(at_backup, "meshroute_messages_accepted_total") is None
    for samples in (at_primary, at_backup):
        assert labelled(samples, "meshroute_router_info") == {
            frozenset({("router", "router-b"), ("version", __version__)}): 1}


@pytest.mark.parametrize("state", shared_store.API_STATES)
def test_a_shared_store_instance_has_a_state_series_for_each_of_its_states(state):
    """
    Whatever state a shared-store instance is in (starting included),
    exactly its own series is 1; it has no replication figures, and says
    whether a primary asks for the store back.
    """

    class Waiting:
        name = "router-b"
        router = None

        def ha_status(self):
            return SharedStoreStatus(instance="router-b/backup", role=BACKUP, state=state,
                                     epoch=3, served_epoch=0, lock="shared-store.lock",
                                     failback_requested=True, live=None)

    samples = scrape(None, ha=Waiting())
    states = labelled(samples, "meshroute_ha_state")
    assert len(states) == len(shared_store.API_STATES)
    assert {labels for labels, v in states.items() if v} == {frozenset({
        ("ha_instance", "router-b/backup"), ("role", BACKUP), ("state", state)})}
    assert value(samples, "meshroute_ha_failback_requested",
                 ha_instance="router-b/backup") == 1
    assert labelled(samples, "meshroute_ha_peer_connected") == {}


def test_the_retained_messages_held_are_shown(mesh):
    star(mesh)
    engine = mesh.routers["router-a"].engine
    for topic, body in (("a", b"12"), ("b", b"345"), ("c", b"")):
        engine.submit(f"topic:{topic}", body, {"x-retain": "true"}, True)
    mesh.run(1)
    at_e = scrape(mesh.routers["router-e"])
    assert value(at_e, "meshroute_topic_retained_messages") == 2
    assert value(at_e, "meshroute_topic_retained_bytes") == 5


def test_event_records_the_disk_refuses_are_shown_waiting_then_written(tmp_path, observe_errors):
    """
    Router A's events directory on a file system of its own, filled: the
    records of its traffic wait (C{meshroute_event_log_waiting_bytes}),
    none lost; once there is room they are written and the gauge is 0.
    """
    with small_disk(tmp_path / "router-a" / "events", "256k") as events:
        mesh = MemoryMesh(tmp_path)
        try:
            a, b = pair(mesh)
            filler = fill(events)
            send(a, "orders@router-b", N)
            mesh.run(0.1)
            samples = scrape(a)
            assert value(samples, "meshroute_event_log_waiting_bytes") > N * 100
            assert value(samples, "meshroute_event_log_lost_records_total") == 0
            os.remove(filler)
            mesh.run(RETRY_S)
            samples = scrape(a)
            assert value(samples, "meshroute_event_log_waiting_bytes") == 0
            assert value(samples, "meshroute_event_log_lost_records_total") == 0
            accepted = [r for r in read_events(str(tmp_path / "router-a"))
                        if r["event"] == "message.accepted"]
            assert len(accepted) == N
        finally:
            mesh.stop_all()
    assert len(observe_errors.take(lambda e: "Event log: cannot write" in e["log_format"])) == 1
