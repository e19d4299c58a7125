"""
Client security with real router processes: the users file and
permissions reload on SIGHUP, the open client listener is said plainly,
and the admin API's token.
"""

import os
import signal

from routers import mesh, run_cli, wait_until  # noqa: F401 (mesh is a fixture)

from meshroute.security.credentials import derive
from meshroute.security.users import read_users, write_users


def secured(mesh, name, users):
    """
    A router with a client listener and C{[security]}: its users file
    holds C{users} (name → password), and every user may consume C{q}.
    """
    spec = mesh.router(name, listener=False, clients=True)
    users_file = spec.directory / "users"
    spec.directory.mkdir(parents=True, exist_ok=True)
    write_users(str(users_file), {user: derive(password) for user, password in users.items()})
    spec.extra["security"] = {"users-file": users_file}
    spec.arrays["security.permission"] = [{"users": ["*"], "consume": ["q"]}]
    spec.write()
    return spec, users_file


def log_lines(spec, fragment):
    return [line for line in spec.log_path.read_text().splitlines() if fragment in line]


def test_sighup_reloads_the_users_file(mesh):
    spec, users_file = secured(mesh, "router-a", {"alice": "pw-a", "bob": "pw-b"})
    [process] = mesh.start(spec)
    assert log_lines(spec, "is open to any client") == []

    result = run_cli("user", "remove", "--file", str(users_file), "alice")
    assert result.returncode == 0, result.stderr
    os.kill(process.pid, signal.SIGHUP)
    [line] = wait_until(lambda: log_lines(spec, "reloaded [security]"),
                        what="the reload to be logged")
    assert "users removed: alice; 1 permissions (unchanged)" in line

    # A users file others may read is refused; the router keeps serving
    # the users it had.
    os.chmod(users_file, 0o644)
    os.kill(process.pid, signal.SIGHUP)
    [line] = wait_until(lambda: log_lines(spec, "reload refused"),
                        what="the refusal to be logged")
    assert f"{users_file}: readable by others (mode 0644); run chmod 600 {users_file}" in line
    assert process.info()["serving"]
    assert process.popen.poll() is None
    os.chmod(users_file, 0o600)
    assert list(read_users(str(users_file))) == ["bob"]


def test_an_open_client_listener_is_said_plainly(mesh):
    spec = mesh.router("router-a", listener=False, clients=True)
    mesh.start(spec)
    [line] = log_lines(spec, "is open to any client")
    endpoint = spec.extra["clients.listener"]["endpoint"]
    assert f"security: no [security] section: the client listener {endpoint} is open" in line
    result = run_cli("check-config", str(spec.config_path))
    assert result.returncode == 0
    assert "is open to any client that reaches it" in result.stderr


def test_a_bad_users_file_stops_the_router(mesh):
    spec, users_file = secured(mesh, "router-a", {"alice": "pw-a"})
    with open(users_file, "a") as f:
        f.write("bob SCRAM-SHA-256$4096:c2FsdA==\n")
    process = mesh.spawn(spec)
    assert process.popen.wait(timeout=60) != 0
    output = spec.output_path.read_text()
    assert f"{users_file}: line 4 (user bob)" in output
