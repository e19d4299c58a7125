"""
A router keeps the names of the routers it heard of across a restart,
and an HA backup holding a copy of its store knows them too: a client's
send to such a router right after the start waits in the backlog (not
C{unknown-router}) until a route appears.
"""

import dataclasses
import sqlite3

import pytest

from meshroute.testing.memory_mesh import MemoryMesh
from support.mesh_testing import Consumer, assert_confirmed, send

A, B, C = "router-a", "router-b", "router-c"


@pytest.fixture
def mesh(tmp_path):
    mesh = MemoryMesh(tmp_path)
    yield mesh
    mesh.stop_all()


def line(mesh) -> None:
    """
    a→b→c: a hears of c only through b.
    """
    mesh.add(A, connect_to=[B])
    mesh.add(B, connect_to=[C])
    mesh.add(C)
    mesh.run(1)
    assert mesh.routers[A].describe_routes()[C]["next_hop"] == B


def test_a_router_restarted_while_its_next_hop_is_down_still_takes_sends_to_it(mesh):
    line(mesh)
    b_config = mesh.routers[B].config
    a_config = mesh.routers[A].config
    mesh.stop(B)
    mesh.stop(A)
    mesh.start(a_config)
    assert C not in mesh.routers[A].describe_routes()
    sent = send(mesh, A, f"q@{C}", 3)
    assert_confirmed(sent)  # accepted into the backlog, not unknown-router
    assert mesh.routers[A].store.backlog_depths() == {C: 3}
    consumer = Consumer(mesh.routers[C], "q")
    mesh.start(b_config)
    mesh.run(2)
    assert consumer.bodies == [b"0", b"1", b"2"]
    assert mesh.routers[A].store.backlog_depths() == {}


def test_a_copy_of_the_store_knows_the_routers_heard(mesh, tmp_path):
    """
    What an HA backup holds when it takes over: a copy of the active's
    store.db (SQLite's online backup, as a snapshot is taken) and nothing
    in memory.  A router started on it refuses no send to c.
    """
    line(mesh)
    active = mesh.routers[A]
    backup_dir = tmp_path / "backup-of-a"
    backup_dir.mkdir()
    with sqlite3.connect(f"{active.config.data_dir}/store.db") as source, \
            sqlite3.connect(backup_dir / "store.db") as copy:
        source.backup(copy)
    mesh.partition("backup-of-a")  # its links are not up yet
    backup = mesh.start(dataclasses.replace(active.config, data_dir=str(backup_dir)),
                        key="backup-of-a")
    sent = send(mesh, "backup-of-a", f"q@{C}", 1)
    assert_confirmed(sent)
    assert backup.store.backlog_depths() == {C: 1}
    assert backup.engine.routes.known(B) and not backup.engine.routes.known("router-x")
