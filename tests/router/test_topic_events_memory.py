"""
The topic events (docs/events.md, "Topic events") of whole routers
linked in memory: one C{topic.fanned-out} per publication per router it
reaches, naming the subscriptions it was copied into and each copy sent
on, and the beginning and end of every subscription.
"""

from meshroute.messages import (
    PUBLICATION_HEADER,
    TARGETS_HEADER,
    TOPIC_HEADER,
    TOPIC_QUEUE,
    Message,
)
from support.mesh_testing import assert_confirmed, events_of, mesh  # noqa: F401 (mesh: a fixture)
from support.topic_testing import TopicConsumer, publish

A, B, C, D = "router-a", "router-b", "router-c", "router-d"
DURABLE = "$durable:app:sub"


def line(mesh) -> None:
    """
    a - b - c, and d beyond b.
    """
    mesh.add(A, connect_to=[B])
    mesh.add(B)
    mesh.add(C, connect_to=[B])
    mesh.add(D, connect_to=[B])
    mesh.run(1)


def test_each_router_a_publication_reaches_records_its_part_of_the_tree(mesh):
    line(mesh)
    routers = mesh.routers
    durable = TopicConsumer(routers[C], "t.#", client_id="app", durable="sub")
    plain = TopicConsumer(routers[C], "t.*")
    local = TopicConsumer(routers[A], "t.x")
    TopicConsumer(routers[D], "other")
    mesh.run(1)
    assert_confirmed(publish(mesh, A, "t.x", 2))
    mesh.run(1)
    assert len(durable.bodies) == len(plain.bodies) == len(local.bodies) == 2
    at_a = events_of(routers[A], "topic.fanned-out")
    accepted = [e["msg_id"] for e in events_of(routers[A], "message.accepted")]
    assert [e["msg_id"] for e in at_a] == [e["publication"] for e in at_a] == accepted
    first = at_a[0]
    assert (first["origin"], first["topic"], first["persistent"], first["hops"]) == (
        A, "t.x", True, 0)
    assert first["durable"] == [] and first["non_durable"] == [local.subscription.queue]
    [sent] = first["sent"]
    assert sent.startswith(f"{first['publication']}>{A}:") and first["targets"] == [[C]]
    # b takes the copy a sent, and sends one on toward c; d gets nothing.
    at_b = events_of(routers[B], "topic.fanned-out")
    assert [e["msg_id"] for e in at_b] == [e["sent"][0] for e in at_a]
    assert [e["publication"] for e in at_b] == accepted
    [onward] = at_b[0]["sent"]
    assert onward.startswith(f"{accepted[0]}>{B}:") and at_b[0]["targets"] == [[C]]
    assert at_b[0]["durable"] == at_b[0]["non_durable"] == [] and at_b[0]["hops"] == 1
    assert events_of(routers[D], "topic.fanned-out") == []
    at_c = events_of(routers[C], "topic.fanned-out")
    assert [e["msg_id"] for e in at_c] == [e["sent"][0] for e in at_b]
    assert all(e["durable"] == [DURABLE] and e["non_durable"] == [plain.subscription.queue]
               and e["sent"] == [] for e in at_c)
    # The copies it names are the ones enqueued there.
    enqueued = {e["msg_id"] for e in events_of(routers[C], "message.enqueued")}
    for e in at_c:
        assert {f"{e['publication']}/{queue}@{C}" for queue in e["durable"] + e["non_durable"]
                } <= enqueued


def test_a_copy_come_round_a_loop_is_recorded_without_what_it_held_already(mesh):
    """
    A copy of a publication that reaches a router a second time (a new
    id: it came round a routing loop while routes converged) makes no
    second copy for a durable subscription there, and the fan-out's
    record of it names none.
    """
    line(mesh)
    router = mesh.routers[C]
    durable = TopicConsumer(router, "t", client_id="app", durable="sub")
    mesh.run(1)
    assert_confirmed(publish(mesh, A, "t", 1))
    mesh.run(1)
    [first] = events_of(router, "topic.fanned-out")
    again = Message(msg_id=f"{first['publication']}>{D}:loop", origin=A, dest_router=C,
                    dest_queue=TOPIC_QUEUE, body=b"0", hops=3, persistent=True,
                    headers={TOPIC_HEADER: "t", PUBLICATION_HEADER: first["publication"],
                             TARGETS_HEADER: C}, accepted_at=first["accepted_at"])
    router.store.commit([(again, "")], []).addCallback(
        lambda _: router.engine.queues.notify(TOPIC_QUEUE))
    mesh.run(1)
    [_, second] = events_of(router, "topic.fanned-out")
    assert (first["durable"], second["msg_id"], second["durable"]) == (
        [DURABLE], again.msg_id, [])
    assert durable.bodies == [b"0"]


def test_subscriptions_begin_and_end(mesh):
    line(mesh)
    router = mesh.routers[C]
    durable = TopicConsumer(router, "t.#", client_id="app", durable="sub", shared=True)
    plain = TopicConsumer(router, "t.*")
    mesh.run(1)
    [made, begun] = events_of(router, "topic.subscribed")
    assert made == {**made, "queue": DURABLE, "pattern": "t.#", "kind": "durable",
                    "client_id": "app", "name": "sub", "shared": True, "user": None,
                    "replaced": False, "deleted": 0}
    assert begun == {**begun, "queue": plain.subscription.queue, "pattern": "t.*",
                     "kind": "non-durable"}
    durable.subscription.cancel()
    assert_confirmed(publish(mesh, A, "t.x", 3))
    mesh.run(1)
    # Attached again with another pattern: replaced, what it held deleted.
    again = TopicConsumer(router, "t.y", client_id="app", durable="sub")
    mesh.run(1)
    replaced = events_of(router, "topic.subscribed")[-1]
    assert replaced == {**replaced, "queue": DURABLE, "pattern": "t.y", "replaced": True,
                        "deleted": 3, "shared": False}
    # Attached again alike: no event.
    again.subscription.cancel()
    TopicConsumer(router, "t.y", client_id="app", durable="sub").subscription.cancel()
    mesh.run(1)
    assert len(events_of(router, "topic.subscribed")) == 3
    plain.subscription.cancel()
    assert_confirmed(publish(mesh, A, "t.y", 2))
    mesh.run(1)
    forgotten = []
    router.engine.topics.forget("app", "sub").addCallback(forgotten.append)
    mesh.run(1)
    assert forgotten == [2]
    ended, gone = events_of(router, "topic.unsubscribed")
    assert ended == {**ended, "queue": plain.subscription.queue, "kind": "non-durable",
                     "dropped": 0}
    assert gone == {**gone, "queue": DURABLE, "kind": "durable", "client_id": "app",
                    "name": "sub", "dropped": 0, "deleted": 2}
