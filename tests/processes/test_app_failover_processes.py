"""
The application-level failover recipe (docs/ha.md, "Application-level
failover") as its example runs it, examples/app_failover.py, against a
real HA pair: router-b's two instances, router-a voting for them and
dialling both as the far router whose consumer counts the messages.
The example reaches the primary through a proxy that stops passing the
router's answers: the sends it makes then are stored, replicated and
confirmed, and the confirmations are lost, so that after the kill the
example sends again messages the new active already holds.
"""

import re
import sys

from support.proxy import TcpProxy
from support.routers import REPO_ROOT, ClientProcess, mesh  # noqa: F401 (mesh is a fixture)

EXAMPLE = REPO_ROOT / "examples" / "app_failover.py"
COUNT = 300
#: Messages per second: COUNT takes 1.5 s to send, around the failover.
RATE = 200
#: Short leases, so the backup takes over about a second after the kill.
HA = {"heartbeat_interval": "200ms", "lease_timeout": "1s", "replication_timeout": "1s"}
PROGRESS = re.compile(r"sent (\d+), confirmed (\d+), unconfirmed (\d+)")
DONE = re.compile(r"done: (\d+) of (\d+) messages confirmed; (\d+) failover\(s\); "
                  r"(\d+) sent again")


def progress(producer: ClientProcess, after: int = 0) -> list[tuple[int, int, int]]:
    """
    The producer's progress lines after its first C{after} lines: (sent,
    confirmed, unconfirmed) each.
    """
    lines = producer.stdout.splitlines()[after:]
    return [tuple(map(int, m.groups())) for m in map(PROGRESS.search, lines) if m]


def test_the_application_fails_over_by_hand_and_the_consumer_gets_each_message_once(mesh):  # noqa: F811
    """
    The example's confirmations stop coming, then the active is killed:
    the example hears DISCONNECT, connects to the backup once it is
    active, sends the unconfirmed messages again with their duplicate ids
    (the backup has them: it answers with their first ids) and goes on;
    router-a's consumer gets every message exactly once.
    """
    witness = mesh.router("router-a", clients=True)
    primary_spec, backup_spec = mesh.pair("router-b", [witness], **HA)
    witness.connectors.append(mesh.connector(
        router="router-b",
        endpoint=[primary_spec.routing_endpoint, backup_spec.routing_endpoint]))
    witness.write()
    (router_a,) = mesh.start(witness)
    primary, backup = mesh.spawn(primary_spec), mesh.spawn(backup_spec)
    primary.wait_ha("active-replicated")
    backup.wait_ha("backup-in-sync")
    primary.wait_route("router-a")
    consumer = mesh.start_receive(router_a, "orders", COUNT, 60)
    with TcpProxy(primary_spec.client_port) as to_primary:
        producer = ClientProcess("app-failover", [
            "--connect", to_primary.endpoint, "--connect", backup_spec.client_endpoint,
            "--to", "orders@router-a", "--count", str(COUNT), "--rate", str(RATE),
            "--retry-interval", "100", "--progress", "0.1"],
            mesh.directory / "clients", program=[sys.executable, str(EXAMPLE)])
        mesh.clients.append(producer)
        primary.wait_for(lambda: any(confirmed >= COUNT // 4
                                     for _, confirmed, _ in progress(producer)),
                         timeout=30, what="a quarter of the messages confirmed")
        to_primary.deafen()
        lines = len(producer.stdout.splitlines())
        primary.wait_for(lambda: any(unconfirmed >= 10
                                     for _, _, unconfirmed in progress(producer, lines)),
                         timeout=10, what="sends whose confirmations were lost")
        primary.sigkill()
        assert producer.wait(60) == 0, producer.stdout + producer.stderr

    output = producer.stdout
    confirmed, count, failovers, sent_again = map(int, DONE.search(output).groups())
    assert (confirmed, count, failovers) == (COUNT, COUNT, 1), output
    assert sent_again >= 10, output
    # The new active held most of them (their first sends were stored
    # and replicated): it answered those with the first message's id.
    duplicates = backup.wait_for(
        lambda: backup.events("message.duplicate", reason="duplicate-id"), timeout=10,
        what="the new active to answer a repeated duplicate id")
    assert len(duplicates) <= sent_again
    assert "DISCONNECT" in output and f"at {backup_spec.client_endpoint} in" in output, output
    assert consumer.wait(60) == 0, consumer.stderr
    bodies = sorted(message["body"] for message in consumer.messages())
    assert bodies == sorted(f"message {n}" for n in range(1, COUNT + 1))
    # Nothing enqueued twice: nothing more waits at router-a, nor on the
    # way there.
    backup.wait_nothing_in_flight()
    assert router_a.queue_depth("orders") == 0
