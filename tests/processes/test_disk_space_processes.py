"""
A router whose data-dir's disk fills up, as an operator meets it: a real
C{twistd} router whose data-dir is a small file system of its own
(a 112 MiB tmpfs, mounted by the test: it needs the right to mount, and
is skipped without it), [store] min-free-disk at 16 MiB (so the store is
squeezed below 80 MiB), a producer sending 8 KiB messages until
refused.  The producer is told C{disk-full}; the router keeps serving
and says so once in its log; every message it confirmed is consumed;
once the queue is drained, the room the consumed messages left in the
store counts as free again and sends are taken.
"""

import pytest

from support.routers import mesh, wait_until  # noqa: F401 (mesh: a fixture)
from support.small_disk import small_disk as mounted_disk

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
