"""
High availability, issue 9's "Measure and report" and issue 28's
"Measure": a backup's catch-up speed, persistent throughput and latency
with and without a backup (and the backup's lag), and failover times, of
a replicated pair and of a shared-store pair (--policy).  Three parts
(--only):

catchup -- an *active side* runs in this process: a real store
(L{SQLiteStore}, C{ThreadedExecutor} with a L{ReplicationGate} in mode
alone) filled with --messages accepted persistent messages of --body
bytes (--window accepts in flight, so group commit makes the batches a
busy router makes), its L{ReplicationSource} (the retained log sized to
hold them all) and an HA instance's replication listener
(L{meshroute.ha.listener}, the link handshake with the mesh secret,
L{meshroute.ha.feed.ReplicationServer}) on a free 127.0.0.1 port.  A
*backup* is this script again in another process (C{worker-follow}): a
L{Replica} on its own data dir and the real L{ReplicationFollower}, which
dials the listener over loopback TCP and follows until it says it is in
sync.  From the log: the backup's store is a copy of the active's taken
before the fill (the same store id, position 0), so every batch comes
from the retained log; from a snapshot: the backup's data dir is empty
(another store id), so the feed sends SQLite's online backup of the
store.  Time is the backup's, from starting the follower to in sync;
each run is checked against the active's position and message count.

throughput -- a replicated pair (two C{twistd -n meshroute} instances
with C{[ha]}, each its own data dir) and a witness router, and a
shared-store pair (two instances on one data dir), against the same
router without C{[ha]}: a producer and a consumer (throughput.py's
workers) on the (active) router, as fast as confirmed and then at
--rate; the replicated active's C{GET /api/v1/ha} C{lag} sampled under
the full load.

failover -- a pair (and its witness) and a probe (C{worker-probe}: a
client with both instances' endpoints sending every --probe-interval
ms); --kills signals of each of --kinds the pair fails over on to the
active instance, timed to the backup's activation (its C{ha.state}
event) and to the probe's first send confirmed by it, against the
issue's bound; the signalled instance comes back and the pair settles
before the next (a shared-store primary takes the store back).

See benchmarks/README.md.
"""

import json
import os
import shutil
import signal
import sqlite3
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _ha_pairs import (  # noqa: E402
    DATA_DIR,
    PAIR_NAME,
    PAIRS,
    REPLICATION,
    ROUTER_CONFIG,
    SHARED_STORE,
    NotSettled,
    Pair,
)
from _harness import (  # noqa: E402
    DEADLINE_S,
    SECRET,
    Meter,
    Router,
    cpu_s,
    poll,
    percentile,
    print_table,
    remove_tree,
    role_result,
    run_main,
    spawn_role,
    windowed,
)
from twisted.internet import defer, task  # noqa: E402
from twisted.internet.endpoints import clientFromString, serverFromString  # noqa: E402
from twisted.python import usage  # noqa: E402

from meshroute.events import EventLog, read_events  # noqa: E402
from meshroute.ha.feed import ReplicationServer  # noqa: E402
from meshroute.ha.follower import ReplicationFollower  # noqa: E402
from meshroute.ha.gate import ReplicationGate  # noqa: E402
from meshroute.ha.listener import replication_listener  # noqa: E402
from meshroute.ha.pairing import Pairing  # noqa: E402
from meshroute.ha.replica import STORE_NAME, Replica  # noqa: E402
from meshroute.ha.source import ReplicationSource  # noqa: E402
from meshroute.harules.quorum import LogPosition  # noqa: E402
from meshroute.link.context import RouterContext
from meshroute.link.registry import LinkRegistry  # noqa: E402
from meshroute.link.retry import RetrySchedule  # noqa: E402
from meshroute.link.rotation import EndpointRotation  # noqa: E402
from meshroute.link.settings import ConnectorSettings, ListenerSettings
from meshroute.messages import Message  # noqa: E402
from meshroute.store import SQLiteStore, ThreadedExecutor  # noqa: E402
from meshroute.store.changes import READ_REPLICATION_STATE  # noqa: E402

SCRIPT = os.path.abspath(__file__)
THROUGHPUT_SCRIPT = os.path.join(os.path.dirname(SCRIPT), "throughput.py")
#: The router name both instances share.
NAME = "router-ha"
QUEUE = "q"
EPOCH = 1
KEEPALIVE_MS = 500
STAGE_VALID_TIMEOUT_MS = 10_000
COUNT_MESSAGES = "SELECT count(*) FROM messages"
PROBE_QUEUE = "probe"


class Options(usage.Options):
    synopsis = "[--only PARTS] [--policy POLICY] [--quick] [--messages N] [--kills N] [...]"
    optParameters = [
        ["only", None, "catchup,throughput,failover", "Comma-separated parts to run."],
        ["messages", "n", None, "Catch-up: messages in the active's store (default 100000; "
         "10000 with --quick).", int],
        ["body", None, 100, "Body size in bytes.", int],
        ["window", None, 1000, "Catch-up: accepts in flight while filling the store (group "
         "commit).", int],
        ["tp-messages", None, None, "Throughput: messages of the full-load run (default 20000; "
         "2000 with --quick).", int],
        ["rate", None, 1000, "Throughput: offered load of the latency run, messages/s.", int],
        ["latency-seconds", None, None, "Throughput: length of the latency run (default 10; 3 "
         "with --quick).", float],
        ["warmup", None, 200, "Throughput: messages of the latency run left out of the "
         "percentiles.", int],
        ["kills", None, None, "Failover: kills of each kind (default 20; 1 with --quick).", int],
        ["kinds", None, "KILL,STOP,TERM", "Failover: the signals, in order."],
        ["heartbeat-interval", None, 500, "The pair's [ha] heartbeat-interval, ms.", int],
        ["lease-timeout", None, 3000, "The pair's [ha] lease-timeout, ms.", int],
        ["replica-sync", None, "full", "The replicated pair's [ha] replica-sync: full or "
         "normal."],
        ["lock-poll-interval", None, 100, "The shared-store pair's [ha] lock-poll-interval, "
         "ms.", int],
        ["policy", None, "both", "Throughput and failover: the pairs' [ha] policy, "
         "replication, shared-store or both."],
        ["steady", None, None, "Failover: seconds the pair runs settled (one instance "
         "serving, the other its ready backup) before each signal (default 5; 1 with "
         "--quick).", float],
        ["probe-interval", None, 5, "Failover: the probe sends one message every this many ms.",
         int],
        ["failure-check", None, 1000, "Failover: the probe's client-failure-check-period, ms "
         "(how soon it gives up on a frozen instance).", int],
        ["dir", None, None, "Where to make the data dirs (default: the system's temporary "
         "directory; its disk is what sync full measures)."],
    ]
    optFlags = [
        ["quick", "q", "Smoke run: fewer messages, shorter runs, one kill of each kind."],
        ["keep", None, "Keep the data dirs (stores, router logs)."],
    ]

    def postOptions(self) -> None:
        quick = self["quick"]
        for key, full, short in (("messages", 100_000, 10_000), ("tp-messages", 20_000, 2000),
                                 ("latency-seconds", 10.0, 3.0), ("kills", 20, 1),
                                 ("steady", 5.0, 1.0)):
            if self[key] is None:
                self[key] = short if quick else full
        if min(self["messages"], self["body"], self["window"], self["tp-messages"],
               self["rate"], self["kills"], self["probe-interval"], self["failure-check"],
               self["lock-poll-interval"]) < 1 \
                or self["latency-seconds"] <= 0 or self["steady"] < 0:
            raise usage.UsageError("counts, sizes, rates and durations must be positive")
        if self["warmup"] >= self["rate"] * self["latency-seconds"]:
            raise usage.UsageError("--warmup leaves no message of the latency run")
        self["parts"] = [p.strip() for p in self["only"].split(",") if p.strip()]
        self["kinds"] = [k.strip().upper() for k in self["kinds"].split(",") if k.strip()]
        if not self["parts"] or set(self["parts"]) - set(PARTS):
            raise usage.UsageError(f"--only: parts are {', '.join(PARTS)}")
        if not self["kinds"] or set(self["kinds"]) - set(KINDS):
            raise usage.UsageError(f"--kinds: kinds are {', '.join(KINDS)}")
        if self["replica-sync"] not in ("full", "normal"):
            raise usage.UsageError("--replica-sync: full or normal")
        if self["policy"] not in (REPLICATION, SHARED_STORE, "both"):
            raise usage.UsageError("--policy: replication, shared-store or both")
        self["policies"] = ([REPLICATION, SHARED_STORE] if self["policy"] == "both"
                            else [self["policy"]])


# -- the active side ------------------------------------------------------------------


class ActiveSide:
    """
    A filled store, its source, gate and replication listener, as an
    active instance has them.
    """

    def __init__(self, reactor, directory: str) -> None:
        self._reactor = reactor
        self.directory = directory
        self.path = os.path.join(directory, STORE_NAME)
        self.store: SQLiteStore | None = None
        self.source: ReplicationSource | None = None
        self.gate: ReplicationGate | None = None
        self.port = None

    async def create(self, copy_to: str) -> None:
        """
        Create the store, and copy it (position 0, its store id) to
        C{copy_to}: what a backup that followed it from the start holds.
        """
        store = SQLiteStore(self.path, "normal", ThreadedExecutor(self._reactor), router=NAME)
        await store.open()
        await store.close()
        os.makedirs(copy_to)
        shutil.copy(self.path, os.path.join(copy_to, STORE_NAME))

    async def fill(self, messages: int, body_size: int, window: int) -> dict:
        """
        Open the store replicated (gate alone) and accept C{messages}.
        """
        connection = sqlite3.connect(self.path)
        try:
            head = LogPosition(*connection.execute(READ_REPLICATION_STATE).fetchone())
            store_id = connection.execute(
                "SELECT value FROM meta WHERE key = 'store_id'").fetchone()[0]
        finally:
            connection.close()
        # Everything stays in the log: the run from the log needs it all.
        self.source = ReplicationSource(self._reactor, self.path, store_id, head,
                                        retained_bytes=2**62)
        self.gate = ReplicationGate(self.source, EPOCH)
        self.store = SQLiteStore(self.path, "normal",
                                 ThreadedExecutor(self._reactor, replication=self.gate),
                                 router=NAME)
        await self.store.open()
        body = b"x" * body_size
        started = time.perf_counter()
        await windowed(messages, window, lambda i: self.store.accept(
            Message(f"m:{i}", NAME, NAME, QUEUE, body, {}, 0, True, 0.0)))
        seconds = time.perf_counter() - started
        batches, size = self.source.retained
        return {"fill_s": seconds, "batches": batches, "log_bytes": size}

    async def listen(self) -> str:
        server = ReplicationServer(lambda: None, lambda: None)
        server.serve(self.source, self.gate)
        events = EventLog(self.directory, NAME, self._reactor)
        settings = ListenerSettings(secret=SECRET, keepalive_interval_ms=KEEPALIVE_MS,
                                    stage_valid_timeout_ms=STAGE_VALID_TIMEOUT_MS,
                                    reject_disconnect_delay_ms=0)
        factory = replication_listener(NAME, self._reactor, events, LinkRegistry(), None,
                                       server, settings, Pairing(NAME, NAME))
        self.port = await serverFromString(self._reactor, "tcp:0:interface=127.0.0.1").listen(
            factory)
        return f"tcp:127.0.0.1:{self.port.getHost().port}"

    async def close(self) -> None:
        if self.port is not None:
            await self.port.stopListening()
        if self.store is not None:
            await self.store.close()


def store_state(path: str) -> tuple[int, int, int]:
    """
    (position, messages, bytes) of the store at C{path} (its WAL
    included: the pages a snapshot copies).
    """
    connection = sqlite3.connect(path)
    try:
        position = connection.execute(READ_REPLICATION_STATE).fetchone()[1]
        messages = connection.execute(COUNT_MESSAGES).fetchone()[0]
        pages = connection.execute("PRAGMA page_count").fetchone()[0]
        return position, messages, pages * connection.execute("PRAGMA page_size").fetchone()[0]
    finally:
        connection.close()


# -- the backup (worker) ---------------------------------------------------------------


async def worker_follow(reactor, data_dir: str, endpoint: str, sync: str) -> None:
    """
    Follow the active at C{endpoint} into a replica in C{data_dir} until in
    sync; print the seconds it took and this process's CPU.
    """
    replica = Replica(data_dir, lambda: ThreadedExecutor(reactor), sync)
    await replica.open()
    in_sync = defer.Deferred()
    context = RouterContext(name=NAME, clock=reactor,
                            events=EventLog(data_dir, NAME, reactor),
                            registry=LinkRegistry(), engine=None, group=NAME)
    follower = ReplicationFollower(
        context, ConnectorSettings(SECRET, NAME, STAGE_VALID_TIMEOUT_MS),
        EndpointRotation([(endpoint, clientFromString(reactor, endpoint))]),
        RetrySchedule(100, 1.0, 100, -1), reactor, replica, data_dir,
        caught_up=lambda: in_sync.called or in_sync.callback(None), lost=lambda: None,
        peer_heard=lambda: None)
    cpu_before, started = cpu_s(os.getpid()), time.perf_counter()
    follower.startService()
    await in_sync.addTimeout(10 * DEADLINE_S, reactor)
    seconds = time.perf_counter() - started
    cpu = cpu_s(os.getpid()) - cpu_before
    await defer.maybeDeferred(follower.stopService)
    await replica.close()
    print(f'{{"seconds": {seconds}, "cpu_s": {cpu}}}', flush=True)


# -- catch-up ----------------------------------------------------------------------------


async def catch_up(reactor, active: ActiveSide, endpoint: str, data_dir: str, sync: str) -> dict:
    """
    One backup catching up into C{data_dir}; checked against the active.
    """
    meter = Meter()
    active_cpu = cpu_s(os.getpid())
    child = spawn_role(reactor, SCRIPT, data_dir, "worker-follow", data_dir, endpoint, sync)
    result = role_result(child, await child.ended)
    result["active_cpu_s"] = cpu_s(os.getpid()) - active_cpu
    result["others"] = meter.stop()[0]
    position, messages, _ = store_state(os.path.join(data_dir, STORE_NAME))
    expected = active.source.head.position, store_state(active.path)[1]
    if (position, messages) != expected:
        raise RuntimeError(f"the backup in {data_dir} holds position {position} and {messages} "
                           f"messages, the active {expected[0]} and {expected[1]}")
    return result


async def bench_catch_up(reactor, options, workdir: str) -> None:
    messages = options["messages"]
    active = ActiveSide(reactor, os.path.join(workdir, "active"))
    os.makedirs(active.directory)
    at_start = os.path.join(workdir, "backup-at-start")
    await active.create(at_start)
    filled = await active.fill(messages, options["body"], options["window"])
    store_bytes = store_state(active.path)[2]
    endpoint = await active.listen()
    rows = []
    try:
        for label, sync, from_log in (("log", "full", True), ("log", "normal", True),
                                      ("snapshot", "full", False)):
            data_dir = os.path.join(workdir, f"backup-{label}-{sync}")
            if from_log:
                shutil.copytree(at_start, data_dir)
            else:
                os.makedirs(data_dir)
            result = await catch_up(reactor, active, endpoint, data_dir, sync)
            size = filled["log_bytes"] if from_log else store_bytes
            seconds = result["seconds"]
            rows.append((f"from the {label}", sync, f"{messages:,}",
                         f"{filled['batches']:,}" if from_log else "-",
                         f"{size / 2**20:.1f}", f"{seconds:.2f}", f"{messages / seconds:,.0f}",
                         f"{size / 2**20 / seconds:.1f}", f"{result['active_cpu_s']:.1f}",
                         f"{result['cpu_s']:.1f}", f"{result['others']:.0%}"))
    finally:
        await active.close()
    print_table(
        f"Catch-up of a backup over loopback TCP (real listener, feed and follower): "
        f"{messages:,} accepted messages of {options['body']} B in the active's store "
        f"(filled in {filled['fill_s']:.1f} s, {filled['batches']:,} batches, store "
        f"{store_bytes / 2**20:.1f} MiB)",
        ("catch-up", "replica-sync", "messages", "batches", "MiB", "s", "msg/s", "MiB/s",
         "active CPU s", "backup CPU s", "others' CPU"),
        rows)
    print("MiB: the batches' msgpack size (from the log) or the store's pages (snapshot); "
          "s: follower start -> in sync; others' CPU: processes not ours, share of one CPU.")


# -- throughput and latency with and without a backup -----------------------------------------


async def produce_and_consume(reactor, router: Router, workdir: str, count: int,
                              rate: int | None, options, backup: Router | None = None,
                              sample=None) -> dict:
    """
    A throughput.py consumer and producer on C{router}'s client listener
    (C{count} persistent messages, at C{rate} or as fast as confirmed);
    C{sample()} is awaited every 100 ms meanwhile.  Checked: every message
    exactly once.  The CPU of C{router} and C{backup} is measured.
    """
    kind = "latency" if rate else "throughput"
    ready, consumed_path, produced_path = (os.path.join(workdir, f"{kind}-{what}")
                                           for what in ("ready", "consumer.json",
                                                        "producer.json"))
    endpoint = router.client_endpoint
    consumer = spawn_role(reactor, THROUGHPUT_SCRIPT, workdir, "worker-consume", "--connect",
                          endpoint, "--queue", "bench", "--count", count, "--prefetch", 1000,
                          "--warmup", options["warmup"] if rate else 0, "--ready", ready,
                          "--result", consumed_path)

    async def subscribed():
        consumer.check_alive()
        return os.path.exists(ready)

    await poll(reactor, "the consumer to subscribe", subscribed)
    cpu_before = router.child.cpu(), backup.child.cpu() if backup else 0.0
    producer = spawn_role(reactor, THROUGHPUT_SCRIPT, workdir, "worker-produce", "--connect",
                          endpoint, "--to", "bench", "--count", count, "--size", options["body"],
                          "--window", 1000, "--result", produced_path,
                          *(("--rate", rate) if rate else ()))
    samples = []
    while not (producer.ended.called and consumer.ended.called):
        router.child.check_alive()
        if sample is not None:
            samples.append(await sample())
        await task.deferLater(reactor, 0.1)
    cpu = router.child.cpu() - cpu_before[0]
    backup_cpu = backup.child.cpu() - cpu_before[1] if backup else None
    for child in (producer, consumer):
        if child.ended.result != 0:
            raise RuntimeError(f"{child.name} exited {child.ended.result}:\n"
                               f"{child.output.decode(errors='replace')}")
    with open(produced_path) as f:
        produced = json.load(f)
    with open(consumed_path) as f:
        consumed = json.load(f)
    if consumed["unique"] != count or consumed["duplicates"] or produced["refused"]:
        raise RuntimeError(f"exactly-once violated: {consumed['unique']} of {count} distinct, "
                           f"{consumed['duplicates']} duplicates, {produced['refused']} refused "
                           f"({produced['first_error']})")
    start = produced["first_send"]
    return {"sent_per_s": produced["confirmed"] / (produced["last_confirm"] - start),
            "consumed_per_s": consumed["received"] / (consumed["last_receive"] - start),
            "latency_ms": consumed["latency_ms"], "router_cpu_per_10k": cpu / count * 10_000,
            "backup_cpu_per_10k": None if backup is None else backup_cpu / count * 10_000,
            "samples": samples}


#: The throughput part's rows: label, directory and the pair's policy (None:
#: the same router without [ha]).
THROUGHPUT_ROWS = (("without a backup", "without-backup", None),
                   ("with a backup", "with-backup", REPLICATION),
                   ("shared store", "shared-store", SHARED_STORE))


async def bench_throughput(reactor, options, workdir: str) -> None:
    rows = []
    for label, name, policy in THROUGHPUT_ROWS:
        if policy is not None and policy not in options["policies"]:
            continue
        directory = os.path.join(workdir, name)
        os.makedirs(directory)
        meter = Meter()
        if policy is not None:
            pair = PAIRS[policy](reactor, directory, options)
            await pair.start()
            router, backup_instance = await pair.settled()
        else:
            pair = backup_instance = None
            router = Router(reactor, directory, "alone", ROUTER_CONFIG, router=PAIR_NAME,
                            data_dir=DATA_DIR)
            await router.start()
        try:
            async def lag():
                return (await router.get("ha"))["lag"]

            full = await produce_and_consume(reactor, router, directory, options["tp-messages"],
                                             None, options, backup_instance,
                                             lag if policy == REPLICATION else None)
            paced = await produce_and_consume(
                reactor, router, directory, int(options["rate"] * options["latency-seconds"]),
                options["rate"], options, backup_instance)
        finally:
            if pair is not None:
                await pair.stop()
            else:
                await router.stop()
        lags = [v for v in full["samples"] if v is not None]
        latency = paced["latency_ms"]
        rows.append((label, f"{full['sent_per_s']:,.0f}", f"{full['consumed_per_s']:,.0f}",
                     cpu_per_10k(full), f"{latency['p50']:.1f}", f"{latency['p99']:.1f}",
                     f"{latency['max']:.1f}", cpu_per_10k(paced),
                     f"{statistics.median(lags):.0f} / {max(lags)} (n={len(lags)})"
                     if lags else "-",
                     others_load(meter)))
    print_table(
        f"Persistent messages of {options['body']} B, producer and consumer on the (active) "
        f"router, store sync=full, replica-sync={options['replica-sync']}: "
        f"{options['tp-messages']:,} as fast as confirmed (1000 in flight), then "
        f"{options['rate']:,}/s for {options['latency-seconds']:g} s",
        ("router", "sent/s", "cons/s", "rCPU/10k", "p50 ms", "p99 ms", "max ms", "@rate/10k",
         "lag median / max", "others' CPU, load"),
        rows)
    print("lag: GET /api/v1/ha `lag` of the active every 100 ms of the full-load run "
          "(store changes the backup has not acknowledged); rCPU/10k and @rate/10k: CPU s per "
          "10,000 messages of the (active) router, + the backup's (in sync, or, shared store, "
          "waiting on the lock).")


def others_load(meter: Meter) -> str:
    """
    What C{meter} saw of other processes: their CPU (share of one CPU)
    and the 1-minute load average at its start and end.
    """
    others, load_start, load_end = meter.stop()
    return f"{others:.0%}, {load_start:.1f}-{load_end:.1f}"


def cpu_per_10k(run: dict) -> str:
    own = f"{run['router_cpu_per_10k']:.2f}"
    return own if run["backup_cpu_per_10k"] is None else \
        f"{own} + {run['backup_cpu_per_10k']:.2f}"


# -- failover ------------------------------------------------------------------------------


async def worker_probe(reactor, endpoints: str, interval_ms: str, check_ms: str) -> None:
    """
    Send a persistent message every C{interval_ms} through a client with
    both instances' endpoints; print C{SWITCH} and the time whenever a
    confirmation comes from another endpoint than the last one.  Runs
    until killed.
    """
    from meshroute.client import connect

    # A frozen instance accepts TCP connections (the kernel does) and never
    # answers: the open timeout is what moves the client on from it.
    client = await connect(reactor, endpoints.split(","), reconnect_attempts=-1,
                           retry_interval_ms=50, max_retry_interval_ms=50,
                           client_failure_check_period_ms=int(check_ms),
                           open_timeout_ms=int(check_ms))
    state = {"endpoint": None, "sent": 0, "in_flight": 0, "failed": 0}

    def confirmed(endpoint) -> None:
        state["in_flight"] -= 1
        if endpoint != state["endpoint"]:
            state["endpoint"] = endpoint
            print("SWITCH " + json.dumps({"t": time.time(), "endpoint": endpoint,
                                          "failed": state["failed"]}), flush=True)

    def failed(_) -> None:
        state["in_flight"] -= 1
        state["failed"] += 1

    def tick() -> None:
        if state["in_flight"] >= 200:
            return
        state["sent"] += 1
        state["in_flight"] += 1
        # A confirmation arrives on the client's current connection.
        client.send(PROBE_QUEUE, b"%d" % state["sent"], duplicate_id=f"p{state['sent']}") \
            .addCallbacks(lambda _: confirmed(client.endpoint), failed)

    task.LoopingCall(tick).start(int(interval_ms) / 1000)
    await defer.Deferred()


def switches(probe) -> list[dict]:
    return [json.loads(line[len("SWITCH "):])
            for line in probe.stdout.decode(errors="replace").splitlines()
            if line.startswith("SWITCH ")]


KINDS = {"KILL": "SIGKILL", "STOP": "SIGSTOP", "TERM": "SIGTERM"}


async def one_failover(reactor, pair: Pair, probe, kind: str, steady: float,
                       deadline: float) -> dict:
    """
    Once the pair has been settled for C{steady} seconds, signal the
    active; time its backup's activation (its event log) and the probe's
    first confirmation from it; then bring the signalled one back and
    time until the pair is settled again.  A pair that does not get there
    is a C{problem} of the result; an activation in an epoch not above
    the old active's is a C{wrong_epoch}.
    """
    active, backup = await pair.settled()
    await task.deferLater(reactor, steady)
    active, backup = await pair.settled()
    epoch = (await active.get("ha"))["epoch"]
    seen = len(switches(probe))
    killed = time.time()
    active.child.process.signalProcess(getattr(signal, KINDS[kind]))

    async def activation():
        backup.child.check_alive()
        return activated_at(pair.events_dir(backup), killed)

    activated = await poll(reactor, f"{backup.name} to activate", activation,
                           lambda e: e is not None, deadline)

    async def confirmed():
        probe.check_alive()
        return [s for s in switches(probe)[seen:] if s["endpoint"] == backup.client_endpoint]

    first = (await poll(reactor, "the probe's first confirmation from the new active",
                        confirmed, bool, deadline))[0]
    result = {"activated": activated["time"] - killed, "confirmed": first["t"] - killed}
    if activated["epoch"] <= epoch:
        result["wrong_epoch"] = (f"{backup.name} activated in epoch {activated['epoch']}, "
                                 f"not above {active.name}'s {epoch}")
    if kind == "STOP":
        active.child.process.signalProcess(signal.SIGCONT)
    else:
        await active.child.ended.addTimeout(DEADLINE_S, reactor)
        await active.start()
    back = time.time()
    try:
        await pair.settled()
        result["back"] = time.time() - back
    except NotSettled as e:
        result["problem"] = f"afterwards: {e}"
    return result


def activated_at(events_dir: str, since: float) -> dict | None:
    """
    The C{ha.state} event of the event log in C{events_dir} saying that its
    instance became active after C{since}.
    """
    for event in read_events(events_dir):
        if (event["event"] == "ha.state" and event["time"] > since
                and event["state"].startswith("active")):
            return event
    return None


class FailoverRig:
    """
    A pair of C{policy} and the probe; started again, in a new directory,
    after a failover that left the pair unsettled.
    """

    def __init__(self, reactor, options, workdir: str, policy: str) -> None:
        self._reactor = reactor
        self._options = options
        self._workdir = workdir
        self._policy = policy
        self.started = 0
        self.pair: Pair | None = None
        self.probe = None

    async def start(self) -> None:
        self.started += 1
        directory = os.path.join(self._workdir, f"failover-{self._policy}-{self.started}")
        self.pair = PAIRS[self._policy](self._reactor, directory, self._options)
        await self.pair.start()
        self.probe = spawn_role(self._reactor, SCRIPT, directory, "worker-probe",
                                ",".join(i.client_endpoint for i in self.pair.instances),
                                self._options["probe-interval"], self._options["failure-check"])

        async def first():
            self.probe.check_alive()
            return switches(self.probe)

        await poll(self._reactor, "the probe's first confirmation", first)

    async def stop(self) -> None:
        if self.probe is not None:
            await self.probe.kill()
        if self.pair is not None:
            await self.pair.stop()
        self.pair = self.probe = None


async def failovers(reactor, options, workdir: str, policy: str,
                    problems: list[str]) -> list[tuple]:
    """
    --kills signals of each of --kinds that C{policy}'s pair fails over
    on, to one rig; a table row for each kind.  What went wrong is added
    to C{problems}.
    """
    kinds = PAIRS[policy].failover_kinds
    bound = PAIRS[policy].bounds(options)
    rig = FailoverRig(reactor, options, workdir, policy)
    rows = []
    try:
        await rig.start()
        for kind in (k for k in options["kinds"] if k in kinds):
            results = []
            for i in range(options["kills"]):
                try:
                    result = await one_failover(reactor, rig.pair, rig.probe, kind,
                                                options["steady"], 10 * bound[kind] + 30)
                except RuntimeError as e:
                    result = {"problem": str(e).splitlines()[0]}
                results.append(result)
                for key, after in (("wrong_epoch", ""),
                                   ("problem", " (a fresh pair was started)")):
                    if key in result:
                        problems.append(f"{policy} {KINDS[kind]} #{i + 1}: {result[key]}{after}")
                if "problem" in result:
                    await rig.stop()
                    await rig.start()
            rows.append(failover_row(policy, kind, results, bound[kind]))
    finally:
        await rig.stop()
    return rows


def failover_row(policy: str, kind: str, results: list[dict], bound: float) -> tuple:
    """
    The table row of C{kind}'s results: p50, p99 and max in ms of each
    time, and whether every first confirmation kept within C{bound} s.
    """
    measured = [r for r in results if "confirmed" in r]
    row = [policy, KINDS[kind], f"{len(measured)}/{len(results)}", f"{bound * 1000:,.0f}"]
    for key in ("activated", "confirmed", "back"):
        values = [r[key] * 1000 for r in measured if key in r]
        row += ([f"{percentile(values, 50):,.0f}", f"{percentile(values, 99):,.0f}",
                 f"{max(values):,.0f}"] if values else ["-"] * 3)
        if key == "confirmed":
            over = sum(r["confirmed"] > bound for r in measured)
            row.append("-" if not measured else "yes" if not over else f"NO ({over} over)")
    return tuple(row)


async def bench_failover(reactor, options, workdir: str) -> None:
    meter = Meter()
    rows: list[tuple] = []
    problems: list[str] = []
    for policy in options["policies"]:
        rows += await failovers(reactor, options, workdir, policy, problems)
    print_table(
        f"Failover under a probe sending a persistent message every {options['probe-interval']} "
        f"ms to both endpoints: heartbeat-interval {options['heartbeat-interval']} ms, "
        f"lease-timeout {options['lease-timeout']} ms; replication: replica-sync "
        f"{options['replica-sync']}, a witness, allow-failback false; shared-store: "
        f"lock-poll-interval {options['lock-poll-interval']} ms, allow-failback true; settled "
        f"{options['steady']:g} s before each signal; the probe's client-failure-check-period "
        f"and open-timeout {options['failure-check']} ms; others' CPU, load "
        f"{others_load(meter)}",
        ("policy", "signal", "measured", "bound", "active p50", "p99", "max", "confirm p50",
         "p99", "max", "bound held", "back p50", "p99", "max"),
        rows)
    print("ms.  active: signal -> the backup's ha.state event saying active; confirm: signal -> "
          "the probe's first send confirmed by the new active; back: the signalled instance's "
          "admin API answers again (restarted) or SIGCONT -> the pair settled again "
          "(replication: rejoined as the backup, in sync; shared store: the primary took the "
          "store back).  Bound, checked on confirm: replication lease-timeout + 2 x "
          "heartbeat-interval + 1 s, SIGTERM 1 s; shared store SIGKILL 2 s, SIGTERM 1 s.  A "
          "shared-store pair does not fail over on SIGSTOP (the frozen live keeps its lock).")
    for problem in problems:
        print(f"PROBLEM {problem}")


PARTS = {"catchup": bench_catch_up, "throughput": bench_throughput, "failover": bench_failover}


async def main(reactor, *argv) -> None:
    options = Options()
    try:
        options.parseOptions(argv)
    except usage.UsageError as e:
        raise SystemExit(f"ha.py: {e} (see --help)")
    workdir = tempfile.mkdtemp(prefix="meshroute-ha-", dir=options["dir"])
    try:
        for part in options["parts"]:
            await PARTS[part](reactor, options, workdir)
            print(flush=True)
    finally:
        if options["keep"]:
            print(f"kept {workdir}")
        else:
            remove_tree(workdir)


if __name__ == "__main__":
    run_main(main, {"worker-follow": worker_follow, "worker-probe": worker_probe})
