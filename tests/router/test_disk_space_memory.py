"""
A router whose disk is low (meshroute.store.disk_space, [store]
min-free-disk), in memory: real engines and stores on iosim links and one
clock, the disk's free space read through a fake.  Its clients' sends are
refused with disk-full, whatever their kind and destination; what it
already holds is consumed; its links hold what other routers send it
(unstored, unacknowledged, at most a window), and a link that closes
meanwhile loses none of it; once the disk has room again, sends are taken
and what was held is stored, in order, exactly once.
"""

from meshroute.admin.metrics import RouterCollector
from meshroute.store.disk_space import CHECK_INTERVAL_S
from support.mesh_testing import (  # noqa: F401 (mesh: a fixture)
    mesh,
    Consumer,
    send,
    assert_confirmed,
)

MiB = 1024**2


def line(mesh) -> None:
    """
    router-a → router-b → router-c, each with [store] min-free-disk 64 MiB.
    """
    mesh.add("router-a", connect_to=["router-b"], min_free_disk=64 * MiB)
    mesh.add("router-b", connect_to=["router-c"], min_free_disk=64 * MiB)
    mesh.add("router-c", min_free_disk=64 * MiB)
    mesh.run(1)


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
    # Bodies over a page: consumed, they leave whole pages free.
    held = [router_a.engine.submit("local", b"%d " % i + b"x" * 8192, {}, True)
            for i in range(50)]
    mesh.run(1)
    assert_confirmed(held)

    assert disk_metrics(router_a) == {"meshroute_store_disk_free_bytes": 1024 * MiB,
                                      "meshroute_store_disk_low": 0}
    disk.free = 10 * MiB
    mesh.run(CHECK_INTERVAL_S)
    assert router_a.disk.low
    # The store checkpoints after every batch: its WAL stops growing.
    assert router_a.store.executor.checkpoints.squeezed
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
    assert [body.split(b" ")[0] for body in consumer.bodies] == [b"%d" % i for i in range(50)]
    assert router_a.store.queue_depths().get("local", 0) == 0
    # The room they left in the store's file counts as free.
    assert router_a.disk.free > 10 * MiB

    disk.free = 100 * MiB
    mesh.run(CHECK_INTERVAL_S)
    assert not router_a.disk.low and router_a.store.executor.checkpoints.squeezed
    disk.free = 1024 * MiB
    mesh.run(CHECK_INTERVAL_S)
    assert not router_a.store.executor.checkpoints.squeezed
    again = send(mesh, "router-a", "local", 2)
    mesh.run(1)
    assert_confirmed(again)


def test_a_link_holds_what_arrives_until_the_disk_has_room(mesh):
    line(mesh)
    router_c = mesh.routers["router-c"]
    disk = with_disk(router_c, 1 * MiB)
    mesh.run(CHECK_INTERVAL_S)
    assert router_c.disk.low
    consumer = Consumer(router_c, "q")
    sent = send(mesh, "router-a", "q@router-c", 1500)
    mesh.run(5)
    # Taken by the origin, on their way, but not stored at the
    # destination: its link to router-b holds at most router-b's window.
    assert_confirmed(sent)
    assert consumer.bodies == []
    assert router_c.store.queue_depths() == {}
    held = router_c.engine.forwarding.channel("router-b").held
    assert 0 < held <= 1024
    [family] = [f for f in RouterCollector(lambda: router_c).collect()
                if f.name == "meshroute_link_held_messages"]
    assert [(sample.labels["peer"], sample.value) for sample in family.samples] == [
        ("router-b", held)]
    assert "router-b" in mesh.stages("router-c")
    assert outcomes(send(mesh, "router-c", "q", 1)) == ["disk-full"]

    disk.free = 1024 * MiB
    mesh.run(5)
    assert consumer.bodies == [b"%d" % i for i in range(1500)]
    assert consumer.redelivered == 0
    assert router_c.engine.forwarding.channel("router-b").held == 0


def test_what_a_link_held_is_sent_again_after_it_closes(mesh):
    line(mesh)
    router_c = mesh.routers["router-c"]
    disk = with_disk(router_c, 1 * MiB)
    mesh.run(CHECK_INTERVAL_S)
    consumer = Consumer(router_c, "q")
    sent = send(mesh, "router-a", "q@router-c", 300)
    mesh.run(2)
    assert router_c.engine.forwarding.channel("router-b").held
    mesh.partition("router-c")
    mesh.run(3)  # keepalive closes the link
    assert "router-b" not in mesh.stages("router-c")
    disk.free = 1024 * MiB
    mesh.heal("router-c")
    mesh.run(10)
    assert_confirmed(sent)
    assert consumer.bodies == [b"%d" % i for i in range(300)]
