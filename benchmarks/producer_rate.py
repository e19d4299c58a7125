"""
How many messages one Python producer process offers a router
(issue 10: at least 150,000 non-persistent msg/s).

One producer process (L{meshroute.client}, this script in worker mode)
sends C{--messages} 100-byte messages to queue C{q} of one router through
a L{meshroute.client.Producer} with a window of C{--window} sends in
flight, and reports:

 - C{msg/s}: messages confirmed per second of wall time (first send to
   last confirmation): what the router took;
 - C{producer CPU}: the producer process's CPU seconds, and
   C{msg per producer CPU-s}: the rate the producer could offer if the
   router kept up (its own ceiling, the figure the target is about);
 - the router's CPU seconds over the run.

Rows: the router is a real one (C{twistd -n meshroute}, C{[store] sync =
"normal"}, non-persistent, then persistent), or a I{sink}: a process that
reads the client protocol and confirms every send at once without doing
anything else, so that the producer is measured alone.  Each three ways:
the version-4 client protocol (SendBatch) with C{Producer.send_many} (one
Deferred per call, as many messages as the window has room for) and with
C{Producer.send} (one Deferred per message), and version 3 (a Send per
message) with C{Producer.send}, for the ratio.  The machine may be
shared: judge by ratios within one run.

    python benchmarks/producer_rate.py                       # 200,000 messages per row
    python benchmarks/producer_rate.py --messages 50000 --only sink,nonpersistent
    python benchmarks/producer_rate.py --profile /tmp/prof   # cProfile of each producer
"""

import os
import resource
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _harness as h  # noqa: E402
from twisted.internet import defer, protocol  # noqa: E402
from twisted.internet.endpoints import TCP4ServerEndpoint  # noqa: E402
from twisted.python import usage  # noqa: E402

QUEUE = "q"
BODY = b"x" * 100

CONFIG = """\
[router]
name = "{name}"
data-dir = "router"
[store]
sync = "normal"
[clients.listener]
endpoint = "tcp:{client_port}:interface=127.0.0.1"
[admin]
endpoint = "tcp:{admin_port}:interface=127.0.0.1"
"""

ROWS = ("sink", "nonpersistent", "persistent")
#: The producer's ways of sending, each row: the protocol version and the
#: call (one Deferred per call of many messages, or one per message).
APIS = ((4, "send_many"), (4, "send"), (3, "send"))


class Options(usage.Options):
    optParameters = [
        ["messages", None, 200_000, "Messages per row.", int],
        ["window", None, 20_000, "The producer's window (sends in flight).", int],
        ["only", None, ",".join(ROWS), "Rows to run (comma-separated): " + ", ".join(ROWS)],
        ["profile", None, None, "Directory for a cProfile of each producer run."],
    ]


# -- the sink: the client protocol, every send confirmed at once ----------------------


class Sink(protocol.Protocol):
    """
    Answers Open, confirms every Send and SendBatch at once (Confirm /
    Confirmed with made-up ids), answers Close with Closed and closes;
    ignores everything else.
    """

    def connectionMade(self) -> None:
        from meshroute.wire import client_frames as f
        from meshroute.wire.codec import FrameDecoder

        self.f = f
        self.decoder = FrameDecoder(frames=f.FROM_CLIENT, max_frame_size=f.MAX_FRAME_SIZE)

    def dataReceived(self, data: bytes) -> None:
        from meshroute.wire.codec import encode

        f = self.f
        out, closing = [], False
        for frame in self.decoder.feed(data):
            kind = type(frame)
            if kind is f.SendBatch:
                first = frame.first_command_id
                out.append(encode(f.Confirmed(first, [f"sink:{first + i}" for i in
                                                      range(len(frame.messages))])))
            elif kind is f.Send:
                out.append(encode(f.Confirm(frame.command_id, f"sink:{frame.command_id}")))
            elif kind is f.Open:
                version = max(set(frame.versions) & set(f.SUPPORTED_VERSIONS))
                out.append(encode(f.OpenedWithTopology(version, "sink", "sink", frame.ttl_ms,
                                                       False, 0, 0, [])
                                  if version >= f.TOPOLOGY_VERSION else
                                  f.Opened(version, "sink", "sink", frame.ttl_ms, False, 0)))
            elif kind is f.Ping:
                out.append(encode(f.Pong(frame.n)))
            elif kind is f.Close:
                out.append(encode(f.Closed()))
                closing = True
        if out:
            self.transport.write(b"".join(out))
        if closing:
            self.transport.loseConnection()


async def sink_worker(reactor, port: str) -> None:
    await TCP4ServerEndpoint(reactor, int(port), interface="127.0.0.1").listen(
        protocol.Factory.forProtocol(Sink))
    print("listening {}", flush=True)
    await defer.Deferred()  # until killed


# -- the producer ------------------------------------------------------------------------


async def producer_worker(reactor, port: str, messages: str, window: str, persistent: str,
                          version: str, api: str, profile: str) -> None:
    import json

    from meshroute.client import connect
    from meshroute.wire import client_frames as f

    # The client offers the versions it speaks: up to --version.
    f.SUPPORTED_VERSIONS = tuple(v for v in f.SUPPORTED_VERSIONS if v <= int(version))
    count, persistent = int(messages), persistent == "1"
    client = await connect(reactor, f"tcp:127.0.0.1:{port}", client_id="producer-rate",
                           ttl_ms=-1)
    producer = client.producer(window=int(window))
    profiler = None
    if profile != "-":
        import cProfile

        profiler = cProfile.Profile()
        profiler.enable()
    cpu0 = _cpu()
    start = time.monotonic()
    sent, failed = 0, []
    last = None
    while sent < count:
        room = min(producer.window - producer.in_flight - producer.waiting, count - sent)
        if room and api == "send_many":
            last = producer.send_many(QUEUE, [BODY] * room, persistent=persistent)
        else:
            for _ in range(room):
                last = producer.send(QUEUE, BODY, persistent=persistent)
        sent += room
        if sent < count:
            await producer.ready()
    # Answers come in order: the last send's is the last.
    await last
    elapsed = time.monotonic() - start
    cpu = _cpu() - cpu0
    if profiler is not None:
        profiler.disable()
        profiler.dump_stats(profile)
    await client.close()
    print(json.dumps({"messages": count, "elapsed_s": elapsed, "cpu_s": cpu,
                      "failed": len(failed)}), flush=True)


def _cpu() -> float:
    usage_ = resource.getrusage(resource.RUSAGE_SELF)
    return usage_.ru_utime + usage_.ru_stime


# -- the benchmark -----------------------------------------------------------------------


async def run_row(reactor, workdir: str, row: str, version: int, api: str,
                  o: Options) -> tuple:
    router = None
    if row == "sink":
        port = h.free_port()
        target = h.spawn_role(reactor, __file__, workdir, "_sink", port)
        await target.wait_line(reactor, "listening ", h.DEADLINE_S)
        cpu_of = target.cpu
    else:
        router = h.Router(reactor, workdir, f"router-{row}-v{version}-{api}", CONFIG)
        await router.start()
        port, target, cpu_of = router.client_port, router.child, router.child.cpu
    profile = (os.path.join(o["profile"], f"producer-{row}-v{version}-{api}.prof")
               if o["profile"] else "-")
    if o["profile"]:
        os.makedirs(o["profile"], exist_ok=True)
    cpu0 = cpu_of()
    worker = h.spawn_role(reactor, __file__, workdir, "_producer", port, o["messages"],
                          o["window"], int(row == "persistent"), version, api, profile)
    r = h.role_result(worker, await worker.ended.addTimeout(1800, reactor))
    target_cpu = cpu_of() - cpu0
    if router is not None:
        depth = (await router.get("queues")) if row == "persistent" else None
        await router.stop()
    else:
        depth = None
        await target.kill()
    rate = r["messages"] / r["elapsed_s"]
    per_cpu = r["messages"] / r["cpu_s"] if r["cpu_s"] else float("inf")
    stored = "" if depth is None else f" stored {_queue_depth(depth)}"
    return (row, f"v{version}", api, f"{rate:,.0f}", f"{r['cpu_s']:.2f}", f"{per_cpu:,.0f}",
            f"{target_cpu:.2f}{stored}")


def _queue_depth(queues) -> str:
    for entry in queues if isinstance(queues, list) else queues.get("queues", []):
        if entry.get("name") == QUEUE:
            return str(entry.get("depth"))
    return "?"


async def main(reactor, *argv) -> None:
    o = Options()
    o.parseOptions(list(argv))
    rows = [r for r in o["only"].split(",") if r]
    unknown = set(rows) - set(ROWS)
    if unknown:
        raise SystemExit(f"--only: unknown rows {sorted(unknown)}; rows are {', '.join(ROWS)}")
    workdir = tempfile.mkdtemp(prefix="producer-rate-")
    meter = h.Meter()
    results = []
    try:
        for row in rows:
            for version, api in APIS:
                results.append(await run_row(reactor, workdir, row, version, api, o))
    finally:
        h.remove_tree(workdir)
    others, load0, load1 = meter.stop()
    h.print_table(
        f"One producer process, {o['messages']:,} x 100 B messages per row, window "
        f"{o['window']:,} (other processes used {others:.2f} CPU; load {load0:.1f} -> "
        f"{load1:.1f}: judge by ratios)",
        ("router", "protocol", "API", "msg/s", "producer CPU s", "msg per producer CPU-s",
         "router CPU s"), results)


if __name__ == "__main__":
    h.run_main(main, {"_sink": sink_worker, "_producer": producer_worker})
