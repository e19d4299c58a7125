"""
Store throughput: what the SQLite store sustains, through the real
threaded executor and the real reactor, on a file in a temporary
directory (pass --dir to measure another disk).

Rows:

  - accept, 1 outstanding: each accept waits for the previous one to be
    durable (one commit per message: fsync-bound with sync=full).
  - accept, 1000 outstanding: a producer keeping 1000 accepts in flight,
    as a router with many clients does; group commit carries them.
  - forward cycle: a transit router's work per message, 1000 in flight:
    receive from the upstream peer into the backlog, assign to the
    downstream peer (batches of up to 100, one assign at a time), and its
    acknowledgement (not awaited before the next assign).
  - deliver cycle: a destination's work per message, 1000 in flight:
    receive into a local queue, fetch (batches of up to 100, one fetch at
    a time), consume (not awaited before the next fetch).

Messages have 100-byte bodies.  "commits" is the number of transactions,
so messages per commit shows the grouping.  See benchmarks/README.md.
"""

import os
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from twisted.internet import defer, task  # noqa: E402
from twisted.python import usage  # noqa: E402

from _harness import windowed  # noqa: E402
from meshroute.messages import Message  # noqa: E402
from meshroute.store import SQLiteStore, ThreadedExecutor  # noqa: E402

BODY = b"x" * 100
ROUTER = "bench-a"


class Options(usage.Options):
    optParameters = [
        ["count", None, 100_000, "Messages per windowed run.", int],
        ["serial-count", None, 2000, "Messages for the 1-outstanding runs.", int],
        ["dir", None, None, "Directory for the database files (default: a temporary one)."],
    ]


def message(i: int, dest_router: str) -> Message:
    return Message(f"m:{i}", ROUTER, dest_router, "q", BODY, {}, 0, True, 0.0)


async def open_store(reactor, directory: str, name: str, sync: str) -> SQLiteStore:
    path = os.path.join(directory, name)
    store = SQLiteStore(path, sync, ThreadedExecutor(reactor), router=ROUTER)
    await store.open()
    return store


async def bench_accept(reactor, directory, sync, count, window):
    store = await open_store(reactor, directory, f"accept-{sync}-{window}.db", sync)
    started = time.perf_counter()
    await windowed(count, window, lambda i: store.accept(message(i, "bench-c")))
    elapsed = time.perf_counter() - started
    commits = store.executor.commits
    await store.close()
    return count / elapsed, count / max(commits, 1)


async def bench_forward(reactor, directory, sync, count, window):
    store = await open_store(reactor, directory, f"forward-{sync}.db", sync)
    state = {"forwarded": 0, "busy": False}
    finished = defer.Deferred()

    def acknowledged(dropped: int) -> None:
        state["forwarded"] += dropped
        if state["forwarded"] == count:
            finished.callback(None)

    async def send() -> None:
        # One assign loop at a time, as a link's sender would; the peer's
        # acknowledgements arrive while the next batch is assigned.
        state["busy"] = True
        while True:
            batch = await store.assign("down", ["bench-c"], 100)
            if not batch:
                break
            store.acknowledge("down", batch[-1][0]).addCallback(acknowledged)
        state["busy"] = False

    def one(i: int) -> defer.Deferred:
        d = store.receive("up", i + 1, message(i, "bench-c"), False)

        def stored(outcome):
            if not state["busy"]:
                defer.ensureDeferred(send())
            return outcome

        return d.addCallback(stored)

    started = time.perf_counter()
    await windowed(count, window, one)
    if state["forwarded"] < count:
        if not state["busy"]:
            defer.ensureDeferred(send())
        await finished
    elapsed = time.perf_counter() - started
    commits = store.executor.commits
    await store.close()
    return count / elapsed, count / max(commits, 1)


async def bench_deliver(reactor, directory, sync, count, window):
    store = await open_store(reactor, directory, f"deliver-{sync}.db", sync)
    state = {"cursor": 0, "consumed": 0, "busy": False}
    finished = defer.Deferred()

    def consumed(n: int) -> None:
        state["consumed"] += n
        if state["consumed"] == count:
            finished.callback(None)

    async def consume() -> None:
        state["busy"] = True
        while True:
            entries = await store.fetch("q", state["cursor"], 100)
            if not entries:
                break
            state["cursor"] = entries[-1][0]
            store.consume([entry for entry, _, _ in entries]).addCallback(consumed)
        state["busy"] = False

    def one(i: int) -> defer.Deferred:
        d = store.receive("up", i + 1, message(i, ROUTER), True)

        def stored(outcome):
            if not state["busy"]:
                defer.ensureDeferred(consume())
            return outcome

        return d.addCallback(stored)

    started = time.perf_counter()
    await windowed(count, window, one)
    if state["consumed"] < count:
        if not state["busy"]:
            defer.ensureDeferred(consume())
        await finished
    elapsed = time.perf_counter() - started
    commits = store.executor.commits
    await store.close()
    return count / elapsed, count / max(commits, 1)


async def main(reactor, options) -> None:
    with tempfile.TemporaryDirectory(dir=options["dir"]) as directory:
        rows = []
        for sync in ("full", "normal"):
            for label, bench, count, window in [
                ("accept, 1 outstanding", bench_accept, options["serial-count"], 1),
                ("accept, 1000 outstanding", bench_accept, options["count"], 1000),
                ("forward cycle, 1000 in flight", bench_forward, options["count"], 1000),
                ("deliver cycle, 1000 in flight", bench_deliver, options["count"], 1000),
            ]:
                rate, per_commit = await bench(reactor, directory, sync, count, window)
                rows.append((label, sync, count, rate, per_commit))
        print(f"{'operation':<32}{'sync':<8}{'messages':>10}{'msg/s':>12}{'msg/commit':>12}")
        for label, sync, count, rate, per_commit in rows:
            print(f"{label:<32}{sync:<8}{count:>10}{rate:>12,.0f}{per_commit:>12.1f}")


if __name__ == "__main__":
    options = Options()
    try:
        options.parseOptions()
    except usage.UsageError as e:
        raise SystemExit(f"{e}\n{options}")
    task.react(lambda reactor: defer.ensureDeferred(main(reactor, options)))
