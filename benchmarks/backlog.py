"""
Store-and-forward backlog: does a router's memory stay bounded while a
large backlog waits for, then drains to, a destination router?

Two real routers on loopback (twistd, free ports, a temporary directory):
A (client listener, admin API, a connector to B) and B (routing listener,
client listener, admin API).  A refuses addresses of routers it never
heard of, so A and B first link once; then B is stopped with SIGTERM.

 - Phase 1, fill: a producer process (L{meshroute.client}, at most
   C{--window} sends in flight) sends C{--messages} persistent messages
   with distinct C{--size}-byte bodies (the first 12 bytes are the message
   number) to C{q@router-b}.  They wait in A's store.  A's RSS (VmRSS from
   /proc) is sampled every second.
 - Phase 2, drain: B is started again and a consumer process on B
   subscribes to C{q} (prefetch C{--prefetch}), acknowledges every message
   and counts them; the backlog crosses the A-B link under its flow
   control.  A's and B's RSS are sampled every second.

It reports RSS before, at the peak of and after each phase, the fill and
drain rates, and checks exactly-once delivery: the consumer must receive N
messages, N distinct bodies and N distinct message ids, and A's backlog and
B's queue must be empty afterwards.  Exits non-zero when a check fails or a
router does not exit 0 on SIGTERM.  Run it for two sizes (e.g. 100,000 and
1,000,000) to see whether memory grows with N.  See benchmarks/README.md.

Both routers run with C{[store] sync = "normal"} by default (C{--sync});
A's C{[routing] max-backlog} is raised to N + 1000.  With
C{--non-persistent} the messages wait in A's memory instead (up to
max-backlog) and may be dropped, so only duplicates fail the run.
"""

import json
import os
import shutil
import sys
import tempfile
import time
import warnings

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _harness import (  # noqa: E402
    Child,
    ProcessExited,
    cpu_s,
    free_port,
    machine_busy_s,
    max_rss_kib,
    own_cpu_s,
    role_result,
)
from _harness import spawn_role as _harness_spawn_role  # noqa: E402

from twisted.internet import defer, task  # noqa: E402
from twisted.internet.endpoints import TCP4ClientEndpoint  # noqa: E402
from twisted.python import usage  # noqa: E402
from twisted.web.client import Agent, readBody  # noqa: E402

from meshroute.events import events_dir  # noqa: E402

warnings.filterwarnings("ignore", "Using readBody with a transport", DeprecationWarning)

SECRET = b"benchmark secret"
QUEUE = "q"
A_NAME, B_NAME = "router-a", "router-b"
#: The longest we wait for a router to start, link, stop.
DEADLINE_S = 60.0
POLL_S = 0.1
SAMPLE_S = 1.0
#: Bytes of a body that carry its number.
NUMBER_BYTES = 12

CONFIG_A = """\
[router]
name = "{name}"
data-dir = "router"
[routing]
max-backlog = {max_backlog}
[store]
sync = "{sync}"
[[routing.connector]]
router = "{peer}"
endpoint = "tcp:127.0.0.1:{peer_port}"
password-file = "secret"
retry-interval = "250ms"
max-retry-interval = "250ms"
[clients.listener]
endpoint = "tcp:{client_port}:interface=127.0.0.1"
[admin]
endpoint = "tcp:{admin_port}:interface=127.0.0.1"
"""

CONFIG_B = """\
[router]
name = "{name}"
data-dir = "router"
[store]
sync = "{sync}"
[routing.listener]
endpoint = "tcp:{port}:interface=127.0.0.1"
password-file = "secret"
[clients.listener]
endpoint = "tcp:{client_port}:interface=127.0.0.1"
[admin]
endpoint = "tcp:{admin_port}:interface=127.0.0.1"
"""


class Options(usage.Options):
    optParameters = [
        ["messages", None, 1_000_000, "Messages in the backlog (N).", int],
        ["size", None, 100, "Body size in bytes (at least 12).", int],
        ["window", None, 1000, "The producer's sends in flight.", int],
        ["prefetch", None, 1000, "The consumer's prefetch.", int],
        ["sync", None, "normal", 'The routers\' [store] sync: "normal" or "full".'],
        ["timeout", None, 3600.0, "Give up on a phase after this many seconds.", float],
        ["idle", None, 60.0, "The consumer gives up after this many seconds without a "
                              "message.", float],
    ]
    optFlags = [
        ["series", None, "Also print every RSS sample."],
        ["keep", None, "Keep the routers' directory (printed) instead of deleting it."],
        ["non-persistent", None, "Send non-persistent messages: they wait in A's memory, "
                                 "not its store, and may be dropped (so only duplicates "
                                 "fail the run)."],
    ]

    def postOptions(self) -> None:
        if self["messages"] < 1 or self["window"] < 1 or self["prefetch"] < 1:
            raise usage.UsageError("--messages, --window and --prefetch must be positive")
        if self["size"] < NUMBER_BYTES:
            raise usage.UsageError(f"--size must be at least {NUMBER_BYTES}")
        if self["sync"] not in ("normal", "full"):
            raise usage.UsageError('--sync must be "normal" or "full"')


def disk_mib(path: str, prefix: str) -> float:
    """
    MiB of the files in C{path} whose names start with C{prefix}.
    """
    total = sum(os.path.getsize(os.path.join(path, name)) for name in os.listdir(path)
                if name.startswith(prefix) and os.path.isfile(os.path.join(path, name)))
    return total / 2**20


def data_dir_sizes(path: str) -> str:
    # Every file of events/ is the event log's (current.jsonl included).
    return (f"store {disk_mib(path, 'store.db'):,.0f} MiB, "
            f"events {disk_mib(events_dir(path), ''):,.0f} MiB")


class Router:
    """
    One router's directory, ports and configuration; L{start} runs
    C{twistd -n meshroute} in it (again after a stop: same data-dir).
    """

    def __init__(self, reactor, workdir: str, name: str, template: str, **fields) -> None:
        self._reactor = reactor
        self.name = name
        self.workdir = os.path.join(workdir, name)
        os.makedirs(self.workdir)
        self.client_port, self.admin_port = free_port(), free_port()
        self.child: Child | None = None
        self._agent = Agent.usingEndpointFactory(reactor, self)
        with open(os.path.join(self.workdir, "secret"), "wb") as f:
            f.write(SECRET)
        with open(os.path.join(self.workdir, "router.toml"), "w") as f:
            f.write(template.format(name=name, client_port=self.client_port,
                                    admin_port=self.admin_port, **fields))

    @property
    def data_dir(self) -> str:
        return os.path.join(self.workdir, "router")

    @property
    def client_endpoint(self) -> str:
        return f"tcp:127.0.0.1:{self.client_port}"

    def start(self) -> None:
        argv = ["-c", "from twisted.scripts.twistd import run; run()", "-n", "--pidfile=",
                "--logfile=router.log", "meshroute", "--config", "router.toml"]
        self.child = Child(self._reactor, argv, self.workdir, self.name)

    def endpointForURI(self, uri):
        return TCP4ClientEndpoint(self._reactor, "127.0.0.1", self.admin_port)

    async def get(self, path: str):
        self.child.check_alive()
        url = f"http://127.0.0.1:{self.admin_port}/api/v1/{path}"
        return json.loads(await readBody(await self._agent.request(b"GET", url.encode())))

    async def backlog(self, router: str) -> int:
        return (await self.get("router"))["backlog"].get(router, 0)

    async def depth(self, queue: str) -> int:
        return next((q["depth"] for q in await self.get("queues") if q["name"] == queue), 0)


async def poll(reactor, what: str, check, done=bool, deadline: float = DEADLINE_S):
    """
    Await C{check()} every POLL_S until C{done(result)}; errors other than
    L{ProcessExited} count as not done yet.
    """
    end = reactor.seconds() + deadline
    while True:
        try:
            result, last = await check(), None
        except ProcessExited:
            raise
        except Exception as e:
            result, last = None, e
        if last is None and done(result):
            return result
        if reactor.seconds() > end:
            raise RuntimeError(f"timed out waiting for {what} (last error: {last!r})")
        await task.deferLater(reactor, POLL_S)


class Sampler:
    """
    Every SAMPLE_S: the RSS of the processes watched, and A's backlog and
    B's queue depth from their admin APIs (as last answered).
    """

    def __init__(self, reactor, a: Router, b: Router) -> None:
        self._reactor, self._a, self._b = reactor, a, b
        self.samples: list[dict] = []
        self.phase = "idle"
        self._backlog = self._depth = None
        self._start = time.monotonic()
        self._loop = task.LoopingCall(self._sample)

    def start(self) -> None:
        self._loop.start(SAMPLE_S)

    def stop(self) -> None:
        if self._loop.running:
            self._loop.stop()

    def enter(self, phase: str) -> None:
        """
        Take a last sample of the phase that ends, then start C{phase}.
        """
        recent = self.samples and time.monotonic() - self._start - self.samples[-1]["t"] < 0.5
        if self._loop.running and not recent:
            self._sample()
        self.phase = phase

    def _sample(self) -> None:
        a, b = self._a.child, self._b.child
        sample = {
            "t": time.monotonic() - self._start, "phase": self.phase,
            "a": a.rss() if a else None, "b": b.rss() if b else None,
            "a_backlog": self._backlog, "b_depth": self._depth,
        }
        self.samples.append(sample)
        self._ask(self._a, lambda r: r.backlog(B_NAME), "_backlog")
        self._ask(self._b, lambda r: r.depth(QUEUE), "_depth")

    def _ask(self, router: Router, query, attr: str) -> None:
        if router.child is None or router.child.ended.called:
            setattr(self, attr, None)
            return
        d = defer.Deferred.fromCoroutine(query(router))
        d.addCallbacks(lambda value: setattr(self, attr, value),
                       lambda failure: setattr(self, attr, None))

    def peak(self, phase: str, key: str) -> int | None:
        values = [s[key] for s in self.samples if s["phase"] == phase and s.get(key)]
        return max(values) if values else None


def others(start: tuple, end: tuple) -> float:
    """
    The CPU other processes used between two C{meter()} readings, as a
    fraction of one CPU.
    """
    wall = end[0] - start[0]
    return max(0.0, (end[1] - start[1]) - (end[2] - start[2])) / wall if wall > 0 else 0.0


def spawn_role(reactor, workdir: str, role: str, *args) -> Child:
    return _harness_spawn_role(reactor, __file__, workdir, role, *args)


async def run(reactor, options: Options, workdir: str) -> tuple[list, list, bool]:
    n, sync = options["messages"], options["sync"]
    b_port = free_port()
    a = Router(reactor, workdir, A_NAME, CONFIG_A, sync=sync, max_backlog=n + 1000, peer=B_NAME,
               peer_port=b_port)
    b = Router(reactor, workdir, B_NAME, CONFIG_B, sync=sync, port=b_port)
    sampler = Sampler(reactor, a, b)
    children: list[Child] = []
    try:
        # Link A and B once, so A knows router-b; then stop B.
        a.start()
        b.start()
        children += [a.child, b.child]
        await poll(reactor, "A's route to B", lambda: a.get("routes"), lambda r: B_NAME in r)
        await task.deferLater(reactor, 2.0)
        b_idle = b.child.rss()
        code = await b.child.stop(reactor)
        if code != 0:
            raise RuntimeError(f"B exited {code} on SIGTERM:\n{b.child.output.decode()}")
        await poll(reactor, "A to lose its route to B", lambda: a.get("routes"),
                   lambda r: B_NAME not in r)
        await task.deferLater(reactor, 2.0)
        a_before = a.child.rss()
        sampler.start()
        meter = lambda: (time.monotonic(), machine_busy_s(), own_cpu_s(children))  # noqa: E731

        # Phase 1: fill A's backlog for B.
        sampler.enter("fill")
        fill_meter, a_cpu0 = meter(), cpu_s(a.child.pid)
        producer = spawn_role(reactor, workdir, "_produce", a.client_endpoint,
                              f"{QUEUE}@{B_NAME}", n, options["size"], options["window"],
                              int(not options["non-persistent"]))
        children.append(producer)
        produced = role_result(producer, await producer.ended.addTimeout(options["timeout"],
                                                                         reactor))
        fill_meter, a_cpu_fill = others(fill_meter, meter()), cpu_s(a.child.pid) - a_cpu0
        backlog_after_fill = await a.backlog(B_NAME)
        sampler.enter("settle-fill")
        await task.deferLater(reactor, 3.0)
        a_after_fill = a.child.rss()
        a_disk = data_dir_sizes(a.data_dir)

        # Phase 2: start B and a consumer on it; the backlog drains.
        sampler.enter("drain")
        drain_wall, drain_meter, a_cpu0 = time.time(), meter(), cpu_s(a.child.pid)
        b.start()
        children.append(b.child)
        await poll(reactor, "B's admin API", lambda: b.get("router"))
        consumer = spawn_role(reactor, workdir, "_consume", b.client_endpoint, QUEUE, n,
                              options["prefetch"], options["idle"])
        children.append(consumer)
        consumed = role_result(consumer, await consumer.ended.addTimeout(options["timeout"],
                                                                         reactor))
        drain_meter, a_cpu_drain = others(drain_meter, meter()), cpu_s(a.child.pid) - a_cpu0
        b_cpu_drain = cpu_s(b.child.pid)
        end_at = consumed["complete_at"] or consumed["last_at"]
        drain_s = end_at - drain_wall if end_at else None
        sampler.enter("settle-drain")
        await task.deferLater(reactor, 3.0)
        a_after, b_after = a.child.rss(), b.child.rss()
        backlog_after = await a.backlog(B_NAME)
        depth_after = await b.depth(QUEUE)
        b_disk = data_dir_sizes(b.data_dir)
        sampler.stop()
        codes = [await r.child.stop(reactor) for r in (a, b)]

        persistent = not options["non-persistent"]
        received = consumed["received"]
        ok = (produced["errors"] == 0 and consumed["foreign"] == 0
              and received == consumed["distinct_bodies"] == consumed["distinct_ids"]
              and backlog_after == 0 and depth_after == 0 and codes == [0, 0])
        if persistent:
            ok = ok and received == n and backlog_after_fill == n
        kib = lambda v: f"{v:,} KiB" if v is not None else "-"  # noqa: E731
        rate = lambda s, count=n: f"{count / s:,.0f} msg/s" if s else "-"  # noqa: E731
        first_last = consumed["last_at"] - consumed["first_at"] if consumed["received"] else 0
        rows = [
            ("messages (N), body bytes", f"{n:,}, {options['size']}"),
            ("store sync", sync),
            ("delivery mode", "persistent" if persistent else "NON-PERSISTENT"),
            ("producer window / consumer prefetch", f"{options['window']} / {options['prefetch']}"),
            ("fill: producer time", f"{produced['seconds']:.1f} s"),
            ("fill: rate", rate(produced["seconds"])),
            ("fill: send errors", str(produced["errors"])),
            ("A backlog for B after fill (admin API)", f"{backlog_after_fill:,}"),
            ("A data-dir after fill", a_disk),
            ("A RSS before fill", kib(a_before)),
            ("A RSS peak during fill", kib(sampler.peak("fill", "a"))),
            ("A RSS after fill (3 s later)", kib(a_after_fill)),
            ("drain: B start to last message consumed", f"{drain_s:.1f} s" if drain_s else "-"),
            ("drain: rate (B start to last message)", rate(drain_s, received)),
            ("drain: rate (first to last message)", rate(first_last, received)),
            ("A CPU during fill", f"{a_cpu_fill:.1f} s"),
            ("A CPU / B CPU during drain (B with its start)",
             f"{a_cpu_drain:.1f} s / {b_cpu_drain:.1f} s"),
            ("other processes' CPU, fill / drain",
             f"{fill_meter:.0%} / {drain_meter:.0%} of one CPU"),
            ("A RSS peak during drain", kib(sampler.peak("drain", "a"))),
            ("A RSS after drain (3 s later)", kib(a_after)),
            ("B RSS idle, before it was stopped", kib(b_idle)),
            ("B RSS peak during drain", kib(sampler.peak("drain", "b"))),
            ("B RSS after drain (3 s later)", kib(b_after)),
            ("producer max RSS (getrusage)", kib(produced["max_rss_kib"])),
            ("consumer max RSS (getrusage)", kib(consumed["max_rss_kib"])),
            ("consumer: messages received", f"{consumed['received']:,}"),
            ("consumer: distinct bodies", f"{consumed['distinct_bodies']:,}"),
            ("consumer: distinct message ids", f"{consumed['distinct_ids']:,}"),
            ("consumer: redelivered / out of order",
             f"{consumed['redelivered']} / {consumed['out_of_order']}"),
            ("A backlog / B queue depth after drain", f"{backlog_after} / {depth_after}"),
            ("B data-dir after drain", b_disk),
            ("router exit status on SIGTERM (A, B)", f"{codes[0]}, {codes[1]}"),
            ("exactly once, nothing left" if persistent else "nothing doubled, nothing left",
             "yes" if ok else "NO"),
        ]
        if max(fill_meter, drain_meter) > 0.10:
            rows.append(("NOTE", "other processes took over 10% of a CPU: rates not comparable"))
        return rows, sampler.samples, ok
    finally:
        sampler.stop()
        for child in children:
            if not child.ended.called:
                await child.kill()


async def main(reactor, *argv: str) -> None:
    options = Options()
    try:
        options.parseOptions(argv)
    except usage.UsageError as e:
        raise SystemExit(f"{e}\n{options}")
    workdir = tempfile.mkdtemp(prefix="meshroute-backlog-")

    def clean_up() -> defer.Deferred:
        # Also at a Ctrl-C, which stops the reactor without finishing run().
        ended = defer.DeferredList([c.kill() for c in Child.started if not c.ended.called])
        ended.addTimeout(DEADLINE_S, reactor)
        ended.addBoth(lambda _: options["keep"] or shutil.rmtree(workdir, ignore_errors=True))
        return ended

    trigger = reactor.addSystemEventTrigger("before", "shutdown", clean_up)
    try:
        rows, samples, ok = await run(reactor, options, workdir)
    finally:
        try:
            reactor.removeSystemEventTrigger(trigger)
        except ValueError:
            pass  # already running: the reactor is shutting down
        await clean_up()
        if options["keep"]:
            print(f"routers' directory kept: {workdir}")
    print(f"meshroute backlog benchmark ({options['messages']:,} messages of "
          f"{options['size']} bytes, A -> B, sync {options['sync']})")
    width = max(len(label) for label, _ in rows) + 3
    print(f"{'metric':<{width}}value")
    for label, value in rows:
        print(f"{label:<{width}}{value}")
    if options["series"]:
        print("\nt_s     phase         A_rss_KiB  B_rss_KiB  A_backlog  B_queue")
        for s in samples:
            print(f"{s['t']:<7.0f} {s['phase']:<13} {s['a'] or '-':>9}  {s['b'] or '-':>9}  "
                  f"{s['a_backlog'] if s['a_backlog'] is not None else '-':>9}  "
                  f"{s['b_depth'] if s['b_depth'] is not None else '-':>7}")
    if not ok:
        raise SystemExit(1)


# -- the producer and consumer processes ------------------------------------------


async def produce(reactor, endpoint: str, address: str, count: str, size: str,
                  window: str, persistent: str) -> None:
    """
    Send C{count} messages numbered 0.. with at most C{window} in flight,
    refilling the window when half of it is confirmed; print a JSON result.
    """
    from meshroute.client import connect

    count, size, window, persistent = int(count), int(size), int(window), persistent == "1"
    client = await connect(reactor, endpoint, client_id="backlog-producer")
    pad = b"x" * (size - NUMBER_BYTES)
    state = {"in_flight": 0, "errors": 0, "first_error": None, "waiting": None}
    low = window // 2

    def done(_) -> None:
        state["in_flight"] -= 1
        waiting = state["waiting"]
        if waiting is not None and state["in_flight"] <= low:
            state["waiting"] = None
            waiting.callback(None)

    def failed(failure) -> None:
        state["errors"] += 1
        state["first_error"] = state["first_error"] or failure.getErrorMessage()
        done(None)

    start = time.monotonic()
    i = 0
    while i < count:
        while i < count and state["in_flight"] < window:
            d = client.send(address, b"%012d" % i + pad, persistent=persistent)
            state["in_flight"] += 1
            d.addCallbacks(done, failed)
            i += 1
        if state["in_flight"] > low:
            state["waiting"] = defer.Deferred()
            await state["waiting"]
    low = 0
    if state["in_flight"]:
        state["waiting"] = defer.Deferred()
        await state["waiting"]
    seconds = time.monotonic() - start
    await client.close()
    print(json.dumps({"sent": count, "seconds": seconds, "errors": state["errors"],
                      "first_error": state["first_error"], "max_rss_kib": max_rss_kib()}))


async def consume(reactor, endpoint: str, queue: str, count: str, prefetch: str,
                  idle: str) -> None:
    """
    Consume C{queue}, acknowledging everything, until C{count} distinct
    bodies arrived (then 2 s more, to catch duplicates) or nothing arrived
    for C{idle} seconds; print a JSON result.
    """
    from meshroute.client import connect

    count, prefetch, idle = int(count), int(prefetch), float(idle)
    client = await connect(reactor, endpoint, client_id="backlog-consumer")
    seen = bytearray(count)
    ids: dict[str, bytearray] = {}  # msg id prefix -> seen counters
    other_ids: set[str] = set()
    stats = {"received": 0, "distinct_bodies": 0, "distinct_ids": 0, "foreign": 0,
             "redelivered": 0, "out_of_order": 0, "first_at": None, "last_at": None,
             "complete_at": None}
    last = [-1, time.monotonic()]
    finished = defer.Deferred()

    def on_message(message) -> None:
        now = time.time()
        stats["received"] += 1
        stats["first_at"] = stats["first_at"] or now
        stats["last_at"] = now
        last[1] = time.monotonic()
        try:
            number = int(message.body[:NUMBER_BYTES])
        except ValueError:
            number = -1
        if 0 <= number < count:
            if not seen[number]:
                seen[number] = 1
                stats["distinct_bodies"] += 1
            if number < last[0]:
                stats["out_of_order"] += 1
            last[0] = number
        else:
            stats["foreign"] += 1
        prefix, _, counter = message.msg_id.rpartition(":")
        if counter.isdigit():
            bits = ids.setdefault(prefix, bytearray())
            k = int(counter)
            if k >= len(bits):
                bits.extend(bytes(max(k + 1 - len(bits), len(bits))))
            if not bits[k]:
                bits[k] = 1
                stats["distinct_ids"] += 1
        elif message.msg_id not in other_ids:
            other_ids.add(message.msg_id)
            stats["distinct_ids"] += 1
        stats["redelivered"] += bool(message.redelivered)
        message.ack()
        if stats["distinct_bodies"] == count and stats["complete_at"] is None:
            stats["complete_at"] = now
            reactor.callLater(2.0, lambda: finished.called or finished.callback(None))

    def watchdog() -> None:
        if not finished.called and time.monotonic() - last[1] > idle:
            finished.callback(None)

    check = task.LoopingCall(watchdog)
    check.start(min(5.0, idle / 2), now=False)
    await client.subscribe(queue, on_message, prefetch=prefetch)
    await finished
    check.stop()
    await client.close()
    stats["max_rss_kib"] = max_rss_kib()
    print(json.dumps(stats))


ROLES = {"_produce": produce, "_consume": consume}

if __name__ == "__main__":
    role = ROLES.get(sys.argv[1]) if len(sys.argv) > 1 else None
    if role is not None:
        task.react(lambda reactor: defer.Deferred.fromCoroutine(role(reactor, *sys.argv[2:])))
    else:
        task.react(lambda reactor: defer.Deferred.fromCoroutine(main(reactor, *sys.argv[1:])))
