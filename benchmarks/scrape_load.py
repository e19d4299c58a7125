"""
What scraping C{/metrics} costs a loaded router (issue 13: "a scrape
during a 100,000-message load changes nothing in throughput beyond
noise").

Two routers on loopback, A (client listener, a connector to B) and B
(routing listener, client listener); every run starts them fresh.  A
consumer process subscribes to queue C{bench} on B, then a producer
process (L{meshroute.client}, C{Producer.send_many}, at most C{--window}
sends in flight) sends C{--messages} 100-byte messages to
C{bench@router-b} through A: one hop.  Runs alternate without and with a
scraper, which GETs both routers' C{/metrics} every C{--interval} seconds
(or as fast as they answer, when a scrape takes longer) for the whole
run.  Reported per run:

 - C{msg/s}: messages / (the consumer's last receipt - the producer's
   first send), end to end;
 - the routers' CPU seconds over the run;
 - with the scraper: scrapes made, their latency (request to last byte,
   p50 / p99 / max, in ms) and the size of one exposition.

The runs alternate (C{--repeat} pairs), so that drift of a shared
machine falls on both kinds alike: compare the two kinds' spread.

    python benchmarks/scrape_load.py                      # 2 pairs of 100,000 persistent messages
    python benchmarks/scrape_load.py --messages 20000 --repeat 1 --non-persistent
"""

import json
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _harness as h  # noqa: E402
from backlog import CONFIG_A, CONFIG_B  # noqa: E402 (the same two routers)
from twisted.internet import defer, task  # noqa: E402
from twisted.python import usage  # noqa: E402
from twisted.web.client import Agent, readBody  # noqa: E402

QUEUE = "bench"
BODY = b"x" * 100
B_NAME = "router-b"


class Options(usage.Options):
    optFlags = [["non-persistent", None, "Send non-persistent messages."]]
    optParameters = [
        ["messages", None, 100_000, "Messages per run.", int],
        ["repeat", None, 2, "Pairs of runs (without, then with the scraper).", int],
        ["interval", None, 0.1, "Seconds between two scrapes of a router.", float],
        ["window", None, 5_000, "The producer's window (sends in flight).", int],
        ["sync", None, "normal", "The routers' [store] sync (full or normal)."],
    ]


# -- workers ------------------------------------------------------------------------------


async def consumer_worker(reactor, port: str, count: str) -> None:
    from meshroute.client import connect

    count = int(count)
    client = await connect(reactor, f"tcp:127.0.0.1:{port}", client_id="scrape-load-consumer")
    done = defer.Deferred()
    state = {"received": 0, "last": 0.0}

    def on_message(message) -> None:
        message.ack_through()
        state["received"] += 1
        state["last"] = time.time()
        if state["received"] == count and not done.called:
            done.callback(None)

    await client.subscribe(QUEUE, on_message, prefetch=1000)
    print("subscribed {}", flush=True)
    await done
    await client.close()
    print(json.dumps(state), flush=True)


async def producer_worker(reactor, port: str, count: str, window: str, persistent: str) -> None:
    from meshroute.client import connect

    count, persistent = int(count), persistent == "1"
    client = await connect(reactor, f"tcp:127.0.0.1:{port}", client_id="scrape-load-producer")
    producer = client.producer(window=int(window))
    first = time.time()
    sent, last = 0, None
    while sent < count:
        room = min(producer.window - producer.in_flight - producer.waiting, count - sent)
        if room:
            last = producer.send_many(f"{QUEUE}@{B_NAME}", [BODY] * room,
                                      persistent=persistent)
            sent += room
        if sent < count:
            await producer.ready()
    await last
    await client.close()
    print(json.dumps({"first": first, "sent": sent}), flush=True)


# -- the scraper --------------------------------------------------------------------------


class Scraper:
    """
    GETs each router's C{/metrics} every C{interval} seconds (the next as
    soon as the last is answered, when that takes longer) until stopped.
    """

    def __init__(self, reactor, routers: list, interval: float) -> None:
        self._reactor = reactor
        self._routers = routers
        self._interval = interval
        self._running = True
        self.latencies_ms: list[float] = []
        self.size = 0
        self._loops = [defer.ensureDeferred(self._loop(router)) for router in routers]

    async def _loop(self, router) -> None:
        agent = Agent.usingEndpointFactory(self._reactor, router)
        url = f"http://127.0.0.1:{router.admin_port}/metrics".encode()
        while self._running:
            start = time.monotonic()
            response = await agent.request(b"GET", url)
            body = await readBody(response)
            took = time.monotonic() - start
            if response.code != 200:
                raise RuntimeError(f"{router.name}'s /metrics answered {response.code}")
            self.latencies_ms.append(took * 1000)
            self.size = len(body)
            await task.deferLater(self._reactor, max(0.0, self._interval - took))

    async def stop(self) -> None:
        self._running = False
        await defer.gatherResults(self._loops, consumeErrors=True)


# -- the benchmark ------------------------------------------------------------------------


async def run_once(reactor, workdir: str, number: int, scraping: bool, o: Options) -> tuple:
    base = os.path.join(workdir, f"run-{number}")
    os.makedirs(base)
    port = h.free_port()
    b = h.Router(reactor, base, B_NAME, CONFIG_B, port=port, sync=o["sync"])
    a = h.Router(reactor, base, "router-a", CONFIG_A, peer=B_NAME, peer_port=port,
                 sync=o["sync"], max_backlog=o["messages"] + 1000)
    await b.start()
    await a.start()
    await h.poll(reactor, "A's route to B", lambda: a.get("routes"), lambda r: B_NAME in r)
    consumer = h.spawn_role(reactor, __file__, base, "_consumer", b.client_port,
                            o["messages"])
    await consumer.wait_line(reactor, "subscribed ", h.DEADLINE_S)
    scraper = Scraper(reactor, [a, b], o["interval"]) if scraping else None
    cpu0 = a.child.cpu() + b.child.cpu()
    producer = h.spawn_role(reactor, __file__, base, "_producer", a.client_port,
                            o["messages"], o["window"], int(not o["non-persistent"]))
    produced = h.role_result(producer, await producer.ended.addTimeout(1800, reactor))
    consumed = h.role_result(consumer, await consumer.ended.addTimeout(1800, reactor))
    cpu = a.child.cpu() + b.child.cpu() - cpu0
    if scraper is not None:
        await scraper.stop()
    await a.stop()
    await b.stop()
    rate = o["messages"] / (consumed["last"] - produced["first"])
    row = ["with" if scraping else "without", f"{rate:,.0f}", f"{cpu:.1f}"]
    if scraper is None:
        return (*row, "", "", "")
    ms = sorted(scraper.latencies_ms)
    p99 = ms[min(len(ms) - 1, int(len(ms) * 0.99))]
    return (*row, str(len(ms)),
            f"{statistics.median(ms):.1f} / {p99:.1f} / {ms[-1]:.1f}", f"{scraper.size:,}")


async def main(reactor, *argv) -> None:
    o = Options()
    o.parseOptions(list(argv))
    workdir = tempfile.mkdtemp(prefix="scrape-load-")
    meter = h.Meter()
    rows = []
    try:
        number = 0
        for _ in range(o["repeat"]):
            for scraping in (False, True):
                number += 1
                rows.append(await run_once(reactor, workdir, number, scraping, o))
    finally:
        h.remove_tree(workdir)
    others, load0, load1 = meter.stop()
    kind = "non-persistent" if o["non-persistent"] else f"persistent, sync {o['sync']}"
    h.print_table(
        f"{o['messages']:,} x 100 B messages ({kind}) through one hop, A -> B; scraper: both "
        f"routers' /metrics every {o['interval']:g} s (other processes used {others:.2f} CPU; "
        f"load {load0:.1f} -> {load1:.1f})",
        ("scraper", "msg/s", "routers CPU s", "scrapes", "scrape ms p50 / p99 / max",
         "exposition bytes"), rows)
    without = [float(r[1].replace(",", "")) for r in rows if r[0] == "without"]
    with_ = [float(r[1].replace(",", "")) for r in rows if r[0] == "with"]
    print(f"mean msg/s without {statistics.mean(without):,.0f}, "
          f"with {statistics.mean(with_):,.0f} "
          f"({(statistics.mean(with_) / statistics.mean(without) - 1) * 100:+.1f} %)")


if __name__ == "__main__":
    h.run_main(main, {"_consumer": consumer_worker, "_producer": producer_worker})
