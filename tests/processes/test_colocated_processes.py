"""
A router process hosting an HA instance of another router
(C{[[ha.colocated]]}, issue 28) as twistd runs it: a bad hosted file
stops twistd with a message naming it, its key and the entry hosting
it; a hosted instance that ends by itself ends alone, its host serving
on.  (Two processes backing each other up, one killed under load, are
in test_ha_faults_processes.py, whose audit covers that run.)
"""

import socket
import subprocess

import pytest

from support.colocation import colocate, hosted_process
from support.routers import mesh, router_env, twistd_command  # noqa: F401 (a fixture)


def test_a_bad_hosted_file_stops_twistd_naming_it_and_the_entry(mesh):  # noqa: F811
    a = mesh.router("router-a")
    _, b_backup = mesh.pair("router-b", [])
    b_backup.extra["ha"]["lease-timeout"] = "900ms"
    b_backup.write()
    colocate(a, b_backup)
    result = subprocess.run(twistd_command(a), cwd=a.directory, env=router_env(),
                            capture_output=True, text=True, timeout=60)
    output = result.stdout + result.stderr
    assert result.returncode != 0, output
    assert "Traceback" not in output, output
    [line] = [line for line in output.splitlines() if str(b_backup.config_path) in line]
    assert "ha.lease-timeout: must exceed" in line
    assert line.endswith(f"(hosted by {a.config_path}, ha.colocated[0].config)")
    # Nothing started: neither instance's data-dir was made.
    assert not a.data_dir.exists() and not b_backup.data_dir.exists()


def test_a_hosted_instance_that_ends_by_itself_leaves_its_host_serving(mesh):  # noqa: F811
    """
    A router without HA hosts router-b's backup, whose store cannot be
    opened (C{store.db} is a directory): the backup stops and says so,
    and the router serves on in the same process.
    """
    a = mesh.router("router-a", clients=True)
    _, b_backup = mesh.pair("router-b", [])
    (b_backup.data_dir / "store.db").mkdir(parents=True)
    colocate(a, b_backup)
    (process,) = mesh.start(a)
    backup = hosted_process(process, b_backup)
    backup.wait_event("router.stopped")
    process.wait_for(lambda: "its instance ends; 1 left in this process" in process.log_tail(),
                     what="the process to say its hosted instance ended")
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", b_backup.admin_port), timeout=2).close()
    assert process.info()["serving"]
    assert mesh.send(process, "orders", 3).returncode == 0
    assert process.queue_depth("orders") == 3
    assert process.terminate() == 0, process.log_tail()
    assert "did not stop cleanly" not in process.log_tail(400)
