"""
A shared-store pair as real processes on 127.0.0.1 (docs/ha.md, "Shared
store"): two C{twistd meshroute} instances of router-b on one data dir,
taking turns by its lock file, under SIGKILL, SIGTERM, SIGSTOP, failback
and a third instance started on the served data dir.
"""

import os
import time
from pathlib import Path

import pytest

from meshroute.audit.running import EXIT_OK
from support.audit_testing import audit
from support.routers import mesh, wait_until  # noqa: F401 (mesh is a fixture)
from support.spark import spark  # noqa: F401 (a fixture)

#: The backup serves within a second of the kill plus the store's open
#: time (lock-poll-interval is 100 ms by default).
SERVE_BOUND_S = 1.5
#: The first confirmed send on the backup after the kill, at the client's
#: defaults (its first attempt at once, then retry-interval 2 s).
FIRST_SEND_BOUND_S = 2.0
#: Sent at RATE a second: the live is killed mid-stream, once the
#: producer's connection has served longer than its retry-interval (2 s),
#: so that its first attempt at the backup is at once.
COUNT = 4000
RATE = 1000
QUEUE = "orders@router-b"
#: The event logs of the run under load, audited by the module's last test.
RUN_LOGS: list[Path] = []


def start_pair(mesh, **ha):  # noqa: F811
    primary_spec, backup_spec = mesh.shared_pair("router-b", **ha)
    primary = mesh.spawn(primary_spec)
    primary.wait_ha("active")
    backup = mesh.spawn(backup_spec)
    backup.wait_ha("backup-waiting")
    return primary, backup


def serving(process) -> bool:
    return bool(process.info().get("serving"))


def wait_serving(process) -> None:
    """
    Wait until the instance is active and its router's store is open.
    """
    process.wait_ha("active")
    process.wait_for(lambda: serving(process), what=f"{process.spec.label} to serve")


def holds_store_open(process) -> bool:
    """
    Whether the process has C{store.db} open (a file descriptor on it).
    """
    directory = f"/proc/{process.pid}/fd"
    store = str(process.spec.store_path)
    return any(os.path.realpath(os.path.join(directory, fd)) == store
               for fd in os.listdir(directory))


def test_sigkill_of_the_live_under_load_loses_and_doubles_nothing(mesh):  # noqa: F811
    """
    router-c dials both instances; a producer at the client's defaults
    sends at a steady rate with duplicate ids to a queue on router-c through router-b; the
    live is SIGKILLed mid-stream: the backup serves within the bound from
    the same store (same store id), the first send is confirmed on it
    within FIRST_SEND_BOUND_S, and c's consumer receives each message
    once.
    """
    primary, backup = start_pair(mesh)
    far = mesh.router("router-c", clients=True, connect=[mesh.connector(
        router="router-b",
        endpoint=[primary.spec.routing_endpoint, backup.spec.routing_endpoint])])
    (router_c,) = mesh.start(far)
    primary.wait_route("router-c")
    receiver = mesh.start_receive(router_c, "far", COUNT, 120)
    sender = mesh._client("send", [
        "send", "--connect", primary.spec.client_endpoint,
        "--connect", backup.spec.client_endpoint, "--to", "far@router-c",
        "--count", str(COUNT), "--rate", str(RATE), "--duplicate-id-prefix", "far-",
        "--reconnect-attempts", "-1"])
    # The moment is the producer's (what the live confirmed), not the far
    # consumer's, which a loaded host may let fall behind until every
    # send is confirmed and the backup would have none to confirm.
    primary.wait_for(lambda: len(primary.events("message.accepted")) >= COUNT * 5 // 8,
                     timeout=60, what="5/8 of the messages confirmed by the live")
    assert sender.poll() is None, "the stream was over before the kill: kill it sooner"
    killed_at, killed_wall = time.monotonic(), time.time()
    primary.sigkill()
    backup.wait_for(lambda: serving(backup), timeout=10, what="the backup to serve")
    took = time.monotonic() - killed_at
    print(f"SIGKILL of the live to the backup serving: {took * 1000:.0f} ms")
    assert took <= SERVE_BOUND_S, f"the backup served {took:.2f} s after the kill"
    first = backup.wait_event("message.accepted", timeout=30)[0]
    first_send = first["time"] - killed_wall
    print(f"SIGKILL of the live to the first send confirmed on the backup: "
          f"{first_send * 1000:.0f} ms")
    assert first_send <= FIRST_SEND_BOUND_S
    assert sender.wait(120) == 0, sender.stderr
    assert receiver.wait(120) == 0, receiver.stderr
    bodies = [message["body"] for message in receiver.messages()]
    assert sorted(bodies) == sorted(f"message {n}" for n in range(1, COUNT + 1))
    # Nothing enqueued twice: nothing more waits at the new active for
    # router-c, nor on the way there, and router-c's queue is empty.
    backup.wait_nothing_in_flight()
    router_c.wait_for(lambda: router_c.queue_depth("far") == 0, timeout=10,
                      what="nothing left over (nothing enqueued twice)")
    (epoch,) = {e["epoch"] for e in backup.events("ha.failover", kind="takeover")}
    assert epoch == 2 and backup.ha()["epoch"] == 2
    for process in (backup, router_c):
        assert process.terminate() == 0, process.log_tail()
    RUN_LOGS.extend(spec.events_dir for spec in mesh.specs if spec.events_dir.exists())


def test_a_third_instance_on_the_served_data_dir_waits_without_opening_the_store(
        mesh):  # noqa: F811
    """
    While the primary serves and the backup waits, a third instance
    started on the same data dir (another copy of the backup) waits too,
    never opening store.db; the second instance in the pair never has it
    open either.
    """
    primary, backup = start_pair(mesh)
    third_spec = mesh.router("router-b", label="router-b-third", clients=True)
    third_spec.router["data-dir"] = backup.spec.router["data-dir"]
    third_spec.instance_dir = backup.spec.instance_dir
    third_spec.extra["ha"] = dict(backup.spec.extra["ha"])
    third_spec.write()
    third = mesh.spawn(third_spec)
    third.wait_ha("backup-waiting")
    assert holds_store_open(primary)
    assert not holds_store_open(backup) and not holds_store_open(third)
    status = third.ha()
    assert status["live"]["held"] and status["live"]["owner"] == "primary"


def test_sigterm_hands_over_within_a_second_or_pauses_without_failover_on_shutdown(
        mesh):  # noqa: F811
    """
    SIGTERM of the live: with failover-on-shutdown (the default) the
    backup serves within a second with every message; without, the
    backup keeps waiting and the primary takes the store back when it
    starts again.
    """
    primary, backup = start_pair(mesh)
    assert mesh.send(primary, QUEUE, 20).returncode == 0
    stopped_at = time.monotonic()
    primary.popen.terminate()
    backup.wait_for(lambda: serving(backup), timeout=5, what="the backup to serve")
    took = time.monotonic() - stopped_at
    print(f"SIGTERM of the live to the backup serving: {took * 1000:.0f} ms")
    assert took <= 1.0, f"hand-over took {took:.2f} s"
    assert primary.popen.wait(15) == 0
    assert backup.queue_depth("orders") == 20
    # The backup, now live, is stopped with failover-on-shutdown = false.
    backup.popen.terminate()
    assert backup.popen.wait(15) == 0
    backup = mesh.spawn(backup.spec)
    backup.wait_ha("active")  # alone, it takes the store a clean stop left live
    primary.spec.extra["ha"]["failover-on-shutdown"] = False
    primary.spec.write()
    primary = mesh.spawn(primary.spec)
    primary.wait_ha("active")  # failback
    backup.wait_ha("backup-waiting")
    primary.popen.terminate()
    assert primary.popen.wait(15) == 0
    waited_since = time.monotonic()
    wait_until(lambda: time.monotonic() - waited_since > 1.0, timeout=5,
               what="ten lock polls")
    status = backup.ha()
    assert status["state"] == "backup-waiting" and not status["live"]["held"]
    primary = mesh.spawn(primary.spec)
    wait_serving(primary)
    assert primary.queue_depth("orders") == 20


def test_failback_and_restart_backup_over_five_cycles(mesh):  # noqa: F811
    """
    Five times: SIGKILL the primary, the backup serves, the primary
    starts again, asks for the store back, and the backup (allow-failback)
    hands it over and waits again (restart-backup); each activation in a
    newer epoch, nothing lost.  Then with restart-backup = false the
    backup's process ends after handing back.
    """
    primary, backup = start_pair(mesh)
    epochs = [primary.ha()["epoch"]]
    for cycle in range(5):
        assert mesh.send(primary, QUEUE, 2).returncode == 0
        primary.sigkill()
        backup.wait_ha("active")
        epochs.append(backup.ha()["epoch"])
        primary = mesh.spawn(primary.spec)
        primary.wait_ha("active")
        epochs.append(primary.ha()["epoch"])
        backup.wait_ha("backup-waiting")
    assert epochs == sorted(set(epochs)), epochs
    wait_serving(primary)
    assert primary.queue_depth("orders") == 10
    kinds = [e["kind"] for e in primary.events("ha.failover")]
    assert kinds == ["handover"] * 5
    backup.popen.terminate()
    assert backup.popen.wait(15) == 0
    backup.spec.extra["ha"]["restart-backup"] = False
    backup.spec.write()
    backup = mesh.spawn(backup.spec)
    backup.wait_ha("backup-waiting")
    primary.sigkill()
    backup.wait_ha("active")
    primary = mesh.spawn(primary.spec)
    wait_serving(primary)
    assert backup.popen.wait(15) == 0
    assert primary.queue_depth("orders") == 10


def test_a_frozen_live_keeps_the_store_and_the_backup_says_why(mesh):  # noqa: F811
    """
    SIGSTOP of the live: it keeps its lock, so no failover; after
    lease-timeout without a heartbeat the backup reports
    live-unresponsive (and logs it), and back to backup-waiting once the
    live runs again.
    """
    primary, backup = start_pair(mesh, lease_timeout="1500ms")
    primary.sigstop()
    status = backup.wait_ha("live-unresponsive", timeout=10)
    assert status["live"]["held"] and status["live"]["heartbeat_silent_s"] >= 1.5
    assert not serving(backup)
    assert backup.events("ha.state", state="live-unresponsive")
    assert "wrote no heartbeat" in backup.log_tail(80)
    primary.sigcont()
    backup.wait_ha("backup-waiting")
    assert serving(primary) and primary.ha()["epoch"] == 1


def test_the_audit_of_the_run_under_load_finds_nothing_wrong(spark, tmp_path):  # noqa: F811
    """
    The audit reads both instances' logs (each in its own directory of
    the shared data dir) and router-c's: every message accepted once,
    nothing lost or doubled across the failover.
    """
    if not RUN_LOGS:
        pytest.skip("the run under load was not selected")
    code, stdout, stderr, summary = audit(spark, RUN_LOGS, tmp_path / "audit",
                                          in_flight_grace_s=0.0, keepalive_limit=100.0)
    assert code == EXIT_OK, stdout + stderr
    messages = summary["messages"]
    assert messages["lost"] == messages["duplicated"] == 0, messages
