"""
Topics as an operator sees them (issue 29): two real C{twistd -n
meshroute} routers on 127.0.0.1, A connected to B, native publishers on A
(C{meshroute send --topic}) and subscribers on B (C{meshroute receive
--topic --json}), each a process of its own.

One run of routers for every check, in two acts:

 1. Subscribers with wildcards on B (C{prices.*.gbp}, C{prices.#}) and a
    durable one (C{prices.#}, C{--durable ticks --client-id app}), all
    C{--mesh-wide}: once B's sessions API shows the three made, their
    interest is held at A, and every publication after that reaches each
    subscription that matches, once, in order.  The durable subscriber
    then leaves (it took its count); its subscription stays recorded in
    B's store.
 2. While it is away, 2,000 persistent publications flow from A; B is
    SIGKILLed in the middle of them and restarted.  The durable
    subscriber returns and receives each exactly once, in order (and no
    copy was enqueued twice, says B's event log); with C{--forget} it
    then ends its subscription for good (its record is gone).
 3. A retained publication at A (C{meshroute send --retain}) reaches B's
    table of retained messages, and a later subscriber on B asking for
    them (C{--retained all}) is given it, flagged C{x-retained}.

Every body is numbered (C{meshroute send} sends C{"message N"}) and every
message carries its topic (C{x-topic}): order is checked per publisher,
that is per topic here.  Synchronisation is always a poll, never a sleep.
"""

import sqlite3
from collections import Counter

from support.routers import mesh, wait_until  # noqa: F401 (mesh is a fixture)

#: Generous deadlines: a 2-core machine running the whole suite.
TIMEOUT_S = 90.0
DURABLE = ("--durable", "ticks", "--client-id", "app")
DURABLE_QUEUE = "$durable:app:ticks"
#: Act 1's publications per topic, act 2's.
FEW, MANY = 100, 2000


def by_topic(messages: list[dict]) -> dict[str, list[int]]:
    """
    The message numbers a subscriber printed, per topic, in the order
    received.
    """
    found: dict[str, list[int]] = {}
    for message in messages:
        number = int(message["body"].rsplit(" ", 1)[1])
        found.setdefault(message["headers"]["x-topic"], []).append(number)
    return found


def finished(client) -> list[dict]:
    code = client.wait(TIMEOUT_S)
    assert code == 0, f"{client.label} exited with {code}:\n{client.stderr}"
    messages = client.messages()
    ids = Counter(m["id"] for m in messages)
    assert max(ids.values(), default=1) == 1, "one delivery id twice"
    return messages


def succeeded(publisher) -> None:
    code = publisher.wait(TIMEOUT_S)
    assert code == 0, f"{publisher.label} exited with {code}:\n{publisher.stderr}"


def durable_subscriptions(router) -> list[str]:
    """
    The durable subscriptions C{router}'s store records (read-only: the
    router keeps it in WAL mode), by queue.
    """
    connection = sqlite3.connect(f"file:{router.spec.store_path}?mode=ro", uri=True, timeout=5)
    try:
        return [queue for (queue,) in connection.execute(
            "SELECT queue FROM durable_subscriptions ORDER BY queue")]
    finally:
        connection.close()


def subscribed(router, sessions: int) -> None:
    """
    Wait until C{sessions} sessions of C{router} have made their
    subscription: a mesh-wide one is made only once its interest is held
    everywhere.
    """
    def made():
        return sum(1 for s in router.get("/api/v1/sessions") if s["subscriptions"]) >= sessions

    wait_until(made, 30, what=f"{sessions} mesh-wide subscriptions at {router.name}")


def test_topics_across_two_routers_and_a_durable_subscriber_through_a_sigkill(mesh):  # noqa: F811
    b_spec = mesh.router("router-b", clients=True)
    a_spec = mesh.router("router-a", clients=True, connect=[b_spec])
    a, b = mesh.start(a_spec, b_spec)
    a.wait_route("router-b")

    # -- act 1: wildcards, and the durable subscriber while it is there ------------
    gbp = mesh.start_receive_topic(b, "prices.*.gbp", FEW, TIMEOUT_S, "--mesh-wide")
    wide = mesh.start_receive_topic(b, "prices.#", 2 * FEW, TIMEOUT_S, "--mesh-wide")
    durable = mesh.start_receive_topic(b, "prices.#", 2 * FEW, TIMEOUT_S, "--mesh-wide",
                                       *DURABLE)
    subscribed(b, 3)
    publishers = [mesh.start_publish(a, topic, FEW) for topic in ("prices.eu.gbp",
                                                                  "prices.us.usd")]
    for publisher in publishers:
        succeeded(publisher)
    numbers = list(range(1, FEW + 1))
    assert by_topic(finished(gbp)) == {"prices.eu.gbp": numbers}
    for subscriber in (wide, durable):
        assert by_topic(finished(subscriber)) == {"prices.eu.gbp": numbers,
                                                  "prices.us.usd": numbers}
    assert durable_subscriptions(b) == [DURABLE_QUEUE]

    # -- act 2: away while B dies in the middle of the stream ------------------------
    publisher = mesh.start_publish(a, "prices.uk.gbp", MANY, "--rate", "1000")
    b.wait_for(lambda: b.queue_depth(DURABLE_QUEUE) >= MANY // 4, timeout=60,
               what="the durable subscription to collect a quarter of the stream")
    b.sigkill()
    assert publisher.poll() is None, "the stream was over before B died: kill it sooner"
    [b] = mesh.start(b_spec)
    succeeded(publisher)
    # It returns, takes the stream, and ends the subscription for good.
    returned = mesh.start_receive_topic(b, "prices.#", MANY, TIMEOUT_S, "--forget", *DURABLE)
    assert by_topic(finished(returned)) == {"prices.uk.gbp": list(range(1, MANY + 1))}
    assert durable_subscriptions(b) == []
    # No copy was enqueued twice, before the kill or after it: nothing
    # more waited beyond the 2,000 it took.
    enqueued = [e["msg_id"] for e in b.events("message.enqueued", queue=DURABLE_QUEUE)]
    assert len(enqueued) == len(set(enqueued)) <= 2 * FEW + MANY

    # -- act 3: a retained message, for a later subscriber on the other router ------
    succeeded(mesh.start_publish(a, "prices.last", 1, "--retain", "--body", "1.17"))
    wait_until(lambda: b.get("/api/v1/topics")["retained"]["count"] == 1, 30,
               what="the retained message at router-b")
    [message] = finished(mesh.start_receive_topic(b, "prices.#", 1, TIMEOUT_S,
                                                  "--retained", "all"))
    assert (message["body"], message["headers"]["x-retained"]) == ("1.17", "true")
