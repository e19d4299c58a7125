"""
Transacted sessions end to end on the in-memory mesh (real
L{RouterService}s, the real meshroute client over iosim, one
C{task.Clock}): a commit makes every send visible at once, across the
mesh too; a rollback sends nothing and redelivers what it acknowledged;
and a commit is all or nothing across a router crash and restart, and
applied exactly once when retried with duplicate ids.
"""

from dataclasses import replace

import pytest

from meshroute.client import (
    FAILOVER,
    TransactionOutcomeUnknown,
    TransactionRolledBack,
    connect_endpoint,
)
from meshroute.sessions.settings import ClientListenerConfig
from meshroute.events import read_events

from support.client_testing import failure_of, result_of
from meshroute.testing.memory_mesh import MemoryMesh

N = 5


@pytest.fixture
def mesh(tmp_path):
    mesh = MemoryMesh(tmp_path)
    yield mesh
    mesh.stop_all()


def router_config(mesh: MemoryMesh, name: str, connect_to=()):
    return replace(mesh.config(name, connect_to),
                   clients=ClientListenerConfig((f"clients-{name}",)))


@pytest.fixture
def configs(mesh):
    a = router_config(mesh, "router-a")
    b = router_config(mesh, "router-b", connect_to=["router-a"])
    mesh.start(a)
    mesh.start(b)
    mesh.run(1)
    assert mesh.stages("router-a") == {"router-b": "delivery"}
    return {"router-a": a, "router-b": b}


class Clients:
    """
    Meshroute clients connected to the mesh's routers, closed at the end.
    """

    def __init__(self, mesh: MemoryMesh) -> None:
        self.mesh = mesh
        self.made = []

    def connect(self, router: str, name: str, **options):
        endpoint = self.mesh.network.endpoints(name).client(f"clients-{router}")
        d = connect_endpoint(self.mesh.clock, endpoint, client_id=name, **options)
        self.mesh.run(0.1)
        client = result_of(d)
        self.made.append(client)
        return client

    def consume(self, client, queue: str = "q", prefetch: int = 100) -> list:
        got = []
        result_of(_settled(self.mesh, client.subscribe(queue, got.append, prefetch=prefetch)))
        return got


def _settled(mesh: MemoryMesh, d):
    mesh.run(0.1)
    return d


@pytest.fixture
def clients(mesh):
    clients = Clients(mesh)
    yield clients
    for client in clients.made:
        client.close()
    mesh.run(0.5)


def test_a_commit_makes_every_send_visible_at_once_across_the_mesh(mesh, configs, clients):
    producer = clients.connect("router-a", "producer", transacted=True)
    local = clients.consume(clients.connect("router-a", "local-consumer"))
    remote = clients.consume(clients.connect("router-b", "remote-consumer"))
    sends = [producer.send("q", b"local %d" % n) for n in range(N)]
    sends += [producer.send("q@router-b", b"remote %d" % n) for n in range(N)]
    mesh.run(2)
    assert (local, remote) == ([], [])
    assert not any(d.called for d in sends)
    committed = _settled(mesh, producer.commit())
    mesh.run(1)
    assert result_of(committed) is None
    assert len({result_of(d) for d in sends}) == 2 * N
    assert [m.body for m in local] == [b"local %d" % n for n in range(N)]
    assert [m.body for m in remote] == [b"remote %d" % n for n in range(N)]


def test_a_rollback_sends_nothing(mesh, configs, clients):
    producer = clients.connect("router-a", "producer", transacted=True)
    received = clients.consume(clients.connect("router-b", "consumer"))
    sends = [producer.send("q@router-b", b"%d" % n) for n in range(N)]
    rolled_back = _settled(mesh, producer.rollback())
    mesh.run(2)
    assert result_of(rolled_back) is None
    assert all(isinstance(failure_of(d), TransactionRolledBack) for d in sends)
    assert received == []
    assert mesh.routers["router-a"].engine.queues.depths() == {}


def test_acks_of_a_rolled_back_transaction_come_again_flagged(mesh, configs, clients):
    plain = clients.connect("router-a", "producer")
    for n in range(N):
        plain.send("q", b"%d" % n)
    consumer = clients.connect("router-a", "consumer", transacted=True)
    received = clients.consume(consumer, prefetch=N)
    assert [m.redelivered for m in received] == [False] * N
    for message in received:
        message.ack()
    result_of(_settled(mesh, consumer.rollback()))
    mesh.run(1)
    again = received[N:]
    assert sorted(m.body for m in again) == sorted(b"%d" % n for n in range(N))
    assert all(m.redelivered for m in again)
    for message in again:
        message.ack()
    result_of(_settled(mesh, consumer.commit()))
    assert mesh.routers["router-a"].engine.queues.depths() == {}


def restart(mesh: MemoryMesh, configs, name: str) -> None:
    mesh.crash(name)
    mesh.start(configs[name])
    mesh.run(3)


def test_a_failed_commit_leaves_nothing_done_after_a_restart(mesh, configs, clients,
                                                             observe_errors):
    plain = clients.connect("router-a", "producer")
    plain.send("in", b"work")
    worker = clients.connect("router-a", "worker", transacted=True, reconnect_attempts=-1,
                             retry_interval_ms=200, max_retry_interval_ms=200)
    received = clients.consume(worker, "in")
    received[0].ack()
    sends = [worker.send("out", b"%d" % n) for n in range(N)]
    mesh.routers["router-a"].store.executor.fail_next("commit")
    committed = _settled(mesh, worker.commit())
    assert failure_of(committed).code == "internal-error"
    (logged,) = observe_errors.take(lambda e: "commit failed" in e.get("log_format", "")
                                    or e.get("doing") == "commit")
    assert all(isinstance(failure_of(d), TransactionRolledBack) for d in sends)
    # The message it acknowledged is back in its queue: delivered again,
    # flagged.
    assert [(m.body, m.redelivered) for m in received] == [(b"work", False), (b"work", True)]
    assert mesh.routers["router-a"].store.queue_depths() == {"in": 1}
    restart(mesh, configs, "router-a")
    assert mesh.routers["router-a"].store.queue_depths() == {"in": 1}
    assert [(m.body, m.redelivered) for m in received[2:]] == [(b"work", True)]


def test_a_commit_whose_answer_a_crash_lost_is_applied_once_when_retried(
        mesh, configs, clients):
    plain = clients.connect("router-a", "producer")
    plain.send("in", b"work")
    worker = clients.connect("router-a", "worker", transacted=True, reconnect_attempts=-1,
                             retry_interval_ms=200, max_retry_interval_ms=200)
    events = []
    worker.add_failure_listener(events.append)
    received = clients.consume(worker, "in")
    received[0].ack()
    sends = [worker.send("out@router-b", b"%d" % n, duplicate_id=f"job-1:{n}")
             for n in range(N)]
    committed = worker.commit()
    # The router receives the Commit and makes it durable; its answers are
    # lost on the way, and the router crashes.
    worker._core.connection.protocol.dataReceived = lambda data: None
    mesh.network.flush()
    restart(mesh, configs, "router-a")
    assert isinstance(failure_of(committed), TransactionOutcomeUnknown)
    assert all(failure_of(d).code == "unblocked" for d in sends)
    assert events == [FAILOVER]
    assert mesh.routers["router-a"].store.queue_depths() == {}
    assert received == [received[0]]
    # The application retries the transaction with the same duplicate ids.
    again = [worker.send("out@router-b", b"%d" % n, duplicate_id=f"job-1:{n}")
             for n in range(N)]
    result_of(_settled(mesh, worker.commit()))
    assert len({result_of(d) for d in again}) == N
    received = clients.consume(clients.connect("router-b", "consumer"), "out")
    mesh.run(2)
    assert sorted(m.body for m in received) == sorted(b"%d" % n for n in range(N))
    # The first commit was applied; the retry was answered from the
    # duplicate ids.
    events = read_events(configs["router-a"].data_dir)
    assert sorted(e["duplicate_id"] for e in events if e["event"] == "message.duplicate") == [
        f"job-1:{n}" for n in range(N)]
