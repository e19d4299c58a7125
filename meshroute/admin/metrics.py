"""
C{GET /metrics}: what a router is doing, in Prometheus' text format
(docs/metrics.md lists every metric).

A scrape reads memory only, never the store: the counts the event log
keeps of what it records (L{meshroute.events.EventLog.counts}), the
store's in-memory backlog counts and its commit-time histogram, the link
registry's traffic counts, the queues' and sessions' own state, and the
HA instance's status.  That state belongs to the reactor thread, while
prometheus-client's Twisted resource serves scrapes in the reactor's
thread pool (C{prometheus_client.twisted.MetricsResource}, a WSGI
resource): so the router's figures are read on the reactor thread, in
one call between two events, and everything else (formatting, the
process collector's reads of C{/proc}) runs in the pool's thread.

Each admin endpoint has a registry of its own, never prometheus-client's
global one, with collectors of its own (the process's too): two routers
in one process (the instances a process hosts, tests, the in-memory mesh)
keep their figures apart and never register one name twice.  The
process's figures are the same process's at each of its endpoints.
"""

import queue
from collections import Counter
from collections.abc import Callable, Iterator

from prometheus_client import (
    CollectorRegistry,
    GCCollector,
    PlatformCollector,
    ProcessCollector,
)
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    InfoMetricFamily,
    Metric,
)
from prometheus_client.exposition import make_wsgi_app
from twisted.python.threadable import isInIOThread
from twisted.web.wsgi import WSGIResource

from meshroute import __version__, events
from meshroute.ha.status import SharedStoreStatus
from meshroute.harules import role, shared_store
from meshroute.link.stages import AUTHENTICATION, CONNECT, DELIVERY, RECOVERY
from meshroute.router.topic_subscriptions import SUBSCRIBER_PREFIX
from meshroute.sessions.served import CLOSING, DISCONNECTED, OPEN

#: Every stage of a routing link, so that each peer's stage is shown as
#: one series per stage, 1 for the stage it is in (0 for all while no
#: link to it is open).
LINK_STAGES = (CONNECT, AUTHENTICATION, RECOVERY, DELIVERY)
#: The states a client session is listed in; a protocol's sessions show
#: a series for each, 0 included.
SESSION_STATES = (OPEN, DISCONNECTED, CLOSING)
#: The protocol of a session whose description names none.
NATIVE = "native"
#: The six states of an HA instance (L{meshroute.harules.role}).
HA_STATES = (role.STARTING, role.BACKUP_SYNCING, role.BACKUP_IN_SYNC, role.ACTIVE_REPLICATED,
             role.ACTIVE_ALONE, role.FENCED)
#: The states of a shared-store instance (docs/ha.md, "Shared store").
SHARED_STORE_STATES = shared_store.API_STATES

#: The router's message counters: the event each counts, its name after
#: C{meshroute_} (without C{_total}), and its help.
MESSAGE_COUNTERS = (
    (events.MESSAGE_ACCEPTED, "messages_accepted",
     "Messages accepted from this router's clients."),
    (events.MESSAGE_FORWARDED, "messages_forwarded",
     "Messages handed to the next router (acknowledged by it, when persistent)."),
    (events.MESSAGE_ENQUEUED, "messages_enqueued", "Messages put in this router's queues."),
    (events.MESSAGE_CONSUMED, "messages_consumed",
     "Messages consumed from this router's queues (acknowledged by their consumer)."),
    (events.MESSAGE_DUPLICATE, "messages_duplicates_refused",
     "Copies refused as duplicates: of a message this router holds or has enqueued, or a "
     "client's send repeating a duplicate id."),
)
#: The counters of clients' two-phase transactions: event, name, help.
TRANSACTION_COUNTERS = (
    (events.TRANSACTION_PREPARED, "transactions_prepared",
     "Two-phase transactions prepared here."),
    (events.TRANSACTION_COMMITTED, "transactions_committed",
     "Two-phase transactions committed here (prepared, or in one phase)."),
    (events.TRANSACTION_ROLLED_BACK, "transactions_rolled_back",
     "Prepared transactions rolled back here."),
    (events.TRANSACTION_HEURISTIC, "transactions_heuristic",
     "Outcomes of two-phase transactions that could not be carried out as asked, in full."),
)
#: The counters by reason: event, name, help.
REASON_COUNTERS = (
    (events.MESSAGE_DEAD_LETTERED, "messages_dead_lettered",
     "Messages put in this router's dead-letter queue, by reason."),
    (events.MESSAGE_DROPPED, "messages_dropped",
     "Non-persistent messages dropped, by reason."),
    (events.LINK_CLOSED, "link_closes",
     "Link-protocol connections closed (links; HA vote and replication connections too), "
     "by reason."),
)

#: How long a scrape waits for the reactor thread to read the router's
#: figures before it fails (a stopping reactor never will).
READ_TIMEOUT_S = 5.0


class RouterCollector:
    """
    Reads one router's figures, and its HA instance's, from memory.

    Call L{collect} on the reactor thread: it reads state that thread
    changes.

    @param current: returns the router (a L{meshroute.router.service.RouterService}),
        or None while an HA instance is not the active one.
    @param ha: the L{meshroute.interfaces.IHAInstanceView}, or None for a
        router on its own.
    """

    def __init__(self, current: Callable[[], object], ha=None) -> None:
        self._current = current
        self._ha = ha

    def collect(self) -> Iterator[Metric]:
        router = self._current()
        yield InfoMetricFamily(
            "meshroute_router", "The router's name and meshroute's version.",
            value={"router": router.config.name if router is not None else self._ha.name,
                   "version": __version__})
        if self._ha is not None:
            yield from _ha_metrics(self._ha.ha_status())
        if router is not None:
            yield from _router_metrics(router)
            yield from _link_metrics(router)
            yield from _queue_metrics(router)
            yield from _topic_metrics(router)
            yield from _session_metrics(router)


def _router_metrics(router) -> Iterator[Metric]:
    counts, reasons = router.events.counts, router.events.reasons
    for event, name, documentation in MESSAGE_COUNTERS + TRANSACTION_COUNTERS:
        yield CounterMetricFamily(f"meshroute_{name}", documentation, value=counts[event])
    for event, name, documentation in REASON_COUNTERS:
        family = CounterMetricFamily(f"meshroute_{name}", documentation, labels=["reason"])
        by_reason = {reason: count for (counted, reason), count in reasons.items()
                     if counted == event}
        for reason, count in sorted(by_reason.items()):
            family.add_metric([reason], count)
        yield family
    yield _by_router("meshroute_backlog_messages",
                     "Persistent messages waiting in this router's store for a route or room "
                     "in a link's window, by destination router.",
                     router.store.backlog_depths())
    yield _by_router("meshroute_backlog_non_persistent_messages",
                     "Non-persistent messages waiting in memory for a route or a link that "
                     "drains, by destination router.",
                     router.engine.transient_depths())
    yield GaugeMetricFamily("meshroute_prepared_transactions",
                            "Two-phase transactions prepared in this router's store and not yet "
                            "committed or rolled back (in doubt).",
                            value=router.store.prepared_count())
    yield from router.store.executor.commit_seconds.collect()
    yield GaugeMetricFamily("meshroute_event_log_waiting_bytes",
                            "Bytes of event records waiting in memory because the data-dir's "
                            "file system refuses them (a full disk, an I/O error).",
                            value=router.events.waiting)
    yield CounterMetricFamily("meshroute_event_log_lost_records",
                              "Event records lost because the file system refused them for "
                              "longer than the log could keep them.",
                              value=router.events.lost)
    disk = router.disk
    if disk.free is not None:
        yield GaugeMetricFamily("meshroute_store_disk_free_bytes",
                                "Free space of the data-dir's disk, the free pages inside the "
                                "store's file included, at its last reading ([store] "
                                "min-free-disk).", value=disk.free)
    yield GaugeMetricFamily("meshroute_store_disk_low",
                            "1 while the data-dir's disk has less free space than [store] "
                            "min-free-disk: clients' sends are refused (disk-full).",
                            value=int(disk.low))


def _by_router(name: str, documentation: str, values: dict[str, int]) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, documentation, labels=["router"])
    for destination, value in sorted(values.items()):
        family.add_metric([destination], value)
    return family


def _link_metrics(router) -> Iterator[Metric]:
    registry = router.registry
    traffic = registry.traffic()
    links = registry.links()
    labels = ["peer", "direction"]
    # Every peer the router links to or did: configured connectors, and
    # the peers that links held before.
    stages: dict[tuple[str, str], Counter] = {key: Counter() for key in traffic}
    for connector in router.config.connectors:
        stages.setdefault((connector.router, "connector"), Counter())
    for link in links:
        stages.setdefault((link.peer or "", link.direction), Counter())[link.core.stage] += 1
    stage = GaugeMetricFamily(
        "meshroute_link_stage",
        "Open links to the peer in each stage (1 for the stage its link is in).",
        labels=labels + ["stage"])
    for (peer, direction), in_stage in sorted(stages.items()):
        for name in LINK_STAGES:
            stage.add_metric([peer, direction, name], in_stage[name])
    yield stage
    keepalive_counter = GaugeMetricFamily(
        "meshroute_link_keepalives_left",
        "The link's keepalive counter: keepalives it may still send without one from the "
        "peer before it closes (docs/protocol.md).", labels=labels)
    keepalive_interval = GaugeMetricFamily(
        "meshroute_link_keepalive_interval_seconds",
        "The link's keepalive interval, as negotiated.", labels=labels)
    in_flight = GaugeMetricFamily(
        "meshroute_link_in_flight_messages",
        "Transfers the link sent and the peer has not acknowledged yet.", labels=labels)
    held = GaugeMetricFamily(
        "meshroute_link_held_messages",
        "Messages the peer sent on the link that are held, unstored and unacknowledged, "
        "while this router's disk is low ([store] min-free-disk).", labels=labels)
    for link in links:
        if link.peer is None or registry.holder(link.peer) is not link:
            continue
        key = [link.peer, link.direction]
        core = link.core
        if core.keepalive is not None:
            keepalive_counter.add_metric(key, core.keepalive.counter.value)
            keepalive_interval.add_metric(key, core.keepalive_interval_ms / 1000)
        if core.channel is not None:
            in_flight.add_metric(key, core.channel.in_flight)
            held.add_metric(key, core.channel.held)
    yield from (keepalive_counter, keepalive_interval, in_flight, held)
    for field, name, documentation in (
            ("messages_sent", "sent_messages", "Messages the links to the peer sent."),
            ("bytes_sent", "sent_bytes", "Bytes the links to the peer sent."),
            ("messages_received", "received_messages",
             "Messages the links to the peer received."),
            ("bytes_received", "received_bytes", "Bytes the links to the peer received.")):
        family = CounterMetricFamily(f"meshroute_link_{name}", documentation, labels=labels)
        for key, carried in sorted(traffic.items()):
            family.add_metric(list(key), getattr(carried, field))
        yield family


def _queue_metrics(router) -> Iterator[Metric]:
    """
    A series per queue, but for the non-durable topic subscriptions'
    (C{$subscriber:N}): numbered anew for each subscription, they would
    make a new series each; L{_topic_metrics} sums them.
    """
    queues = router.engine.queues
    for name, documentation, values in (
            ("meshroute_queue_messages",
             "Messages in the queue (persistent and non-persistent; delivered and "
             "unacknowledged included).", queues.depths()),
            ("meshroute_queue_consumers", "Consumers of the queue.", queues.consumer_counts()),
            ("meshroute_queue_unacknowledged_messages",
             "Messages delivered to the queue's consumers and not acknowledged yet.",
             queues.unacknowledged_counts())):
        family = GaugeMetricFamily(name, documentation, labels=["queue"])
        for queue_name, value in sorted(values.items()):
            if not queue_name.startswith(SUBSCRIBER_PREFIX):
                family.add_metric([queue_name], value)
        yield family


def _topic_metrics(router) -> Iterator[Metric]:
    """
    The topics: what the fan-out took and made, the subscriptions, and
    the interest held.  No label names a topic or a pattern: a durable
    subscription's series is labelled with its queue, as any queue's is,
    and the non-durable ones are counted together.
    """
    engine = router.engine
    fan_out = engine.fan_out
    publications = CounterMetricFamily(
        "meshroute_topic_publications",
        "Publications this router's fan-out took, by source: published by its clients "
        "(client), or a copy a neighbour sent for the routers beyond (link).",
        labels=["source"])
    for source, count in sorted(fan_out.publications.items()):
        publications.add_metric([source], count)
    yield publications
    copies = CounterMetricFamily(
        "meshroute_topic_copies",
        "Copies the fan-out made of publications, by kind: into a local durable or "
        "non-durable subscription, or for other routers (one per link).", labels=["kind"])
    for kind, count in sorted(fan_out.copies_made.items()):
        copies.add_metric([kind], count)
    yield copies
    yield GaugeMetricFamily(
        "meshroute_topic_publishers_held",
        "Client sessions whose connections the router does not read because they publish "
        "while the fan-out is behind ($topic reached hold-publishers-at).",
        value=engine.topic_backlog.waiting)
    topics = engine.topics
    depths = engine.queues.depths()
    subscriptions = GaugeMetricFamily(
        "meshroute_topic_subscriptions", "Topic subscriptions at this router, by kind.",
        labels=["kind"])
    held = topics.describe()
    subscriptions.add_metric(["durable"], len(held["durable"]))
    subscriptions.add_metric(["non-durable"], len(held["non_durable"]))
    yield subscriptions
    yield GaugeMetricFamily(
        "meshroute_topic_non_durable_messages",
        "Messages waiting in all the non-durable topic subscriptions of this router (in "
        "memory; delivered and unacknowledged included).",
        value=sum(depths.get(row["queue"], 0) for row in held["non_durable"]))
    durable = GaugeMetricFamily(
        "meshroute_topic_durable_subscription_messages",
        "Messages waiting in the durable topic subscription (persistent and "
        "non-persistent; delivered and unacknowledged included), by its queue.",
        labels=["queue"])
    for row in held["durable"]:
        durable.add_metric([row["queue"]], depths.get(row["queue"], 0))
    yield durable
    interest = engine.interest
    patterns = GaugeMetricFamily(
        "meshroute_topic_interest_patterns",
        "Patterns of the router's advertised topic interest as this router holds it (its "
        "own included), by router.", labels=["router"])
    for origin, advertised in interest.describe().items():
        patterns.add_metric([origin], len(advertised["patterns"]))
    yield patterns
    retained = engine.retained.describe()
    yield GaugeMetricFamily(
        "meshroute_topic_retained_messages",
        "Retained topic messages this router holds (every router holds the same once the "
        "flood has passed; cleared topics not counted).", value=retained["count"])
    yield GaugeMetricFamily(
        "meshroute_topic_retained_bytes",
        "Bytes of the bodies of the retained topic messages this router holds.",
        value=retained["bytes"])


def _session_metrics(router) -> Iterator[Metric]:
    sessions: Counter = Counter()
    for session in router.describe_sessions():
        sessions[session.get("protocol", NATIVE), session["state"]] += 1
    family = GaugeMetricFamily("meshroute_client_sessions",
                               "Client sessions held by this router, by protocol and state.",
                               labels=["protocol", "state"])
    for protocol in sorted({NATIVE} | {protocol for protocol, _ in sessions}):
        for state in SESSION_STATES:
            family.add_metric([protocol, state], sessions[protocol, state])
    yield family


def _ha_metrics(status) -> Iterator[Metric]:
    """
    The HA instance's figures, each labelled with the instance
    (C{ha_instance="router-b/backup"}): one process may run several
    (docs/ha.md, "Colocated backups"), and the label keeps their series
    apart wherever they are gathered.  (Not C{instance}: Prometheus gives
    that label the scrape target.)
    """
    state = GaugeMetricFamily("meshroute_ha_state",
                              "The HA instance's state (1 for the state it is in), with its "
                              "configured role.", labels=["ha_instance", "role", "state"])
    shared = isinstance(status, SharedStoreStatus)
    for name in SHARED_STORE_STATES if shared else HA_STATES:
        state.add_metric([status.instance, status.role, name], int(status.state == name))
    yield state
    figures = [("meshroute_ha_epoch", "The epoch the instance serves in; on an instance that "
                "does not serve, the active's epoch it follows (or last followed).",
                status.epoch)]
    if shared:
        figures.append(("meshroute_ha_failback_requested",
                        "Whether a primary waits to take the shared store back.",
                        int(status.failback_requested)))
    else:
        figures += [("meshroute_ha_peer_connected",
                     "Whether a replication connection to the other instance is up.",
                     int(status.peer.connected)),
                    ("meshroute_ha_replication_lag_transactions",
                     "Store transactions the backup lacks (on the active: its backup's; on a "
                     "backup: its own).", status.lag)]
    for name, documentation, value in figures:
        if value is not None:
            family = GaugeMetricFamily(name, documentation, labels=["ha_instance"])
            family.add_metric([status.instance], value)
            yield family


class _OnReactorThread:
    """
    A collector that has C{collector} collect on the reactor thread, for
    a registry that a thread of the reactor's pool reads.
    """

    def __init__(self, reactor, collector: RouterCollector) -> None:
        self._reactor = reactor
        self._collector = collector

    def collect(self) -> list[Metric]:
        if isInIOThread():
            return list(self._collector.collect())
        answer: queue.SimpleQueue = queue.SimpleQueue()

        def read() -> None:
            try:
                answer.put((True, list(self._collector.collect())))
            except Exception as e:
                answer.put((False, e))

        self._reactor.callFromThread(read)
        try:
            ok, value = answer.get(timeout=READ_TIMEOUT_S)
        except queue.Empty:
            raise TimeoutError(
                f"the reactor did not read the router's figures within {READ_TIMEOUT_S} s"
            ) from None
        if not ok:
            raise value
        return value


def router_registry(reactor, current: Callable[[], object], ha=None) -> CollectorRegistry:
    """
    The registry of one admin endpoint: the router's figures (read on
    C{reactor}'s thread) and the process's.
    """
    registry = CollectorRegistry()
    registry.register(_OnReactorThread(reactor, RouterCollector(current, ha)))
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    GCCollector(registry=registry)
    return registry


def metrics_resource(reactor, current: Callable[[], object], ha=None) -> WSGIResource:
    """
    prometheus-client's Twisted resource over L{router_registry}:
    C{prometheus_client.twisted.MetricsResource} is this very resource
    on the global reactor, which it imports; this one runs on C{reactor},
    the router's.
    """
    return WSGIResource(reactor, reactor.getThreadPool(),
                        make_wsgi_app(router_registry(reactor, current, ha)))
