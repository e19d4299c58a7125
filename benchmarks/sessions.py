"""
Client sessions that survive failures (issue 4, "Measure and report"):

 1. failover: time from a proxy restore to the first message flowing again.
    A producer process (L{meshroute.client}, confirmation window 1 MiB,
    reconnect-attempts -1, retry interval C{--retry} ms) streams persistent
    100-byte messages at C{--rate} msg/s to queue C{q} through a small TCP
    proxy (asyncio, in a thread of the producer process) in front of the
    router's client listener.  The proxy is cut (listener closed, every
    connection aborted) and restored; we time restore -> failure listener
    FAILOVER and restore -> first Confirm of a send.  REATTACH: cut
    C{--cut} s, shorter than the router's keep-alive (C{--keep-alive} ms);
    RECREATE: cut keep-alive + 1 s, so the router expired the session.
 2. throughput: one producer, persistent 100-byte messages, C{--messages}
    per run, at most C{--in-flight} unconfirmed, with the confirmation
    window on (1 MiB) and off (-1), router sync normal and full.
 3. idle sessions: C{--sessions} client sessions (each its own connection,
    TTL C{--ttl} ms so it pings every TTL/3) from worker processes to one
    router; router RSS before and after, and its CPU over a C{--hold} s
    idle hold.

Every router is C{twistd -n meshroute} on free 127.0.0.1 ports in a
temporary directory; see benchmarks/README.md.
"""

import asyncio
import os
import statistics
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _harness as h  # noqa: E402
from twisted.internet import defer, task  # noqa: E402
from twisted.python import usage  # noqa: E402

QUEUE = "q"
BODY = 100
WINDOW_ON = 1024 * 1024

CONFIG = """\
[router]
name = "{name}"
data-dir = "router"
[store]
sync = "{sync}"
[clients.listener]
endpoint = "tcp:{client_port}:interface=127.0.0.1"
[clients.reconnect]
keep-alive = {keep_alive}
[admin]
endpoint = "tcp:{admin_port}:interface=127.0.0.1"
"""


class Options(usage.Options):
    optParameters = [
        ["only", None, "failover,throughput,idle", "Parts to run (comma-separated)."],
        ["repeats", None, 5, "Cuts per failover mode.", int],
        ["cut", None, 1.0, "REATTACH cut, seconds (must be < keep-alive).", float],
        ["keep-alive", None, 2000, "The failover router's [clients.reconnect] keep-alive, ms.",
         int],
        ["retry", None, 100, "The producer's retry-interval (= max), ms.", int],
        ["rate", None, 2000, "Failover producer's offered rate, msg/s.", int],
        ["messages", None, 20000, "Messages per throughput run.", int],
        ["runs", None, 2, "Throughput runs per row (interleaved).", int],
        ["in-flight", None, 1000, "Throughput producer's unconfirmed sends.", int],
        ["syncs", None, "normal,full", "Throughput [store] sync values."],
        ["sessions", None, 1000, "Idle sessions held open.", int],
        ["per-process", None, 250, "Idle sessions per client process.", int],
        ["ttl", None, 30000, "Idle sessions' TTL, ms (they ping at TTL/3).", int],
        ["hold", None, 30.0, "Idle hold, seconds.", float],
    ]
    optFlags = [["keep", None, "Keep the routers' directory."]]


def ms(v: float | None) -> str:
    return "-" if v is None else f"{v * 1000:.0f} ms"


def noise(meter: h.Meter) -> str:
    others, l0, l1 = meter.stop()
    return f"others {others:.0%} CPU, load {l0:.1f}->{l1:.1f}"


# -- part 1: failover ------------------------------------------------------------


async def part_failover(reactor, o, workdir: str, rows: list) -> None:
    router = h.Router(reactor, workdir, "failover", CONFIG, sync="normal",
                      keep_alive=o["keep-alive"])
    await router.start()
    try:
        for mode, cut in (("REATTACH", o["cut"]), ("RECREATE", o["keep-alive"] / 1000 + 1.0)):
            meter = h.Meter()
            worker = h.spawn_role(reactor, __file__, workdir, "_failover", router.client_port,
                                  cut, o["repeats"], o["retry"], o["rate"])
            r = h.role_result(worker, await worker.ended.addTimeout(600, reactor))
            confirm = [s["confirm"] for s in r["samples"] if s["confirm"] is not None]
            failover = [s["failover"] for s in r["samples"] if s["failover"] is not None]
            how = sorted({s["how"] or "-" for s in r["samples"]})
            rows.append((
                f"restore->first Confirm, {mode} (cut {cut:g} s)",
                f"median {ms(statistics.median(confirm)) if confirm else '-'}, "
                f"max {ms(max(confirm)) if confirm else '-'} (n={len(confirm)}/{o['repeats']})",
                f"restore->FAILOVER median {ms(statistics.median(failover)) if failover else '-'};"
                f" last_failover={'/'.join(how)}; unblocked sends {r['unblocked']}, "
                f"other errors {r['errors']}; {noise(meter)}"))
    finally:
        await router.stop()


class Proxy:
    """
    A TCP proxy 127.0.0.1:port -> 127.0.0.1:upstream, run by asyncio in a
    thread; L{cut} closes its listener and aborts every connection,
    L{restore} listens again.  Both return time.monotonic() when done.
    """

    def __init__(self, upstream: int) -> None:
        self.upstream, self.port = upstream, h.free_port()
        self.loop = asyncio.new_event_loop()
        self.server = None
        self.transports: set = set()
        threading.Thread(target=self.loop.run_forever, daemon=True).start()

    def _call(self, coro):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(10)

    async def _pipe(self, reader, writer) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except Exception:
            pass
        finally:
            writer.transport.abort()

    async def _handle(self, reader, writer) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream)
        except OSError:
            writer.transport.abort()
            return
        self.transports |= {writer.transport, up_writer.transport}
        await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer))

    async def _listen(self) -> float:
        self.server = await asyncio.start_server(self._handle, "127.0.0.1", self.port,
                                                 reuse_address=True)
        return time.monotonic()

    async def _cut(self) -> float:
        self.server.close()
        for transport in self.transports:
            transport.abort()
        self.transports.clear()
        return time.monotonic()

    def restore(self) -> float:
        return self._call(self._listen())

    def cut(self) -> float:
        return self._call(self._cut())


async def failover_worker(reactor, port: str, cut: str, repeats: str, retry: str,
                          rate: str) -> None:
    import json

    from meshroute.client import ClientOptions, UnblockedError, connect

    cut, repeats, retry, rate = float(cut), int(repeats), int(retry), int(rate)
    proxy = Proxy(int(port))
    proxy.restore()
    options = ClientOptions(client_id="sessions-failover", confirmation_window_size=WINDOW_ON,
                            reconnect_attempts=-1, retry_interval_ms=retry,
                            max_retry_interval_ms=retry)
    client = await connect(reactor, f"tcp:127.0.0.1:{proxy.port}", options)
    events: list = []
    client.add_failure_listener(
        lambda event: events.append((time.monotonic(), event, client.last_failover)))
    st = {"in_flight": 0, "restore": None, "first": None, "unblocked": 0, "errors": 0,
          "first_error": None, "n": 0}
    body = b"x" * (BODY - 12)

    def confirmed(_) -> None:
        st["in_flight"] -= 1
        now = time.monotonic()
        if st["restore"] is not None and st["first"] is None and now >= st["restore"]:
            st["first"] = now

    def failed(failure) -> None:
        st["in_flight"] -= 1
        if failure.check(UnblockedError):
            st["unblocked"] += 1
        else:
            st["errors"] += 1
            st["first_error"] = st["first_error"] or failure.getErrorMessage()

    per_tick = max(1, rate // 100)

    def tick() -> None:
        for _ in range(per_tick):
            if st["in_flight"] >= 500:
                return
            st["in_flight"] += 1
            st["n"] += 1
            client.send(QUEUE, b"%012d" % st["n"] + body).addCallbacks(confirmed, failed)

    loop = task.LoopingCall(tick)
    loop.start(0.01)
    await task.deferLater(reactor, 2.0)
    samples = []
    for _ in range(repeats):
        st["restore"] = st["first"] = None
        t_cut = proxy.cut()
        await task.deferLater(reactor, cut)
        st["restore"] = t_restore = proxy.restore()
        end = time.monotonic() + 30
        while st["first"] is None and time.monotonic() < end:
            await task.deferLater(reactor, 0.002)
        after = [e for e in events if e[0] >= t_cut]
        samples.append({
            "confirm": None if st["first"] is None else st["first"] - t_restore,
            "failover": after[0][0] - t_restore if after else None,
            "how": after[0][2] if after else None,
        })
        await task.deferLater(reactor, 1.5)
    loop.stop()
    await client.close()
    print(json.dumps({"samples": samples, "unblocked": st["unblocked"],
                      "errors": st["errors"], "first_error": st["first_error"],
                      "sent": st["n"]}))


# -- part 2: throughput -----------------------------------------------------------


async def part_throughput(reactor, o, workdir: str, rows: list) -> None:
    for sync in o["syncs"].split(","):
        router = h.Router(reactor, workdir, f"throughput-{sync}", CONFIG, sync=sync,
                          keep_alive=60000)
        await router.start()
        results: dict = {"on": [], "off": []}
        meter = h.Meter()
        try:
            for run in range(o["runs"]):
                for label, window in (("on", WINDOW_ON), ("off", -1)):
                    cpu0 = router.child.cpu()
                    worker = h.spawn_role(reactor, __file__, workdir, "_throughput",
                                          router.client_endpoint, o["messages"], window,
                                          o["in-flight"], f"{QUEUE}-{label}-{run}")
                    r = h.role_result(worker, await worker.ended.addTimeout(1800, reactor))
                    r["router_cpu"] = router.child.cpu() - cpu0
                    results[label].append(r)
        finally:
            await router.stop()
        note = noise(meter)
        for label, window in (("on", WINDOW_ON), ("off", -1)):
            rates = [o["messages"] / r["seconds"] for r in results[label]]
            errors = sum(r["errors"] for r in results[label])
            cpu = statistics.mean(r["router_cpu"] for r in results[label]) * 10000 / o["messages"]
            rows.append((
                f"msg/s, window {label} ({window}), sync={sync}",
                f"median {statistics.median(rates):,.0f} (runs: "
                f"{', '.join(f'{x:,.0f}' for x in rates)})",
                f"router CPU {cpu:.2f} s/10k msgs; send errors {errors}; {note}"))


async def throughput_worker(reactor, endpoint: str, count: str, window: str,
                            in_flight: str, queue: str) -> None:
    import json

    from meshroute.client import ClientOptions, connect

    count, window, cap = int(count), int(window), int(in_flight)
    options = ClientOptions(client_id="sessions-throughput", confirmation_window_size=window)
    client = await connect(reactor, endpoint, options)
    pad = b"x" * (BODY - 12)
    st = {"in_flight": 0, "errors": 0, "waiting": None}
    low = cap // 2

    def done(_) -> None:
        st["in_flight"] -= 1
        if st["waiting"] is not None and st["in_flight"] <= low:
            waiting, st["waiting"] = st["waiting"], None
            waiting.callback(None)

    def failed(_) -> None:
        st["errors"] += 1
        done(None)

    start = time.monotonic()
    i = 0
    while i < count:
        while i < count and st["in_flight"] < cap:
            st["in_flight"] += 1
            client.send(queue, b"%012d" % i + pad).addCallbacks(done, failed)
            i += 1
        if st["in_flight"] > low:
            st["waiting"] = defer.Deferred()
            await st["waiting"]
    low = 0
    if st["in_flight"]:
        st["waiting"] = defer.Deferred()
        await st["waiting"]
    seconds = time.monotonic() - start
    await client.close()
    print(json.dumps({"seconds": seconds, "errors": st["errors"]}))


# -- part 3: idle sessions --------------------------------------------------------


async def part_idle(reactor, o, workdir: str, rows: list) -> None:
    n = o["sessions"]
    nofile = h.raise_nofile(max(4096, n * 2 + 1024))
    router = h.Router(reactor, workdir, "idle", CONFIG, sync="normal", keep_alive=60000)
    await router.start()
    workers = []
    try:
        await task.deferLater(reactor, 3.0)
        rss_before = router.child.rss()
        counts = [o["per-process"]] * (n // o["per-process"])
        if n % o["per-process"]:
            counts.append(n % o["per-process"])
        t0 = time.monotonic()
        for i, count in enumerate(counts):
            workers.append(h.spawn_role(reactor, __file__, workdir, "_idle",
                                        router.client_endpoint, count, o["ttl"], i))
        opened = [await w.wait_line(reactor, "OPENED ", 300) for w in workers]
        open_s = time.monotonic() - t0
        failures = sum(r["failures"] for r in opened)
        sessions = await router.get("sessions")
        states: dict = {}
        for s in sessions:
            states[s.get("state")] = states.get(s.get("state"), 0) + 1
        await task.deferLater(reactor, 3.0)
        rss_open = router.child.rss()
        meter = h.Meter()
        cpu0, t_hold = router.child.cpu(), time.monotonic()
        clients_cpu0 = sum(w.cpu() for w in workers)
        await task.deferLater(reactor, o["hold"])
        held = time.monotonic() - t_hold
        cpu = router.child.cpu() - cpu0
        clients_cpu = sum(w.cpu() for w in workers) - clients_cpu0
        rss_after = router.child.rss()
        sessions_after = await router.get("sessions")
        note = noise(meter)
        clients_rss = sum(w.rss() or 0 for w in workers)
    finally:
        for w in workers:
            w.kill()
        await router.stop()
    per = (rss_open - rss_before) / n
    rows += [
        (f"router RSS, {n:,} idle sessions",
         f"{rss_before:,} -> {rss_open:,} KiB (after hold {rss_after:,})",
         f"{len(counts)} client processes; opened in {open_s:.1f} s; open failures "
         f"{failures}; admin API: {len(sessions)} sessions {states}, "
         f"{len(sessions_after)} after hold; RLIMIT_NOFILE {nofile}"),
        ("router RSS per idle session", f"{per:.1f} KiB",
         f"(RSS open - RSS before) / {n}; client processes' RSS {clients_rss:,} KiB total"),
        (f"router CPU, {held:.0f} s idle hold",
         f"{cpu * 1000:.0f} ms ({cpu / held:.2%} of a CPU)",
         f"TTL {o['ttl']} ms -> each client pings every {o['ttl'] / 3000:g} s "
         f"(~{n * 3000 / o['ttl']:.0f} pings/s); clients' CPU {clients_cpu * 1000:.0f} ms; "
         f"{note}"),
    ]


async def idle_worker(reactor, endpoint: str, count: str, ttl: str, index: str) -> None:
    import json

    from meshroute.client import ClientOptions, connect

    h.raise_nofile(int(count) * 2 + 256)
    options = ClientOptions(client_id=f"sessions-idle-{index}", ttl_ms=int(ttl),
                            confirmation_window_size=WINDOW_ON, reconnect_attempts=-1)
    clients, failures = [], 0
    semaphore = defer.DeferredSemaphore(50)
    t0 = time.monotonic()
    results = await defer.DeferredList(
        [semaphore.run(connect, reactor, endpoint, options) for _ in range(int(count))],
        consumeErrors=True)
    for ok, value in results:
        if ok:
            clients.append(value)
        else:
            failures += 1
    print("OPENED " + json.dumps({"opened": len(clients), "failures": failures,
                                  "seconds": time.monotonic() - t0}), flush=True)
    await defer.Deferred()  # held until killed


# -- main -----------------------------------------------------------------------------


async def main(reactor, *argv: str) -> None:
    o = Options()
    try:
        o.parseOptions(argv)
    except usage.UsageError as e:
        raise SystemExit(f"{e}\n{o}")
    parts = o["only"].split(",")
    workdir = tempfile.mkdtemp(prefix="meshroute-sessions-")
    rows: list = []
    load0 = os.getloadavg()
    try:
        if "failover" in parts:
            await part_failover(reactor, o, workdir, rows)
        if "throughput" in parts:
            await part_throughput(reactor, o, workdir, rows)
        if "idle" in parts:
            await part_idle(reactor, o, workdir, rows)
    finally:
        if o["keep"]:
            print(f"routers' directory kept: {workdir}")
        else:
            h.remove_tree(workdir)
    load1 = os.getloadavg()
    h.print_table(
        f"meshroute client sessions benchmark ({os.cpu_count()} CPUs; load average "
        f"{load0[0]:.2f} {load0[1]:.2f} {load0[2]:.2f} at start, "
        f"{load1[0]:.2f} {load1[1]:.2f} {load1[2]:.2f} at end)",
        ("measurement", "result", "notes"), rows)
    print(f"failover: retry-interval {o['retry']} ms bounds restore->reconnect (an attempt "
          f"every {o['retry']} ms); keep-alive {o['keep-alive']} ms; "
          f"{o['rate']} msg/s offered, 100 B persistent, sync normal")


if __name__ == "__main__":
    h.run_main(main, {"_failover": failover_worker, "_throughput": throughput_worker,
                      "_idle": idle_worker})
