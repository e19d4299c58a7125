"""
Issue 10's side-by-side comparison: the same workload against meshroute,
a RabbitMQ shovel and a NATS route, in one run, one table with ratios.

The workload (throughput.py's): a producer process connected to the first
router or broker (A), a consumer process on the last (B), bodies of 100 B
and 1 KiB carrying their sequence number and send time; a throughput run
(--messages, at most --window unconfirmed, the median of --runs runs) and
a latency run at a paced --rate (default 1,000 msg/s) that also gives each
router's or broker's CPU at that rate.  Persistent runs must deliver every
message exactly once (checked and printed; a violation makes the script
exit 1).

- meshroute: real C{twistd -n meshroute} routers on fresh data dirs for
  every run (throughput.py's meshes and workers, so the client API is
  whatever throughput.py's producer and consumer use): one hop (A -> B),
  two hops (A -> B -> C) and one hop to an HA pair (B is a primary and a
  backup with C{[ha]}, replica-sync full, the backup in sync; A is their
  witness); persistent with C{[store] sync = "full"} and non-persistent.
- RabbitMQ (Debian package rabbitmq-server, plugin rabbitmq_shovel, client
  pika): two nodes, each C{rabbitmq-server} run as the current user with
  its own directory, ports on 127.0.0.1 and its own epmd port; a static
  shovel on A moves durable queue C{bench} of A to queue C{bench} of B
  (ack-mode on-confirm); the producer publishes to A with publisher
  confirms, persistent (delivery mode 2) or transient; the consumer
  acknowledges each message on B (prefetch --prefetch).  pika's Twisted
  adapter, so the producer paces and windows exactly as meshroute's does.
- NATS (Debian package nats-server, client nats-py): two servers joined by
  a route; the producer publishes on A, the consumer subscribes on B (no
  persistence: its "persistent" columns stay empty).

What is missing is installed first (apt-get as root, pip; --no-install
skips it instead, saying how to install).  Everything runs on
127.0.0.1 and is stopped when the script ends.  See benchmarks/README.md.
"""

import asyncio
import importlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import throughput  # noqa: E402
from _ha_pairs import HA_CONFIG  # noqa: E402
from _harness import print_table  # noqa: E402
from throughput import (  # noqa: E402
    CONNECTOR_CONFIG,
    QUEUE,
    ROUTER_CONFIG,
    START_DEADLINE_S,
    STOP_DEADLINE_S,
    Children,
    ConsumeOptions,
    Mesh,
    ProduceOptions,
    Receipts,
    RouterProc,
    Row,
    busy_seconds,
    free_port,
    paced_sends,
    parse_main_options,
    print_notes,
    run_deadline,
    run_workers,
    summarize,
    tail,
    wait_until,
    write_produced,
)
from twisted.python import usage  # noqa: E402

SCRIPT = os.path.abspath(__file__)
SIZES = (100, 1024)
SYSTEMS = ("meshroute", "rabbitmq", "nats")
#: A NATS consumer's probe body (not a benchmark message): it proves the route
#: carries its subscription's interest to A before the producer starts.
PROBE = b"probe"
#: What each broker needs: Debian packages, then Python packages (the
#: C{bench} extra of setup.cfg).
PACKAGES = {
    "rabbitmq": (("rabbitmq-server",), ("pika",)),
    "nats": (("nats-server",), ("nats-py",)),
    "mosquitto": (("mosquitto",), ("paho-mqtt",)),
}
INSTALL = {system: f"apt-get install {' '.join(debian)} && pip install {' '.join(python)}"
           for system, (debian, python) in PACKAGES.items()}


# -- options ------------------------------------------------------------------------


class Options(usage.Options):
    synopsis = "[--quick] [--systems meshroute,rabbitmq,nats] [--messages N] [...]"
    optParameters = [
        ["systems", None, ",".join(SYSTEMS), "Comma-separated systems to run."],
        ["sizes", None, None, "Comma-separated body sizes in bytes (default 100,1024; 100 "
         "with --quick)."],
        ["messages", "n", None, "Messages per throughput run (default 50000; 5000 with "
         "--quick).", int],
        ["runs", None, None, "Throughput runs per row; the median counts (default 3; 1 with "
         "--quick).", int],
        ["latency-runs", None, None, "Latency runs per row; each figure's median counts "
         "(default 3; 1 with --quick).", int],
        ["rate", None, 1000, "Offered load of the latency runs, messages/s.", int],
        ["latency-seconds", None, None, "Length of each latency run (default 10; 3 with "
         "--quick).", float],
        ["warmup", None, 200, "Messages of each latency run left out of the percentiles.", int],
        ["window", None, 1000, "Sends in flight per producer (unconfirmed).", int],
        ["prefetch", None, 1000, "The consumer's prefetch (unacknowledged deliveries).", int],
        ["dir", None, None, "Where to make the temporary directories (default: the system's "
         "temporary directory; its disk is what sync=full and RabbitMQ's persistence "
         "measure)."],
        ["json", None, None, "Also write every measurement to this JSON file."],
    ]
    optFlags = [
        ["quick", "q", "Smoke run: fewer messages, one throughput run per row, 100 B only."],
        ["keep", None, "Keep the directories (router and broker logs, stores)."],
        ["no-install", None, "Skip a system that is missing instead of installing it "
         "(apt-get, pip)."],
    ]

    #: The systems --systems may name (a subclass measuring others says which).
    known_systems = SYSTEMS

    def postOptions(self) -> None:
        quick = self["quick"]
        for key, full, short in (("messages", 50_000, 5000), ("runs", 3, 1),
                                 ("latency-runs", 3, 1), ("latency-seconds", 10.0, 3.0)):
            if self[key] is None:
                self[key] = short if quick else full
        self["systems"] = [s.strip() for s in self["systems"].split(",") if s.strip()]
        self["install"] = not self["no-install"]
        unknown = set(self["systems"]) - set(self.known_systems)
        if unknown:
            raise usage.UsageError(f"--systems: unknown {', '.join(sorted(unknown))}; "
                                   f"known: {', '.join(self.known_systems)}")
        try:
            self["sizes"] = ([int(s) for s in self["sizes"].split(",")] if self["sizes"]
                             else [100] if quick else list(SIZES))
        except ValueError:
            raise usage.UsageError("--sizes: comma-separated byte counts") from None
        if min(self["sizes"]) < 40:
            raise usage.UsageError("--sizes: at least 40 bytes (sequence number and send time)")
        if min(self["messages"], self["runs"], self["latency-runs"], self["rate"]) < 1 \
                or self["latency-seconds"] <= 0:
            raise usage.UsageError("--messages, --runs, --latency-runs, --rate and "
                                   "--latency-seconds must be positive")
        if self["warmup"] >= self["rate"] * self["latency-seconds"]:
            raise usage.UsageError("--warmup leaves no message of the latency run")
        # What throughput.run_once reads besides ours.
        self.update({"wait-idle": 0.0, "py-spy": None, "wakeups": False})


@dataclass(frozen=True)
class Case(Row):
    """
    One row of the comparison: a system, its path (C{1hop}, C{2hop},
    C{1hop-ha}; a broker's is C{1hop}), body size and mode (C{full} for
    persistent, C{nonpersistent}).
    """

    system: str = "meshroute"
    ha: bool = False

    @property
    def path(self) -> str:
        return f"{self.hops}hop" + ("-ha" if self.ha else "")

    @property
    def id(self) -> str:
        return f"{self.system}-{self.path}-{throughput._size_label(self.size)}-{self.mode}"


def cases(options) -> list[Case]:
    found = []
    for system in options["systems"]:
        for size in options["sizes"]:
            if system == "meshroute":
                found += [Case(1, size, "full"), Case(1, size, "nonpersistent"),
                          Case(2, size, "full"), Case(2, size, "nonpersistent"),
                          Case(1, size, "full", ha=True)]
            elif system == "rabbitmq":
                found += [Case(1, size, mode, system) for mode in ("full", "nonpersistent")]
            else:
                found.append(Case(1, size, "nonpersistent", system))
    return found


# -- meshroute with an HA pair as the destination --------------------------------------


class HAMesh(Mesh):
    """
    router-a (routing listener, the pair's witness) and router-b as an HA
    pair (primary and backup, C{[ha]} with replica-sync full, each with a
    connector to router-a); the destination is the active instance once
    the backup is in sync.
    """

    def __init__(self, workdir: str, hops: int, sync: str, children: Children) -> None:
        self.children = children
        self.sync = sync
        origin = RouterProc("router-a", os.path.join(workdir, "router-a"))
        origin.routing_port = free_port()
        self.instances = [RouterProc(role, os.path.join(workdir, role), "router-b")
                          for role in ("primary", "backup")]
        self.routers = [origin, *self.instances]
        self._active = self.instances[0]

    @property
    def destination(self) -> RouterProc:
        return self._active

    def start(self) -> None:
        origin = self.origin
        origin.write_config(self.sync)
        origin.start(self.children)
        replication = [free_port(), free_port()]
        endpoints = ", ".join(f'"{i.client_endpoint}"' for i in self.instances)
        for i, (instance, role) in enumerate(zip(self.instances, ("primary", "backup"))):
            os.makedirs(instance.directory)
            config = ROUTER_CONFIG.format(
                name=instance.router, client_port=instance.client_port,
                admin_port=instance.admin_port, sync=self.sync)
            config += HA_CONFIG.format(
                role=role, heartbeat=500, lease=3000, replica_sync="full",
                client_endpoints=endpoints, replication_port=replication[i],
                peer_replication_port=replication[1 - i], witness=origin.router,
                witness_port=origin.routing_port)
            config += CONNECTOR_CONFIG.format(peer=origin.router, port=origin.routing_port)
            with open(os.path.join(instance.directory, "router.toml"), "w") as f:
                f.write(config)
            with open(os.path.join(instance.directory, "secret"), "wb") as f:
                f.write(throughput.SECRET)
            instance.start(self.children)

        def settled():
            states = [i.get("ha")["state"] for i in self.instances]
            if sorted(states) == ["active-replicated", "backup-in-sync"]:
                return self.instances[states.index("active-replicated")]
            return None

        self._active = wait_until("one instance active, the other backup-in-sync", settled,
                                  2 * START_DEADLINE_S)
        wait_until("a route from router-a to router-b",
                   lambda: "router-b" in origin.get("routes"), START_DEADLINE_S)


def run_meshroute(case: Case, options, base: str, rate: int | None, count: int) -> dict:
    return throughput.run_once(case, options, base, rate, count,
                               HAMesh if case.ha else Mesh)


# -- brokers -------------------------------------------------------------------------


def _tree_cpu(pid: int) -> float:
    """
    utime + stime of C{pid} and its descendants still running (a broker's
    start script may leave the VM as its child).
    """
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rpartition(")")[2].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    total, todo = 0.0, [pid]
    while todo:
        current = todo.pop()
        try:
            total += throughput.cpu_seconds(current)
        except OSError:
            pass
        todo += children.get(current, [])
    return total


class Broker:
    """
    One broker process: a name (A or B), its directory and client port.
    """

    def __init__(self, name: str, directory: str) -> None:
        self.name, self.directory = name, directory
        self.port = free_port()
        self.proc: subprocess.Popen | None = None
        os.makedirs(directory)

    @property
    def out_path(self) -> str:
        return os.path.join(self.directory, "broker.out")

    def check_alive(self) -> None:
        if self.proc.poll() is not None:
            raise RuntimeError(f"broker {self.name} exited with {self.proc.returncode}:\n"
                               f"{tail(self.out_path)}")

    def cpu(self) -> float:
        return _tree_cpu(self.proc.pid)


class BrokerPair:
    """
    Two brokers, A and B, joined so that what is published on A reaches
    the consumer on B; started once for all of a system's cases.
    """

    label = ""

    def __init__(self, workdir: str, children: Children) -> None:
        self.workdir, self.children = workdir, children
        self.brokers = [Broker(n, os.path.join(workdir, n)) for n in ("A", "B")]

    def check_alive(self) -> None:
        for broker in self.brokers:
            broker.check_alive()

    def cpu(self) -> dict[str, float]:
        return {broker.name: broker.cpu() for broker in self.brokers}

    def stop(self) -> dict[str, int]:
        """
        SIGTERM both; their exit statuses (SIGKILL after STOP_DEADLINE_S).
        """
        for broker in self.brokers:
            throughput._signal(broker.proc, signal.SIGTERM)
        codes = {}
        for broker in self.brokers:
            try:
                codes[broker.name] = broker.proc.wait(STOP_DEADLINE_S * 3)
            except subprocess.TimeoutExpired:
                throughput._signal(broker.proc, signal.SIGKILL)
                codes[broker.name] = broker.proc.wait()
        return codes

    def drained(self) -> bool:
        """
        Whether nothing is left queued anywhere (between runs).
        """
        return True

    def cleanup(self) -> None:
        """
        After the brokers are gone: stop what they left behind.
        """


RABBIT_CONF = """\
listeners.tcp.1 = 127.0.0.1:{port}
loopback_users.guest = true
disk_free_limit.absolute = 50MB
log.file.level = warning
log.console = false
"""
RABBIT_SHOVEL = """\
[{{rabbitmq_shovel, [{{shovels, [{{bench, [
  {{source, [{{protocol, amqp091}}, {{uris, ["amqp://guest:guest@127.0.0.1:{source}"]}},
            {{declarations, [{{'queue.declare', [{{queue, <<"{queue}">>}}, durable]}}]}},
            {{queue, <<"{queue}">>}}, {{prefetch_count, {prefetch}}}]}},
  {{destination, [{{protocol, amqp091}},
                 {{uris, ["amqp://guest:guest@127.0.0.1:{destination}"]}},
                 {{declarations, [{{'queue.declare', [{{queue, <<"{queue}">>}}, durable]}}]}},
                 {{publish_fields, [{{exchange, <<"">>}}, {{routing_key, <<"{queue}">>}}]}}]}},
  {{ack_mode, on_confirm}},
  {{reconnect_delay, 1}}
]}}]}}]}}].
"""
RABBIT_SERVER = "/usr/lib/rabbitmq/bin/rabbitmq-server"


class RabbitPair(BrokerPair):
    """
    Two RabbitMQ nodes as the current user (C{rabbitmq-server} without the
    Debian wrapper, which would switch to the rabbitmq user and the system
    node), each with its own directory, AMQP and distribution ports on
    127.0.0.1, and one epmd of our own on a free port; node A runs a static
    shovel from its queue C{bench} to B's.
    """

    label = "RabbitMQ shovel, publisher confirms"

    @staticmethod
    def missing() -> str | None:
        if not os.access(RABBIT_SERVER, os.X_OK):
            return "rabbitmq-server is not installed"
        try:
            import pika  # noqa: F401
        except ImportError:
            return "pika is not installed"
        return None

    def __init__(self, workdir: str, children: Children) -> None:
        super().__init__(workdir, children)
        self.epmd_port = free_port()

    def config_files(self, broker: Broker, options) -> dict[str, str]:
        """
        The files C{broker} starts from, by name in its directory: its
        configuration, its plugins (the shovel) and, on A, the shovel.
        """
        return {
            "rabbitmq.conf": RABBIT_CONF.format(port=broker.port),
            "enabled_plugins": "[rabbitmq_shovel].\n",
            "advanced.config": RABBIT_SHOVEL.format(
                source=broker.port, destination=self.brokers[1].port, queue=QUEUE,
                prefetch=options["prefetch"]) if broker.name == "A" else "[].\n",
        }

    def start(self, options) -> None:
        for broker in self.brokers:
            env = self._env(broker)
            for name, content in self.config_files(broker, options).items():
                with open(os.path.join(broker.directory, name), "w") as f:
                    f.write(content)
            broker.proc = self.children.spawn([RABBIT_SERVER], broker.directory,
                                              broker.out_path, stop_signal=signal.SIGTERM,
                                              env=env)
        for broker in self.brokers:
            wait_until(f"RabbitMQ {broker.name} to accept AMQP",
                       lambda b=broker: self.queue_depth(b) is not None, 4 * START_DEADLINE_S,
                       self.check_alive)

    def _env(self, broker: Broker) -> dict[str, str]:
        d = broker.directory
        return dict(
            os.environ, HOME=d,
            RABBITMQ_NODENAME=f"bench{broker.name}{os.getpid()}@localhost",
            RABBITMQ_NODE_IP_ADDRESS="127.0.0.1", RABBITMQ_NODE_PORT=str(broker.port),
            RABBITMQ_DIST_PORT=str(free_port()), ERL_EPMD_PORT=str(self.epmd_port),
            ERL_EPMD_ADDRESS="127.0.0.1",
            RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS="-kernel inet_dist_use_interface {127,0,0,1}",
            RABBITMQ_CTL_ERL_ARGS="-kernel inet_dist_use_interface {127,0,0,1}",
            RABBITMQ_CONFIG_FILE=os.path.join(d, "rabbitmq.conf"),
            RABBITMQ_ADVANCED_CONFIG_FILE=os.path.join(d, "advanced.config"),
            RABBITMQ_ENABLED_PLUGINS_FILE=os.path.join(d, "enabled_plugins"),
            RABBITMQ_MNESIA_BASE=os.path.join(d, "mnesia"),
            RABBITMQ_LOG_BASE=os.path.join(d, "log"),
            RABBITMQ_PID_FILE=os.path.join(d, "rabbitmq.pid"),
            RABBITMQ_PLUGINS_EXPAND_DIR=os.path.join(d, "plugins-expand"))

    def queue_depth(self, broker: Broker) -> int | None:
        """
        Messages in C{broker}'s queue C{bench} (declaring it), or None while
        it does not answer.
        """
        import pika

        try:
            with pika.BlockingConnection(pika.ConnectionParameters(
                    "127.0.0.1", broker.port, connection_attempts=1, socket_timeout=2)) as conn:
                declared = conn.channel().queue_declare(QUEUE, durable=True)
                return declared.method.message_count
        except pika.exceptions.AMQPError:
            return None

    def drained(self) -> bool:
        return all(self.queue_depth(b) == 0 for b in self.brokers)

    def cleanup(self) -> None:
        # The epmd the nodes started (ours: its own port) goes with them.
        subprocess.run(["epmd", "-port", str(self.epmd_port), "-kill"],
                       env=dict(os.environ, ERL_EPMD_PORT=str(self.epmd_port)),
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)

    def workers(self, case: Case, count: int, rate: int | None, options) -> tuple[list, list]:
        a, b = self.brokers
        consumer = [sys.executable, SCRIPT, "worker-rabbit-consume", "--connect", str(b.port),
                    "--count", str(count), "--prefetch", str(options["prefetch"]),
                    "--warmup", str(options["warmup"] if rate else 0)]
        producer = [sys.executable, SCRIPT, "worker-rabbit-produce", "--connect", str(a.port),
                    "--count", str(count), "--size", str(case.size),
                    "--window", str(options["window"]),
                    *(("--rate", str(rate)) if rate else ()),
                    *(() if case.persistent else ("--non-persistent",))]
        return consumer, producer


NATS_SERVER = "nats-server"


class NatsPair(BrokerPair):
    """
    Two nats-server processes on 127.0.0.1 joined by a route (each
    soliciting the other's cluster port), each with its HTTP monitoring
    port (C{monitor_port}: C{/routez} counts the route's bytes).
    """

    label = "NATS route (no persistence)"

    @staticmethod
    def missing() -> str | None:
        if shutil.which(NATS_SERVER) is None:
            return "nats-server is not installed"
        try:
            import nats  # noqa: F401
        except ImportError:
            return "nats-py is not installed"
        return None

    def start(self, options) -> None:
        cluster = [free_port(), free_port()]
        for i, broker in enumerate(self.brokers):
            broker.monitor_port = free_port()
            argv = [NATS_SERVER, "-a", "127.0.0.1", "-p", str(broker.port),
                    "--cluster_name", "bench", "--cluster", f"nats://127.0.0.1:{cluster[i]}",
                    "--routes", f"nats://127.0.0.1:{cluster[1 - i]}", "--no_advertise",
                    "-m", str(broker.monitor_port)]
            broker.proc = self.children.spawn(argv, broker.directory, broker.out_path,
                                              stop_signal=signal.SIGTERM)
        wait_until("the NATS route", lambda: all(
            "Route connection created" in tail(b.out_path, 100) for b in self.brokers),
            START_DEADLINE_S, self.check_alive)

    def stop(self) -> dict[str, int]:
        codes = super().stop()
        # nats-server exits 1 after a SIGTERM by design ("Server Exiting...").
        return {name: 0 if code in (0, 1) else code for name, code in codes.items()}

    def workers(self, case: Case, count: int, rate: int | None, options) -> tuple[list, list]:
        a, b = self.brokers
        consumer = [sys.executable, SCRIPT, "worker-nats-consume", "--connect",
                    f"nats://127.0.0.1:{b.port}", "--probe-via", f"nats://127.0.0.1:{a.port}",
                    "--count", str(count), "--warmup", str(options["warmup"] if rate else 0)]
        producer = [sys.executable, SCRIPT, "worker-nats-produce", "--connect",
                    f"nats://127.0.0.1:{a.port}", "--count", str(count), "--size",
                    str(case.size), *(("--rate", str(rate)) if rate else ())]
        return consumer, producer


PAIRS = {"rabbitmq": RabbitPair, "nats": NatsPair}


def run_broker(pair: BrokerPair, case: Case, options, base: str, rate: int | None,
               count: int) -> dict:
    """
    One run against a started broker pair: the workers, CPU and checks as
    in throughput.run_once.
    """
    kind = "latency" if rate else "throughput"
    workdir = tempfile.mkdtemp(prefix=f"{case.id}-{kind}-", dir=base)
    children = Children()
    try:
        consumer, producer = pair.workers(case, count, rate, options)
        produced, consumed, (cpu_before, busy_before, wall_before) = run_workers(
            children, workdir, consumer, producer, run_deadline(count, rate), pair.check_alive,
            lambda: (pair.cpu(), busy_seconds(), time.monotonic()))
        if case.persistent:
            wait_until(f"{pair.label}: queues empty", pair.drained, START_DEADLINE_S)
        cpu_after, busy_after, wall_after = pair.cpu(), busy_seconds(), time.monotonic()
    finally:
        children.kill_all()
        if not options["keep"]:
            shutil.rmtree(workdir, ignore_errors=True)
    return summarize(case.id, case.persistent, kind, count, rate, produced, consumed,
                     cpu_before, cpu_after, busy_after - busy_before, wall_after - wall_before,
                     {})


# -- running the cases ---------------------------------------------------------------


def measure(case: Case, options, base: str, run) -> dict:
    """
    C{options["runs"]} throughput runs and C{options["latency-runs"]}
    latency runs of C{case} through C{run(case, options, base, rate,
    count)}; C{latency} is their median (L{median_latency}).
    """
    count, rate = options["messages"], options["rate"]
    runs = []
    for i in range(options["runs"]):
        print(f"{case.id}: throughput {i + 1}/{options['runs']}, {count:,} messages ...",
              file=sys.stderr, flush=True)
        runs.append(run(case, options, base, None, count))
        print(f"  {runs[-1]['consumed_per_s']:,.0f} msg/s end to end", file=sys.stderr,
              flush=True)
    lat_count = int(rate * options["latency-seconds"])
    latency_runs = []
    for i in range(options["latency-runs"]):
        print(f"{case.id}: latency {i + 1}/{options['latency-runs']}, {lat_count:,} messages "
              f"at {rate:,}/s ...", file=sys.stderr, flush=True)
        latency_runs.append(run(case, options, base, rate, lat_count))
    return {"case": case, "throughput": runs, "latency_runs": latency_runs,
            "latency": median_latency(latency_runs),
            "msg_per_s": statistics.median(r["consumed_per_s"] for r in runs)}


def median_latency(runs: list[dict]) -> dict:
    """
    The latency runs C{runs} of one row as one: each percentile and each
    router's CPU the median of the runs' (so p50 and p99 may come from
    different runs), the first run's other fields.
    """
    first = runs[0]
    percentiles = [r["latency_ms"] for r in runs if r["latency_ms"]]
    return {**first,
            "latency_ms": {key: statistics.median(p[key] for p in percentiles)
                           for key in percentiles[0]} if percentiles else first["latency_ms"],
            "router_cpu_by_router": {name: statistics.median(r["router_cpu_by_router"][name]
                                                             for r in runs)
                                     for name in first["router_cpu_by_router"]}}


def install(system: str, pair_class) -> str | None:
    """
    Install what C{system} needs (L{PACKAGES}): its Debian packages with
    apt-get (after an C{apt-get update} if the first attempt fails), its
    Python packages with this Python's pip.  Needs root for apt-get.

    @return: what is still missing afterwards (C{pair_class.missing()}), or None.
    """
    debian, python = PACKAGES[system]
    print(f"{pair_class.label}: {pair_class.missing()}; installing "
          f"({INSTALL[system]}) ...", file=sys.stderr, flush=True)
    environment = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    apt = ["apt-get", "install", "-y", "-q", "--no-install-recommends", *debian]
    if shutil.which("apt-get") is None or os.geteuid() != 0:
        print("  apt-get needs root (or is not here): not installing", file=sys.stderr)
    elif subprocess.run(apt, env=environment, stdout=subprocess.DEVNULL).returncode != 0:
        subprocess.run(["apt-get", "update", "-q"], env=environment, stdout=subprocess.DEVNULL)
        subprocess.run(apt, env=environment, stdout=subprocess.DEVNULL)
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", *python])
    importlib.invalidate_caches()
    return pair_class.missing()


def run_all(options, base: str, found: list[Case], pairs: dict, run_router,
            run_pair) -> tuple[dict[str, dict], list[str]]:
    """
    Measure every case of C{found}: meshroute's through C{run_router(case,
    options, base, rate, count)}, a broker's on a pair of C{pairs[system]}
    started for its cases through C{run_pair(pair, case, options, base,
    rate, count)}.  A broker that is missing is installed first when
    C{options["install"]} (L{install}), else skipped.

    @return: the results by case id, and the lines saying what was skipped.
    """
    results: dict[str, dict] = {}
    skipped = []
    # Each body size's systems one after the other (brokers started for it),
    # so that what else the machine does varies less between the numbers
    # compared.
    groups: dict[tuple[int, str], list[Case]] = {}
    for case in found:
        groups.setdefault((case.size, case.system), []).append(case)
    for (_size, system), system_cases in sorted(groups.items(),
                                                key=lambda g: (g[0][0], SYSTEMS.index(g[0][1]))):
        if system == "meshroute":
            for case in system_cases:
                results[case.id] = measure(case, options, base, run_router)
            continue
        pair_class = pairs[system]
        missing = pair_class.missing()
        if missing and options.get("install") and not any(
                pair_class.label in line for line in skipped):
            missing = install(system, pair_class)
        if missing:
            if any(pair_class.label in line for line in skipped):
                continue
            skipped.append(f"{pair_class.label}: skipped, {missing} "
                           f"(install: {INSTALL[system]})")
            print(skipped[-1], file=sys.stderr, flush=True)
            continue
        children = Children()
        workdir = tempfile.mkdtemp(prefix=f"{system}-", dir=base)
        pair = pair_class(workdir, children)
        try:
            print(f"{pair.label}: starting ...", file=sys.stderr, flush=True)
            pair.start(options)
            for case in system_cases:
                results[case.id] = measure(
                    case, options, base,
                    lambda c, o, b, rate, count: run_pair(pair, c, o, b, rate, count))
            codes = pair.stop()
            if any(codes.values()):
                for case in system_cases:
                    results[case.id]["latency"]["problems"].append(
                        f"did not exit 0 on SIGTERM: {codes}")
        finally:
            children.kill_all()
            pair.cleanup()
    return results, skipped


# -- the table -------------------------------------------------------------------------


def cores_per_router(result: dict) -> str:
    """
    Each router's (broker's) CPU over a latency run, in cores: CPU seconds
    divided by the run's offered duration (count / rate).
    """
    seconds = result["count"] / result["rate"]
    return " / ".join(f"{cpu / seconds:.2f}" for cpu in result["router_cpu_by_router"].values())


def mean_cores(result: dict) -> float:
    """
    The mean of a latency run's routers' (brokers') CPU, in cores: what
    one of them costs at the offered rate.
    """
    latency = result["latency"]
    seconds = latency["count"] / latency["rate"]
    cpus = latency["router_cpu_by_router"].values()
    return sum(cpus) / len(cpus) / seconds


def print_tables(results: dict, options, skipped: list[str], started: float) -> None:
    rate = options["rate"]
    print(f"issue 10 side-by-side comparison: {os.cpu_count()} CPUs, Python "
          f"{sys.version.split()[0]}; throughput: {options['messages']:,} messages, median of "
          f"{options['runs']}, window {options['window']}, prefetch {options['prefetch']}; "
          f"latency: {int(rate * options['latency-seconds']):,} messages at {rate:,}/s (first "
          f"{options['warmup']} left out), median of {options['latency-runs']}; {time.monotonic() - started:.0f} s")
    for line in skipped:
        print(line)
    header = ("system", "path", "body", "msg/s pers.", "msg/s non-p.",
              f"p50/p99 ms @{rate}/s pers.", f"p50/p99 ms @{rate}/s non-p.",
              f"cores/router @{rate}/s pers.", "exactly once (pers.)")
    rows = []
    keys = sorted({(r["case"].system, r["case"].path, r["case"].size) for r in results.values()},
                  key=lambda k: (SYSTEMS.index(k[0]), k[2], k[1]))
    for system, path, size in keys:
        def get(mode):
            return results.get(Case(int(path[0]), size, mode, system, path.endswith("-ha")).id)

        pers, nonp = get("full"), get("nonpersistent")

        def lat(result):
            if not result or not result["latency"]["latency_ms"]:
                return "-"
            ms = result["latency"]["latency_ms"]
            return f"{ms['p50']:.2f} / {ms['p99']:.2f}"

        once = "-"
        if pers:
            runs = [*pers["throughput"], *pers["latency_runs"]]
            bad = [r for r in runs if any("exactly-once" in p for p in r["problems"])]
            once = (f"yes ({len(runs)} runs)" if not bad else f"NO ({len(bad)} of {len(runs)})")
        label = {"meshroute": "meshroute", "rabbitmq": RabbitPair.label,
                 "nats": NatsPair.label}[system]
        rows.append((label, path.replace("1hop-ha", "1hop, HA pair"), _body(size),
                     f"{pers['msg_per_s']:,.0f}" if pers else "-",
                     f"{nonp['msg_per_s']:,.0f}" if nonp else "-",
                     lat(pers), lat(nonp),
                     cores_per_router(pers["latency"]) if pers else "-", once))
    print_table("", header, rows)
    print("msg/s: received by the consumer on B per second from the first send (median of "
          "the throughput runs); pers. = persistent (meshroute sync=full, RabbitMQ delivery "
          "mode 2), non-p. = non-persistent/transient.\ncores/router: CPU seconds of each "
          "router (A, [B,] C; HA: A, primary, backup) or broker (A, B) during the latency run "
          "divided by its length.")
    print()
    target_rows = []
    for size in options["sizes"]:
        target_rows += targets(results, size, rate)
    if target_rows:
        print_table("The issue's targets (ratios in this run):",
                         ("path", "body", "meshroute", "against", "ratio", "must reach",
                          "aim"), target_rows)


def _body(size: int) -> str:
    return "100 B" if size == 100 else throughput._size_label(size).replace("KiB", " KiB")


def targets(results: dict, size: int, rate: int) -> list[tuple]:
    """
    The rows of the target tables that this run measured: issue 10's
    throughput ratios, issue 30's paced ratios.
    """
    def get(system, hops, mode, ha=False):
        return results.get(Case(hops, size, mode, system, ha).id)

    def p99(result):
        ms = result and result["latency"]["latency_ms"]
        return ms and ms["p99"]

    rows = []

    def paced(what, ours, theirs, against, figure, must):
        if ours and figure(ours) is not None:
            mine, peer = figure(ours), theirs and figure(theirs)
            rows.append((what.format(rate=f"{rate:,}"), _body(size), f"{mine:.2f}",
                         f"{against} {peer:.2f}" if peer else "-",
                         f"{mine / peer:.2f}x" if peer else "-", must, ""))

    def ratio(what, ours, theirs, against, must, aim):
        if ours and theirs:
            rows.append((what, _body(size), f"{ours['msg_per_s']:,.0f}",
                         f"{against} {theirs['msg_per_s']:,.0f}",
                         f"{ours['msg_per_s'] / theirs['msg_per_s']:.2f}x", must, aim))

    one_full, one_nonp = get("meshroute", 1, "full"), get("meshroute", 1, "nonpersistent")
    rabbit_full, rabbit_nonp = get("rabbitmq", 1, "full"), get("rabbitmq", 1, "nonpersistent")
    nats = get("nats", 1, "nonpersistent")
    ratio("one hop, persistent, vs RabbitMQ shovel with confirms", one_full, rabbit_full,
          "RabbitMQ", "1.5x", "3x")
    ratio("one hop, non-persistent, vs NATS route", one_nonp, nats, "NATS", "0.35x", "0.7x")
    ratio("one hop, non-persistent, vs RabbitMQ transient", one_nonp, rabbit_nonp, "RabbitMQ",
          "", "")
    ratio("two hops, persistent, vs one hop", get("meshroute", 2, "full"), one_full,
          "one hop", "0.8x", "0.9x")
    ratio("one hop to an HA pair (backup in sync), vs without", get("meshroute", 1, "full",
                                                                    True), one_full,
          "without", "0.7x", "0.9x")
    # Issue 30's paced rows: ratios to the peer in this run (median of the
    # latency runs), as one measure of a choice between them.
    paced("p50 ms at {rate}/s, persistent, one hop", one_full, rabbit_full, "RabbitMQ",
          lambda r: r["latency"]["latency_ms"]["p50"], "<= 2x")
    paced("p99 ms at {rate}/s, persistent, one hop", one_full, rabbit_full, "RabbitMQ",
          p99, "<= 1.5x")
    paced("router CPU at {rate}/s, persistent (cores, mean of each)", one_full, rabbit_full,
          "RabbitMQ node", mean_cores, "<= 1.0x")
    paced("p99 ms at {rate}/s, non-persistent, one hop", one_nonp, nats, "NATS", p99, "<= 2x")
    return rows


def notes(results: dict) -> bool:
    """
    Print each run's problems and notes; returns whether any run failed.
    """
    failed = False
    for case_id, result in results.items():
        for run in [*result["throughput"], *result["latency_runs"]]:
            failed = print_notes(case_id, run["kind"], run) or failed
    return failed


def main(argv: list[str]) -> int:
    options = parse_main_options(Options(), argv)
    return run_cases(options, "meshroute-compare-", cases(options), PAIRS, run_meshroute,
                     run_broker, print_tables)


def in_temporary_directory(options, prefix: str, run):
    """
    C{run(base)} in a new temporary directory C{base} (under --dir, named
    C{prefix}...), removed afterwards unless --keep.
    """
    base = tempfile.mkdtemp(prefix=prefix, dir=options["dir"])
    try:
        return run(base)
    finally:
        if not options["keep"]:
            shutil.rmtree(base, ignore_errors=True)
        else:
            print(f"directories kept in {base}", file=sys.stderr)


def run_cases(options, prefix: str, found: list[Case], pairs: dict, run_router, run_pair,
              report) -> int:
    """
    L{run_all} in a new temporary directory (C{prefix}; removed unless
    --keep), the results written to --json, C{report(results, options,
    skipped, started)} printing the tables, then the notes.

    @return: the exit status: 1 if any run had a problem.
    """
    started = time.monotonic()
    results, skipped = in_temporary_directory(
        options, prefix, lambda base: run_all(options, base, found, pairs, run_router, run_pair))
    if options["json"]:
        with open(options["json"], "w") as f:
            json.dump({k: dict(v, case=v["case"].id) for k, v in results.items()}, f, indent=1)
    report(results, options, skipped, started)
    return 1 if notes(results) else 0


# -- the workers (separate processes) -----------------------------------------------


async def rabbit_channel(reactor, port: int):
    """
    A channel of a pika connection (its Twisted adapter) to 127.0.0.1:C{port}.
    """
    import pika
    from pika.adapters.twisted_connection import TwistedProtocolConnection
    from twisted.internet.protocol import ClientCreator

    parameters = pika.ConnectionParameters("127.0.0.1", port)
    connection = await ClientCreator(reactor, TwistedProtocolConnection,
                                     parameters).connectTCP("127.0.0.1", port)
    await connection.ready
    return connection, await connection.channel()


async def rabbit_produce(reactor, options) -> None:
    import pika

    connection, channel = await rabbit_channel(reactor, int(options["connect"]))
    await channel.confirm_delivery()
    properties = pika.BasicProperties(delivery_mode=1 if options["non-persistent"] else 2)
    exchange, routing_key = options["exchange"], options["to"] or QUEUE
    result = await paced_sends(
        reactor, lambda body: channel.basic_publish(exchange, routing_key, body, properties),
        options)
    connection.close()
    write_produced(options["result"], result)


async def rabbit_consume(reactor, options) -> None:
    from twisted.internet import defer, task

    connection, channel = await rabbit_channel(reactor, int(options["connect"]))
    await channel.queue_declare(QUEUE, durable=True)
    await channel.basic_qos(prefetch_count=options["prefetch"])
    receipts = Receipts(options["count"], options["warmup"])
    queue, _tag = await channel.basic_consume(queue=QUEUE, auto_ack=False)
    with open(options["ready"], "w"):
        pass
    done = defer.Deferred()

    def idle_check() -> None:
        if receipts.idle() and not done.called:
            done.callback(None)

    checker = task.LoopingCall(idle_check)
    checker.start(1.0, now=False)

    async def receive():
        while not done.called:
            ch, method, properties, body = await queue.get()
            ch.basic_ack(delivery_tag=method.delivery_tag)
            if receipts.record(body, method.redelivered) and not done.called:
                done.callback(None)

    defer.Deferred.fromCoroutine(receive()).addErrback(
        lambda f: done.called or done.errback(f))
    await done
    checker.stop()
    receipts.write(options["result"])
    await task.deferLater(reactor, 0.05)
    connection.close()


async def nats_produce(options) -> None:
    import nats

    client = await nats.connect(options["connect"])
    count, size, rate = options["count"], options["size"], options["rate"]
    subject = options["to"] or QUEUE
    cpu_start = throughput._process_cpu()
    start = last_send = time.time()
    for i in range(count):
        if rate is not None:
            delay = start + i / rate - time.time()
            if delay > 0:
                await asyncio.sleep(delay)
        last_send = time.time()
        await client.publish(subject, throughput.make_body(i, size, last_send))
    await client.flush()
    result = {"first_send": start, "last_send": last_send, "last_confirm": time.time(),
              "sent": count, "confirmed": count, "refused": 0, "first_error": None,
              "cpu_s": throughput._process_cpu() - cpu_start}
    await client.close()
    write_produced(options["result"], result)


async def nats_probe(url: str, subject: str, probed: list[asyncio.Future]) -> None:
    """
    A subscription's interest reaches the other server over the route some
    time later: publish L{PROBE}s on C{subject} of server C{url} until
    every future of C{probed} is done (its subscriber got one).
    """
    import nats

    origin = await nats.connect(url)
    while pending := [future for future in probed if not future.done()]:
        await origin.publish(subject, PROBE)
        await origin.flush()
        await asyncio.wait(pending, timeout=0.05)
    await origin.close()


async def nats_consume(options) -> None:
    import nats

    client = await nats.connect(options["connect"])
    receipts = Receipts(options["count"], options["warmup"])
    done = asyncio.get_running_loop().create_future()
    probed = asyncio.get_running_loop().create_future()

    async def on_message(message) -> None:
        if message.data == PROBE:
            if not probed.done():
                probed.set_result(None)
        elif receipts.record(message.data, False) and not done.done():
            done.set_result(None)

    await client.subscribe(QUEUE, cb=on_message, pending_msgs_limit=-1,
                           pending_bytes_limit=-1)
    await client.flush()
    await nats_probe(options["probe-via"], QUEUE, [probed])
    receipts.cpu_start = throughput._process_cpu()
    with open(options["ready"], "w"):
        pass
    while not done.done() and not receipts.idle():
        await asyncio.wait([done], timeout=1.0)
    receipts.write(options["result"])
    await client.close()


class RabbitProduceOptions(ProduceOptions):
    optParameters = [["exchange", None, "", "Exchange to publish to (--to is the routing key; "
                      "default: the default exchange, queue bench)."]]


class NatsConsumeOptions(ConsumeOptions):
    optParameters = [["probe-via", None, None, "Server (A) to publish the probes on."]]


def worker(role: str, argv: list[str]) -> None:
    from twisted.internet import defer, task

    options = {"worker-rabbit-produce": RabbitProduceOptions,
               "worker-nats-produce": ProduceOptions,
               "worker-nats-consume": NatsConsumeOptions}.get(role, ConsumeOptions)()
    options.parseOptions(argv)
    if role.startswith("worker-nats"):
        asyncio.run(nats_produce(options) if role.endswith("produce") else nats_consume(options))
        return
    run = rabbit_produce if role.endswith("produce") else rabbit_consume
    task.react(lambda reactor: defer.Deferred.fromCoroutine(run(reactor, options)))


WORKER_ROLES = ("worker-rabbit-produce", "worker-rabbit-consume", "worker-nats-produce",
                "worker-nats-consume")

if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] in WORKER_ROLES:
        worker(sys.argv[1], sys.argv[2:])
    else:
        sys.exit(main(sys.argv[1:]))
