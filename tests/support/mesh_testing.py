"""
Traffic on the in-memory mesh (L{meshroute.testing.memory_mesh}): the C{mesh}
fixture, a consumer that acknowledges everything, numbered sends, the
events one router recorded (and its links closed on a failed store call,
whose logged errors a test takes), and a line of three routers.
"""

import pytest
from meshroute.events import read_events
from meshroute.testing.memory_mesh import MemoryMesh


@pytest.fixture
def mesh(tmp_path):
    mesh = MemoryMesh(tmp_path)
    yield mesh
    mesh.stop_all()


class Consumer:
    """
    Receives and acknowledges everything from one queue of one router.
    """

    def __init__(self, router, queue: str, credit: int = 100) -> None:
        self.received = []
        self.redelivered = 0
        # Deliveries may start inside subscribe(): grant credit once we
        # hold the subscription.
        self._subscription = router.engine.queues.subscribe(queue, self._deliver, 0)
        self._subscription.add_credit(credit)

    def _deliver(self, delivery) -> None:
        self.received.append(delivery.message)
        self.redelivered += delivery.redelivered
        self._subscription.ack([delivery.delivery_id])
        self._subscription.add_credit(1)

    @property
    def bodies(self) -> list[bytes]:
        return [m.body for m in self.received]


def send(mesh, router: str, address: str, count: int, start: int = 0, persistent=True):
    """
    Submit C{count} numbered messages; return their Deferreds.
    """
    engine = mesh.routers[router].engine
    return [engine.submit(address, b"%d" % i, {}, persistent) for i in range(start, start + count)]


def assert_confirmed(deferreds) -> None:
    failures = []
    for d in deferreds:
        d.addErrback(failures.append)
        assert d.called
    assert failures == []


def events_of(router, event: str) -> list[dict]:
    router.events.flush()
    return [e for e in read_events(router.events.data_dir) if e["event"] == event]


def closes_for_store(router) -> list:
    """
    The C{link.closed} events of C{router} that a failed store call caused.
    """
    return [e for e in events_of(router, "link.closed") if e["reason"] == "store-failed"]


def take_store_failures(observe_errors) -> list:
    """
    Take the errors logged for links closed on a failed store call out of
    C{observe_errors}, which would fail the test.
    """
    return observe_errors.take(lambda e: "closing the link" in e.get("log_format", ""))


def line(mesh):
    mesh.add("router-a", connect_to=["router-b"])
    mesh.add("router-b", connect_to=["router-c"])
    mesh.add("router-c")
    mesh.run(1)
