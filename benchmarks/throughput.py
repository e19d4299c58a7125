"""
Routed-message throughput, end-to-end latency and router CPU, on loopback.

For each row (route x body size x delivery mode) it starts a fresh mesh of
real routers (twistd, data dirs in a new temporary directory, every port a
free one on 127.0.0.1):

  - 1 hop:  router-a -> router-b      (a connects to b)
  - 2 hops: router-a -> router-b -> router-c

and runs two separate processes built on L{meshroute.client}: a consumer
subscribed to queue C{bench} of the destination router, and a producer
connected to router-a sending to C{bench@DESTINATION}.  Each row is two
runs, each on its own fresh mesh:

  - throughput: the producer sends --messages messages as fast as the
    router confirms them (at most --window unconfirmed), the consumer
    acknowledges each message as it arrives (--prefetch).  Reported:
    sent/s (confirmed by router-a), delivered/s (C{message.enqueued} at
    the destination, from its event log), consumed/s (received by the
    consumer), each as messages / (time of the last one - time of the first
    send); and router CPU seconds per 10,000 messages (utime + stime of
    every router process from /proc/PID/stat, from the moment the consumer
    is subscribed until the destination queue is empty again).
  - latency: the producer offers --rate messages/s (default 1,000) for
    --latency-seconds; every body starts with its sequence number and the
    send time (time.time() just before C{send}); the consumer takes
    receive time minus send time (one machine, one clock).  The first
    --warmup messages are left out of the percentiles.  With --wakeups,
    each router's system calls, futex wake-ups and context switches are
    counted during this run and reported per message (L{_wakeups}).

Modes: persistent with C{[store] sync = "full"}, persistent with
C{sync = "normal"}, and non-persistent (C{send(persistent=False)}; store
left at "full").  Persistent runs must deliver every message exactly once,
or the benchmark fails; lost non-persistent messages are reported.

Row ids look like C{1hop-100B-full}, C{2hop-1KiB-normal},
C{1hop-100B-nonpersistent}; --only takes comma-separated fnmatch
patterns over them.  See benchmarks/README.md.

The producer and consumer are this script again (C{worker-produce} /
C{worker-consume}, not meant to be run by hand).  Every child process is
killed when this script exits, even on error (and, on Linux, even if this
script itself is killed: they get SIGKILL as their parent-death signal).
"""

import fnmatch
import functools
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from twisted.python import usage  # noqa: E402

from meshroute.events import read_events  # noqa: E402
from meshroute.store.settings import StoreConfig  # noqa: E402
from meshroute.store.writers import WRITERS  # noqa: E402

import _wakeups  # noqa: E402
from _harness import free_port, percentile  # noqa: E402

SCRIPT = os.path.abspath(__file__)
SECRET = b"benchmark secret"
QUEUE = "bench"
NAMES = ("router-a", "router-b", "router-c")
#: Longest wait for a router to start, a mesh to learn its routes, a
#: process to stop.
START_DEADLINE_S = 30.0
STOP_DEADLINE_S = 10.0
POLL_S = 0.05
#: A consumer that received something stops this long after the last one.
IDLE_TIMEOUT_S = 10.0
MODES = ("full", "normal", "nonpersistent")
MODE_LABELS = {"full": "persistent, sync=full", "normal": "persistent, sync=normal",
               "nonpersistent": "non-persistent"}
SIZES = (100, 1024)
HOPS = (1, 2)

#: The router configuration; paths are relative to its working directory.
ROUTER_CONFIG = """\
[router]
name = "{name}"
data-dir = "data"

[clients.listener]
endpoint = "tcp:{client_port}:interface=127.0.0.1"

[store]
sync = "{sync}"

[admin]
endpoint = "tcp:{admin_port}:interface=127.0.0.1"
"""
LISTENER_CONFIG = """
[routing.listener]
endpoint = "tcp:{port}:interface=127.0.0.1"
password-file = "secret"
"""
CONNECTOR_CONFIG = """
[[routing.connector]]
router = "{peer}"
endpoint = "tcp:127.0.0.1:{port}"
password-file = "secret"
retry-interval = 100
max-retry-interval = 500
"""


# -- options --------------------------------------------------------------------


def _size_label(size: int) -> str:
    return f"{size // 1024}KiB" if size % 1024 == 0 else f"{size}B"


@dataclass(frozen=True)
class Row:
    hops: int
    size: int
    mode: str

    @property
    def id(self) -> str:
        return f"{self.hops}hop-{_size_label(self.size)}-{self.mode}"

    @property
    def destination(self) -> str:
        return NAMES[self.hops]

    @property
    def persistent(self) -> bool:
        return self.mode != "nonpersistent"

    @property
    def sync(self) -> str:
        return "normal" if self.mode == "normal" else "full"


#: What --quick runs: the rows the targets are about.
QUICK_ROWS = ("1hop-100B-*",)


class Options(usage.Options):
    synopsis = "[--messages N] [--quick] [--only PATTERNS] [...]"
    optParameters = [
        ["messages", "n", None, "Messages per throughput run (default 50000; 5000 with --quick).",
         int],
        ["rate", None, 1000, "Offered load of the latency runs, messages/s.", int],
        ["latency-seconds", None, None, "Length of each latency run (default 10; 3 with --quick).",
         float],
        ["warmup", None, 200, "Messages of each latency run left out of the percentiles.", int],
        ["window", None, 1000, "Sends in flight per producer (unconfirmed).", int],
        ["prefetch", None, 1000, "The consumer's prefetch (unacknowledged deliveries).", int],
        ["only", None, None, "Comma-separated fnmatch patterns over row ids, e.g. "
         "'1hop-100B-*,2hop-100B-full'."],
        ["dir", None, None, "Where to make the temporary mesh directories (default: the "
         "system's temporary directory; its disk is what sync=full measures)."],
        ["json", None, None, "Also write every measurement to this JSON file."],
        ["store-writer", None, StoreConfig.writer,
         "[store] writer of every router: adaptive, reactor or thread (default the router's)."],
        ["early-accept-hold", None, None,
         "[routing] early-accept-hold of every router, milliseconds (0: the origin writes "
         "every persistent send at once); default the router's.", int],
        ["events-max-file-size", None, None, "The routers close their event files at this "
         "size ([events] max-file-size: bytes, or e.g. '1 MiB'); default the router's."],
        ["wait-idle", None, 0.0, "Before each run, wait up to this many seconds for the machine "
         "to be idle (under 10% busy for 2 s); for shared machines.", float],
        ["py-spy", None, None, "Record every router with py-spy during the throughput runs, "
         "into this directory (py-spy must be on PATH or next to this Python)."],
        ["py-spy-format", None, "flamegraph", "py-spy output format: flamegraph, raw, "
         "speedscope."],
    ]
    optFlags = [
        ["quick", "q", "Smoke run: 1 hop, 100 B, all three modes, fewer messages."],
        ["no-latency", None, "Skip the latency runs."],
        ["py-spy-gil", None, "With --py-spy: only the samples of a thread holding the GIL "
         "(py-spy --gil): the router's Python work, without its waits and what runs "
         "outside the interpreter (SQLite, the kernel)."],
        ["no-throughput", None, "Skip the throughput runs."],
        ["keep", None, "Keep the mesh directories (logs, event logs, stores)."],
        ["wakeups", None, "Count each router's system calls, futex wake-ups and context "
         "switches per message during the latency runs (perf stat, /proc)."],
    ]

    def postOptions(self) -> None:
        quick = self["quick"]
        if self["messages"] is None:
            self["messages"] = 5000 if quick else 50_000
        if self["latency-seconds"] is None:
            self["latency-seconds"] = 3.0 if quick else 10.0
        if self["messages"] < 1 or self["rate"] < 1 or self["latency-seconds"] <= 0:
            raise usage.UsageError("--messages, --rate and --latency-seconds must be positive")
        if self["window"] < 1 or self["prefetch"] < 1 or self["warmup"] < 0:
            raise usage.UsageError("--window and --prefetch must be at least 1")
        if self["warmup"] >= self["rate"] * self["latency-seconds"]:
            raise usage.UsageError("--warmup leaves no message of the latency run")
        if self["store-writer"] not in WRITERS:
            raise usage.UsageError(f"--store-writer is one of {', '.join(WRITERS)}")
        rows = [Row(h, s, m) for h in HOPS for s in SIZES for m in MODES]
        patterns = self["only"].split(",") if self["only"] else (QUICK_ROWS if quick else ["*"])
        self["rows"] = [r for r in rows if any(fnmatch.fnmatchcase(r.id, p.strip())
                                               for p in patterns)]
        if not self["rows"]:
            raise usage.UsageError(f"no row matches {self['only']!r}; rows are "
                                   + ", ".join(r.id for r in rows))
        if self["py-spy"]:
            self["py-spy-binary"] = shutil.which("py-spy") or os.path.join(
                os.path.dirname(sys.executable), "py-spy")
            if not os.access(self["py-spy-binary"], os.X_OK):
                raise usage.UsageError("--py-spy: no py-spy found (pip install py-spy)")
        elif self["py-spy-gil"]:
            raise usage.UsageError("--py-spy-gil goes with --py-spy DIR")
        if self["wakeups"]:
            self["perf-binary"] = shutil.which("perf")
            if not self["perf-binary"]:
                raise usage.UsageError("--wakeups: no perf on PATH")
            if self["no-latency"]:
                raise usage.UsageError("--wakeups counts during the latency runs")


# -- processes --------------------------------------------------------------------


def _die_with_parent() -> None:
    """
    In the child, before exec: get SIGKILL when this script dies, however it
    dies (Linux prctl PR_SET_PDEATHSIG); elsewhere, nothing.
    """
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)
    except Exception:
        pass


class Children:
    """
    Every process this script started, so that all of them go, whatever
    happens.
    """

    def __init__(self) -> None:
        self.procs: list[subprocess.Popen] = []

    def spawn(self, argv: list[str], cwd: str, out_path: str, stop_signal=signal.SIGKILL,
              env: dict[str, str] | None = None, **kwargs) -> subprocess.Popen:
        env = dict(os.environ if env is None else env, PYTHONUNBUFFERED="1")
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")]))
        with open(out_path, "wb") as out:
            proc = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                                    stdout=out, stderr=subprocess.STDOUT,
                                    preexec_fn=_die_with_parent, **kwargs)
        proc.stop_signal = stop_signal
        self.procs.append(proc)
        return proc

    def kill_all(self) -> None:
        """
        Send each process still running its stop signal (SIGTERM for
        routers, SIGKILL for the workers), then SIGKILL what did not go in
        time.
        """
        alive = [p for p in self.procs if p.poll() is None]
        for proc in alive:
            _signal(proc, proc.stop_signal)
        deadline = time.monotonic() + STOP_DEADLINE_S
        for proc in alive:
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                _signal(proc, signal.SIGKILL)
                proc.wait()
        self.procs = []


def _signal(proc: subprocess.Popen, signum: int) -> None:
    if proc.poll() is None:
        try:
            proc.send_signal(signum)
        except ProcessLookupError:
            pass


def tail(path: str, lines: int = 30) -> str:
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-lines:])
    except OSError as e:
        return f"<{path}: {e.strerror}>"


def cpu_seconds(pid: int) -> float:
    """
    utime + stime of process C{pid} (all its threads), in seconds.
    """
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def busy_seconds() -> float:
    """
    CPU seconds the whole machine spent busy (all CPUs, from /proc/stat).
    """
    with open("/proc/stat") as f:
        values = [int(v) for v in f.readline().split()[1:]]
    idle = values[3] + (values[4] if len(values) > 4 else 0)  # idle + iowait
    return (sum(values[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def wait_for_idle(max_wait_s: float, window_s: float = 2.0, threshold: float = 0.10) -> bool:
    """
    Wait until the machine was less than C{threshold} busy (all CPUs) for
    C{window_s}, at most C{max_wait_s}.  Returns whether it was.
    """
    end = time.monotonic() + max_wait_s
    cpus = os.cpu_count() or 1
    while True:
        before = busy_seconds()
        time.sleep(window_s)
        if (busy_seconds() - before) / (window_s * cpus) < threshold:
            return True
        if time.monotonic() > end:
            return False


def wait_until(what: str, check, deadline_s: float, alive=lambda: None):
    """
    Poll C{check()} every POLL_S until it returns something true; errors
    count as "not yet" (the last is reported).  C{alive()} raises when a
    process we depend on is gone.
    """
    end = time.monotonic() + deadline_s
    last = None
    while True:
        alive()
        try:
            result, last = check(), None
        except (OSError, ValueError, urllib.error.URLError) as e:
            result, last = None, e
        if result:
            return result
        if time.monotonic() > end:
            raise RuntimeError(f"timed out after {deadline_s:g} s waiting for {what}"
                               + (f" (last error: {last!r})" if last else ""))
        time.sleep(POLL_S)


class RouterProc:
    """
    One C{twistd -n meshroute} process: C{name} labels it (logs, CPU),
    C{router} is the router name it serves (the same for both instances of
    an HA pair; C{name} by default).
    """

    def __init__(self, name: str, directory: str, router: str | None = None) -> None:
        self.name = name
        self.router = router or name
        self.directory = directory
        self.client_port, self.admin_port = free_port(), free_port()
        self.routing_port: int | None = None
        #: The routing listener's C{keepalive-interval} (None: the router's default).
        self.keepalive_interval_ms: int | None = None
        self.connect_to: "RouterProc | None" = None
        self.proc: subprocess.Popen | None = None

    @property
    def data_dir(self) -> str:
        return os.path.join(self.directory, "data")

    @property
    def client_endpoint(self) -> str:
        return f"tcp:127.0.0.1:{self.client_port}"

    def write_config(self, sync: str, extra: str = "", writer: str = StoreConfig.writer) -> None:
        """
        Write its C{router.toml}, with C{[store] writer = writer} and the
        TOML C{extra} at the end.
        """
        os.makedirs(self.directory)
        config = ROUTER_CONFIG.format(name=self.name, client_port=self.client_port,
                                      admin_port=self.admin_port, sync=sync)
        config = config.replace(f'sync = "{sync}"\n',
                                f'sync = "{sync}"\nwriter = "{writer}"\n', 1) + extra
        if self.routing_port is not None:
            config += LISTENER_CONFIG.format(port=self.routing_port)
            if self.keepalive_interval_ms is not None:
                config += f"keepalive-interval = {self.keepalive_interval_ms}\n"
        if self.connect_to is not None:
            config += CONNECTOR_CONFIG.format(peer=self.connect_to.name,
                                              port=self.connect_to.routing_port)
        with open(os.path.join(self.directory, "router.toml"), "w") as f:
            f.write(config)
        with open(os.path.join(self.directory, "secret"), "wb") as f:
            f.write(SECRET)

    def start(self, children: Children) -> None:
        argv = [sys.executable, "-c", "from twisted.scripts.twistd import run; run()", "-n",
                "--pidfile=", "--logfile=router.log", "meshroute", "--config", "router.toml"]
        self.proc = children.spawn(argv, self.directory, os.path.join(self.directory, "router.out"),
                                   stop_signal=signal.SIGTERM)

    def check_alive(self) -> None:
        if self.proc.poll() is not None:
            raise RuntimeError(
                f"{self.name} exited with {self.proc.returncode}:\n"
                f"{tail(os.path.join(self.directory, 'router.out'))}"
                f"{tail(os.path.join(self.directory, 'router.log'))}")

    def get(self, path: str):
        self.check_alive()
        url = f"http://127.0.0.1:{self.admin_port}/api/v1/{path}"
        with urllib.request.urlopen(url, timeout=5) as response:
            return json.load(response)

    def queue_depth(self, queue: str) -> int:
        return sum(q["depth"] for q in self.get("queues") if q["name"] == queue)

    def cpu(self) -> float:
        self.check_alive()
        return cpu_seconds(self.proc.pid)


class Mesh:
    """
    A line of 2 or 3 routers, each in a fresh directory under C{workdir},
    each a C{router_class}.
    """

    router_class = RouterProc

    def __init__(self, workdir: str, hops: int, sync: str, children: Children,
                 extra_config: str = "", store_writer: str = StoreConfig.writer) -> None:
        """
        @param extra_config: TOML tables added to every router's configuration.
        @param store_writer: every router's C{[store] writer}.
        """
        self.children = children
        self.sync = sync
        self.extra_config = extra_config
        self.store_writer = store_writer
        self.routers = [self.router_class(name, os.path.join(workdir, name))
                        for name in NAMES[:hops + 1]]
        for upstream, downstream in zip(self.routers, self.routers[1:]):
            downstream.routing_port = free_port()
            upstream.connect_to = downstream

    @property
    def origin(self) -> RouterProc:
        return self.routers[0]

    @property
    def destination(self) -> RouterProc:
        return self.routers[-1]

    def start(self) -> None:
        for router in reversed(self.routers):
            router.write_config(self.sync, self.extra_config, self.store_writer)
            router.start(self.children)
        for router in self.routers:
            wait_until(f"{router.name}'s admin API",
                       lambda r=router: r.get("router").get("name") == r.name, START_DEADLINE_S)
        dest = self.destination.name
        wait_until(f"a route from {self.origin.name} to {dest}",
                   lambda: dest in self.origin.get("routes"), START_DEADLINE_S)

    def cpu(self) -> dict[str, float]:
        return {router.name: router.cpu() for router in self.routers}

    def stop(self) -> dict[str, int]:
        """
        SIGTERM every router; their exit statuses (0 is a clean stop).
        """
        for router in self.routers:
            _signal(router.proc, signal.SIGTERM)
        codes = {}
        for router in self.routers:
            try:
                codes[router.name] = router.proc.wait(STOP_DEADLINE_S)
            except subprocess.TimeoutExpired:
                _signal(router.proc, signal.SIGKILL)
                codes[router.name] = router.proc.wait()
        return codes


# -- one run ----------------------------------------------------------------------------


def read_enqueued(data_dir: str, queue: str) -> tuple[int, float | None]:
    """
    From a data dir's event log: how many C{message.enqueued} into
    C{queue}, and the time of the last.
    """
    count, last = 0, None
    for record in read_events(data_dir):
        if record["event"] == "message.enqueued" and record.get("queue") == queue:
            count += 1
            last = record["time"] if last is None else max(last, record["time"])
    return count, last


def run_workers(children: Children, workdir: str, consumer_argv: list[str],
                producer_argv: list[str], deadline_s: float, check_alive,
                before_producer=lambda: None) -> tuple[dict, dict, object]:
    """
    L{run_fleet} with one consumer.

    @return: (the producer's result, the consumer's, what C{before_producer}
        returned).
    """
    produced, (consumed,), before = run_fleet(children, workdir, [consumer_argv], producer_argv,
                                              deadline_s, check_alive, before_producer)
    return produced, consumed, before


def run_fleet(children: Children, workdir: str, consumer_argvs: list[list[str]],
              producer_argv: list[str], deadline_s: float, check_alive,
              before_producer=lambda: None) -> tuple[dict, list[dict], object]:
    """
    Start consumer workers (each C{consumer_argvs} entry + C{--ready} and
    C{--result} files in C{workdir}), wait until every one is subscribed,
    call C{before_producer()}, start the producer worker (C{producer_argv} +
    C{--result}) and wait until all of them exited 0.  C{check_alive()}
    raises when the system under test is gone.

    @return: (the producer's result, the consumers' in order, what
        C{before_producer} returned).
    """
    names = ["consumer"] if len(consumer_argvs) == 1 else [
        f"consumer-{i}" for i in range(len(consumer_argvs))]
    workers = {}
    for name, argv in zip(names, consumer_argvs):
        workers[name] = children.spawn(
            [*argv, "--ready", os.path.join(workdir, f"{name}.ready"),
             "--result", os.path.join(workdir, f"{name}.json")],
            workdir, os.path.join(workdir, f"{name}.out"))

    def workers_alive() -> None:
        for name, proc in workers.items():
            if proc.poll() not in (None, 0):
                raise RuntimeError(f"the {name} exited with {proc.returncode}:\n"
                                   + tail(os.path.join(workdir, f"{name}.out")))
        check_alive()

    def consumers_alive() -> None:
        for name, proc in workers.items():
            if proc.poll() is not None:
                raise RuntimeError(f"the {name} exited early:\n"
                                   + tail(os.path.join(workdir, f"{name}.out")))
        check_alive()

    wait_until("the consumers to subscribe", lambda: all(
        os.path.exists(os.path.join(workdir, f"{name}.ready")) for name in names),
        START_DEADLINE_S, consumers_alive)
    before = before_producer()
    producer_out = os.path.join(workdir, "producer.json")
    workers["producer"] = children.spawn([*producer_argv, "--result", producer_out], workdir,
                                         os.path.join(workdir, "producer.out"))

    def workers_done() -> bool:
        workers_alive()
        return all(proc.poll() == 0 for proc in workers.values())

    wait_until("the producer and the consumers to finish", workers_done, deadline_s)
    with open(producer_out) as f:
        produced = json.load(f)
    consumed = []
    for name in names:
        with open(os.path.join(workdir, f"{name}.json")) as f:
            consumed.append(json.load(f))
    return produced, consumed, before


def run_deadline(count: int, rate: int | None) -> float:
    """
    How long a run may take: generous, a slow disk with sync=full must not
    fail it.
    """
    return (count / rate + 60) if rate else (60 + count / 200)


def run_once(row: Row, options, base: str, rate: int | None, count: int,
             make_mesh=Mesh) -> dict:
    """
    One run on a fresh mesh (C{make_mesh(workdir, hops, sync, children)}):
    start it, start the consumer, then the producer; wait for both;
    measure; stop everything.
    """
    kind = "latency" if rate else "throughput"
    if options["wait-idle"] > 0 and not wait_for_idle(options["wait-idle"]):
        print(f"{row.id}: the machine is still busy after {options['wait-idle']:g} s; "
              "running anyway", file=sys.stderr, flush=True)
    workdir = tempfile.mkdtemp(prefix=f"{row.id}-{kind}-", dir=base)
    children = Children()
    profilers: list[subprocess.Popen] = []
    counters: dict[str, _wakeups.WakeupCounter] = {}
    wakeups = None
    try:
        mesh = make_mesh(workdir, row.hops, row.sync, children)
        mesh.start()
        dest = mesh.destination

        def mesh_alive() -> None:
            for router in mesh.routers:
                router.check_alive()

        def measure_from() -> tuple:
            before = mesh.cpu(), busy_seconds(), time.monotonic()
            if options["py-spy"]:
                profilers.extend(start_profilers(options, row, mesh, kind))
            if options["wakeups"] and rate:
                start_wakeup_counters(options, mesh, workdir, counters)
            return before

        produced, consumed, (cpu_before, busy_before, wall_before) = run_workers(
            children, workdir,
            [sys.executable, SCRIPT, "worker-consume", "--connect", dest.client_endpoint,
             "--queue", QUEUE, "--count", str(count), "--prefetch", str(options["prefetch"]),
             "--warmup", str(options["warmup"] if rate else 0)],
            [sys.executable, SCRIPT, "worker-produce", "--connect", mesh.origin.client_endpoint,
             "--to", f"{QUEUE}@{dest.router}", "--count", str(count), "--size", str(row.size),
             "--window", str(options["window"]),
             *(("--rate", str(rate)) if rate else ()),
             *(() if row.persistent else ("--non-persistent",))],
            run_deadline(count, rate), mesh_alive, measure_from)
        if row.persistent:
            wait_until(f"queue {QUEUE} of {dest.name} to be empty",
                       lambda: dest.queue_depth(QUEUE) == 0, START_DEADLINE_S)
        cpu_after, busy_after, wall_after = mesh.cpu(), busy_seconds(), time.monotonic()
        stop_profilers(profilers)
        if counters:
            wakeups = {name: counter.stop(STOP_DEADLINE_S) for name, counter in counters.items()}
        exit_codes = mesh.stop()
        enqueued, last_enqueued = read_enqueued(dest.data_dir, QUEUE)
    finally:
        for profiler in profilers:
            if profiler.poll() is None:
                profiler.kill()
                profiler.wait()
        for counter in counters.values():
            counter.kill()
        children.kill_all()
        if not options["keep"]:
            shutil.rmtree(workdir, ignore_errors=True)
    result = summarize(row.id, row.persistent, kind, count, rate, produced, consumed,
                       cpu_before, cpu_after, busy_after - busy_before, wall_after - wall_before,
                       exit_codes)
    start = produced["first_send"]
    result.update(enqueued=enqueued, delivered_per_s=(
        enqueued / max(1e-9, last_enqueued - start) if last_enqueued else 0.0))
    if wakeups:
        result["wakeups"] = {name: {"counts": counts,
                                    "per_message": _wakeups.per_message(counts, result["unique"])}
                             for name, counts in wakeups.items()}
    return result


def start_wakeup_counters(options, mesh: Mesh, workdir: str,
                          counters: dict[str, _wakeups.WakeupCounter]) -> None:
    """
    Start a L{_wakeups.WakeupCounter} on each router of C{mesh} (--wakeups)
    into C{counters}, by router name (each as soon as it runs, so that an
    error leaves none behind).
    """
    for router in mesh.routers:
        counters[router.name] = _wakeups.WakeupCounter(
            options["perf-binary"], router.proc.pid,
            os.path.join(workdir, f"perf-{router.name}.csv"))
        counters[router.name].start()


def start_profilers(options, row: Row, mesh: Mesh, kind: str) -> list[subprocess.Popen]:
    """
    py-spy recording every router of C{mesh} (--py-spy) during a C{kind} run.
    """
    extension = {"flamegraph": "svg", "raw": "txt"}.get(options["py-spy-format"], "json")
    gil = ["--gil"] if options["py-spy-gil"] else []
    return [subprocess.Popen(
        [options["py-spy-binary"], "record", "--pid", str(router.proc.pid), "--threads", *gil,
         "--rate", "250", "--format", options["py-spy-format"],
         "-o", os.path.join(options["py-spy"], f"{row.id}-{kind}-{router.name}.{extension}")],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, preexec_fn=_die_with_parent)
        for router in mesh.routers]


def stop_profilers(profilers: list[subprocess.Popen]) -> None:
    for profiler in profilers:
        profiler.send_signal(signal.SIGINT)
    for profiler in profilers:
        try:
            profiler.wait(STOP_DEADLINE_S)
        except subprocess.TimeoutExpired:
            profiler.kill()


def summarize(row_id: str, persistent: bool, kind: str, count: int, rate: int | None,
              produced: dict, consumed: dict, cpu_before: dict[str, float],
              cpu_after: dict[str, float], busy_s: float, elapsed: float,
              exit_codes: dict[str, int]) -> dict:
    """
    One run's measurements from the workers' results and the CPU seconds of
    the system's processes (by name) before and after; C{problems} lists
    what makes the run a failure (a persistent run not exactly once, a
    process that did not exit 0 on SIGTERM).
    """
    start = produced["first_send"]
    received = consumed["received"]
    router_cpu = sum(cpu_after.values()) - sum(cpu_before.values())
    # What else kept the machine busy meanwhile (other processes, not ours):
    # machine busy time minus routers, producer (whole process) and consumer.
    foreign = busy_s - router_cpu - produced["cpu_total_s"] - consumed["cpu_s"]
    result = {
        "row": row_id, "kind": kind, "count": count, "rate": rate,
        "confirmed": produced["confirmed"], "refused": produced["refused"],
        "received": received, "unique": consumed["unique"],
        "duplicates": consumed["duplicates"], "redelivered": consumed["redelivered"],
        "sent_per_s": produced["confirmed"] / max(1e-9, produced["last_confirm"] - start),
        "offered_per_s": produced["sent"] / max(1e-9, produced["last_send"] - start),
        "consumed_per_s": (received / max(1e-9, consumed["last_receive"] - start)
                           if received else 0.0),
        "router_cpu_s": router_cpu,
        "router_cpu_by_router": {name: cpu_after[name] - cpu_before[name] for name in cpu_after},
        "router_cpu_per_10k": router_cpu / max(1, received) * 10_000,
        "producer_cpu_s": produced["cpu_s"], "consumer_cpu_s": consumed["cpu_s"],
        "client_cpu_per_10k": (produced["cpu_s"] + consumed["cpu_s"]) / max(1, received) * 10_000,
        "latency_ms": consumed["latency_ms"], "exit_codes": exit_codes,
        "elapsed_s": elapsed, "foreign_cpu_s": foreign,
    }
    problems = []
    if persistent and (consumed["unique"] != count or consumed["duplicates"]
                       or produced["refused"]):
        problems.append(f"exactly-once violated: {consumed['unique']} of {count} distinct, "
                        f"{consumed['duplicates']} duplicates, {produced['refused']} refused")
    if any(exit_codes.values()):
        problems.append(f"did not exit 0 on SIGTERM: {exit_codes}")
    result["problems"] = problems
    return result


# -- the table -------------------------------------------------------------------------


COLUMNS = [
    ("route", 10), ("body", 6), ("mode", 23), ("sent/s", 8), ("deliv/s", 8), ("cons/s", 8),
    ("p50 ms", 7), ("p99 ms", 7), ("rCPU/10k", 9), ("@1k/s", 7), ("cCPU/10k", 9),
]


def format_row(row: Row, tp: dict | None, lat: dict | None) -> str:
    def num(value, digits=0):
        return "-" if value is None else f"{value:,.{digits}f}"

    route = "A->B" if row.hops == 1 else "A->B->C"
    body = "100 B" if row.size == 100 else _size_label(row.size).replace("KiB", " KiB")
    lat_ms = lat["latency_ms"] if lat else None
    cells = [
        route, body, MODE_LABELS[row.mode],
        num(tp and tp["sent_per_s"]), num(tp and tp["delivered_per_s"]),
        num(tp and tp["consumed_per_s"]),
        num(lat_ms and lat_ms["p50"], 2), num(lat_ms and lat_ms["p99"], 2),
        num(tp and tp["router_cpu_per_10k"], 2), num(lat and lat["router_cpu_per_10k"], 2),
        num(tp and tp["client_cpu_per_10k"], 2),
    ]
    return "  ".join(f"{c:<{w}}" if i < 3 else f"{c:>{w}}"
                     for i, (c, (_, w)) in enumerate(zip(cells, COLUMNS)))


def header() -> str:
    return "  ".join(f"{n:<{w}}" if i < 3 else f"{n:>{w}}" for i, (n, w) in enumerate(COLUMNS))


def _interrupt(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


def print_notes(row_id: str, kind: str, run: dict) -> bool:
    """
    Print a run's problems and what makes its numbers doubtful (lost
    non-persistent messages, a busy machine, a latency run that could not
    offer its rate); returns whether it has problems (a failure).
    """
    notes = list(run["problems"])
    if run["row"].endswith("nonpersistent") and run["unique"] != run["count"]:
        notes.append(f"non-persistent: {run['count'] - run['unique']} of {run['count']} lost")
    if run["foreign_cpu_s"] > 0.1 * run["elapsed_s"]:
        notes.append(f"other processes used {run['foreign_cpu_s']:.1f} CPU s during "
                     f"this {run['elapsed_s']:.1f} s run: the machine was not idle")
    if kind == "latency" and run["offered_per_s"] < 0.95 * run["rate"]:
        notes.append(f"offered only {run['offered_per_s']:.0f} msg/s "
                     f"(the origin confirms too slowly for the window)")
    for note in notes:
        print(f"NOTE {row_id} {kind}: {note}")
    return bool(run["problems"])


def parse_main_options(options: usage.Options, argv: list[str]) -> usage.Options:
    """
    Parse a benchmark's command line (exit with usage on errors) and make
    SIGTERM and SIGHUP unwind like Ctrl-C, so every finally runs.
    """
    try:
        options.parseOptions(argv)
    except usage.UsageError as e:
        raise SystemExit(f"{e}\n{options}")
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, _interrupt)
    return options


def main(argv: list[str]) -> int:
    options = parse_main_options(Options(), argv)
    if options["py-spy"]:
        os.makedirs(options["py-spy"], exist_ok=True)
    base = tempfile.mkdtemp(prefix="meshroute-throughput-", dir=options["dir"])
    count, rate, seconds = options["messages"], options["rate"], options["latency-seconds"]
    lat_count = int(rate * seconds)
    extra = ""
    if options["events-max-file-size"]:
        size = options["events-max-file-size"]
        extra = f"\n[events]\nmax-file-size = {size if size.isdigit() else json.dumps(size)}\n"
    if options["early-accept-hold"] is not None:
        extra += f"\n[routing]\nearly-accept-hold = {options['early-accept-hold']}\n"
    make_mesh = functools.partial(Mesh, extra_config=extra, store_writer=options["store-writer"])
    results: dict[str, dict] = {}
    lines = []
    started = time.monotonic()
    try:
        for row in options["rows"]:
            tp = lat = None
            if not options["no-throughput"]:
                print(f"{row.id}: throughput, {count} messages ...", file=sys.stderr, flush=True)
                tp = run_once(row, options, base, None, count, make_mesh)
            if not options["no-latency"]:
                print(f"{row.id}: latency, {lat_count} messages at {rate}/s ...",
                      file=sys.stderr, flush=True)
                lat = run_once(row, options, base, rate, lat_count, make_mesh)
            results[row.id] = {"throughput": tp, "latency": lat}
            lines.append(format_row(row, tp, lat))
            print(lines[-1], file=sys.stderr, flush=True)
    finally:
        if not options["keep"]:
            shutil.rmtree(base, ignore_errors=True)
        else:
            print(f"mesh directories kept in {base}", file=sys.stderr)
        if options["json"]:
            with open(options["json"], "w") as f:
                json.dump(results, f, indent=1)

    print(f"meshroute throughput benchmark: {os.cpu_count()} CPUs, Python "
          f"{sys.version.split()[0]}; throughput runs {count:,} messages (window "
          f"{options['window']}, prefetch {options['prefetch']}); latency runs {lat_count:,} "
          f"messages at {rate:,}/s (first {options['warmup']} left out); "
          f"{time.monotonic() - started:.0f} s")
    print(header())
    for line in lines:
        print(line)
    print("sent/s: confirmed by router-a; deliv/s: enqueued at the destination; cons/s: "
          "received by the consumer (each from the first send).\n"
          "p50/p99: send to receive at the offered rate.  rCPU/10k: router CPU seconds per "
          "10,000 messages, all routers (throughput run; @1k/s: latency run).\n"
          "cCPU/10k: producer + consumer CPU seconds per 10,000 messages (throughput run).")
    wakeup_rows = [(row_id, name, counts["per_message"])
                   for row_id, runs in results.items() if runs["latency"]
                   for name, counts in runs["latency"].get("wakeups", {}).items()]
    if wakeup_rows:
        print()
        print("\n".join(_wakeups.format_table(wakeup_rows)))
        print(_wakeups.LEGEND)
    failed = False
    for row_id, runs in results.items():
        for kind, run in runs.items():
            if run:
                failed = print_notes(row_id, kind, run) or failed
    return 1 if failed else 0


# -- the workers (separate processes) -----------------------------------------------


class ProduceOptions(usage.Options):
    optParameters = [
        ["connect", None, None, "Client endpoint of the origin router."],
        ["to", None, None, "Address."],
        ["count", None, 1, "Messages.", int],
        ["size", None, 100, "Body bytes.", int],
        ["window", None, 1000, "Sends in flight.", int],
        ["rate", None, None, "Messages/s (default: as fast as confirmed).", float],
        ["result", None, None, "Where to write the JSON result."],
    ]
    optFlags = [["non-persistent", None, "Non-persistent sends."]]


class ConsumeOptions(usage.Options):
    optParameters = [
        ["connect", None, None, "Client endpoint of the destination router."],
        ["queue", None, QUEUE, "Queue."],
        ["count", None, 1, "Messages expected.", int],
        ["prefetch", None, 1000, "Prefetch.", int],
        ["warmup", None, 0, "Messages left out of the latency percentiles.", int],
        ["ready", None, None, "File to create once subscribed."],
        ["result", None, None, "Where to write the JSON result."],
    ]


def _process_cpu() -> float:
    t = os.times()
    return t.user + t.system


def make_body(i: int, size: int, now: float) -> bytes:
    """
    C{"SEQ SENDTIME "} padded with x to C{size} bytes.
    """
    head = b"%d %.6f " % (i, now)
    return head + b"x" * (size - len(head)) if size > len(head) else head


async def produce(reactor, options) -> None:
    from meshroute.client import connect

    client = await connect(reactor, options["connect"])
    to, persistent = options["to"], not options["non-persistent"]
    result = await paced_sends(reactor, lambda body: client.send(to, body, persistent=persistent),
                               options)
    await client.close()
    write_produced(options["result"], result)


def paced_sends(reactor, send, options):
    """
    Call C{send(body)} (returns a Deferred that fires once the system
    confirmed the message) for C{options["count"]} bodies of
    C{options["size"]} bytes (L{make_body}), at most C{options["window"]}
    unconfirmed, at C{options["rate"]} per second or as fast as confirmed.
    Shared by every system's producer worker.

    @return: a Deferred firing with the producer's result (see
        L{write_produced}) once every send is confirmed or refused.
    """
    from twisted.internet import defer

    count, size, window, rate = options["count"], options["size"], options["window"], \
        options["rate"]
    state = {"sent": 0, "in_flight": 0, "confirmed": 0, "refused": 0, "first_error": None,
             "last_confirm": None, "last_send": None, "timer": None}
    done = defer.Deferred()
    start = time.time()
    cpu_start = _process_cpu()

    def confirmed(_):
        state["in_flight"] -= 1
        state["confirmed"] += 1
        finish_or_pump()

    def refused(failure):
        state["in_flight"] -= 1
        state["refused"] += 1
        state["first_error"] = state["first_error"] or failure.getErrorMessage()
        finish_or_pump()

    def finish_or_pump():
        if state["confirmed"] + state["refused"] == count:
            state["last_confirm"] = time.time()
            if not done.called:
                done.callback({"first_send": start, "last_send": state["last_send"],
                               "last_confirm": state["last_confirm"], "sent": state["sent"],
                               "confirmed": state["confirmed"], "refused": state["refused"],
                               "first_error": state["first_error"],
                               "cpu_s": _process_cpu() - cpu_start})
        else:
            pump()

    def on_timer():
        state["timer"] = None
        pump()

    def pump():
        now = time.time()
        allowed = count if rate is None else min(count, int((now - start) * rate) + 1)
        sent = state["sent"]
        while sent < allowed and state["in_flight"] < window:
            now = time.time()
            d = send(make_body(sent, size, now))
            sent += 1
            state["in_flight"] += 1
            state["sent"] = sent
            d.addCallbacks(confirmed, refused)
            state["last_send"] = now
        if rate is not None and sent < count and state["timer"] is None \
                and state["in_flight"] < window:
            state["timer"] = reactor.callLater(max(0.0, start + sent / rate - time.time()),
                                               on_timer)

    pump()
    return done


def write_produced(path: str, result: dict) -> None:
    """
    Write a producer's result: what L{paced_sends} measured (first_send,
    last_send, last_confirm: time.time(); sent, confirmed, refused,
    first_error; cpu_s: the sending's CPU) and the whole process's CPU.
    """
    with open(path, "w") as f:
        json.dump(dict(result, cpu_total_s=_process_cpu()), f)


class Receipts:
    """
    What a consumer received: every body made by L{make_body} counted once
    by its sequence number (duplicates and redeliveries apart), and its
    latency (receive time minus the send time in the body) unless among the
    first C{warmup}.  Shared by every system's consumer worker.
    """

    def __init__(self, count: int, warmup: int) -> None:
        self.count, self.warmup = count, warmup
        self.seen = bytearray(count)
        self.latencies: list[float] = []
        self.received = self.unique = self.duplicates = self.redelivered = 0
        self.last: float | None = None
        self.cpu_start = _process_cpu()

    def record(self, body: bytes, redelivered: bool) -> bool:
        """
        Count one receipt; returns whether every message has arrived.
        """
        now = time.time()
        self.received += 1
        self.last = now
        if redelivered:
            self.redelivered += 1
        seq, sent_at = body.split(b" ", 2)[:2]
        i = int(seq)
        if 0 <= i < self.count and not self.seen[i]:
            self.seen[i] = 1
            self.unique += 1
            if i >= self.warmup:
                self.latencies.append(now - float(sent_at))
        else:
            self.duplicates += 1
        return self.unique == self.count

    def idle(self) -> bool:
        """
        Whether something arrived but nothing for IDLE_TIMEOUT_S since.
        """
        return self.last is not None and time.time() - self.last > IDLE_TIMEOUT_S

    def summary(self) -> dict:
        """
        What the consumer's result file holds: counts, the last receipt's
        time, latency percentiles (ms) and the CPU since C{cpu_start}.
        """
        return {"received": self.received, "unique": self.unique,
                "duplicates": self.duplicates, "redelivered": self.redelivered,
                "last_receive": self.last,
                "latency_ms": latency_percentiles([x * 1000 for x in self.latencies]),
                "cpu_s": _process_cpu() - self.cpu_start}

    def write(self, path: str) -> None:
        with open(path, "w") as f:
            json.dump(self.summary(), f)


def latency_percentiles(ms: list[float]) -> dict | None:
    """
    p50, p90, p99, max and count of latencies in ms (None for none).
    """
    if not ms:
        return None
    return {"p50": percentile(ms, 50), "p90": percentile(ms, 90), "p99": percentile(ms, 99),
            "max": max(ms), "n": len(ms)}


async def consume(reactor, options) -> None:
    from twisted.internet import defer, task

    from meshroute.client import connect

    client = await connect(reactor, options["connect"])
    receipts: Receipts | None = None
    done = defer.Deferred()

    def on_message(message) -> None:
        # Cumulative: one AckThrough per turn for all of its deliveries (a
        # router older than client protocol 4 gets their ids in one Ack).
        message.ack_through()
        if receipts.record(message.body, message.redelivered) and not done.called:
            done.callback(None)

    def idle_check() -> None:
        if receipts.idle() and not done.called:
            done.callback(None)

    def lost(failure) -> None:
        if not done.called:
            done.errback(failure)

    client.when_closed().addErrback(lost)
    receipts = Receipts(options["count"], options["warmup"])
    await client.subscribe(options["queue"], on_message, prefetch=options["prefetch"])
    receipts.cpu_start = _process_cpu()
    with open(options["ready"], "w"):
        pass
    checker = task.LoopingCall(idle_check)
    checker.start(1.0, now=False)
    await done
    checker.stop()
    receipts.write(options["result"])
    # Let the last acknowledgements go out before closing.
    await task.deferLater(reactor, 0.05)
    await client.close()


def worker(kind: str, argv: list[str]) -> None:
    from twisted.internet import defer, task

    options = ProduceOptions() if kind == "worker-produce" else ConsumeOptions()
    options.parseOptions(argv)
    run = produce if kind == "worker-produce" else consume
    task.react(lambda reactor: defer.Deferred.fromCoroutine(run(reactor, options)))


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] in ("worker-produce", "worker-consume"):
        worker(sys.argv[1], sys.argv[2:])
    else:
        sys.exit(main(sys.argv[1:]))
