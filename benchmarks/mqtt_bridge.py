"""
Issue 32's measure: MQTT devices across one hop of meshroute beside a
Mosquitto bridge carrying the same load, in one run, as ratios; and how
long each side takes to notice that the far side froze.

The load, the same for both: a paho-mqtt publisher (MQTT 3.1.1) on A
publishes on a topic C{bench/runN} (new for every run) bodies carrying
their sequence number and send time (throughput.py's); a paho-mqtt
subscriber on B subscribed to it first.  QoS 1 (a persistent subscriber
session: every publication must arrive exactly once, or the script exits
1; at most --window unacknowledged) and QoS 0 (a clean session; losses
reported) are a row each, each a throughput run (the median of --runs)
and a latency run at a paced --rate (default 1,000 msg/s) that also gives
each router's (broker's) CPU at that rate.

- meshroute: two real C{twistd -n meshroute} routers, router-a dialling
  router-b, each with an C{[mqtt.listener]}; C{[store] sync = "full"} (a
  QoS 1 publication is durable at router-a before its PUBACK).
- Mosquitto (Debian package C{mosquitto}): two brokers on 127.0.0.1, A
  bridging C{bench/#} out to B at QoS 1 (C{cleansession false}),
  persistence on, C{max_queued_messages 0} (no limit: at its default of
  1,000 a broker drops QoS 1 messages queued for a client beyond it).

Dead-bridge detection: fresh processes without load; the far side (router-b,
broker B) is frozen with SIGSTOP and we note when the near side (router-a,
broker A) closes its connection to it (its socket leaves ESTABLISHED in
/proc/net/tcp, polled every 20 ms), and what it says about it: router-a's
C{link.closed} event (reason C{keepalive}), Mosquitto's log (the bridge's
PINGREQ; Mosquitto 2.0 logs no line when it drops a bridge for its
keepalive).  Both with short keepalives (--mesh-keepalive-ms,
--mosquitto-keepalive) and, with --defaults, with each one's default
(minutes: both at once).

Mosquitto and paho-mqtt are installed when missing (apt-get as root, pip;
--no-install skips Mosquitto instead).  Everything runs on 127.0.0.1 and
is stopped when the script ends.  See benchmarks/README.md.
"""

import itertools
import json
import os
import pwd
import re
import shutil
import signal
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import compare  # noqa: E402
from _harness import print_table  # noqa: E402
from compare import Broker, BrokerPair  # noqa: E402
from throughput import (  # noqa: E402
    START_DEADLINE_S,
    Children,
    ConsumeOptions,
    Mesh,
    ProduceOptions,
    Receipts,
    RouterProc,
    _process_cpu,
    free_port,
    paced_sends,
    parse_main_options,
    tail,
    wait_until,
    write_produced,
)
from twisted.python import usage  # noqa: E402

from meshroute.events import read_events  # noqa: E402
from meshroute.store.settings import StoreConfig  # noqa: E402

SCRIPT = os.path.abspath(__file__)
SYSTEMS = ("meshroute", "mosquitto")
LABELS = {"meshroute": "meshroute (router-a -> router-b)",
          "mosquitto": "Mosquitto bridge (A -> B)"}
MODES = {"full": 1, "nonpersistent": 0}
#: A probe's body (not a benchmark message): the subscriber publishes
#: these on A until one reaches it, so the load starts on a path proven end
#: to end (the bridge connected, the subscription's interest across).
PROBE = b"probe"
#: Every run's topic and subscriber are new (a persistent session left by
#: an earlier run must not collect this one's publications).
RUNS = itertools.count(1)
#: The defaults this benchmark states (meshroute's [routing.listener]
#: keepalive-interval; Mosquitto's bridge keepalive_interval).
MESH_DEFAULT_KEEPALIVE_MS = 60_000
MOSQUITTO_DEFAULT_KEEPALIVE_S = 60
#: Mosquitto refuses a shorter bridge keepalive ("too low, using 5 seconds").
MOSQUITTO_MIN_KEEPALIVE_S = 5
SOCKET_POLL_S = 0.02
ESTABLISHED = "01"


# -- options ------------------------------------------------------------------------


class Options(compare.Options):
    """
    compare.py's options (--sizes, --messages, --runs, --rate,
    --latency-seconds, --warmup, --dir, --json, --quick, --keep) and the
    MQTT ones.
    """

    synopsis = "[--quick] [--systems meshroute,mosquitto] [--defaults] [...]"
    optParameters = [
        ["systems", None, ",".join(SYSTEMS), "Comma-separated systems to run."],
        ["sizes", None, None, "Comma-separated body sizes in bytes (default 100)."],
        ["messages", "n", None, "Publications per throughput run (default 20000; 5000 with "
         "--quick).", int],
        ["prefetch", None, 1000, "Not used here (the subscriber acknowledges each QoS 1 "
         "delivery; the brokers' own limits hold).", int],
        ["window", None, 100, "QoS 1 publications unacknowledged at most (paho's max "
         "inflight); QoS 0: publications not yet written.", int],
        ["mesh-keepalive-ms", None, 1000, "meshroute's [routing.listener] keepalive-interval, "
         "ms.", int],
        ["mosquitto-keepalive", None, MOSQUITTO_MIN_KEEPALIVE_S, "Mosquitto's bridge "
         f"keepalive_interval, s (at least {MOSQUITTO_MIN_KEEPALIVE_S}).", int],
        ["qos", None, "1,0", "Comma-separated QoS rows to run (1: persistent session, 0: "
         "clean session)."],
    ]
    optFlags = [
        ["defaults", None, "Also measure dead-bridge detection at each system's default "
         "keepalive (both at once; meshroute's takes 4 to 6 minutes)."],
        ["no-load", None, "Only the dead-bridge detection."],
        ["no-detection", None, "Only the load (no dead-bridge detection)."],
    ]
    known_systems = SYSTEMS

    def postOptions(self) -> None:
        if self["messages"] is None:
            self["messages"] = 5000 if self["quick"] else 20_000
        if self["sizes"] is None:
            self["sizes"] = "100"
        super().postOptions()
        if min(self["window"], self["mesh-keepalive-ms"]) < 1:
            raise usage.UsageError("--window and --mesh-keepalive-ms must be positive")
        if self["mosquitto-keepalive"] < MOSQUITTO_MIN_KEEPALIVE_S:
            raise usage.UsageError(f"--mosquitto-keepalive: Mosquitto takes at least "
                                   f"{MOSQUITTO_MIN_KEEPALIVE_S} s")
        qos = {q.strip() for q in self["qos"].split(",") if q.strip()}
        if not qos or qos - {"0", "1"}:
            raise usage.UsageError("--qos: a comma-separated list of 0 and 1")
        self["modes"] = [mode for mode, level in MODES.items() if str(level) in qos]


@dataclass(frozen=True)
class MqttCase(compare.Case):
    """
    One row: a system and a mode (C{full}: QoS 1 to a persistent session;
    C{nonpersistent}: QoS 0 to a clean one), one hop.
    """

    @property
    def qos(self) -> int:
        return MODES[self.mode]


def cases(options) -> list[MqttCase]:
    return [MqttCase(1, size, mode, system)
            for system in options["systems"] for size in options["sizes"]
            for mode in options["modes"]]


def worker_argvs(origin_port: int, destination_port: int, case: MqttCase, count: int,
                 rate: int | None, options) -> tuple[list[str], list[str]]:
    """
    The subscriber (on C{destination_port}) and publisher (on
    C{origin_port}) of one run, on a topic of their own.
    """
    run = next(RUNS)
    topic = f"bench/run{run}"
    consumer = [sys.executable, SCRIPT, "worker-mqtt-subscribe", "--connect",
                str(destination_port), "--probe-via", str(origin_port), "--topic", topic,
                "--qos", str(case.qos), "--client-id", f"bench-sub-{run}",
                "--count", str(count), "--warmup", str(options["warmup"] if rate else 0)]
    producer = [sys.executable, SCRIPT, "worker-mqtt-publish", "--connect", str(origin_port),
                "--to", topic, "--qos", str(case.qos), "--count", str(count),
                "--size", str(case.size), "--window", str(options["window"]),
                *(("--rate", str(rate)) if rate else ())]
    return consumer, producer


# -- meshroute: two routers with MQTT listeners ------------------------------------------


MQTT_LISTENER = """
[mqtt.listener]
endpoint = "tcp:{port}:interface=127.0.0.1"
"""


class MqttRouter(RouterProc):
    """
    A router with an C{[mqtt.listener]} on a port of its own.
    """

    def __init__(self, name: str, directory: str, router: str | None = None) -> None:
        super().__init__(name, directory, router)
        self.mqtt_port = free_port()

    def write_config(self, sync: str, extra: str = "", writer: str = StoreConfig.writer) -> None:
        super().write_config(sync, extra + MQTT_LISTENER.format(port=self.mqtt_port), writer)


class MqttMesh(Mesh):
    """
    router-a dialling router-b (whose routing listener has
    C{keepalive_interval_ms}, which router-a adopts; None: the default),
    both serving MQTT, C{[store] sync = "full"}; started once for every
    run of meshroute's rows.
    """

    router_class = MqttRouter
    label = "meshroute"

    def __init__(self, workdir: str, children: Children,
                 keepalive_interval_ms: int | None) -> None:
        super().__init__(workdir, 1, "full", children)
        self.destination.keepalive_interval_ms = keepalive_interval_ms

    def check_alive(self) -> None:
        for router in self.routers:
            router.check_alive()

    def drained(self) -> bool:
        """
        Whether no queue of either router holds anything (every copy
        delivered and acknowledged).
        """
        return all(queue["depth"] == 0 for router in self.routers
                   for queue in router.get("queues"))

    def workers(self, case: MqttCase, count: int, rate: int | None,
                options) -> tuple[list[str], list[str]]:
        return worker_argvs(self.origin.mqtt_port, self.destination.mqtt_port, case, count,
                            rate, options)


# -- Mosquitto: two brokers, A bridging to B ----------------------------------------------


MOSQUITTO_CONF = """\
listener {port} 127.0.0.1
allow_anonymous true
user {user}
persistence true
persistence_location {directory}/
max_queued_messages 0
log_dest file {directory}/mosquitto.log
{log_types}
"""
#: A's bridge to B: what is published on bench/# at A goes to B at QoS 1
#: (a QoS 0 publication stays QoS 0), a persistent bridge session.
MOSQUITTO_BRIDGE = """
connection bench-bridge
address 127.0.0.1:{port}
topic bench/# out 1
cleansession false
"""
#: The log's levels: under load without the per-packet debug lines; for
#: the dead-bridge runs everything (the bridge's PINGREQ is a debug line).
LOAD_LOG = ("error", "warning", "notice", "information")
DEBUG_LOG = ("all",)


class MosquittoPair(BrokerPair):
    """
    Two C{mosquitto} brokers on 127.0.0.1, A bridging C{bench/#} to B
    (L{MOSQUITTO_BRIDGE}), A's bridge keepalive C{keepalive_s} (None: the
    default); running as the current user (as root Mosquitto would switch
    to the user mosquitto, who may not write our directories).
    """

    label = "Mosquitto bridge"

    def __init__(self, workdir: str, children: Children, keepalive_s: int | None,
                 log_types: tuple[str, ...] = LOAD_LOG) -> None:
        super().__init__(workdir, children)
        self.keepalive_s, self.log_types = keepalive_s, log_types

    @staticmethod
    def missing() -> str | None:
        if shutil.which("mosquitto") is None and not os.access("/usr/sbin/mosquitto", os.X_OK):
            return "mosquitto is not installed"
        try:
            import paho.mqtt  # noqa: F401
        except ImportError:
            return "paho-mqtt is not installed"
        return None

    @staticmethod
    def log_path(broker: Broker) -> str:
        return os.path.join(broker.directory, "mosquitto.log")

    def config(self, broker: Broker) -> str:
        text = MOSQUITTO_CONF.format(
            port=broker.port, user=pwd.getpwuid(os.geteuid()).pw_name,
            directory=broker.directory,
            log_types="\n".join(f"log_type {t}" for t in self.log_types))
        if broker.name == "A":
            text += MOSQUITTO_BRIDGE.format(port=self.brokers[1].port)
            if self.keepalive_s is not None:
                text += f"keepalive_interval {self.keepalive_s}\n"
        return text

    def start(self, options=None) -> None:
        binary = shutil.which("mosquitto") or "/usr/sbin/mosquitto"
        for broker in reversed(self.brokers):
            path = os.path.join(broker.directory, "mosquitto.conf")
            with open(path, "w") as f:
                f.write(self.config(broker))
            broker.proc = self.children.spawn([binary, "-c", path], broker.directory,
                                              broker.out_path, stop_signal=signal.SIGTERM)
        wait_until("A's bridge to connect to B", lambda: "New bridge connected" in tail(
            self.log_path(self.brokers[1]), 200), START_DEADLINE_S, self.check_alive)

    def workers(self, case: MqttCase, count: int, rate: int | None,
                options) -> tuple[list[str], list[str]]:
        a, b = self.brokers
        return worker_argvs(a.port, b.port, case, count, rate, options)


# -- the load ---------------------------------------------------------------------------


def mosquitto_missing(options) -> str | None:
    """
    Install Mosquitto and paho-mqtt where missing (unless --no-install,
    with compare.py's L{compare.install}); what is still missing, said as
    a line of the report, or None.
    """
    missing = MosquittoPair.missing()
    if missing and options["install"]:
        missing = compare.install("mosquitto", MosquittoPair)
    if not missing:
        return None
    line = f"{MosquittoPair.label}: skipped, {missing} (install: {compare.INSTALL['mosquitto']})"
    print(line, file=sys.stderr, flush=True)
    return line


def run_load(system: str, options, base: str) -> dict[str, dict]:
    """
    Every row of C{system}: its processes started once, each row's runs
    through compare.measure and compare.run_broker (the workers, the CPU
    of the system's processes, the exactly-once check).

    @return: the results by case id.
    """
    workdir = tempfile.mkdtemp(prefix=f"{system}-load-", dir=base)
    children = Children()
    if system == "meshroute":
        target = MqttMesh(workdir, children, options["mesh-keepalive-ms"])
    else:
        target = MosquittoPair(workdir, children, options["mosquitto-keepalive"])
    results = {}
    try:
        print(f"{LABELS[system]}: starting ...", file=sys.stderr, flush=True)
        target.start()
        for case in cases(options):
            if case.system == system:
                results[case.id] = compare.measure(
                    case, options, base,
                    lambda c, o, b, rate, count: compare.run_broker(target, c, o, b, rate,
                                                                    count))
        codes = target.stop()
        if any(codes.values()):
            for result in results.values():
                result["latency"]["problems"].append(f"did not exit 0 on SIGTERM: {codes}")
    finally:
        children.kill_all()
        if not options["keep"]:
            shutil.rmtree(workdir, ignore_errors=True)
    return results


# -- dead-bridge detection ----------------------------------------------------------------


def established_to(port: int) -> set[int]:
    """
    The local ports of the ESTABLISHED IPv4 connections to C{port} (the
    connecting side's sockets, from /proc/net/tcp).
    """
    found = set()
    with open("/proc/net/tcp") as f:
        next(f)
        for line in f:
            fields = line.split()
            local, remote, state = fields[1], fields[2], fields[3]
            if state == ESTABLISHED and int(remote.rpartition(":")[2], 16) == port:
                found.add(int(local.rpartition(":")[2], 16))
    return found


def freeze_and_wait(near_alive, far_proc, far_port: int, deadline_s: float) -> tuple[float,
                                                                                      float]:
    """
    SIGSTOP C{far_proc} and wait until the connection to C{far_port} that
    was up then is closed by the near side (C{near_alive()} raises if the
    near side died).

    @return: (when it was frozen, when its connection was seen closed),
        epoch seconds.
    """
    up = wait_until(f"a connection to port {far_port}", lambda: established_to(far_port),
                    START_DEADLINE_S, near_alive)
    os.kill(far_proc.pid, signal.SIGSTOP)
    frozen = time.time()
    end = frozen + deadline_s
    while up & established_to(far_port):
        near_alive()
        if time.time() > end:
            raise RuntimeError(f"port {far_port}'s connection still up {deadline_s:g} s "
                               "after the freeze")
        time.sleep(SOCKET_POLL_S)
    return frozen, time.time()


def thaw_and_stop(children: Children) -> None:
    """
    SIGCONT every process of C{children} (a frozen one would only take the
    SIGKILL after the stop deadline), then stop them all.
    """
    for proc in children.procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGCONT)
    children.kill_all()


def mesh_detection(base: str, keepalive_ms: int | None) -> dict:
    """
    Freeze router-b of a fresh idle MqttMesh; when router-a closed the link
    (its socket, its C{link.closed} event).
    """
    interval_ms = keepalive_ms or MESH_DEFAULT_KEEPALIVE_MS
    workdir = tempfile.mkdtemp(prefix="meshroute-dead-", dir=base)
    children = Children()
    mesh = MqttMesh(workdir, children, keepalive_ms)
    try:
        mesh.start()
        a, b = mesh.routers
        frozen, closed = freeze_and_wait(a.check_alive, b.proc, b.routing_port,
                                         8 * interval_ms / 1000 + START_DEADLINE_S)

        def keepalive_close():
            return next((e for e in read_events(a.data_dir)
                         if e["event"] == "link.closed" and e.get("peer") == b.name
                         and e["time"] >= frozen), None)

        event = wait_until("router-a's link.closed event", keepalive_close, START_DEADLINE_S,
                           a.check_alive)
    finally:
        thaw_and_stop(children)
    return {
        "system": "meshroute",
        "settings": f"keepalive-interval {interval_ms:,} ms" + (
            "" if keepalive_ms else " (default)"),
        "rule": f"closed after 4-6 silent intervals: {4 * interval_ms / 1000:g}-"
                f"{6 * interval_ms / 1000:g} s",
        "socket_s": closed - frozen,
        "seen": f"link.closed reason {event['reason']} at +{event['time'] - frozen:.2f} s"
                + (f" (silent {event['time'] - event['last_heard']:.2f} s)"
                   if event.get("last_heard") else ""),
        "reason": event["reason"],
    }


def mosquitto_detection(base: str, keepalive_s: int | None) -> dict:
    """
    Freeze broker B of a fresh idle MosquittoPair; when A closed its
    bridge connection (its socket; its log's PINGREQ before that).
    """
    seconds = keepalive_s or MOSQUITTO_DEFAULT_KEEPALIVE_S
    workdir = tempfile.mkdtemp(prefix="mosquitto-dead-", dir=base)
    children = Children()
    pair = MosquittoPair(workdir, children, keepalive_s, DEBUG_LOG)
    try:
        pair.start()
        a, b = pair.brokers
        frozen, closed = freeze_and_wait(a.check_alive, b.proc, b.port,
                                         3 * seconds + START_DEADLINE_S)
        pings = [int(stamp) for stamp in re.findall(
            r"^(\d+): Sending PINGREQ to", tail(pair.log_path(a), 10_000), re.MULTILINE)
            if int(stamp) >= int(frozen)]
    finally:
        thaw_and_stop(children)
    return {
        "system": "mosquitto",
        "settings": f"keepalive_interval {seconds} s" + ("" if keepalive_s else " (default)"),
        "rule": f"PINGREQ {seconds} s after its last traffic, closed {seconds} s later "
                f"without PINGRESP: {seconds}-{2 * seconds} s",
        "socket_s": closed - frozen,
        "seen": (f"log: PINGREQ at +{pings[0] - frozen:.0f} s (1 s stamps), no line for the "
                 "close" if pings else "log: no PINGREQ after the freeze"),
        "reason": "keepalive" if pings else "?",
    }


def run_detection(options, base: str, systems: list[str]) -> list[dict]:
    """
    The dead-bridge runs of C{systems}: short keepalives one after the
    other; with --defaults, then both at their defaults at once (each
    waits minutes).
    """
    jobs = []
    for system in systems:
        if system == "meshroute":
            jobs.append((mesh_detection, options["mesh-keepalive-ms"]))
        else:
            jobs.append((mosquitto_detection, options["mosquitto-keepalive"]))
    found = []
    for run, keepalive in jobs:
        print(f"dead-bridge: {run.__name__}, keepalive {keepalive} ...", file=sys.stderr,
              flush=True)
        found.append(run(base, keepalive))
    if options["defaults"]:
        print("dead-bridge: both at their default keepalives, at once (minutes) ...",
              file=sys.stderr, flush=True)
        with ThreadPoolExecutor(len(jobs)) as pool:
            found += pool.map(lambda job: job[0](base, None), jobs)
    return found


# -- the tables -------------------------------------------------------------------------


def _run_counts(result: dict) -> str:
    """
    Lost and duplicate receipts of each run (throughput runs, then the
    latency run).
    """
    runs = [*result["throughput"], result["latency"]]
    return ", ".join(f"{r['count'] - r['unique']}/{r['duplicates']}" for r in runs)


def _saturated(result: dict) -> bool:
    """
    Whether the latency run received less than 95% of the rate offered:
    queues grew all along, so its latencies are times through that backlog.
    """
    latency = result["latency"]
    return latency["consumed_per_s"] < 0.95 * latency["rate"]


def _cores(result: dict) -> float:
    latency = result["latency"]
    return latency["router_cpu_s"] / (latency["count"] / latency["rate"])


def print_tables(results: dict, detections: list[dict], options, skipped: list[str],
                 started: float, load_at_start: float) -> None:
    rate = options["rate"]
    load = (f"; paho-mqtt, MQTT 3.1.1; throughput: {options['messages']:,} publications, "
            f"median of {options['runs']}, window {options['window']}; latency: "
            f"{int(rate * options['latency-seconds']):,} publications at {rate:,}/s (first "
            f"{options['warmup']} left out)") if results else ""
    print(f"issue 32 MQTT one hop: {os.cpu_count()} CPUs, Python {sys.version.split()[0]}"
          f"{load}; {time.monotonic() - started:.0f} s; load average {load_at_start:.1f} at "
          f"the start, {os.getloadavg()[0]:.1f} at the end")
    for line in skipped:
        print(line)
    rows = []
    for result in sorted(results.values(), key=lambda r: (
            r["case"].size, SYSTEMS.index(r["case"].system), -r["case"].qos)):
        case = result["case"]
        ms = result["latency"]["latency_ms"]
        rows.append((LABELS[case.system], compare._body(case.size), f"QoS {case.qos}" + (
            ", persistent session" if case.qos else ", clean session"),
            f"{result['msg_per_s']:,.0f}",
            f"{ms['p50']:.2f} / {ms['p99']:.2f}" + (" *" if _saturated(result) else "")
            if ms else "-",
            compare.cores_per_router(result["latency"]), _run_counts(result)))
    if rows:
        print_table("", ("system", "body", "QoS", "msg/s", f"p50 / p99 ms @{rate}/s",
                         f"cores A / B @{rate}/s", "lost/dup per run"), rows)
        print("msg/s: received by the subscriber on B per second from the first publication "
              "(median of the throughput runs).  p50 / p99: publication to receipt (*: less "
              f"than 95% of {rate:,}/s received, so queues grew all along and these are "
              "times through that backlog).  cores: each router's (broker's) CPU seconds "
              "during the latency run divided by its length.  lost/dup: publications never "
              "received / received more than once, in each run (throughput runs, then the "
              "latency run).")
        print()
    ratios = [row for size in options["sizes"] for row in ratio_rows(results, size, rate)]
    if ratios:
        print_table("meshroute / Mosquitto (this run):",
                    ("body", "QoS", "what", "meshroute", "Mosquitto", "ratio"), ratios)
        print()
    if detections:
        print_table("Dead-bridge detection (idle; the far side frozen with SIGSTOP):",
                    ("system", "keepalive", "by its rule", "near side closed after",
                     "what it says"),
                    [(LABELS[d["system"]], d["settings"], d["rule"], f"{d['socket_s']:.2f} s",
                      d["seen"]) for d in detections])
        print("closed after: from SIGSTOP until the near side's connection to the far side "
              "left ESTABLISHED (/proc/net/tcp, polled every 20 ms).")


def ratio_rows(results: dict, size: int, rate: int) -> list[tuple]:
    """
    meshroute's figures over Mosquitto's for C{size}-byte bodies, per QoS:
    msg/s (higher is better), p50 and p99 at the paced rate, CPU (lower is
    better).
    """
    rows = []
    for mode, qos in MODES.items():
        ours = results.get(MqttCase(1, size, mode, "meshroute").id)
        theirs = results.get(MqttCase(1, size, mode, "mosquitto").id)
        if not (ours and theirs):
            continue
        figures = (
            ("msg/s", lambda r: r["msg_per_s"], "{:,.0f}"),
            (f"p50 ms @{rate}/s", lambda r: (r["latency"]["latency_ms"] or {}).get("p50"),
             "{:.2f}"),
            (f"p99 ms @{rate}/s", lambda r: (r["latency"]["latency_ms"] or {}).get("p99"),
             "{:.2f}"),
            (f"cores, A + B @{rate}/s", _cores, "{:.2f}"),
        )
        for what, figure, form in figures:
            a, b = figure(ours), figure(theirs)
            if a is not None and b:
                rows.append((compare._body(size), f"QoS {qos}", what, form.format(a),
                             form.format(b),
                             f"{a / b:.2f}x"))
    return rows


def main(argv: list[str]) -> int:
    options = parse_main_options(Options(), argv)
    load_at_start = os.getloadavg()[0]
    started = time.monotonic()
    results: dict[str, dict] = {}
    skipped: list[str] = []
    systems = list(options["systems"])
    if "mosquitto" in systems and (line := mosquitto_missing(options)):
        systems.remove("mosquitto")
        skipped.append(line)

    def run(base: str) -> list[dict]:
        for system in [] if options["no-load"] else systems:
            results.update(run_load(system, options, base))
        return [] if options["no-detection"] else run_detection(options, base, systems)

    detections = compare.in_temporary_directory(options, "meshroute-mqtt-bridge-", run)
    if options["json"]:
        with open(options["json"], "w") as f:
            json.dump({"load": {k: dict(v, case=v["case"].id) for k, v in results.items()},
                       "dead_bridge": detections}, f, indent=1)
    print_tables(results, detections, options, skipped, started, load_at_start)
    return 1 if compare.notes(results) else 0


# -- the workers (separate processes) -----------------------------------------------


def mqtt_client(client_id: str, clean_session: bool):
    """
    A paho-mqtt client speaking MQTT 3.1.1, its callbacks of API version 2.
    """
    import paho.mqtt.client as mqtt

    return mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=client_id,
                       clean_session=clean_session, protocol=mqtt.MQTTv311)


async def mqtt_publish(reactor, options) -> None:
    """
    Connect to 127.0.0.1:--connect and publish as throughput.paced_sends
    says; a publication is confirmed by its PUBACK (QoS 1) or once written
    (QoS 0), paho's loop thread handing that to the reactor.
    """
    from twisted.internet import defer

    client = mqtt_client(f"bench-pub-{os.getpid()}", True)
    client.max_inflight_messages_set(options["window"])
    client.max_queued_messages_set(0)
    connected = defer.Deferred()
    pending: dict[int, defer.Deferred] = {}

    def on_connect(_client, _userdata, _flags, reason_code, _properties) -> None:
        reactor.callFromThread(lambda: connected.called or connected.callback(reason_code))

    def on_publish(_client, _userdata, mid, _reason_code, _properties) -> None:
        reactor.callFromThread(lambda: pending.pop(mid).callback(None))

    client.on_connect, client.on_publish = on_connect, on_publish
    client.connect("127.0.0.1", int(options["connect"]))
    client.loop_start()
    reason = await connected
    if reason.is_failure:
        raise RuntimeError(f"CONNECT refused: {reason}")
    topic, qos = options["to"], options["qos"]

    def send(body: bytes) -> defer.Deferred:
        info = client.publish(topic, body, qos)
        if info.rc:
            return defer.fail(RuntimeError(f"publish: paho error {info.rc}"))
        pending[info.mid] = defer.Deferred()
        return pending[info.mid]

    result = await paced_sends(reactor, send, options)
    client.disconnect()
    client.loop_stop()
    write_produced(options["result"], result)


def mqtt_subscribe(options) -> None:
    """
    Connect to 127.0.0.1:--connect (a persistent session for QoS 1),
    subscribe, publish L{PROBE}s on --probe-via until one arrives, say
    ready, and count receipts until every publication arrived or none did
    for a while.
    """
    qos = options["qos"]
    receipts = Receipts(options["count"], options["warmup"])
    subscribed, probed, done = threading.Event(), threading.Event(), threading.Event()
    client = mqtt_client(options["client-id"], clean_session=qos == 0)

    def on_connect(client, _userdata, _flags, reason_code, _properties) -> None:
        if not reason_code.is_failure:
            client.subscribe(options["topic"], qos)

    def on_message(_client, _userdata, message) -> None:
        if message.payload == PROBE:
            probed.set()
        elif receipts.record(message.payload, message.dup):
            done.set()

    client.on_connect, client.on_message = on_connect, on_message
    client.on_subscribe = lambda *_: subscribed.set()
    client.connect("127.0.0.1", int(options["connect"]))
    client.loop_start()
    if not subscribed.wait(START_DEADLINE_S):
        raise SystemExit("no SUBACK")
    probe(int(options["probe-via"]), options["topic"], probed)
    receipts.cpu_start = _process_cpu()
    with open(options["ready"], "w"):
        pass
    while not done.wait(1.0) and not receipts.idle():
        pass
    receipts.write(options["result"])
    client.disconnect()
    client.loop_stop()


def probe(port: int, topic: str, probed: threading.Event) -> None:
    """
    Publish L{PROBE} at QoS 0 on C{topic} at 127.0.0.1:C{port} every 50 ms
    until C{probed} is set.
    """
    client = mqtt_client(f"bench-probe-{os.getpid()}", True)
    client.connect("127.0.0.1", port)
    client.loop_start()
    end = time.monotonic() + START_DEADLINE_S
    while not probed.wait(0.05):
        if time.monotonic() > end:
            raise SystemExit("no probe reached the subscriber")
        client.publish(topic, PROBE, 0)
    client.disconnect()
    client.loop_stop()


class PublishOptions(ProduceOptions):
    optParameters = [["qos", None, 1, "QoS of the publications.", int]]


class SubscribeOptions(ConsumeOptions):
    optParameters = [
        ["topic", None, None, "Topic to subscribe to."],
        ["qos", None, 1, "QoS of the subscription (1: a persistent session).", int],
        ["client-id", None, None, "Client id."],
        ["probe-via", None, None, "Port of the broker (router) to publish the probes on."],
    ]


def worker(role: str, argv: list[str]) -> None:
    from twisted.internet import defer, task

    if role == "worker-mqtt-subscribe":
        options = SubscribeOptions()
        options.parseOptions(argv)
        mqtt_subscribe(options)
        return
    options = PublishOptions()
    options.parseOptions(argv)
    task.react(lambda reactor: defer.Deferred.fromCoroutine(mqtt_publish(reactor, options)))


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] in ("worker-mqtt-publish", "worker-mqtt-subscribe"):
        worker(sys.argv[1], sys.argv[2:])
    else:
        sys.exit(main(sys.argv[1:]))
