"""
An HA pair's restarts as real processes on 127.0.0.1 (issue 9): both
instances SIGKILLed and started again in either order, failback, and a
transacted consumer and producer across a failover.

The mesh of each run: router-a, the witness of router-b's pair and the
far side of its traffic (a routing connector that lists both instances,
a client listener), and the two instances of router-b.  Producers send
persistent messages with duplicate ids to the pair's two client
endpoints, addressed to a queue on router-a; a consumer there must
receive every confirmed message exactly once, and the audit of the run's
event logs must find nothing wrong.

Intervals are short (heartbeat 100 ms, lease 1 s) so that each run takes
seconds; every wait is a poll against a deadline.
"""

import subprocess
import sys
import time
from pathlib import Path

import pytest

from support.spark import spark  # noqa: F401 (a fixture)
from support.routers import (  # noqa: F401 (mesh is a fixture)
    REPO_ROOT,
    ClientProcess,
    Mesh,
    RouterProcess,
    mesh,
    router_env,
    wait_until,
)
from support.audit_testing import audit

from meshroute.audit.running import EXIT_OK

HEARTBEAT_S = 0.1
LEASE_S = 1.0
HA = {"heartbeat_interval": "100ms", "lease_timeout": "1s", "replication_timeout": "1s"}
#: The issue's bound: lease-timeout + 2 x heartbeat-interval + 1 s.
TAKEOVER_BOUND_S = LEASE_S + 2 * HEARTBEAT_S + 1.0
QUEUE = "orders"
ADDRESS = f"{QUEUE}@router-a"
ACTIVE = ("active-replicated", "active-alone")


WORKER = REPO_ROOT / "tests" / "support" / "ha_worker.py"


class WorkerProcess(ClientProcess):
    """
    A client worker of L{ha_worker} in the background, read as a
    L{ClientProcess} is.
    """

    def __init__(self, label: str, args: list[str], directory: Path) -> None:
        self.label = label
        self.args = list(args)
        directory.mkdir(parents=True, exist_ok=True)
        self.stdout_path = directory / f"{label}.out"
        self.stderr_path = directory / f"{label}.err"
        with open(self.stdout_path, "wb") as out, open(self.stderr_path, "wb") as err:
            self.popen = subprocess.Popen(
                [sys.executable, str(WORKER), *self.args],
                env=router_env(), stdin=subprocess.DEVNULL, stdout=out, stderr=err)

    def done(self, word: str) -> list[int]:
        """
        The numbers of the lines C{WORD N} printed so far.
        """
        return [int(line.split()[1]) for line in self.stdout.splitlines()
                if line.startswith(word + " ")]


class PairRun:
    """
    The three routers of one run and the clients it started.
    """

    def __init__(self, mesh: Mesh, **ha: object) -> None:  # noqa: F811
        self.mesh = mesh
        far = mesh.router("router-a", clients=True)
        self.primary_spec, self.backup_spec = mesh.pair("router-b", [far], **{**HA, **ha})
        far.connectors.append(mesh.connector(router="router-b", endpoint=[
            self.primary_spec.routing_endpoint, self.backup_spec.routing_endpoint]))
        far.write()
        [self.far] = mesh.start(far)
        self.primary = self.backup = None

    @property
    def endpoints(self) -> list[str]:
        return [self.primary_spec.client_endpoint, self.backup_spec.client_endpoint]

    def start_primary(self) -> RouterProcess:
        self.primary = self.mesh.spawn(self.primary_spec)
        return self.primary

    def start_backup(self) -> RouterProcess:
        self.backup = self.mesh.spawn(self.backup_spec)
        return self.backup

    def start_pair(self) -> None:
        self.start_primary().wait_ha("active-alone")
        self.start_backup()
        self.primary.wait_ha("active-replicated")
        self.backup.wait_ha("backup-in-sync")
        self.far.wait_delivery("router-b")

    def worker(self, mode: str, *args: str) -> WorkerProcess:
        """
        Start an L{ha_worker} of C{mode} on the pair's two endpoints.
        """
        connects = [arg for endpoint in self.endpoints for arg in ("--connect", endpoint)]
        worker = WorkerProcess(f"{mode}-{len(self.mesh.clients) + 1}", [mode, *connects, *args],
                               self.mesh.directory / "clients")
        self.mesh.clients.append(worker)
        return worker

    def send(self, count: int, *options: str) -> WorkerProcess:
        """
        A paced producer of C{count} persistent messages with duplicate
        ids to the far side's queue, reconnecting forever along both
        instances.
        """
        return self.worker("produce", "--to", ADDRESS, "--count", str(count),
                           "--prefix", "order-", *options)

    def receive(self, count: int | None = None):
        return self.mesh.start_receive(self.far, QUEUE, count)

    def stop_all(self) -> None:
        """
        Stop every running router in order (backup, active, far side), so
        that each event log ends with its C{router.stopped}.
        """
        running = [p for p in (self.backup, self.primary) if p and p.popen.poll() is None]
        running.sort(key=lambda p: p.ha()["state"] in ACTIVE)
        for process in [*running, self.far]:
            assert process.terminate() == 0, process.log_tail()

    def audit(self, spark, out):  # noqa: F811
        logs = [spec.events_dir for spec in
                (self.far.spec, self.primary_spec, self.backup_spec)]
        code, stdout, stderr, summary = audit(spark, logs, out, in_flight_grace_s=0.0)
        assert code == EXIT_OK, stdout
        return summary


def active_state(process: RouterProcess) -> str | None:
    state = process.ha()["state"]
    return state if state in ACTIVE else None


def confirmed_more(sender: WorkerProcess, more: int, what: str) -> None:
    """
    Wait until C{sender} had C{more} messages confirmed than now.
    """
    before = len(sender.done("confirmed"))
    wait_until(lambda: len(sender.done("confirmed")) >= before + more, 60,
               what=f"{more} messages confirmed {what}")


def since_start(process: RouterProcess, event: str) -> list[dict]:
    """
    The C{event} records of C{process}'s event log since it last started.
    """
    records = process.events()
    starts = [i for i, record in enumerate(records) if record["event"] == "router.started"]
    return [record for record in records[starts[-1]:] if record["event"] == event]


def received_once(consumer, count: int) -> None:
    """
    The consumer printed C{count} messages, each body once.
    """
    bodies = [message["body"] for message in consumer.messages()]
    assert len(bodies) == count, f"{len(bodies)} received"
    assert len(set(bodies)) == count, "a message was received twice"


def took_over(process: RouterProcess, since: float, bound: float) -> float:
    process.wait_for(lambda: active_state(process), timeout=bound + 10,
                     what=f"{process.spec.label} to serve")
    took = time.monotonic() - since
    assert took <= bound, f"{process.spec.label} took {took:.2f} s to serve"
    return took


@pytest.mark.slow  # 50-150 s each: make test-slow runs it (test_ha_processes has the short one)
@pytest.mark.parametrize("first", ["stale", "newest"])
def test_both_instances_killed_then_started_in_either_order(mesh, spark, first, tmp_path):  # noqa: F811
    """
    The backup took over and served alone; both are SIGKILLed under load.
    Started again in either order, the backup (the newest (epoch,
    position)) resumes by itself, the primary (stale) never activates;
    nothing confirmed is lost or enqueued twice.
    """
    count = 1000
    run = PairRun(mesh, allow_failback=False)
    run.start_pair()
    consumer = run.receive(count)
    sender = run.send(count)
    confirmed_more(sender, 150, "by the primary")
    killed_at = time.monotonic()
    run.primary.sigkill()
    takeover = took_over(run.backup, killed_at, TAKEOVER_BOUND_S)
    confirmed_more(sender, 150, "by the backup")
    run.backup.sigkill()
    assert sender.poll() is None, "the producer finished before both instances died"

    if first == "stale":
        primary = run.start_primary()
        # The primary asks the voters: the witness knows the backup's
        # newer epoch (and, for a lease, still believes it active), so the
        # primary never serves; it follows the backup once that is back.
        primary.wait_ha("starting", "backup-syncing")
        watched_until = time.monotonic() + 3 * LEASE_S
        while time.monotonic() < watched_until:
            assert primary.ha()["state"] not in ACTIVE
            time.sleep(0.05)
        restarted_at = time.monotonic()
        backup = run.start_backup()
    else:
        restarted_at = time.monotonic()
        backup = run.start_backup()
        backup.wait_ha(*ACTIVE)
        primary = run.start_primary()
    backup.wait_ha(*ACTIVE)
    resumed = time.monotonic() - restarted_at
    primary.wait_ha("backup-in-sync")
    assert not since_start(primary, "ha.epoch"), "the stale primary took an epoch"

    assert sender.wait(120) == 0, sender.stderr
    assert consumer.wait(60) == 0, consumer.stderr
    received_once(consumer, count)
    run.stop_all()
    run.audit(spark, tmp_path / "audit")
    print(f"takeover {takeover:.2f} s; resumed {resumed:.2f} s after the restart ({first} first)")


@pytest.mark.slow  # 75-85 s alone: make test-slow runs it
def test_ten_failback_cycles_under_load_lose_and_double_nothing(mesh, spark, tmp_path):  # noqa: F811
    """
    allow-failback and restart-backup (the defaults): ten times, the
    primary is SIGKILLed under load, the backup takes over, the primary
    returns, catches up and gets the router back in a new epoch, and the
    backup follows it again.  Every confirmed message reaches the far
    consumer once.
    """
    run = PairRun(mesh)
    run.start_pair()
    consumer = run.receive()
    stop = tmp_path / "stop-sending"
    sender = run.send(1_000_000, "--until", str(stop))
    takeovers, failbacks = [], []
    for cycle in range(10):
        confirmed_more(sender, 20, f"by the primary (cycle {cycle})")
        killed_at = time.monotonic()
        run.primary.sigkill()
        takeovers.append(took_over(run.backup, killed_at, TAKEOVER_BOUND_S))
        confirmed_more(sender, 20, f"by the backup (cycle {cycle})")
        restarted_at = time.monotonic()
        run.start_primary().wait_ha("active-replicated")
        failbacks.append(time.monotonic() - restarted_at)
        run.backup.wait_ha("backup-in-sync")
    stop.touch()
    assert sender.wait(60) == 0, sender.stderr
    confirmed = sender.done("confirmed")
    wait_until(lambda: consumer.count() >= len(confirmed), 60,
               what=f"{len(confirmed)} messages at the far consumer")
    run.stop_all()
    consumer.kill()
    received_once(consumer, len(confirmed))
    # (A SIGKILL may take the newest lines of the event log with it.)
    handovers = [e["duration_ms"] for e in run.primary.events("ha.failover", kind="handover")]
    run.audit(spark, tmp_path / "audit")
    print(f"{len(confirmed)} messages; takeover s: {sorted(round(t, 2) for t in takeovers)}; "
          f"primary restart to serving again s: {sorted(round(t, 2) for t in failbacks)}; "
          f"hand-over ms: {sorted(handovers)}")


def test_a_transacted_producer_and_relay_across_a_failover_process_each_message_once(
        mesh, spark, tmp_path):  # noqa: F811
    """
    A transacted producer sends to a queue of the pair in transactions of
    five; a transacted relay consumes that queue and, per message, sends
    one on to the far side and acknowledges in one transaction.  The
    active is SIGKILLed under that load: commits then fail with
    TransactionRolledBack or TransactionOutcomeUnknown, and the workers
    do their transactions again with the same duplicate ids.  Every
    message reaches the far consumer exactly once.
    """
    count = 300
    run = PairRun(mesh)
    run.start_pair()
    consumer = mesh.start_receive(run.far, "out", count)
    producer = run.worker("transact-produce", "--to", "in@router-b", "--count", str(count),
                          "--prefix", "in-", "--batch", "5")
    relay = run.worker("transact-relay", "--queue", "in", "--to", "out@router-a",
                       "--count", str(count), "--prefix", "out-")
    wait_until(lambda: len(relay.done("relayed")) >= 50, 60, what="50 messages relayed")
    killed_at = time.monotonic()
    run.primary.sigkill()
    takeover = took_over(run.backup, killed_at, TAKEOVER_BOUND_S)
    assert producer.wait(120) == 0, producer.stderr
    assert sorted(producer.done("committed")) == list(range(1, count + 1))
    assert consumer.wait(120) == 0, consumer.stderr
    received_once(consumer, count)
    relay.kill()
    run.stop_all()
    run.audit(spark, tmp_path / "audit")
    print(f"transacted: takeover {takeover:.2f} s")
