"""
Two-phase commit across the failover of an HA pair, as real processes on
127.0.0.1 (issue 28, the chapter's XA rules): a witness and the two
instances of router-b, and a transaction manager
(L{support.two_phase_worker}) with two clients listing both instances.

One run, one SIGKILL, both cases:

 - transaction C{a} is prepared on the active (it acknowledged two
   messages of C{in} and sends three to C{out}); the active is SIGKILLed;
   on the new active, C{tpc_recover()} lists it, and C{tpc_commit(xid)}
   commits it: its sends are enqueued once, its acknowledgements applied
   once (the two messages are never delivered again, not even while it
   waited prepared);
 - transaction C{b} is prepared, and its commit is in flight when the
   active dies: the active committed it, but the answer was lost (a
   proxy between the manager and the active drops what the active says
   from the moment the commit is sent).  The commit fails with
   C{TransactionRetry}, and committing the same xid again on the new
   active completes it without doing it twice.
"""

import sys
import time

from support.proxy import TcpProxy
from support.routers import REPO_ROOT, ClientProcess, mesh, wait_until  # noqa: F401

WORKER = REPO_ROOT / "tests" / "support" / "two_phase_worker.py"
HA = {"heartbeat_interval": "100ms", "lease_timeout": "1s", "replication_timeout": "1s"}
XID_A = [1, "tpc-test:a", "mq"]
XID_B = [1, "tpc-test:b", "mq"]


def lines(worker: ClientProcess, word: str) -> list[str]:
    return [line for line in worker.stdout.splitlines() if line.startswith(word)]


def out_messages(instance) -> list[str]:
    return sorted(m["body"] for m in instance.stored_messages() if m["dest"] == "out@router-b")


def test_prepared_transactions_survive_a_sigkill_and_commit_exactly_once(mesh, tmp_path):  # noqa: F811
    witness = mesh.router("router-a")
    primary_spec, backup_spec = mesh.pair("router-b", [witness], **HA)
    mesh.start(witness)
    primary, backup = mesh.spawn(primary_spec), mesh.spawn(backup_spec)
    primary.wait_ha("active-replicated")
    backup.wait_ha("backup-in-sync")
    assert mesh.send(primary, "in", 4).returncode == 0
    control = tmp_path / "control"
    control.mkdir()
    both = (primary_spec.client_endpoint, backup_spec.client_endpoint)
    with TcpProxy(primary_spec.client_port) as to_primary:
        args = ["--control", str(control)]
        for endpoint in both:
            args += ["--consumer", endpoint]
        for endpoint in (to_primary.endpoint, backup_spec.client_endpoint):
            args += ["--manager", endpoint]
        worker = ClientProcess("two-phase", args, mesh.directory / "clients",
                               program=[sys.executable, str(WORKER)])
        mesh.clients.append(worker)
        wait_until(lambda: lines(worker, "prepared b") or worker.poll() is not None, 60,
                   what="both transactions prepared")
        assert lines(worker, "prepared a"), worker.stderr
        assert primary.queue_depth("out") == 0  # prepared: nothing enqueued yet

        # b's commit goes out; its answer will not come back.
        to_primary.deafen()
        (control / "commit-b").touch()
        [committed] = primary.wait_event("transaction.committed", timeout=30)
        assert committed["xid"] == XID_B
        killed_at = time.monotonic()
        primary.sigkill()

        wait_until(lambda: lines(worker, "committed a") or worker.poll() is not None, 60,
                   what="the manager to commit both on the new active")
        print(f"SIGKILL to both committed on the new active: "
              f"{time.monotonic() - killed_at:.2f} s")
        assert lines(worker, "retry b"), worker.stderr  # TransactionRetry
        assert lines(worker, "recovered") == [f"recovered {[XID_A]}"]
        # The consumer's session was recreated on the new active: the two
        # messages a acknowledged were never delivered again, the others were.
        wait_until(lambda: len(lines(worker, "delivered")) >= 6, 30,
                   what="the unacknowledged messages delivered again")
        (control / "done").touch()
        assert worker.wait(30) == 0, worker.stderr

    delivered = [line.split(" ", 1)[1] for line in lines(worker, "delivered")]
    assert sorted(delivered) == ["message 1 False", "message 2 False", "message 3 False",
                                 "message 3 True", "message 4 False", "message 4 True"]
    # Sends enqueued once each; acknowledgements applied once each.
    assert out_messages(backup) == ["a 1", "a 2", "a 3", "b 1", "b 2", "b 3"]
    assert sorted(m["body"] for m in backup.stored_messages() if m["dest"] == "in@router-b") == [
        "message 3", "message 4"]
    assert {m["state"] for m in backup.stored_messages()} == {"queue"}  # nothing locked
    # The event logs count each send and each acknowledgement once: b's
    # on the old active, which committed it; a's on the new one, which
    # answered b's retry from the xids it remembers, doing nothing again.
    accepted = [e for instance in (primary, backup)
                for e in instance.events("message.accepted", dest="out@router-b")]
    assert len(accepted) == 6 and len({e["msg_id"] for e in accepted}) == 6
    assert [e["xid"] for e in backup.events("transaction.committed")] == [XID_A]
    consumed = [e["msg_id"] for instance in (primary, backup)
                for e in instance.events("message.consumed", queue="in")]
    assert len(consumed) == 2 and len(set(consumed)) == 2
