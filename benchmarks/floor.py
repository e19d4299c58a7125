"""
What this machine allows a Twisted router at a paced rate: the latency
and CPU of a relay that does nothing but the unavoidable, measured the
way throughput.py measures meshroute.

A producer process sends 100-byte frames (length-prefixed, carrying the
send time) at a paced --rate to relay A, which passes them to relay B,
which passes them to a consumer process; each relay is its own Python
process running the Twisted reactor, over TCP on 127.0.0.1 with
TCP_NODELAY.  Per row, a relay does:

  - C{relay}: read a frame, write it on (no store): the floor of the
    non-persistent path;
  - C{inline}: commit the frames it read in a turn to its own SQLite
    database (WAL, C{synchronous = FULL}, one row each) on the reactor
    thread, then write them on: the floor of a store-and-forward hop
    with one fsync per message (what the turn executor, C{[store]
    writer = "reactor"}, does);
  - C{thread}: the same commit on one writer thread, the frames written
    on from the reactor once C{deferToThreadPool} hands the commit back
    (what the thread writer does);
  - C{inline-acks}: C{inline}, and each relay also answers its sender
    with a 4-byte acknowledgement frame after the commit, and the
    consumer answers relay B: the acknowledgements a store-and-forward
    protocol cannot do without (the producer's confirmation, the link's
    acknowledgement, the consumer's), one frame each, not committed;
  - C{pipelined}: the shape issue 30 asks of a persistent hop, on the
    thread writer's shape, with the acknowledgements: relay A writes the
    frames on at once and commits them on its writer thread meanwhile,
    answering the producer once its commit is done (the origin forwards
    while its commit is in flight); relay B commits them on its writer
    thread, then writes them on and answers A (the destination commits
    before it delivers or acknowledges); the consumer answers B.  The
    floor of meshroute's paced persistent path as it is built today.

The relays route nothing, keep no state, log nothing and emit no event:
every cost here is also a cost of meshroute's path at that rate, so a
target below this row's CPU or latency is below what the machine gives
one message alone in its turn.  Printed per row: p50 / p90 / p99 of send
to receipt (the first --warmup frames left out), and each relay's CPU in
cores over the run (utime + stime from /proc) and per message.

    python benchmarks/floor.py                 # every row, 10 s at 1,000/s each
    python benchmarks/floor.py --rows inline --seconds 30 --rate 2000

Runs on 127.0.0.1 only; temporary databases under --dir; not part of
`make test`.  See benchmarks/README.md.
"""

import argparse
import os
import select
import socket
import sqlite3
import struct
import subprocess
import sys
import tempfile
import threading
import time

import _harness

ROWS = ("relay", "inline", "thread", "inline-acks", "pipelined")
HEADER = struct.Struct(">I")
STAMP = struct.Struct(">d")
ACK = HEADER.pack(0)
BODY_SIZE = 100


def frames_of(buffer: bytes) -> tuple[list[bytes], bytes]:
    """
    The whole length-prefixed frames at the start of C{buffer} (each with
    its prefix), and what is left.
    """
    frames, at = [], 0
    while len(buffer) - at >= 4:
        (size,) = HEADER.unpack_from(buffer, at)
        if len(buffer) - at - 4 < size:
            break
        frames.append(buffer[at:at + 4 + size])
        at += 4 + size
    return frames, buffer[at:]


# -- a relay (its own process) ----------------------------------------------------


def run_relay(listen: int, onward: int, row: str, database: str, origin: bool) -> None:
    from twisted.internet import defer, endpoints, protocol, reactor, threads
    from twisted.python.threadpool import ThreadPool

    acks = row in ("inline-acks", "pipelined")
    store = None
    if row != "relay":
        store = sqlite3.connect(database, isolation_level=None, check_same_thread=False)
        store.execute("PRAGMA journal_mode = WAL")
        store.execute("PRAGMA synchronous = FULL")
        store.execute("CREATE TABLE IF NOT EXISTS frames (id INTEGER PRIMARY KEY, frame BLOB)")
    writer = None
    if row in ("thread", "pipelined"):
        writer = ThreadPool(1, 1, "writer")
        writer.start()
        reactor.addSystemEventTrigger("after", "shutdown", writer.stop)

    def commit(frames: list[bytes]) -> None:
        store.execute("BEGIN")
        store.executemany("INSERT INTO frames (frame) VALUES (?)", [(f,) for f in frames])
        store.execute("COMMIT")

    class Onward(protocol.Protocol):
        def dataReceived(self, data: bytes) -> None:
            pass  # the next hop's acknowledgements: read and dropped

    class Inbound(protocol.Protocol):
        def connectionMade(self) -> None:
            self.transport.setTcpNoDelay(True)
            self.buffer = b""

        def dataReceived(self, data: bytes) -> None:
            frames, self.buffer = frames_of(self.buffer + data)
            if not frames:
                return
            if row == "pipelined" and origin:
                onward_protocol.transport.write(b"".join(frames))
                d = threads.deferToThreadPool(reactor, writer, commit, frames)
                d.addCallback(lambda _: self.transport.write(ACK))
                return
            if writer is not None:
                d = threads.deferToThreadPool(reactor, writer, commit, frames)
                d.addCallback(lambda _: self.passOn(frames))
                return
            if store is not None:
                commit(frames)
            self.passOn(frames)

        def passOn(self, frames: list[bytes]) -> None:
            onward_protocol.transport.write(b"".join(frames))
            if acks:
                self.transport.write(ACK)

    onward_protocol = Onward()

    async def start() -> None:
        await endpoints.connectProtocol(
            endpoints.clientFromString(reactor, f"tcp:127.0.0.1:{onward}"), onward_protocol)
        onward_protocol.transport.setTcpNoDelay(True)
        await endpoints.serverFromString(reactor, f"tcp:{listen}:interface=127.0.0.1").listen(
            protocol.Factory.forProtocol(Inbound))
        print("listening", flush=True)

    def failed(failure) -> None:
        print(f"failed: {failure.getErrorMessage()}", flush=True)
        reactor.stop()

    reactor.callWhenRunning(lambda: defer.Deferred.fromCoroutine(start()).addErrback(failed))
    reactor.run()


# -- the run (this process: producer, consumer, the relays' CPU) --------------------


def wait_for_line(process: subprocess.Popen, line: str) -> None:
    """
    Wait up to L{_harness.DEADLINE_S} for C{process} to print its first
    line, which must be C{line} (an empty one: it died).
    """
    ready, _, _ = select.select([process.stdout], [], [], _harness.DEADLINE_S)
    got = process.stdout.readline().strip() if ready else "(nothing in time)"
    if got != line:
        raise RuntimeError(f"a relay did not start: {got!r} (exit {process.poll()})")


def measure(row: str, rate: float, seconds: float, warmup: int, directory: str) -> dict:
    count = int(rate * seconds)
    consumer_port, b_port, a_port = (_harness.free_port() for _ in range(3))
    sink = socket.socket()
    sink.bind(("127.0.0.1", consumer_port))
    sink.listen(1)
    sink.settimeout(_harness.DEADLINE_S)
    relays = []
    try:
        for listen, onward, name in ((b_port, consumer_port, "b"), (a_port, b_port, "a")):
            relays.append(subprocess.Popen(
                [sys.executable, __file__, "relay", str(listen), str(onward), row,
                 os.path.join(directory, f"{row}-{name}.sqlite"), name],
                stdout=subprocess.PIPE, text=True))
            if name == "b":
                inbound, _ = sink.accept()
            wait_for_line(relays[-1], "listening")
        relay_b, relay_a = relays
        inbound.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        producer = socket.create_connection(("127.0.0.1", a_port))
        producer.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        latencies: list[float] = []
        acks = row in ("inline-acks", "pipelined")

        def consume() -> None:
            buffer = b""
            while len(latencies) < count:
                data = inbound.recv(65536)
                if not data:
                    return
                frames, buffer = frames_of(buffer + data)
                now = time.time()
                for frame in frames:
                    latencies.append(now - STAMP.unpack_from(frame, 4)[0])
                if acks:
                    inbound.sendall(ACK)

        def drain_acks() -> None:
            while producer.recv(65536):
                pass

        consumer = threading.Thread(target=consume, daemon=True)
        consumer.start()
        if acks:
            threading.Thread(target=drain_acks, daemon=True).start()
        padding = b"x" * (BODY_SIZE - STAMP.size)
        cpu_before = [_harness.cpu_s(r.pid) for r in (relay_a, relay_b)]
        started = time.monotonic()
        for n in range(count):
            due = started + n / rate
            while (late := due - time.monotonic()) > 0:
                time.sleep(late if late < 0.0005 else late - 0.0002)
            producer.sendall(HEADER.pack(BODY_SIZE) + STAMP.pack(time.time()) + padding)
        consumer.join(timeout=30)
        elapsed = time.monotonic() - started
        cpu_after = [_harness.cpu_s(r.pid) for r in (relay_a, relay_b)]
        producer.close()
        if len(latencies) < count:
            raise RuntimeError(f"{row}: {len(latencies)} of {count} frames arrived")
        kept = [latency * 1e3 for latency in latencies[warmup:]]
        cores = [(after - before) / elapsed for before, after in zip(cpu_before, cpu_after)]
        return {
            "row": row,
            "p50": _harness.percentile(kept, 50),
            "p90": _harness.percentile(kept, 90),
            "p99": _harness.percentile(kept, 99),
            "cores": cores,
            "us_per_message": [c / rate * 1e6 for c in cores],
        }
    finally:
        for relay in relays:
            relay.kill()
            relay.wait()
        sink.close()


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "relay":
        listen, onward, row, database, name = sys.argv[2:7]
        run_relay(int(listen), int(onward), row, database, origin=name == "a")
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", default=",".join(ROWS),
                        help=f"comma-separated, of {', '.join(ROWS)} (default: all)")
    parser.add_argument("--rate", type=float, default=1000.0, help="frames/s (default 1000)")
    parser.add_argument("--seconds", type=float, default=10.0, help="per row (default 10)")
    parser.add_argument("--warmup", type=int, default=200, help="frames left out (default 200)")
    parser.add_argument("--dir", default=None, help="where the databases go (default: a temporary directory)")
    options = parser.parse_args()
    rows = [r for r in options.rows.split(",") if r]
    unknown = set(rows) - set(ROWS)
    if unknown:
        parser.error(f"unknown rows: {', '.join(sorted(unknown))}")
    with tempfile.TemporaryDirectory(dir=options.dir) as directory:
        results = [measure(row, options.rate, options.seconds, options.warmup, directory)
                   for row in rows]
    _harness.print_table(
        f"A bare relay chain at {options.rate:,.0f} frames/s, {BODY_SIZE} B: producer -> A -> B -> consumer",
        ("row", "p50 ms", "p90 ms", "p99 ms", "cores A / B", "CPU us/msg A / B"),
        [(r["row"], f"{r['p50']:.2f}", f"{r['p90']:.2f}", f"{r['p99']:.2f}",
          "{:.3f} / {:.3f}".format(*r["cores"]), "{:.0f} / {:.0f}".format(*r["us_per_message"]))
         for r in results])


if __name__ == "__main__":
    main()
