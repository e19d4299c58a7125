"""
High availability: how fast a backup catches up with the active
instance's store (issue 9, "Measure and report").

An *active side* runs in this process: a real store (L{SQLiteStore},
C{ThreadedExecutor} with a L{ReplicationGate} in mode alone) filled with
--messages accepted persistent messages of --body bytes (--window accepts
in flight, so group commit makes the batches a busy router makes), its
L{ReplicationSource} (the retained log sized to hold them all) and an HA
instance's replication listener (L{meshroute.ha.listener}, the link
handshake with the mesh secret, L{meshroute.ha.feed.ReplicationServer})
on a free 127.0.0.1 port.  A *backup* is this script again in another
process (C{worker-follow}): a L{Replica} on its own data dir and the real
L{ReplicationFollower}, which dials the listener over loopback TCP and
follows until it says it is in sync (the C{caught_up} of its role).

Rows:

  - from the log: the backup's store is a copy of the active's taken
    before the fill (the same store id, position 0), so the feed sends
    every batch from the retained log (C{Changes} frames) and the backup
    applies them (C{replica-sync} full, then normal);
  - from a snapshot: the backup's data dir is empty (another store id),
    so the feed takes a snapshot (SQLite's online backup, in a thread),
    sends it in C{SnapshotChunk}s and the backup installs it.

Time is the backup's, from starting the follower to in sync (TCP
connect and handshake included).  Each run is checked: the backup's
position is the active's head and it holds as many messages.  See
benchmarks/README.md.
"""

import os
import shutil
import sqlite3
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _harness import (  # noqa: E402
    DEADLINE_S,
    SECRET,
    Meter,
    cpu_s,
    print_table,
    remove_tree,
    role_result,
    run_main,
    spawn_role,
    windowed,
)
from twisted.internet import defer  # noqa: E402
from twisted.internet.endpoints import clientFromString, serverFromString  # noqa: E402
from twisted.python import usage  # noqa: E402

from meshroute.events import EventLog  # noqa: E402
from meshroute.ha.changes import READ_REPLICATION_STATE  # noqa: E402
from meshroute.ha.feed import ReplicationServer  # noqa: E402
from meshroute.ha.follower import ReplicationFollower  # noqa: E402
from meshroute.ha.gate import ReplicationGate  # noqa: E402
from meshroute.ha.listener import replication_listener  # noqa: E402
from meshroute.ha.quorum import LogPosition  # noqa: E402
from meshroute.ha.replica import STORE_NAME, Replica  # noqa: E402
from meshroute.ha.source import ReplicationSource  # noqa: E402
from meshroute.link.handshake import ConnectorSettings, ListenerSettings, RouterContext  # noqa: E402
from meshroute.link.registry import LinkRegistry  # noqa: E402
from meshroute.link.retry import RetrySchedule  # noqa: E402
from meshroute.link.rotation import EndpointRotation  # noqa: E402
from meshroute.messages import Message  # noqa: E402
from meshroute.store import SQLiteStore, ThreadedExecutor  # noqa: E402

SCRIPT = os.path.abspath(__file__)
#: The router name both instances share.
NAME = "router-ha"
QUEUE = "q"
EPOCH = 1
KEEPALIVE_MS = 500
STAGE_VALID_TIMEOUT_MS = 10_000
COUNT_MESSAGES = "SELECT count(*) FROM messages"


class Options(usage.Options):
    synopsis = "[--messages N] [--quick] [--dir DIR] [--keep]"
    optParameters = [
        ["messages", "n", None, "Messages in the active's store (default 100000; 10000 with "
         "--quick).", int],
        ["body", None, 100, "Body size in bytes.", int],
        ["window", None, 1000, "Accepts in flight while filling the store (group commit).", int],
        ["dir", None, None, "Where to make the data dirs (default: the system's temporary "
         "directory; its disk is what replica-sync full measures)."],
    ]
    optFlags = [
        ["quick", "q", "Smoke run: fewer messages."],
        ["keep", None, "Keep the data dirs (stores, router logs)."],
    ]

    def postOptions(self) -> None:
        if self["messages"] is None:
            self["messages"] = 10_000 if self["quick"] else 100_000
        if self["messages"] < 1 or self["body"] < 1 or self["window"] < 1:
            raise usage.UsageError("--messages, --body and --window must be positive")


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
        events = EventLog(os.path.join(self.directory, "events.jsonl"), NAME, self._reactor)
        settings = ListenerSettings(secret=SECRET, keepalive_interval_ms=KEEPALIVE_MS,
                                    stage_valid_timeout_ms=STAGE_VALID_TIMEOUT_MS,
                                    reject_disconnect_delay_ms=0)
        factory = replication_listener(NAME, self._reactor, events, LinkRegistry(), None,
                                       server, settings)
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
                            events=EventLog(os.path.join(data_dir, "events.jsonl"), NAME, reactor),
                            registry=LinkRegistry(), engine=None)
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
    print("MiB: the batches' msgpack size (from the log) or the store file (snapshot); "
          "s: follower start -> in sync; others' CPU: processes not ours, share of one CPU.")


async def main(reactor, *argv) -> None:
    options = Options()
    try:
        options.parseOptions(argv)
    except usage.UsageError as e:
        raise SystemExit(f"{e}\n{options}")
    workdir = tempfile.mkdtemp(prefix="meshroute-ha-", dir=options["dir"])
    try:
        await bench_catch_up(reactor, options, workdir)
    finally:
        if options["keep"]:
            print(f"kept {workdir}")
        else:
            remove_tree(workdir)


if __name__ == "__main__":
    run_main(main, {"worker-follow": worker_follow})
