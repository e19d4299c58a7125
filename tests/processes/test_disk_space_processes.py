"""
A router whose data-dir's disk fills up, as an operator meets it: a real
C{twistd} router whose data-dir is a small file system of its own
(a 112 MiB tmpfs, mounted by the test: it needs the right to mount, and
is skipped without it), [store] min-free-disk at 16 MiB (so the store is
squeezed below 80 MiB), a producer sending 8 KiB messages until
refused.  The producer is told C{disk-full}; the router keeps serving
and says so once in its log; every message it confirmed is consumed;
once the queue is drained, the room the consumed messages left in the
store counts as free again and sends are taken.  And an HA pair whose
backup's disk fills: the active runs alone, the backup catches up once
it has room.
"""

import os

import pytest

from support.routers import mesh, wait_until  # noqa: F401 (mesh: a fixture)
from support.small_disk import fill, small_disk as mounted_disk

MiB = 1024**2


@pytest.fixture
def small_disk(tmp_path):
    with mounted_disk(tmp_path / "disk", "112m") as mount_point:
        yield mount_point


def test_a_full_disk_refuses_sends_and_drains(mesh, small_disk):
    a = mesh.router("router-a", clients=True, store={"min-free-disk": "16 MiB"})
    a.router["data-dir"] = str(small_disk / "data")
    a.write()
    (a_proc,) = mesh.start(a)

    sent = mesh.send(a_proc, "q", 100_000, "--size", "8192", "--rate", "4000", timeout=120)
    assert sent.returncode != 0
    assert ": disk-full: the router's disk has " in sent.stderr
    failed_at = int(sent.stderr.split("message ")[1].split(":")[0])
    assert failed_at > 1000
    log = a_proc.spec.log_text()
    assert log.count("under [store] min-free-disk (16.0 MiB)") == 1
    assert "#critical" not in log

    depth = a_proc.queues()["q"]["depth"]
    assert depth >= failed_at - 1
    consumer = mesh.start_receive(a_proc, "q", depth, 60)
    assert consumer.wait(90) == 0
    assert len({m["id"] for m in consumer.messages()}) == depth
    wait_until(lambda: "free again" in a_proc.spec.log_text(), timeout=30,
               what="the router saying its disk has room again")
    again = mesh.send(a_proc, "q", 10, "--size", "8192")
    assert again.returncode == 0, again.stderr
    # At no point was the disk full itself: every write the store tried fitted.
    assert "disk is full" not in a_proc.spec.log_text()


def test_a_backup_whose_disk_fills_lets_the_active_run_alone_then_catches_up(mesh, tmp_path):
    """
    An HA pair whose backup's data-dir is a 64 MiB tmpfs, filled to its
    last byte by another process: the active runs alone and confirms
    every send; the backup fails its replica at each connection but says
    so once, and its voter records once, with no traceback; once the
    space is freed it follows again and holds what the active holds.
    """
    with mounted_disk(tmp_path / "backup-disk", "64m") as disk:
        witness = mesh.router("router-a")
        primary_spec, backup_spec = mesh.pair("router-b", [witness])
        backup_spec.router["data-dir"] = str(disk / "data")
        backup_spec.write()
        mesh.start(witness)
        primary, backup = mesh.spawn(primary_spec), mesh.spawn(backup_spec)
        primary.wait_ha("active-replicated")
        backup.wait_ha("backup-in-sync")

        filler = fill(disk)
        sent = mesh.send(primary, "q", 2000, "--size", "1024", "--rate", "1000", timeout=120)
        assert sent.returncode == 0, sent.stderr
        assert primary.ha()["state"] == "active-alone"
        # Each connection (one each heartbeat-interval) failed the same way.
        wait_until(lambda: backup.spec.log_text().count("store-failed replica") >= 3,
                   timeout=30, what="the backup trying its replica again")
        log = backup.spec.log_text()
        assert log.count("the replica failed") == 1
        assert "until it has room" in log
        assert log.count("HA voter record of group") <= 1
        assert "#critical" not in log

        os.remove(filler)
        primary.wait_ha("active-replicated", timeout=30)

        def caught_up():
            following, serving = backup.ha(), primary.ha()
            return (following["state"] == "backup-in-sync"
                    and following["position"] == serving["position"])

        backup.wait_for(caught_up, timeout=30, what="the backup holding the active's position")
        assert "the replica's disk has room again" in backup.spec.log_text()
        assert primary.queues()["q"]["depth"] == 2000
