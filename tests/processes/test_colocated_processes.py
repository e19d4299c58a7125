"""
Colocated backups as real processes on 127.0.0.1 (issue 28): two
C{twistd meshroute} processes, each running one router's primary and
hosting the other router's backup (C{[[ha.colocated]]}), and a witness
router voting for both pairs.  One process is SIGKILLed while producers
send persistent messages with duplicate ids to both routers: the other
process serves both, nothing is lost or doubled, and the audit of the
run's event logs is clean.

Short intervals keep it to seconds: heartbeats every 200 ms, a lease of
1 s, a backup lost after 1 s of silence.
"""

import re
import time
import urllib.request
from pathlib import Path

import pytest
from support.audit_testing import audit
from support.colocation import colocate, hosted_process
from support.routers import mesh  # noqa: F401 (a fixture)
from support.spark import spark  # noqa: F401 (a fixture)

from meshroute.audit.running import EXIT_OK

HA = {"heartbeat_interval": "200ms", "lease_timeout": "1s", "replication_timeout": "1s"}
#: The issue's failover bound: lease-timeout + 2 x heartbeat-interval + 1 s.
FAILOVER_BOUND_S = 1.0 + 2 * 0.2 + 1.0
COUNT = 300

#: The event logs of the run, for the audit (the module's last test).
RUN_LOGS: list[Path] = []


def metrics(process) -> str:
    with urllib.request.urlopen(process.spec.admin_url + "/metrics", timeout=5) as response:
        return response.read().decode()


def send(mesh, primary, backup, router: str):  # noqa: F811
    """
    A producer of C{COUNT} persistent messages to C{orders@ROUTER}, given
    both instances, retrying with its duplicate ids across a failover.
    """
    return mesh._client("send", [
        "send", "--connect", primary.spec.client_endpoint, "--connect",
        backup.spec.client_endpoint, "--to", f"orders@{router}", "--count", str(COUNT),
        "--duplicate-id-prefix", f"{router}-", "--reconnect-attempts", "-1",
        "--retry-interval", "100"])


def test_one_process_killed_under_load_the_other_serves_both_routers(mesh):  # noqa: F811
    witness = mesh.router("router-w")
    a_primary, a_backup = mesh.pair("router-a", [witness], **HA)
    b_primary, b_backup = mesh.pair("router-b", [witness], **HA)
    colocate(a_primary, b_backup)
    colocate(b_primary, a_backup)
    (witness_process,) = mesh.start(witness)
    one, two = mesh.spawn(a_primary), mesh.spawn(b_primary)
    instances = {"router-a/primary": one, "router-b/backup": hosted_process(one, b_backup),
                 "router-b/primary": two, "router-a/backup": hosted_process(two, a_backup)}
    # Whichever instance of a pair came up first, the primaries serve in
    # the end (a backup that took its router hands it back: failback).
    for name, instance in instances.items():
        state = "active-replicated" if name.endswith("primary") else "backup-in-sync"
        assert instance.wait_ha(state)["instance"] == name

    # One process, two instances, each shown at its own endpoint.
    for name in ("router-b/primary", "router-a/backup"):
        scraped = metrics(instances[name])
        assert set(re.findall(r'ha_instance="([^"]+)"', scraped)) == {name}
        assert "process_start_time_seconds" in scraped

    senders = [send(mesh, instances["router-a/primary"], instances["router-a/backup"],
                    "router-a"),
               send(mesh, instances["router-b/primary"], instances["router-b/backup"],
                    "router-b")]
    one.wait_for(lambda: one.queue_depth("orders") >= COUNT // 3, timeout=60,
                 what="a third of router-a's messages on its primary")
    killed_at = time.monotonic()
    one.sigkill()
    a_now = instances["router-a/backup"]
    a_now.wait_ha("active-alone", "active-replicated", timeout=FAILOVER_BOUND_S + 5)
    took = time.monotonic() - killed_at
    print(f"SIGKILL of the process to router-a's backup serving: {took:.2f} s")
    assert took <= FAILOVER_BOUND_S, f"failover took {took:.2f} s"
    # router-b's primary, its backup gone with the process, runs alone.
    two.wait_ha("active-alone", timeout=10)
    for sender in senders:
        assert sender.wait(120) == 0, sender.stderr
    consumers = [mesh.start_receive(a_now, "orders", COUNT, 60),
                 mesh.start_receive(two, "orders", COUNT, 60)]
    for consumer, router in zip(consumers, ("router-a", "router-b")):
        assert consumer.wait(90) == 0, consumer.stderr
        bodies = sorted(message["body"] for message in consumer.messages())
        # Every message once: nothing lost, nothing doubled.
        assert bodies == sorted(f"message {n}" for n in range(1, COUNT + 1)), router
    assert a_now.queue_depth("orders") == two.queue_depth("orders") == 0

    for process in (two, witness_process):
        assert process.terminate() == 0, process.log_tail()
    RUN_LOGS.extend(spec.events_dir for spec in mesh.specs if spec.events_dir.exists())


def test_the_audit_of_the_run_finds_nothing_wrong(spark, tmp_path):  # noqa: F811
    if not RUN_LOGS:
        pytest.skip("the run was not selected")
    code, stdout, stderr, summary = audit(spark, RUN_LOGS, tmp_path / "audit",
                                          in_flight_grace_s=0.0, keepalive_limit=100.0)
    assert code == EXIT_OK, stdout + stderr
    messages = summary["messages"]
    assert messages["lost"] == messages["duplicated"] == 0, messages
    assert any((failover["router"], failover["kind"], failover["to"])
               == ("router-a", "takeover", "backup") for failover in summary["ha"]["list"])
