"""
The subscriber workers of benchmarks/fanout.py, one process each
(C{python _fan_subscribers.py worker-mesh-subscribe|worker-rabbit-subscribe|
worker-nats-subscribe ...}, not meant to be run by hand): a few of the ten
subscribers, each its own connection with its own pattern, each counting
what it received (throughput.Receipts: every publication once per
subscription, duplicates apart, latency from the send time in the body).
Once every subscription is made (meshroute: confirmed mesh-wide; a broker:
a probe published on A has reached it) the worker creates its ready file;
when every subscription has every publication, or nothing came for
throughput.IDLE_TIMEOUT_S, it writes its result file and exits.
"""

import asyncio
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import compare  # noqa: E402
import throughput  # noqa: E402
from compare import PROBE  # noqa: E402
from throughput import IDLE_TIMEOUT_S, ConsumeOptions, Receipts  # noqa: E402

SCRIPT = os.path.abspath(__file__)
TOPIC = "bench.fan.out"
#: Subscriber i's pattern is PATTERNS[i % 5]: all match TOPIC, each a
#: different way.
PATTERNS = ("bench.fan.out", "bench.*.out", "bench.#", "#", "*.fan.*")
#: A RabbitMQ exchange per mode, each federated with its own ack mode.
EXCHANGES = {"full": "fan.persistent", "nonpersistent": "fan.transient"}
POLL_S = 0.1


def nats_subject(pattern: str) -> str:
    """
    A topic pattern as a NATS subject: C{#} (only ever last here) is C{>}.
    """
    return pattern.replace("#", ">")


class SubscribeOptions(ConsumeOptions):
    optParameters = [
        ["where", None, "", "The router or broker connected to (named in the result)."],
        ["subscribers", None, "0", "Comma-separated subscriber numbers (0-9)."],
        ["probe-via", None, None, "A broker's A, to publish probes on."],
    ]
    optFlags = [["durable", None, "Durable subscriptions (queues), for persistent runs."]]

    def postOptions(self) -> None:
        self["indices"] = [int(i) for i in self["subscribers"].split(",")]


class Subscribers:
    """
    What one consumer worker's subscribers received: a Receipts each (so
    every publication is counted once per subscription, duplicates apart),
    when anything last arrived, and the first failure of a connection.
    """

    def __init__(self, options) -> None:
        self.where, self.count = options["where"], options["count"]
        self.receipts = {i: Receipts(options["count"], options["warmup"])
                         for i in options["indices"]}
        self.last: float | None = None
        self.error: str | None = None
        self.done = False
        self.cpu_start = throughput._process_cpu()

    def record(self, index: int, body: bytes, redelivered: bool) -> None:
        self.receipts[index].record(body, redelivered)
        self.last = time.time()

    def fail(self, failure) -> None:
        """
        A connection or a receive loop failed: unless the worker is
        ending anyway, it stops and says so.
        """
        if not self.done and self.error is None:
            self.error = failure.getErrorMessage()

    def finished(self) -> bool:
        """
        Whether every subscription has every publication, nothing arrived
        for IDLE_TIMEOUT_S, or a connection failed.
        """
        return (self.error is not None
                or all(r.unique == self.count for r in self.receipts.values())
                or (self.last is not None and time.time() - self.last > IDLE_TIMEOUT_S))

    async def serve(self, options, sleep) -> None:
        """
        The subscriptions are made: say so (the ready file), wait until
        L{finished} (C{sleep(seconds)} returns an awaitable), write the
        result.
        """
        self.cpu_start = throughput._process_cpu()
        with open(options["ready"], "w"):
            pass
        while not self.finished():
            await sleep(POLL_S)
        self.done = True
        subscribers = [dict(r.summary(), index=i, where=self.where,
                            pattern=PATTERNS[i % len(PATTERNS)],
                            latencies_ms=[x * 1000 for x in r.latencies])
                       for i, r in self.receipts.items()]
        with open(options["result"], "w") as f:
            json.dump({"subscribers": subscribers, "error": self.error,
                       "cpu_s": throughput._process_cpu() - self.cpu_start}, f)
        # Let the last acknowledgements go out before closing.
        await sleep(0.05)


async def mesh_subscribe(reactor, options) -> None:
    from twisted.internet import task

    from meshroute.client import connect

    subscribers = Subscribers(options)
    clients = []
    for i in options["indices"]:
        client = await connect(reactor, options["connect"])
        client.when_closed().addErrback(subscribers.fail)
        clients.append(client)

        def on_message(message, i=i) -> None:
            message.ack_through()
            subscribers.record(i, message.body, message.redelivered)

        durable = options["durable"]
        await client.subscribe_topic(
            PATTERNS[i % len(PATTERNS)], on_message, mesh_wide=True,
            prefetch=options["prefetch"], durable=f"fan-{i}" if durable else None,
            client_id=f"bench-{i}" if durable else None)
    await subscribers.serve(options, lambda seconds: task.deferLater(reactor, seconds))
    for client in clients:
        await client.close()


async def rabbit_subscribe(reactor, options) -> None:
    import pika
    from twisted.internet import defer, task

    subscribers = Subscribers(options)
    durable = options["durable"]
    exchange = EXCHANGES["full" if durable else "nonpersistent"]
    probed, connections = {}, []
    for i in options["indices"]:
        connection, channel = await compare.rabbit_channel(reactor, int(options["connect"]))
        connections.append(connection)
        queue_name = f"{exchange}-{i}"
        await channel.queue_declare(queue_name, durable=durable, exclusive=not durable,
                                    auto_delete=not durable)
        await channel.queue_bind(queue_name, exchange, routing_key=PATTERNS[i % len(PATTERNS)])
        await channel.basic_qos(prefetch_count=options["prefetch"])
        queue, _tag = await channel.basic_consume(queue=queue_name, auto_ack=False)
        probed[i] = defer.Deferred()
        defer.Deferred.fromCoroutine(
            _rabbit_receive(queue, i, subscribers, probed[i])).addErrback(subscribers.fail)
    # B's bindings reach A's exchange over the federation link some time
    # later: publish probes on A until every subscription got one.
    connection, channel = await compare.rabbit_channel(reactor, int(options["probe-via"]))
    transient = pika.BasicProperties(delivery_mode=1)
    while not all(d.called for d in probed.values()):
        channel.basic_publish(exchange, TOPIC, PROBE, transient)
        await task.deferLater(reactor, 0.05)
    connection.close()
    await subscribers.serve(options, lambda seconds: task.deferLater(reactor, seconds))
    for connection in connections:
        connection.close()


async def _rabbit_receive(queue, index: int, subscribers: Subscribers, probed) -> None:
    while True:
        channel, method, _properties, body = await queue.get()
        channel.basic_ack(delivery_tag=method.delivery_tag)
        if body != PROBE:
            subscribers.record(index, body, method.redelivered)
        elif not probed.called:
            probed.callback(None)


async def nats_subscribe(options) -> None:
    import nats

    subscribers = Subscribers(options)
    loop = asyncio.get_running_loop()
    probed, clients = {}, []
    for i in options["indices"]:
        client = await nats.connect(options["connect"])
        clients.append(client)
        probed[i] = loop.create_future()

        async def on_message(message, i=i) -> None:
            if message.data != PROBE:
                subscribers.record(i, message.data, False)
            elif not probed[i].done():
                probed[i].set_result(None)

        await client.subscribe(nats_subject(PATTERNS[i % len(PATTERNS)]), cb=on_message,
                               pending_msgs_limit=-1, pending_bytes_limit=-1)
        await client.flush()
    await compare.nats_probe(options["probe-via"], TOPIC, list(probed.values()))
    await subscribers.serve(options, asyncio.sleep)
    for client in clients:
        await client.close()


WORKER_ROLES = ("worker-mesh-subscribe", "worker-rabbit-subscribe", "worker-nats-subscribe")


def worker(role: str, argv: list[str]) -> None:
    from twisted.internet import defer, task

    options = SubscribeOptions()
    options.parseOptions(argv)
    if role == "worker-nats-subscribe":
        asyncio.run(nats_subscribe(options))
        return
    run = mesh_subscribe if role == "worker-mesh-subscribe" else rabbit_subscribe
    task.react(lambda reactor: defer.Deferred.fromCoroutine(run(reactor, options)))


if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] not in WORKER_ROLES:
        sys.exit(f"usage: {sys.argv[0]} {'|'.join(WORKER_ROLES)} OPTIONS (fanout.py runs it)")
    worker(sys.argv[1], sys.argv[2:])
