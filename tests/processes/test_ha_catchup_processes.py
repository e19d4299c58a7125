"""
A backup that starts against a large store catches up without stalling the
active's writers (issue 9: "A large backlog (100,000 messages) replicated
at backup start while producers keep sending: no send waits more than a
second"), as real processes on 127.0.0.1.

The primary of router-b runs alone (a witness, router-a, makes the
majority) and takes 100,000 persistent messages into a queue nobody
consumes, through its client listener (C{meshroute send}, pipelined).
Then a producer that times each send (tests/support/timed_producer.py) and a
pipelined one (C{meshroute send}, 20,000 more) keep sending while the
backup starts from an empty data dir: the active takes
a snapshot of its store, streams it and the batches since, the backup
says it is in sync, the pair switches to synchronous replication.  The
bound is one second for every send, through all of that: a correctness
bound, not a benchmark (the active must never hold its writers for the
snapshot, the catch-up or the switch).  Last, the primary is SIGKILLed:
the backup takes over holding every message that was confirmed.
"""

import sys
import time
from pathlib import Path

from support.routers import REPO_ROOT, ClientProcess, WaitTimeout, mesh  # noqa: F401 (mesh is a fixture)

BACKLOG = 100_000
#: Messages the pipelined producer sends meanwhile.
BULK = 20_000
#: How long one send may wait, whatever replication is doing.
MAX_SEND_LATENCY_S = 1.0
#: Sends confirmed in replicated mode before the producer stops: the
#: switch to synchronous replication is behind them.
REPLICATED_SENDS = 200
#: Defaults of [ha]: lease-timeout 3 s + 2 x heartbeat-interval 500 ms + 1 s.
FAILOVER_BOUND_S = 5.0


class TimedProducer(ClientProcess):
    """
    tests/support/timed_producer.py in the background, stopped by creating its
    stop file; L{messages} are its confirmed sends.
    """

    def __init__(self, label: str, endpoints: list[str], to: str, directory: Path) -> None:
        self.stop_file = directory / f"{label}.stop"
        args = [a for endpoint in endpoints for a in ("--connect", endpoint)]
        program = [sys.executable, str(REPO_ROOT / "tests" / "support" / "timed_producer.py")]
        super().__init__(label, [*args, "--to", to, "--stop-file", str(self.stop_file)],
                         directory, program)

    def stop(self, timeout: float = 30.0) -> int:
        self.stop_file.touch()
        return self.wait(timeout)

    def confirmed(self, at_least: int) -> bool:
        """
        Whether it confirmed C{at_least} sends; it must not have ended.
        """
        if self.poll() is not None:
            raise AssertionError(f"{self.label} exited with {self.poll()}:\n{self.stderr}")
        return self.count() >= at_least


def ha_states(*instances) -> str:
    """
    What each instance's C{/api/v1/ha} says, for a failure message.
    """
    states = []
    for instance in instances:
        try:
            ha = instance.ha()
        except OSError as e:
            states.append(f"{instance.spec.label}: {e}")
            continue
        states.append(f"{instance.spec.label}: {ha['state']}, epoch {ha['epoch']}, position "
                      f"{ha['position']}, lag {ha['lag']}")
    return "; ".join(states)


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def test_a_backup_catching_up_a_large_backlog_never_stalls_a_send(mesh):  # noqa: F811
    witness = mesh.router("router-a")
    primary_spec, backup_spec = mesh.pair("router-b", [witness])
    mesh.start(witness)
    primary = mesh.spawn(primary_spec)
    primary.wait_ha("active-alone")

    started = time.monotonic()
    result = mesh.send(primary, "backlog@router-b", BACKLOG, "--size", "100", timeout=600)
    assert result.returncode == 0, result.stderr
    backlog_s = time.monotonic() - started
    assert primary.queue_depth("backlog") == BACKLOG

    producer = TimedProducer("timed-producer", [primary.client_endpoint], "orders@router-b",
                             mesh.directory / "clients")
    mesh.clients.append(producer)
    primary.wait_for(lambda: producer.confirmed(10), timeout=30,
                     what="the timed producer's first sends")
    before_backup = producer.count()

    # A second producer, pipelined, keeps the stream busy while the
    # backup catches up.
    bulk = mesh.start_send(primary, "bulk@router-b", BULK, "--size", "100")
    started = time.monotonic()
    backup = mesh.spawn(backup_spec)
    backup.wait_ha("backup-in-sync", timeout=120)
    catch_up_s = time.monotonic() - started
    primary.wait_ha("active-replicated", timeout=30)
    replicated_from = producer.count()
    try:
        primary.wait_for(lambda: producer.confirmed(replicated_from + REPLICATED_SENDS),
                         timeout=60, what=f"{REPLICATED_SENDS} sends confirmed in replicated mode")
    except WaitTimeout as e:
        raise AssertionError(f"{e}: {ha_states(primary, backup)}; "
                             f"last confirmed send: {producer.messages()[-1:]}") from None
    assert producer.stop() == 0, producer.stderr
    assert bulk.wait(120) == 0, bulk.stderr

    sent = producer.messages()
    during = [m["latency"] for m in sent[before_backup:]]
    summary = (f"backlog of {BACKLOG} built in {backlog_s:.1f} s; backup in sync "
               f"{catch_up_s:.1f} s after its start; {len(sent)} timed sends, "
               f"{len(during)} from the backup's start on: max {max(during) * 1000:.0f} ms, "
               f"p99 {percentile(during, 0.99) * 1000:.0f} ms")
    print(summary)
    assert [m["n"] for m in sent] == list(range(1, len(sent) + 1)), summary
    slow = [m for m in sent if m["latency"] > MAX_SEND_LATENCY_S]
    assert not slow, f"{summary}; sends over {MAX_SEND_LATENCY_S} s: {slow[:10]}"

    killed_at = time.monotonic()
    primary.sigkill()
    backup.wait_ha("active-alone", timeout=FAILOVER_BOUND_S + 5)
    assert time.monotonic() - killed_at <= FAILOVER_BOUND_S
    stored = backup.stored_messages()
    assert sum(m["dest"] == "backlog@router-b" for m in stored) == BACKLOG
    assert sum(m["dest"] == "bulk@router-b" for m in stored) == BULK
    orders = {m["msg_id"] for m in stored if m["dest"] == "orders@router-b"}
    assert {m["id"] for m in sent} <= orders, "a confirmed send is missing on the backup"
