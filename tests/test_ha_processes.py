"""
An HA pair as real processes on 127.0.0.1: two C{twistd meshroute}
instances of router-b and a witness router, a producer sending
persistent messages with duplicate ids to both instances' client
endpoints, and the active SIGKILLed under that load.
"""

import time

from routers import mesh  # noqa: F401 (mesh is a fixture)

#: Defaults of [ha]: heartbeat-interval 500 ms, lease-timeout 3 s.
FAILOVER_BOUND_S = 3.0 + 2 * 0.5 + 1.0
COUNT = 300
QUEUE = "orders@router-b"


def start_pair(mesh):  # noqa: F811
    witness = mesh.router("router-a")
    primary_spec, backup_spec = mesh.pair("router-b", [witness])
    mesh.start(witness)
    primary, backup = mesh.spawn(primary_spec), mesh.spawn(backup_spec)
    primary.wait_ha("active-replicated")
    backup.wait_ha("backup-in-sync")
    return primary, backup


def test_sigkill_of_the_active_under_load_loses_and_doubles_nothing(mesh):  # noqa: F811
    primary, backup = start_pair(mesh)
    sender = mesh._client("send", [
        "send", "--connect", primary.spec.client_endpoint,
        "--connect", backup.spec.client_endpoint, "--to", QUEUE, "--count", str(COUNT),
        "--duplicate-id-prefix", "order-", "--reconnect-attempts", "-1",
        "--retry-interval", "100"])
    primary.wait_for(lambda: primary.queue_depth("orders") >= COUNT // 3, timeout=60,
                     what="a third of the messages on the primary")
    killed_at = time.monotonic()
    primary.sigkill()
    backup.wait_for(lambda: backup.info().get("serving"), timeout=FAILOVER_BOUND_S + 5,
                    what="the backup to serve")
    took = time.monotonic() - killed_at
    assert took <= FAILOVER_BOUND_S, f"failover took {took:.2f} s"
    assert sender.wait(120) == 0, sender.stderr
    messages = [m for m in backup.stored_messages() if m["dest"] == QUEUE]
    assert len(messages) == COUNT  # nothing lost...
    assert len({m["body"] for m in messages}) == COUNT  # ...and nothing twice


def test_sigterm_of_the_active_hands_over_within_a_second(mesh):  # noqa: F811
    primary, backup = start_pair(mesh)
    sent = mesh.send(primary, QUEUE, 20)
    assert sent.returncode == 0, sent.stderr
    stopped_at = time.monotonic()
    primary.popen.terminate()
    backup.wait_for(lambda: backup.info().get("serving"), timeout=5,
                    what="the backup to serve")
    took = time.monotonic() - stopped_at
    assert took <= 1.0, f"hand-over took {took:.2f} s"
    assert primary.popen.wait(15) == 0
    assert backup.ha()["state"] == "active-alone"
    assert backup.queue_depth("orders") == 20
