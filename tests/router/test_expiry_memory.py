"""
Message expiry across whole routers in memory (real engines, stores and
links on one clock): a message that expires two hops from its sender, one
that expires in transit and is not forwarded, and the notice that travels
back to the sender's router.
"""

import pytest

from meshroute.events import read_events
from meshroute.expiry import SWEEP_INTERVAL_S, now_ms
from meshroute.messages import EXPIRED_QUEUE
from meshroute.testing.memory_mesh import MemoryMesh


@pytest.fixture
def mesh(tmp_path):
    mesh = MemoryMesh(tmp_path)
    # The clock is the wall clock expiries are compared with.
    mesh.clock.advance(1_700_000_000)
    yield mesh
    mesh.stop_all()


def line(mesh):
    mesh.add("router-a", connect_to=["router-b"])
    mesh.add("router-b", connect_to=["router-c"])
    mesh.add("router-c")
    mesh.run(1)


def events_of(mesh, router: str, event: str) -> list[dict]:
    router = mesh.routers[router]
    router.events.flush()
    return [e for e in read_events(router.events.data_dir) if e["event"] == event]


class Consumer:
    def __init__(self, router, queue: str) -> None:
        self.received = []
        # Deliveries may start inside subscribe(): credit once we hold it.
        self._subscription = router.engine.queues.subscribe(queue, self._deliver, 0)
        self._subscription.add_credit(100)

    def _deliver(self, delivery) -> None:
        self.received.append(delivery.message)
        self._subscription.ack([delivery.delivery_id])
        self._subscription.add_credit(1)


def submit(mesh, router: str, address: str, ttl_ms: int, persistent=True, notify=False):
    engine = mesh.routers[router].engine
    got = []
    engine.submit(address, b"x", {}, persistent, "", now_ms(mesh.clock) + ttl_ms, notify,
                  "session-1").addBoth(got.append)
    (msg_id,) = got
    assert isinstance(msg_id, str), msg_id
    return msg_id


class Told:
    """
    Stands for router-a's client sessions: records the notices handed to
    session-1.
    """

    def __init__(self, router) -> None:
        self.notices = []
        router.engine.expiry_notices.insert(0, self)

    def __call__(self, session: str, msg_id: str, address: str, where: str) -> bool:
        self.notices.append((session, msg_id, address, where))
        return True


def test_a_message_expires_two_hops_away_and_its_sender_is_told(mesh):
    line(mesh)
    told = Told(mesh.routers["router-a"])
    persistent = submit(mesh, "router-a", "orders@router-c", 2000, notify=True)
    transient = submit(mesh, "router-a", "orders@router-c", 2000, persistent=False, notify=True)
    quiet = submit(mesh, "router-a", "orders@router-c", 2000)
    mesh.run(0.5)
    assert mesh.routers["router-c"].engine.queues.depths() == {"orders": 3}
    mesh.run(2 + SWEEP_INTERVAL_S)
    c = mesh.routers["router-c"]
    assert c.engine.queues.depths() == {EXPIRED_QUEUE: 3}
    expired = events_of(mesh, "router-c", "message.expired")
    assert sorted((e["msg_id"], e["where"], e["dest"]) for e in expired) == sorted(
        (m, "queue", "orders@router-c") for m in (persistent, transient, quiet))
    assert sorted(told.notices) == sorted(
        ("session-1", m, "orders@router-c", "router-c") for m in (persistent, transient))
    # Nobody gets them from their queue now; $expired has them.
    assert Consumer(c, "orders").received == []
    aside = Consumer(c, EXPIRED_QUEUE).received
    assert {m.headers["x-original-address"] for m in aside} == {"orders@router-c"}
    # The notices are no messages of the audit's.
    assert [e for e in events_of(mesh, "router-b", "message.forwarded")
            if e["msg_id"] not in (persistent, transient, quiet)] == []


def test_a_message_that_expires_in_transit_is_not_forwarded(mesh):
    line(mesh)
    told = Told(mesh.routers["router-a"])
    consumer = Consumer(mesh.routers["router-c"], "orders")
    mesh.partition("router-b")
    late = submit(mesh, "router-a", "orders@router-c", 500, notify=True)
    late_transient = submit(mesh, "router-a", "orders@router-c", 500, persistent=False)
    in_time = submit(mesh, "router-a", "orders@router-c", 60_000)
    mesh.run(1)
    mesh.heal("router-b")
    mesh.run(0.5)
    mesh.run(5)
    assert [m.msg_id for m in consumer.received] == [in_time]
    found = {e["msg_id"]: (e["router"], e["where"])
             for name in ("router-a", "router-b", "router-c")
             for e in events_of(mesh, name, "message.expired")}
    # The partition outlived the link (keepalive): the non-persistent one
    # was lost with it, and the persistent one, back in router-a's
    # backlog, expired there before the link came back: router-c never
    # saw it.
    assert found == {late: ("router-a", "backlog")}
    assert [e for e in events_of(mesh, "router-c", "message.enqueued")
            if e["msg_id"] in (late, late_transient)] == []
    assert [n[1] for n in told.notices] == [late]


def test_a_message_waiting_for_an_unreachable_router_expires_in_the_backlog(mesh):
    line(mesh)
    mesh.stop("router-c")
    mesh.run(1)
    waiting = submit(mesh, "router-b", "orders@router-c", 1000)
    mesh.run(1 + 2 * SWEEP_INTERVAL_S)
    b = mesh.routers["router-b"]
    assert b.store.backlog_depths() == {}
    assert [(e["msg_id"], e["where"]) for e in events_of(mesh, "router-b", "message.expired")
            ] == [(waiting, "backlog")]
    assert b.engine.queues.depths() == {EXPIRED_QUEUE: 1}
