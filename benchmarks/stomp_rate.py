"""
STOMP beside the native client (issue 12, "Measure"): throughput and p99
latency at 1,000 msg/s through one hop (producer on router-a, consumer on
router-b), with stomp.py on the STOMP listener and with
L{meshroute.client} on the client listener, on the same meshes.

throughput.py's workload and measurements (its meshes, its run and its
table's figures, its native workers): 100-byte persistent messages
(C{[store] sync = "full"}, then non-persistent), carrying their sequence
number and send time; a throughput run (C{--messages}, at most C{--window}
unconfirmed) and a latency run at C{--rate} msg/s for
C{--latency-seconds}.  Every persistent message must arrive exactly once
(the script exits 1 otherwise).

The STOMP workers are stomp.py (C{Connection12}): the producer sends each
message with a C{receipt} (its confirmation: durable at router-a) and at
most C{--window} unreceipted; the consumer subscribes with C{ack:client}
and C{prefetch-count} C{--prefetch}, and acknowledges cumulatively every
100 messages (as the native consumer acknowledges a turn's deliveries
with one C{AckThrough}).

    python benchmarks/stomp_rate.py                  # 20,000 messages, 10 s at 1,000 msg/s
    python benchmarks/stomp_rate.py --messages 5000 --latency-seconds 3
"""

import os
import shutil
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import throughput  # noqa: E402
from _harness import print_table  # noqa: E402
from throughput import (  # noqa: E402
    QUEUE,
    Children,
    ConsumeOptions,
    Mesh,
    ProduceOptions,
    Receipts,
    RouterProc,
    Row,
    busy_seconds,
    free_port,
    run_deadline,
    run_workers,
    summarize,
    wait_until,
    write_produced,
)
from twisted.python import usage  # noqa: E402
from meshroute.store.settings import StoreConfig  # noqa: E402

SCRIPT = os.path.abspath(__file__)
#: Cumulative acknowledgements of the STOMP consumer: one per this many.
ACK_EVERY = 100
STOMP_CONFIG = """
[stomp.listener]
endpoint = "tcp:{port}:interface=127.0.0.1"
prefetch-count = {prefetch}
"""


class Options(usage.Options):
    optParameters = [
        ["messages", "n", 20000, "Messages per throughput run.", int],
        ["rate", None, 1000, "Offered load of the latency runs, messages/s.", int],
        ["latency-seconds", None, 10.0, "Length of each latency run.", float],
        ["warmup", None, 200, "Messages of each latency run left out of the percentiles.", int],
        ["window", None, 1000, "Sends in flight per producer (unconfirmed).", int],
        ["prefetch", None, 1000, "The consumer's prefetch.", int],
        ["modes", None, "full,nonpersistent", "Modes (throughput.py's)."],
    ]
    optFlags = [["keep", None, "Keep the mesh directories."]]

    def postOptions(self) -> None:
        self["modes"] = [m for m in self["modes"].split(",") if m]
        # What throughput.run_once reads besides ours.
        self.update({"wait-idle": 0.0, "py-spy": None, "wakeups": False})


class StompRouter(RouterProc):
    """
    A router of throughput.py's meshes with a STOMP listener too.
    """

    prefetch = 1000

    def __init__(self, name: str, directory: str) -> None:
        super().__init__(name, directory)
        self.stomp_port = free_port()

    def write_config(self, sync: str, extra: str = "", writer: str = StoreConfig.writer) -> None:
        super().write_config(sync, extra, writer)
        with open(os.path.join(self.directory, "router.toml"), "a") as f:
            f.write(STOMP_CONFIG.format(port=self.stomp_port, prefetch=self.prefetch))


class StompMesh(Mesh):
    def __init__(self, workdir: str, hops: int, sync: str, children: Children) -> None:
        super().__init__(workdir, hops, sync, children)
        routers = [StompRouter(r.name, r.directory) for r in self.routers]
        for old, new in zip(self.routers, routers):
            new.routing_port = old.routing_port
        for upstream, downstream in zip(routers, routers[1:]):
            upstream.connect_to = downstream
        self.routers = routers


def run_stomp(row: Row, options, base: str, rate: int | None, count: int) -> dict:
    """
    One run of the STOMP workers on a fresh one-hop mesh, measured as
    throughput.run_once measures the native ones.
    """
    kind = "latency" if rate else "throughput"
    workdir = tempfile.mkdtemp(prefix=f"stomp-{row.id}-{kind}-", dir=base)
    children = Children()
    try:
        mesh = StompMesh(workdir, row.hops, row.sync, children)
        mesh.start()
        dest = mesh.destination

        def alive() -> None:
            for router in mesh.routers:
                router.check_alive()

        produced, consumed, (cpu_before, busy_before, wall_before) = run_workers(
            children, workdir,
            [sys.executable, SCRIPT, "worker-stomp-consume", "--connect", str(dest.stomp_port),
             "--queue", QUEUE, "--count", str(count), "--prefetch", str(options["prefetch"]),
             "--warmup", str(options["warmup"] if rate else 0)],
            [sys.executable, SCRIPT, "worker-stomp-produce",
             "--connect", str(mesh.origin.stomp_port), "--to", f"{QUEUE}@{dest.router}",
             "--count", str(count), "--size", str(row.size), "--window", str(options["window"]),
             *(("--rate", str(rate)) if rate else ()),
             *(() if row.persistent else ("--non-persistent",))],
            run_deadline(count, rate), alive,
            lambda: (mesh.cpu(), busy_seconds(), time.monotonic()))
        if row.persistent:
            wait_until(f"queue {QUEUE} of {dest.name} to be empty",
                       lambda: dest.queue_depth(QUEUE) == 0, throughput.START_DEADLINE_S)
        cpu_after, busy_after, wall_after = mesh.cpu(), busy_seconds(), time.monotonic()
        exit_codes = mesh.stop()
    finally:
        children.kill_all()
        if not options["keep"]:
            shutil.rmtree(workdir, ignore_errors=True)
    return summarize(f"stomp-{row.id}", row.persistent, kind, count, rate, produced, consumed,
                     cpu_before, cpu_after, busy_after - busy_before, wall_after - wall_before,
                     exit_codes)


def run_native(row: Row, options, base: str, rate: int | None, count: int) -> dict:
    return throughput.run_once(row, options, base, rate, count, StompMesh)


def main(argv: list[str]) -> int:
    options = Options()
    try:
        options.parseOptions(argv)
    except usage.UsageError as e:
        print(f"{e}\n{options}", file=sys.stderr)
        return 2
    StompRouter.prefetch = options["prefetch"]
    base = tempfile.mkdtemp(prefix="stomp-rate-")
    rows, failed = [], False
    try:
        for mode in options["modes"]:
            row = Row(1, 100, mode)
            for client, run in (("native", run_native), ("stomp.py", run_stomp)):
                print(f"{client} {row.id}: throughput, {options['messages']:,} messages ...",
                      file=sys.stderr, flush=True)
                tp = run(row, options, base, None, options["messages"])
                lat_count = int(options["rate"] * options["latency-seconds"])
                print(f"{client} {row.id}: latency, {lat_count:,} at {options['rate']:,}/s ...",
                      file=sys.stderr, flush=True)
                lat = run(row, options, base, options["rate"], lat_count)
                problems = tp["problems"] + lat["problems"]
                failed = failed or bool(problems)
                latency = lat["latency_ms"] or {}
                rows.append((
                    client, throughput.MODE_LABELS[mode],
                    f"{tp['consumed_per_s']:,.0f}",
                    f"{latency.get('p50', 0):.1f}", f"{latency.get('p99', 0):.1f}",
                    f"{lat['router_cpu_per_10k']:.2f}",
                    "; ".join(problems) or "ok"))
    finally:
        if not options["keep"]:
            shutil.rmtree(base, ignore_errors=True)
    print_table(f"STOMP beside the native client: one hop, 100 B, latency at "
                f"{options['rate']:,} msg/s", ("client", "mode", "msg/s", "p50 ms", "p99 ms",
                                              "rCPU s/10k", "checks"), rows)
    return 1 if failed else 0


# -- the STOMP workers ------------------------------------------------------------------


def _stomp_connection(port: str, listener):
    import stomp

    connection = stomp.Connection12([("127.0.0.1", int(port))], auto_decode=False)
    connection.set_listener("bench", listener)
    connection.connect(wait=True)
    return connection


def stomp_produce(options) -> None:
    import stomp

    receipted = threading.Condition()
    state = {"receipts": 0}

    class Counter(stomp.ConnectionListener):
        def on_receipt(self, frame) -> None:
            with receipted:
                state["receipts"] += 1
                receipted.notify_all()

    connection = _stomp_connection(options["connect"], Counter())
    count, size, window, rate = options["count"], options["size"], options["window"], \
        options["rate"]
    headers = {} if not options["non-persistent"] else {"persistent": "false"}
    cpu_start = throughput._process_cpu()
    start = last_send = time.time()
    for i in range(count):
        if rate is not None:
            delay = start + i / rate - time.time()
            if delay > 0:
                time.sleep(delay)
        with receipted:
            receipted.wait_for(lambda: i - state["receipts"] < window)
        last_send = time.time()
        connection.send(f"/queue/{options['to']}", throughput.make_body(i, size, last_send),
                        receipt=str(i), headers=headers)
    with receipted:
        receipted.wait_for(lambda: state["receipts"] == count)
    result = {"first_send": start, "last_send": last_send, "last_confirm": time.time(),
              "sent": count, "confirmed": count, "refused": 0, "first_error": None,
              "cpu_s": throughput._process_cpu() - cpu_start}
    connection.disconnect()
    write_produced(options["result"], result)


def stomp_consume(options) -> None:
    import stomp

    receipts = Receipts(options["count"], options["warmup"])
    done = threading.Event()
    subscribed = threading.Event()
    state = {"unacked": 0}

    class Consumer(stomp.ConnectionListener):
        def on_receipt(self, frame) -> None:
            subscribed.set()

        def on_message(self, frame) -> None:
            finished = receipts.record(frame.body, "redelivered" in frame.headers)
            state["unacked"] += 1
            if finished or state["unacked"] >= ACK_EVERY:
                connection.ack(frame.headers["ack"])
                state["unacked"] = 0
            if finished:
                done.set()

    connection = _stomp_connection(options["connect"], Consumer())
    connection.subscribe(f"/queue/{options['queue']}", id="bench", ack="client",
                         headers={"prefetch-count": str(options["prefetch"]),
                                  "receipt": "subscribed"})
    subscribed.wait(throughput.START_DEADLINE_S)
    receipts.cpu_start = throughput._process_cpu()
    with open(options["ready"], "w"):
        pass
    while not done.wait(1.0) and not receipts.idle():
        pass
    receipts.write(options["result"])
    connection.disconnect()


def worker(role: str, argv: list[str]) -> None:
    options = ProduceOptions() if role.endswith("produce") else ConsumeOptions()
    options.parseOptions(argv)
    (stomp_produce if role.endswith("produce") else stomp_consume)(options)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] in ("worker-stomp-produce", "worker-stomp-consume"):
        worker(sys.argv[1], sys.argv[2:])
    else:
        sys.exit(main(sys.argv[1:]))
