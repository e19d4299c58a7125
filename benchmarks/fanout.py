"""
Issue 29's fan-out measure: one publisher, ten subscribers spread over a
mesh, meshroute beside RabbitMQ (a topic exchange federated between two
nodes) and NATS (subjects over a route), in one run, as ratios.

The workload, the same for every system: a publisher process connected to
router (node, server) A publishes on topic C{bench.fan.out} bodies carrying
their sequence number and send time (throughput.py's); ten subscribers,
each its own connection with its own pattern (C{bench.fan.out},
C{bench.*.out}, C{bench.#}, C{#}, C{*.fan.*}, twice over: every one
matches), two in each of five consumer processes.  A throughput run
(--messages publications, at most --window unconfirmed, the median of
--runs runs) and a latency run at a paced --rate (default 1,000
publications/s, so 10,000 deliveries/s), which also gives each router's or
broker's CPU at that rate.  Persistent runs (durable subscriptions) must
deliver every publication exactly once to every subscription (checked and
printed; a violation makes the script exit 1).

- meshroute: five real C{twistd -n meshroute} routers on fresh data dirs for
  every run, a tree: B and C dial A, D dials B, E dials C (so A's
  publications split at A and travel two hops to D and E); two subscribers
  on each router (native C{subscribe_topic}, C{mesh_wide=True}, so the
  publisher starts once every subscription's interest reached every
  router); persistent: publications persistent, subscriptions durable,
  C{[store] sync = "full"}; non-persistent: both not.  The publisher is
  throughput.py's producer sending to the address C{topic:bench.fan.out}.
  The bytes each link carried, both ways, from every router's C{/metrics}
  (C{meshroute_link_sent_bytes_total}).
- RabbitMQ (rabbitmq_federation): two nodes (compare.py's, run as the
  current user); exchanges C{fan.persistent} and C{fan.transient} (topic) on
  both, B's federated from A's (a federation upstream to A, ack-mode
  on-confirm for the persistent exchange, no-ack for the transient one);
  the publisher publishes to A with publisher confirms, delivery mode 2 or
  1; subscribers 0-1 bind their queues on A, 2-9 on B (durable queues for
  persistent, exclusive auto-delete ones for transient), each acknowledging
  every message.  Bytes: the federation link's connection on A.
- NATS: two servers joined by a route (compare.py's); subscribers 0-1 on A,
  2-9 on B (patterns as subjects: C{#} is C{>}); no persistence.  Bytes: the
  route (A's C{/routez}).

What is missing is installed (Debian packages with apt-get, clients with
pip; --no-install skips it instead, saying how to install).  Everything runs
on 127.0.0.1 and is stopped when the script ends.  The subscriber workers
are benchmarks/_fan_subscribers.py.  See benchmarks/README.md.
"""

import base64
import functools
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import compare  # noqa: E402
import throughput  # noqa: E402
from _fan_subscribers import EXCHANGES, TOPIC  # noqa: E402
from _fan_subscribers import SCRIPT as SUBSCRIBE  # noqa: E402
from _harness import print_table  # noqa: E402
from compare import Broker, NatsPair, RabbitPair  # noqa: E402
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402
from throughput import (  # noqa: E402
    START_DEADLINE_S,
    Children,
    Mesh,
    RouterProc,
    busy_seconds,
    free_port,
    latency_percentiles,
    parse_main_options,
    run_deadline,
    run_fleet,
    summarize,
    wait_until,
)
from meshroute.store.settings import StoreConfig  # noqa: E402

SUBSCRIBERS = 10
ROUTERS = ("router-a", "router-b", "router-c", "router-d", "router-e")
#: The mesh, a tree: each router's one connector dials its parent.
PARENTS = {"router-b": "router-a", "router-c": "router-a", "router-d": "router-b",
           "router-e": "router-c"}


def groups() -> list[list[int]]:
    """
    The subscribers of each consumer process: two each, process g on
    meshroute's ROUTERS[g]; a broker's process 0 on A, the others on B.
    """
    per = SUBSCRIBERS // len(ROUTERS)
    return [list(range(g * per, (g + 1) * per)) for g in range(len(ROUTERS))]


# -- options and cases -------------------------------------------------------------


class Options(compare.Options):
    synopsis = "[--quick] [--systems meshroute,rabbitmq,nats] [--messages N] [...]"

    def postOptions(self) -> None:
        quick = self["quick"]
        # Fewer than compare.py's: each publication is ten deliveries.
        if self["messages"] is None:
            self["messages"] = 2000 if quick else 20_000
        if self["sizes"] is None:
            self["sizes"] = "100"
        super().postOptions()


@dataclass(frozen=True)
class FanCase(compare.Case):
    """
    One row: a system, body size and mode (C{full}: persistent
    publications to durable subscriptions; C{nonpersistent}).
    """

    @property
    def path(self) -> str:
        return "fanout"


def cases(options) -> list[FanCase]:
    """
    The rows --systems and --sizes ask for: meshroute and RabbitMQ in both
    modes, NATS non-persistent only.
    """
    found = []
    for system in options["systems"]:
        modes = ("nonpersistent",) if system == "nats" else ("full", "nonpersistent")
        found += [FanCase(2 if system == "meshroute" else 1, size, mode, system)
                  for size in options["sizes"] for mode in modes]
    return found


def consumer_arguments(case: FanCase, where: str, group: list[int], count: int,
                       rate: int | None, options) -> list[str]:
    """
    What every system's consumer worker takes besides where to connect
    (C{where} names it in the results).
    """
    return ["--where", where, "--subscribers", ",".join(map(str, group)), "--count", str(count),
            "--prefetch", str(options["prefetch"]),
            "--warmup", str(options["warmup"] if rate else 0),
            *(("--durable",) if case.persistent else ())]


def producer_arguments(case: FanCase, count: int, rate: int | None, options) -> list[str]:
    """
    What every system's producer worker (throughput.py's or compare.py's)
    takes besides where to connect and publish.
    """
    return ["--count", str(count), "--size", str(case.size), "--window", str(options["window"]),
            *(("--rate", str(rate)) if rate else ()),
            *(() if case.persistent else ("--non-persistent",))]


# -- meshroute: five routers in a tree --------------------------------------------------


class TreeMesh(Mesh):
    """
    The five ROUTERS, each in a fresh directory under C{workdir}, each
    dialling its parent (PARENTS); started once every router has a route to
    every other.
    """

    label = "meshroute"

    def __init__(self, workdir: str, sync: str, children: Children) -> None:
        self.children, self.sync = children, sync
        self.extra_config, self.store_writer = "", StoreConfig.writer
        self.routers = [RouterProc(name, os.path.join(workdir, name)) for name in ROUTERS]
        by_name = {router.name: router for router in self.routers}
        for child, parent in PARENTS.items():
            if by_name[parent].routing_port is None:
                by_name[parent].routing_port = free_port()
            by_name[child].connect_to = by_name[parent]

    def start(self) -> None:
        super().start()
        for router in self.routers:
            others = set(ROUTERS) - {router.name}
            wait_until(f"{router.name}'s routes to every other router",
                       lambda r=router: others <= set(r.get("routes")), START_DEADLINE_S)

    def check_alive(self) -> None:
        for router in self.routers:
            router.check_alive()

    def drained(self) -> bool:
        """
        Whether every router's C{$topic} queue and durable subscriptions are
        empty (every copy made and acknowledged).
        """
        return all(queue["depth"] == 0 for router in self.routers for queue in router.get("queues")
                   if queue["name"] == "$topic" or queue["name"].startswith("$durable:"))

    def link_bytes(self) -> dict[str, tuple[int, int]]:
        """
        Bytes each link of the tree carried so far: (parent to child, child
        to parent), from both ends' C{meshroute_link_sent_bytes_total}.
        """
        sent = {router.name: _sent_bytes(router) for router in self.routers}
        return {f"{parent[-1].upper()}-{child[-1].upper()}":
                (sent[parent].get(child, 0), sent[child].get(parent, 0))
                for child, parent in PARENTS.items()}

    def workers(self, case: FanCase, count: int, rate: int | None,
                options) -> tuple[list[list[str]], list[str]]:
        consumers = [[sys.executable, SUBSCRIBE, "worker-mesh-subscribe", "--connect",
                      router.client_endpoint,
                      *consumer_arguments(case, router.name, group, count, rate, options)]
                     for router, group in zip(self.routers, groups())]
        producer = [sys.executable, throughput.SCRIPT, "worker-produce", "--connect",
                    self.origin.client_endpoint, "--to", f"topic:{TOPIC}",
                    *producer_arguments(case, count, rate, options)]
        return consumers, producer


def _sent_bytes(router: RouterProc) -> dict[str, int]:
    """
    C{meshroute_link_sent_bytes_total} of C{router}, by peer.
    """
    router.check_alive()
    url = f"http://127.0.0.1:{router.admin_port}/metrics"
    with urllib.request.urlopen(url, timeout=5) as response:
        text = response.read().decode()
    sent: dict[str, int] = {}
    for family in text_string_to_metric_families(text):
        if family.name == "meshroute_link_sent_bytes":
            for sample in family.samples:
                if sample.name.endswith("_total"):
                    peer = sample.labels["peer"]
                    sent[peer] = sent.get(peer, 0) + int(sample.value)
    return sent


def run_meshroute(case: FanCase, options, base: str, rate: int | None, count: int) -> dict:
    """
    One run on a fresh TreeMesh.
    """
    workdir = tempfile.mkdtemp(prefix=f"{case.id}-mesh-", dir=base)
    children = Children()
    try:
        mesh = TreeMesh(workdir, case.sync, children)
        mesh.start()
        result = run_fan(mesh, case, options, base, rate, count)
        codes = mesh.stop()
    finally:
        children.kill_all()
        if not options["keep"]:
            shutil.rmtree(workdir, ignore_errors=True)
    if any(codes.values()):
        result["problems"].append(f"did not exit 0 on SIGTERM: {codes}")
    return result


# -- brokers ---------------------------------------------------------------------


def _broker_workers(pair, role: str, address, case: FanCase, count: int, rate: int | None,
                    options, producer: list[str]) -> tuple[list[list[str]], list[str]]:
    """
    A broker pair's consumer workers (C{role}; group 0 on A, the others on
    B; C{address(broker)} is how a worker names one) and C{producer}.
    """
    a, b = pair.brokers
    consumers = []
    for g, group in enumerate(groups()):
        broker = a if g == 0 else b
        consumers.append([sys.executable, SUBSCRIBE, role, "--connect", address(broker),
                          "--probe-via", address(a),
                          *consumer_arguments(case, broker.name, group, count, rate, options)])
    return consumers, [*producer, *producer_arguments(case, count, rate, options)]


RABBITMQCTL = "/usr/lib/rabbitmq/bin/rabbitmqctl"


class FederatedRabbitPair(RabbitPair):
    """
    compare.py's two RabbitMQ nodes, with the federation plugin instead of
    the shovel: both nodes declare the EXCHANGES (topic, durable) from a
    definitions file; B's are federated from A's (one upstream per mode).
    """

    label = "RabbitMQ federated topic exchange"

    def config_files(self, broker: Broker, options) -> dict[str, str]:
        definitions = os.path.join(broker.directory, "definitions.json")
        return {
            "rabbitmq.conf": super().config_files(broker, options)["rabbitmq.conf"]
            + f"load_definitions = {definitions}\n",
            "enabled_plugins": "[rabbitmq_federation].\n",
            "advanced.config": "[].\n",
            "definitions.json": json.dumps(self.definitions(broker, options)),
        }

    def definitions(self, broker: Broker, options) -> dict:
        """
        The user guest (loopback only, as by default), the exchanges and,
        on B, the federation upstreams and the policies that federate its
        exchanges from A's.
        """
        exchange = {"vhost": "/", "type": "topic", "durable": True, "auto_delete": False,
                    "internal": False, "arguments": {}}
        answer = {
            "users": [{"name": "guest", "password_hash": _rabbit_password_hash("guest"),
                       "hashing_algorithm": "rabbit_password_hashing_sha256",
                       "tags": ["administrator"], "limits": {}}],
            "vhosts": [{"name": "/"}],
            "permissions": [{"user": "guest", "vhost": "/", "configure": ".*", "write": ".*",
                             "read": ".*"}],
            "exchanges": [dict(exchange, name=name) for name in EXCHANGES.values()],
        }
        if broker.name == "B":
            uri = f"amqp://guest:guest@127.0.0.1:{self.brokers[0].port}"
            ack_modes = {"full": "on-confirm", "nonpersistent": "no-ack"}
            answer["parameters"] = [
                {"vhost": "/", "component": "federation-upstream", "name": f"a-{mode}",
                 "value": {"uri": uri, "ack-mode": ack_modes[mode],
                           "prefetch-count": options["prefetch"]}}
                for mode in EXCHANGES]
            answer["policies"] = [
                {"vhost": "/", "name": f"federate-{mode}", "apply-to": "exchanges",
                 "pattern": "^" + name.replace(".", r"\.") + "$", "priority": 0,
                 "definition": {"federation-upstream": f"a-{mode}"}}
                for mode, name in EXCHANGES.items()]
        return answer

    def ctl(self, broker: Broker, *arguments: str) -> list[dict]:
        """
        C{rabbitmqctl ARGUMENTS --formatter json} against C{broker}.
        """
        done = subprocess.run([RABBITMQCTL, *arguments, "--formatter", "json"],
                              env=self._env(broker), capture_output=True, text=True, timeout=60)
        if done.returncode != 0:
            raise ValueError(f"rabbitmqctl {' '.join(arguments)}: {done.stderr.strip()}")
        return json.loads(done.stdout)

    def drained(self) -> bool:
        """
        Whether every queue of both nodes is empty (the subscribers' and
        the federation's), every message acknowledged.
        """
        return all(queue["messages"] == 0 for broker in self.brokers
                   for queue in self.ctl(broker, "list_queues", "name", "messages"))

    def link_bytes(self) -> dict[str, tuple[int, int]]:
        """
        The federation links' bytes, A to B and back (their connections on
        A: B's links are its clients).
        """
        links = [c for c in self.ctl(self.brokers[0], "list_connections", "client_properties",
                                     "send_oct", "recv_oct")
                 if "Federation link" in json.dumps(c["client_properties"])]
        return {"A-B": (sum(c["send_oct"] for c in links), sum(c["recv_oct"] for c in links))}

    def workers(self, case: FanCase, count: int, rate: int | None,
                options) -> tuple[list[list[str]], list[str]]:
        return _broker_workers(
            self, "worker-rabbit-subscribe", lambda broker: str(broker.port), case, count, rate,
            options, [sys.executable, compare.SCRIPT, "worker-rabbit-produce", "--connect",
                      str(self.brokers[0].port), "--exchange", EXCHANGES[case.mode], "--to",
                      TOPIC])


def _rabbit_password_hash(password: str) -> str:
    """
    RabbitMQ's rabbit_password_hashing_sha256: base64(salt + sha256(salt +
    password)), a 4-byte salt.
    """
    salt = os.urandom(4)
    return base64.b64encode(salt + hashlib.sha256(salt + password.encode()).digest()).decode()


class FanNatsPair(NatsPair):
    """
    compare.py's two NATS servers joined by a route.
    """

    def link_bytes(self) -> dict[str, tuple[int, int]]:
        """
        The route's bytes, A to B and back (A's C{/routez}).
        """
        url = f"http://127.0.0.1:{self.brokers[0].monitor_port}/routez"
        with urllib.request.urlopen(url, timeout=5) as response:
            routes = json.load(response)["routes"]
        return {"A-B": (sum(r["out_bytes"] for r in routes), sum(r["in_bytes"] for r in routes))}

    def workers(self, case: FanCase, count: int, rate: int | None,
                options) -> tuple[list[list[str]], list[str]]:
        def url(broker: Broker) -> str:
            return f"nats://127.0.0.1:{broker.port}"

        return _broker_workers(
            self, "worker-nats-subscribe", url, case, count, rate, options,
            [sys.executable, compare.SCRIPT, "worker-nats-produce", "--connect",
             url(self.brokers[0]), "--to", TOPIC])


PAIRS = {"rabbitmq": FederatedRabbitPair, "nats": FanNatsPair}


# -- one run ------------------------------------------------------------------------


def run_fan(target, case: FanCase, options, base: str, rate: int | None, count: int) -> dict:
    """
    One run against a started C{target} (a TreeMesh or a broker pair): its
    consumer workers, then its producer; the CPU of its processes and the
    bytes of its links from just before the producer starts until
    everything was delivered (and, when persistent, acknowledged).
    """
    kind = "latency" if rate else "throughput"
    workdir = tempfile.mkdtemp(prefix=f"{case.id}-{kind}-", dir=base)
    children = Children()
    try:
        consumers, producer = target.workers(case, count, rate, options)

        def measure_from() -> tuple:
            return target.link_bytes(), target.cpu(), busy_seconds(), time.monotonic()

        produced, consumed, (bytes_before, cpu_before, busy_before, wall_before) = run_fleet(
            children, workdir, consumers, producer, run_deadline(count * SUBSCRIBERS, rate),
            target.check_alive, measure_from)
        if case.persistent:
            wait_until(f"{target.label}: everything acknowledged", target.drained,
                       START_DEADLINE_S)
        cpu_after, busy_after, wall_after = target.cpu(), busy_seconds(), time.monotonic()
        bytes_after = target.link_bytes()
    finally:
        children.kill_all()
        if not options["keep"]:
            shutil.rmtree(workdir, ignore_errors=True)
    subscribers = [s for group in consumed for s in group["subscribers"]]
    merged = {
        "received": sum(s["received"] for s in subscribers),
        "unique": sum(s["unique"] for s in subscribers),
        "duplicates": sum(s["duplicates"] for s in subscribers),
        "redelivered": sum(s["redelivered"] for s in subscribers),
        "last_receive": max((s["last_receive"] for s in subscribers if s["last_receive"]),
                            default=None),
        "latency_ms": latency_percentiles([ms for s in subscribers for ms in s["latencies_ms"]]),
        "cpu_s": sum(group["cpu_s"] for group in consumed),
    }
    # Every subscription expects every publication: summarize counts and
    # checks deliveries, so sent_per_s is publications/s, consumed_per_s
    # deliveries/s.
    result = summarize(case.id, case.persistent, kind, count * len(subscribers), rate,
                       produced, merged, cpu_before, cpu_after, busy_after - busy_before,
                       wall_after - wall_before, {})
    result["problems"] += [f"a subscriber of {group['subscribers'][0]['where']} failed: "
                           f"{group['error']}" for group in consumed if group["error"]]
    by_where: dict[str, list[float]] = {}
    for s in subscribers:
        if case.persistent and (s["unique"] != count or s["duplicates"]):
            result["problems"].append(
                f"subscriber {s['index']} ({s['where']}, {s['pattern']}): {s['unique']} of "
                f"{count} distinct, {s['duplicates']} duplicates")
        by_where.setdefault(s["where"], []).extend(s.pop("latencies_ms"))
    result.update(
        publications=count, subscribers=subscribers,
        link_bytes={link: (bytes_after[link][0] - down, bytes_after[link][1] - up)
                    for link, (down, up) in bytes_before.items()},
        latency_ms_by_where={w: latency_percentiles(ms) for w, ms in by_where.items()})
    return result

# -- the tables -------------------------------------------------------------------


MODE_LABELS = {"full": "persistent, durable", "nonpersistent": "non-persistent"}
SHORT = {"rabbitmq": "RabbitMQ", "nats": "NATS"}


def _label(system: str) -> str:
    return {"meshroute": "meshroute (5 routers)", "rabbitmq": FederatedRabbitPair.label,
            "nats": FanNatsPair.label}[system]


def _ordered(results: dict) -> list[dict]:
    return sorted(results.values(), key=lambda r: (r["case"].size,
                                                   compare.SYSTEMS.index(r["case"].system),
                                                   r["case"].mode))


def _p50_p99(result: dict) -> str:
    """
    The latency run's p50 / p99, marked C{*} when the system fell behind the
    offered rate (L{_saturated}).
    """
    ms = result["latency"]["latency_ms"]
    if not ms:
        return "-"
    return f"{ms['p50']:.2f} / {ms['p99']:.2f}" + (" *" if _saturated(result) else "")


def _saturated(result: dict) -> bool:
    """
    Whether the latency run delivered less than 95% of the deliveries per
    second offered (rate x subscribers): its queues grew all along, so its
    latencies are the time through that backlog.
    """
    latency = result["latency"]
    return latency["consumed_per_s"] < 0.95 * latency["rate"] * len(latency["subscribers"])


def _cpu_per_10k(result: dict) -> float:
    """
    CPU seconds of all routers (brokers) per 10,000 publications in the
    latency run.
    """
    latency = result["latency"]
    return latency["router_cpu_s"] / latency["publications"] * 10_000


def print_tables(results: dict, options, skipped: list[str], started: float,
                 load_at_start: float) -> None:
    rate = options["rate"]
    print(f"issue 29 fan-out: {os.cpu_count()} CPUs, Python {sys.version.split()[0]}; one "
          f"publisher on A, {SUBSCRIBERS} subscribers (meshroute: 2 on each of 5 routers, B and "
          f"C linked to A, D to B, E to C; brokers: 2 on A, 8 on B); throughput: "
          f"{options['messages']:,} publications, median of {options['runs']}, window "
          f"{options['window']}, prefetch {options['prefetch']}; latency: "
          f"{int(rate * options['latency-seconds']):,} publications at {rate:,}/s (first "
          f"{options['warmup']} left out); {time.monotonic() - started:.0f} s; load average "
          f"{load_at_start:.1f} at the start, {os.getloadavg()[0]:.1f} at the end")
    for line in skipped:
        print(line)
    rows = []
    for result in _ordered(results):
        case = result["case"]
        runs = [*result["throughput"], result["latency"]]
        once = "-"
        if case.persistent:
            bad = [r for r in runs if any("exactly-once" in p for p in r["problems"])]
            once = f"yes ({len(runs)} runs)" if not bad else f"NO ({len(bad)} of {len(runs)})"
        rows.append((
            _label(case.system), MODE_LABELS[case.mode], compare._body(case.size),
            f"{statistics.median(r['sent_per_s'] for r in result['throughput']):,.0f}",
            f"{result['msg_per_s']:,.0f}", _p50_p99(result),
            compare.cores_per_router(dict(result["latency"],
                                          count=result["latency"]["publications"])),
            f"{_cpu_per_10k(result):.2f}", once))
    print_table("", ("system", "mode", "body", "pub/s", "deliv/s", f"p50/p99 ms @{rate}/s",
                     f"cores per router @{rate}/s", "CPU s/10k pub", "exactly once"), rows)
    print(f"pub/s: publications confirmed at A per second; deliv/s: receipts of all "
          f"{SUBSCRIBERS} subscribers per second, from the first publication to the last "
          f"receipt (medians of the throughput runs).\np50/p99: publication to receipt, all "
          f"subscribers, at {rate:,} publications/s (*: it delivered less than 95% of the "
          f"{rate * SUBSCRIBERS:,} deliveries/s offered, so its queues grew all along and "
          f"these are times through that backlog).  cores per router: each router's "
          f"(meshroute A..E) or broker's (A, B) CPU during that run divided by its offered "
          f"length (publications / rate); "
          f"CPU s/10k pub: all of them together per 10,000 publications.")
    print()
    print_table("Bytes per publication on each link (the latency run; down: from the "
                "publisher's side, up: back):",
                ("system", "mode", "link", "down B/pub", "up B/pub"),
                [(_label(r["case"].system), MODE_LABELS[r["case"].mode], link,
                  f"{down / r['latency']['publications']:,.0f}",
                  f"{up / r['latency']['publications']:,.1f}")
                 for r in _ordered(results)
                 for link, (down, up) in r["latency"]["link_bytes"].items()])
    print()
    ratios = [row for size in options["sizes"] for row in ratio_rows(results, size, rate)]
    if ratios:
        print_table("meshroute against the others (ratios in this run):",
                    ("what", "body", "meshroute", "against", "ratio"), ratios)


def ratio_rows(results: dict, size: int, rate: int) -> list[tuple]:
    """
    meshroute's figures over the brokers' in the same run: deliveries/s
    (higher is better), p99 at the paced rate, CPU per publication and the
    busiest link's bytes per publication (lower is better).
    """
    def get(system, mode):
        return results.get(FanCase(2 if system == "meshroute" else 1, size, mode, system).id)

    def busiest(result):
        latency = result["latency"]
        return max(down for down, _ in latency["link_bytes"].values()) / latency["publications"]

    figures = (
        ("deliveries/s", lambda r: r["msg_per_s"], "{:,.0f}"),
        (f"p99 ms @{rate}/s", lambda r: (r["latency"]["latency_ms"] or {}).get("p99"), "{:.2f}"),
        (f"router CPU s/10k pub @{rate}/s", _cpu_per_10k, "{:.2f}"),
        ("busiest link, B/pub", busiest, "{:,.0f}"),
    )
    rows = []
    for mode, against in (("full", "rabbitmq"), ("nonpersistent", "nats"),
                          ("nonpersistent", "rabbitmq")):
        ours, theirs = get("meshroute", mode), get(against, mode)
        if not (ours and theirs):
            continue
        for what, figure, form in figures:
            a, b = figure(ours), figure(theirs)
            if a is not None and b:
                rows.append((f"{what}, {MODE_LABELS[mode]}", compare._body(size),
                             form.format(a), f"{SHORT[against]} {form.format(b)}",
                             f"{a / b:.2f}x"))
    return rows


def main(argv: list[str]) -> int:
    options = parse_main_options(Options(), argv)
    report = functools.partial(print_tables, load_at_start=os.getloadavg()[0])
    return compare.run_cases(options, "meshroute-fanout-", cases(options), PAIRS, run_meshroute,
                             run_fan, report)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
