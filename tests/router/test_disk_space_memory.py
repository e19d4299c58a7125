"""
A router whose disk is low (meshroute.store.disk_space, [store]
min-free-disk), in memory: real engines and stores on iosim links and one
clock, the disk's free space read through a fake.  Its clients' sends are
refused with disk-full, whatever their kind and destination; what it
already holds is consumed, and what other routers already sent it is
still taken; once the disk has room again, sends are taken again.
"""

from meshroute.admin.metrics import RouterCollector
from meshroute.store.disk_space import CHECK_INTERVAL_S
from support.mesh_testing import (  # noqa: F401 (mesh: a fixture)
    mesh,
    Consumer,
    send,
    assert_confirmed,
    line,
)

MiB = 1024**2


class Disk:
    def __init__(self, free):
        self.free = free

    def __call__(self, path):
        return self.free


def with_disk(router, free) -> Disk:
    """
    Have C{router}'s disk read as having C{free} bytes free from now on.
    """
    router.disk.read_free = disk = Disk(free)
    return disk


def disk_metrics(router) -> dict:
    return {family.name: family.samples[0].value
            for family in RouterCollector(lambda: router).collect()
            if family.name.startswith("meshroute_store_disk")}


def outcomes(deferreds) -> list:
    found = []
    for d in deferreds:
        d.addCallbacks(lambda _: found.append("ok"), lambda f: found.append(f.value.code))
    return found


def test_a_low_disk_refuses_sends_and_lets_the_queues_drain(mesh):
    line(mesh)
    router_a = mesh.routers["router-a"]
    disk = with_disk(router_a, 1024 * MiB)
    held = send(mesh, "router-a", "local", 50)
    mesh.run(1)
    assert_confirmed(held)

    assert disk_metrics(router_a) == {"meshroute_store_disk_free_bytes": 1024 * MiB,
                                      "meshroute_store_disk_low": 0}
    disk.free = 10 * MiB
    mesh.run(CHECK_INTERVAL_S)
    assert router_a.disk.low
    assert disk_metrics(router_a) == {"meshroute_store_disk_free_bytes": 10 * MiB,
                                      "meshroute_store_disk_low": 1}
    engine = router_a.engine
    refused = (send(mesh, "router-a", "local", 3) + send(mesh, "router-a", "q@router-c", 3)
               + send(mesh, "router-a", "q@router-c", 3, persistent=False))
    batch = engine.acceptance.submit_many([("local", {}, b"b", True, ""),
                                           ("q@router-c", {}, b"b", False, "")])
    mesh.run(1)
    assert outcomes(refused) == ["disk-full"] * 9
    assert [f.value.code for f in batch.result] == ["disk-full", "disk-full"]
    assert "10.0 MiB free" in batch.result[0].getErrorMessage()

    # What it holds is consumed: acknowledgements are written.
    consumer = Consumer(router_a, "local")
    mesh.run(1)
    assert consumer.bodies == [b"%d" % i for i in range(50)]
    assert router_a.store.queue_depths().get("local", 0) == 0

    disk.free = 100 * MiB
    mesh.run(CHECK_INTERVAL_S)
    again = send(mesh, "router-a", "local", 2)
    mesh.run(1)
    assert_confirmed(again)


def test_transfers_from_other_routers_are_still_taken(mesh):
    line(mesh)
    router_c = mesh.routers["router-c"]
    with_disk(router_c, 1 * MiB)
    mesh.run(CHECK_INTERVAL_S)
    assert router_c.disk.low
    consumer = Consumer(router_c, "q")
    sent = send(mesh, "router-a", "q@router-c", 100)
    mesh.run(2)
    assert_confirmed(sent)
    assert consumer.bodies == [b"%d" % i for i in range(100)]
    assert outcomes(send(mesh, "router-c", "q", 1)) == ["disk-full"]
