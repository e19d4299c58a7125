"""
STOMP topics end to end (docs/stomp.md "Topics"): two real C{twistd}
routers on 127.0.0.1, stomp.py publishers and subscribers and native
clients (C{meshroute send --topic}, a script subscribing with
C{Client.subscribe_topic}), one set of routers for every check (the
suite's time is short):

 - wildcard subscribers on router B, STOMP in each ack mode and native,
   publishers on router A, STOMP and native; a MESSAGE names the topic it
   was published to;
 - a durable subscriber away while 5,000 persistent publications flow,
   its router SIGKILLed in their middle and restarted: each is received
   exactly once when the subscriber returns;
 - the README's stomp.py example of topics, as written.

Every subscription is made C{mesh-wide:true}: its RECEIPT says its
interest reached router A, so what A takes after it is promised to it
(docs/topics.md).  Synchronisation is a poll against a deadline.
"""

import subprocess
import sys
import threading
from collections import Counter

from support.routers import (  # noqa: F401 (mesh is a fixture)
    mesh, run_cli, wait_until)
from support.pacing import paced
from support.stomp_clients import TIMEOUT_S, connect, readme_example, stomp_router
from support.topic_subscriber import native_topic_subscriber

#: The durable subscription's publications.
DURABLE_COUNT = 5_000
#: The publisher's receipts it waits for before going on (publications in flight).
WINDOW = 200
LEDGER = "$durable:ledger:all-orders"
BULK_TIMEOUT_S = 240.0



def subscribe(connection, got, destination: str, sub: str, ack: str = "auto", headers=None):
    """
    SUBSCRIBE mesh-wide, and wait for its RECEIPT.
    """
    connection.subscribe(destination, id=sub, ack=ack, headers={
        "mesh-wide": "true", "receipt": f"sub-{sub}", **(headers or {})})
    got.wait_receipt(f"sub-{sub}")


def by_subscription(messages, sub: str) -> list:
    return [m for m in messages if m.headers["subscription"] == sub]


def test_stomp_topics_across_two_routers(mesh, tmp_path):  # noqa: F811
    b = stomp_router(mesh, "router-b")
    a = stomp_router(mesh, "router-a", connect=[b])
    a_proc, b_proc = mesh.start(a, b)
    a_proc.wait_route("router-b")
    _wildcards_from_stomp_and_native_publishers(mesh, a, b, a_proc)
    _a_durable_subscriber_through_a_sigkill(mesh, a, b, b_proc)
    _the_readme_example(a, tmp_path)


def _wildcards_from_stomp_and_native_publishers(mesh, a, b, a_proc) -> None:  # noqa: F811
    native = native_topic_subscriber(mesh, b, "prices.#", 5)
    subscriber, got = connect(b, headers={"client-id": "watcher"})
    subscribe(subscriber, got, "/topic/prices.*.gbp", "gbp", "client-individual")
    subscribe(subscriber, got, "/topic/prices.#", "prices", "client")
    subscribe(subscriber, got, "/topic/#", "all")
    wait_until(lambda: "subscribed" in native.stdout or native.poll() is not None, TIMEOUT_S,
               what="the native subscriber's subscription")
    publisher, sent = connect(a)
    topics = ("prices.eu.gbp", "prices.us.usd", "orders.new", "prices")
    for topic in topics:
        publisher.send(f"/topic/{topic}", topic.encode(), content_type="text/plain",
                       receipt=topic, headers={"x-from": "stomp"})
    for topic in topics:
        sent.wait_receipt(topic)
    # The native client publishes as well, to a topic one pattern matches.
    assert run_cli("send", "--connect", a_proc.client_endpoint, "--topic", "prices.jp.gbp",
                   "--count", "2").returncode == 0
    messages = got.wait_messages(4 + 2 + 4 + 2)

    gbp = by_subscription(messages, "gbp")
    assert sorted((m.headers["destination"], m.body) for m in gbp) == [
        ("/topic/prices.eu.gbp", b"prices.eu.gbp"), ("/topic/prices.jp.gbp", b"message 1"),
        ("/topic/prices.jp.gbp", b"message 2")]
    prices = by_subscription(messages, "prices")
    assert sorted(m.body for m in prices) == [b"message 1", b"message 2", b"prices",
                                              b"prices.eu.gbp", b"prices.us.usd"]
    everything = by_subscription(messages, "all")
    assert sorted(m.headers["destination"] for m in everything) == sorted(
        [f"/topic/{t}" for t in topics] + ["/topic/prices.jp.gbp"] * 2)
    first = gbp[0].headers
    assert first["content-type"] == "text/plain" and first["x-from"] == "stomp"
    assert not first.keys() & {"x-topic", "x-publication", "x-topic-targets"}
    assert all("ack" not in m.headers for m in everything)
    # The native subscriber got the STOMP publications (and the native ones).
    assert native.wait(TIMEOUT_S) == 0, native.stderr
    assert sorted(native.stdout.splitlines()[1:]) == [
        "prices prices", "prices.eu.gbp prices.eu.gbp", "prices.jp.gbp message 1",
        "prices.jp.gbp message 2", "prices.us.usd prices.us.usd"]

    # client-individual: one each; client: the last takes them all.
    for m in gbp:
        subscriber.ack(m.headers["ack"])
    subscriber.ack(prices[-1].headers["ack"], receipt="acked")
    got.wait_receipt("acked")
    assert got.errors == [] and sent.errors == []
    subscriber.disconnect(receipt="bye")
    publisher.disconnect()


def _a_durable_subscriber_through_a_sigkill(mesh, a, b, b_proc) -> None:  # noqa: F811
    durable = {"durable-subscription-name": "all-orders"}
    ledger, got = connect(b, headers={"client-id": "ledger"})
    subscribe(ledger, got, "/topic/orders.#", "ledger", headers=durable)
    ledger.disconnect(receipt="away")

    publisher, sent = connect(a)

    def publish() -> None:
        # Paced (2.5 s in all): router-b dies while the flow still goes on.
        for i in paced(DURABLE_COUNT, 2000):
            if i >= WINDOW:
                wait_until(lambda: len(sent.receipts) > i - WINDOW, BULK_TIMEOUT_S,
                           what=f"receipts up to order {i - WINDOW}")
            publisher.send(f"/topic/orders.{'eu' if i % 2 else 'us'}.new", b"order %d" % i,
                           receipt=str(i))

    flowing = threading.Thread(target=publish, name="publisher", daemon=True)
    flowing.start()
    wait_until(lambda: b_proc.queue_depth(LEDGER) >= DURABLE_COUNT // 5, BULK_TIMEOUT_S,
               what="a fifth of the publications at router-b")
    b_proc.sigkill()
    assert len(sent.receipts) < DURABLE_COUNT, "the flow was over before router-b died"
    [b_proc] = mesh.start(b)
    flowing.join(BULK_TIMEOUT_S)
    wait_until(lambda: len(sent.receipts) == DURABLE_COUNT, BULK_TIMEOUT_S,
               what=f"{DURABLE_COUNT} receipts (have {len(sent.receipts)})")
    assert sent.errors == []
    publisher.disconnect()

    back, returned = connect(b, headers={"client-id": "ledger"})
    subscribe(back, returned, "/topic/orders.#", "ledger",
              headers={"prefetch-count": "1000", **durable})
    returned.wait_messages(DURABLE_COUNT, BULK_TIMEOUT_S)
    wait_until(lambda: b_proc.queue_depth(LEDGER) == 0, BULK_TIMEOUT_S,
               what="the durable subscription to be drained")
    # Every MESSAGE the router wrote comes before the DISCONNECT's RECEIPT.
    back.disconnect(receipt="done")
    counts = Counter(m.body for m in returned.messages)
    assert len(counts) == DURABLE_COUNT and set(counts.values()) == {1}, (
        len(returned.messages), [body for body, n in counts.items() if n > 1][:5])
    assert counts.keys() == {b"order %d" % i for i in range(DURABLE_COUNT)}
    assert returned.errors == []


def _the_readme_example(a, tmp_path) -> None:
    script = tmp_path / "topics_example.py"
    script.write_text(readme_example("/topic/prices.#").replace("61613", str(a.stomp_port)))
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                            timeout=TIMEOUT_S)
    assert result.returncode == 0, result.stderr
    assert "received: /topic/prices.eu.gbp 1.17" in result.stdout
