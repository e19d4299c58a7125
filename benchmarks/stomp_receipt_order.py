"""
When a persistent SEND's MESSAGE reaches a consumer on the same router,
beside its RECEIPT (issue 29: "a persistent SEND's MESSAGE is not held
behind its RECEIPT longer than the commit needs (measure and document the
order)").

Each row starts one router (C{twistd -n meshroute}, a C{[stomp.listener]}
on a free 127.0.0.1 port, the row's C{[store] sync} and C{writer}) and a
worker process holding two stomp.py connections to it: a consumer
subscribed to queue C{order} (C{ack:auto}) and a producer sending
persistent 100-byte messages to it at C{--rate} msg/s, each with a
C{receipt}.  Every arrival is stamped on the worker's monotonic clock by
stomp.py's receiver threads.  Per message: SEND→RECEIPT (what the
producer waits for: the message is durable), SEND→MESSAGE (what the
consumer waits for), and MESSAGE minus RECEIPT (negative: the MESSAGE came
first).  The table gives p50/p99 of each over the messages after the
first C{--warmup}, and the share of MESSAGEs that came first.

    python benchmarks/stomp_receipt_order.py
    python benchmarks/stomp_receipt_order.py --messages 500 --rate 100 --rows full/thread
"""

import json
import os
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _harness as h  # noqa: E402
import stomp  # noqa: E402
from twisted.python import usage  # noqa: E402

from meshroute.store.writers import WRITERS  # noqa: E402

QUEUE = "order"
BODY = 100
#: The configurations measured: C{[store] sync}/C{writer}.
ROWS = ("full/thread", "normal/thread", "full/reactor")

CONFIG = """\
[router]
name = "{name}"
data-dir = "router"
[store]
sync = "{sync}"
writer = "{writer}"
[clients.listener]
endpoint = "tcp:{client_port}:interface=127.0.0.1"
[stomp.listener]
endpoint = "tcp:{stomp_port}:interface=127.0.0.1"
[admin]
endpoint = "tcp:{admin_port}:interface=127.0.0.1"
"""


class Options(usage.Options):
    optParameters = [
        ["messages", "n", 2000, "Messages per row.", int],
        ["rate", None, 200, "Offered load, messages/s.", int],
        ["warmup", None, 100, "First messages left out of the percentiles.", int],
        ["rows", None, ",".join(ROWS), "Rows: [store] sync/writer, comma-separated."],
    ]

    def postOptions(self) -> None:
        self["rows"] = [row for row in self["rows"].split(",") if row]
        for row in self["rows"]:
            sync, _, writer = row.partition("/")
            if sync not in ("full", "normal") or writer not in WRITERS:
                raise usage.UsageError(f"row {row!r} is not SYNC/WRITER "
                                       "(full or normal / thread or reactor)")
        if self["warmup"] >= self["messages"]:
            raise usage.UsageError("--warmup must be below --messages")


class Stamps(stomp.ConnectionListener):
    """
    When each RECEIPT and each MESSAGE of one connection arrived, by
    message number (stomp.py calls it on the connection's receiver
    thread); C{done} is set once C{count} of them, or an ERROR, arrived.
    """

    def __init__(self, count: int) -> None:
        self.receipts: dict[int, float] = {}
        self.messages: dict[int, float] = {}
        self.errors: list[str] = []
        self.done = threading.Event()
        self._count = count

    def on_receipt(self, frame) -> None:
        self._stamp(self.receipts, int(frame.headers["receipt-id"]))

    def on_message(self, frame) -> None:
        self._stamp(self.messages, int(frame.body.split(b" ", 1)[0]))

    def on_error(self, frame) -> None:
        self.errors.append(frame.headers.get("message", "?"))
        self.done.set()

    def _stamp(self, stamps: dict, number: int) -> None:
        stamps.setdefault(number, time.monotonic())
        if len(stamps) == self._count:
            self.done.set()


async def measure_worker(reactor, port: str, messages: str, rate: str) -> None:
    """
    The worker: consumer and producer on the router's STOMP port; prints
    C{{"sent", "receipts", "messages", "errors"}} (monotonic seconds by
    message number) as its last line.
    """
    count, interval = int(messages), 1 / int(rate)
    consumer, producer = (stomp.Connection12([("127.0.0.1", int(port))], auto_decode=False)
                          for _ in range(2))
    delivered, receipted = Stamps(count), Stamps(count)
    consumer.set_listener("stamps", delivered)
    consumer.connect(wait=True)
    consumer.subscribe(f"/queue/{QUEUE}", id="1", ack="auto")
    producer.set_listener("stamps", receipted)
    producer.connect(wait=True)
    sent: dict[int, float] = {}
    start = time.monotonic()
    for number in range(count):
        delay = start + number * interval - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        body = f"{number} ".encode().ljust(BODY, b".")
        sent[number] = time.monotonic()
        producer.send(f"/queue/{QUEUE}", body, receipt=str(number), persistent="true")
    deadline = count * interval + 60
    receipted.done.wait(deadline)
    delivered.done.wait(deadline)
    producer.disconnect()
    consumer.disconnect()
    print(json.dumps({"sent": sent, "receipts": receipted.receipts,
                      "messages": delivered.messages,
                      "errors": receipted.errors + delivered.errors}))


def summarize(result: dict, warmup: int) -> tuple:
    """
    One table row's figures from a worker's stamps.
    """
    def ms(stamps: dict, number: str) -> float:
        return (stamps[number] - result["sent"][number]) * 1000

    numbers = [n for n in result["sent"] if int(n) >= warmup]
    missing = [n for n in numbers if n not in result["receipts"] or n not in result["messages"]]
    if missing or result["errors"]:
        raise RuntimeError(f"{len(missing)} messages without RECEIPT or MESSAGE; "
                           f"errors: {result['errors']}")
    receipt = [ms(result["receipts"], n) for n in numbers]
    message = [ms(result["messages"], n) for n in numbers]
    behind = [m - r for m, r in zip(message, receipt)]
    first = sum(1 for b in behind if b < 0) / len(behind)

    def p(values: list[float], q: float) -> str:
        return f"{h.percentile(values, q):.2f}"

    return (p(receipt, 50), p(receipt, 99), p(message, 50), p(message, 99),
            p(behind, 50), p(behind, 99), f"{first:.0%}")


async def run_row(reactor, options, base: str, row: str) -> tuple:
    """
    One row: its router and worker; its table figures, and a note on how
    busy the machine was meanwhile.
    """
    sync, _, writer = row.partition("/")
    stomp_port = h.free_port()
    router = h.Router(reactor, base, f"router-{sync}-{writer}", CONFIG, sync=sync,
                      writer=writer, stomp_port=stomp_port)
    await router.start()
    await h.poll(reactor, "the router to serve", lambda: router.get("router"),
                 lambda answer: answer["serving"])
    meter = h.Meter()
    worker = h.spawn_role(reactor, __file__, router.workdir, "_measure", stomp_port,
                          options["messages"], options["rate"])
    result = h.role_result(worker, await worker.ended)
    others, load_start, load_end = meter.stop()
    await router.stop()
    note = f"others' CPU {others:.0%}, load {load_start:.1f}→{load_end:.1f}"
    return (row, *summarize(result, options["warmup"])), note


async def main(reactor, *argv: str) -> None:
    options = Options()
    options.parseOptions(argv)
    base = tempfile.mkdtemp(prefix="stomp-receipt-order-")
    rows, notes = [], []
    try:
        for row in options["rows"]:
            figures, note = await run_row(reactor, options, base, row)
            rows.append(figures)
            notes.append(f"{row}: {note}")
    finally:
        h.remove_tree(base)
    h.print_table(
        f"persistent SEND to a consumer on the same router, {options['messages']} × "
        f"{BODY} B at {options['rate']} msg/s (ms; first {options['warmup']} left out)",
        ("sync/writer", "RECEIPT p50", "p99", "MESSAGE p50", "p99",
         "MESSAGE−RECEIPT p50", "p99", "MESSAGE first"), rows)
    for note in notes:
        print(note)


if __name__ == "__main__":
    h.run_main(main, {"_measure": measure_worker})
