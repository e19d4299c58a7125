"""
Client security with real router processes: the users file and
permissions reload on SIGHUP, the open client listener is said plainly,
and the admin API's token.
"""

import json
import os
import signal
import ssl
import urllib.error
import urllib.request

import pytest
from support.certificates import make_ca, make_server_cert
from support.routers import (  # noqa: F401 (mesh is a fixture)
    mesh,
    run_cli,
    wait_until,
    write_token_file,
)

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


TOKEN = "admin-token-0123456789abcdef"


def token_file(directory, token=TOKEN):
    return write_token_file(directory, token)


def request(url, *, method="GET", token=None, context=None):
    """
    C{(status, JSON body)} of one admin API request, refusals included.
    """
    headers = {} if token is None else {"Authorization": f"Bearer {token}"}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, method=method,
                                                           headers=headers),
                                    timeout=5, context=context) as response:
            return response.status, json.load(response)
    except urllib.error.HTTPError as e:
        return e.code, json.load(e)


def test_the_admin_api_refuses_requests_without_the_token(mesh, monkeypatch):
    spec, users_file = secured(mesh, "router-a", {"alice": "pw-a"})
    spec.admin = {"token-file": token_file(spec.directory)}
    spec.admin_token = TOKEN
    spec.write()
    [process] = mesh.start(spec)
    base = spec.admin_url
    for path in ("/api/v1/router", "/api/v1/links", "/api/v1/queues", "/api/v1/sessions",
                 "/api/v1/nothing", "/api/v1/actions/reload-security"):
        for token in (None, "wrong-token-0123456789abcdef", TOKEN[:-1]):
            for method in ("GET", "POST"):
                status, body = request(base + path, method=method, token=token)
                assert (status, body["error"]) == (401, "unauthorized"), (path, token)
    status, body = request(base + "/api/v1/router", token=TOKEN)
    assert (status, body["name"]) == (200, "router-a")

    # The one action: a reload, as SIGHUP does.
    result = run_cli("user", "remove", "--file", str(users_file), "alice")
    assert result.returncode == 0, result.stderr
    assert request(base + "/api/v1/actions/reload-security", method="POST", token=TOKEN) == (
        200, {"reloaded": True})
    [line] = log_lines(spec, "reloaded [security]")
    assert "users removed: alice" in line

    # meshroute status takes the token from a file or the environment,
    # never from the command line.
    result = run_cli("status", "--admin", base)
    assert result.returncode == 1 and "401 unauthorized" in result.stderr
    result = run_cli("status", "--admin", base, "--token-file",
                     str(token_file(spec.directory / "cli")))
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("router router-a ")
    monkeypatch.setenv("MESHROUTE_ADMIN_TOKEN", TOKEN)
    assert run_cli("status", "--admin", base).returncode == 0
    monkeypatch.delenv("MESHROUTE_ADMIN_TOKEN")
    exposed = token_file(spec.directory / "exposed")
    exposed.chmod(0o644)
    result = run_cli("status", "--admin", base, "--token-file", str(exposed))
    assert result.returncode == 1 and "readable by others (mode 0644)" in result.stderr
    # The router's configuration gives both the endpoint and the token.
    result = run_cli("status", str(spec.config_path), "links", "--json")
    assert result.returncode == 0 and json.loads(result.stdout) == [], result.stderr
    assert process.popen.poll() is None


def test_the_admin_api_over_tls(mesh, tmp_path):
    ca_key, ca_cert = make_ca(tmp_path / "tls" / "ca", "meshroute test CA")
    key_path, cert_path = make_server_cert(tmp_path / "tls", ca_key, ca_cert)
    spec = mesh.router("router-a", listener=False)
    spec.admin = {"endpoint": f"ssl:{spec.admin_port}:interface=127.0.0.1:"
                              f"privateKey={key_path}:certKey={cert_path}",
                  "token-file": token_file(spec.directory)}
    spec.write()
    mesh.spawn(spec)
    base = f"https://localhost:{spec.admin_port}"
    context = ssl.create_default_context(cafile=str(tmp_path / "tls" / "ca" / "ca.pem"))
    status, body = wait_until(
        lambda: request(base + "/api/v1/router", token=TOKEN, context=context),
        30, what="the admin API over TLS", retry_on=(OSError,))
    assert (status, body["name"]) == (200, "router-a")
    assert request(base + "/api/v1/router", context=context)[0] == 401
    with pytest.raises(urllib.error.URLError, match="CERTIFICATE_VERIFY_FAILED"):
        request(base + "/api/v1/router", token=TOKEN)
    result = run_cli("status", "--admin", base, "--token-file", str(token_file(tmp_path)),
                     "--ca-file", str(tmp_path / "tls" / "ca" / "ca.pem"))
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("router router-a ")
