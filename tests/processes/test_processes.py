"""
The mesh as an operator runs it: real C{twistd -n meshroute} processes on
127.0.0.1, watched through their admin API and event logs, disturbed with
signals, raw sockets and bad configurations.

Intervals are short (keepalive 200 ms, stage-valid-timeout and
reject-disconnect-delay at their 1000 ms minimum, connector retries every
200 ms) so the whole file runs in well under a minute and a half.
"""

import json
import signal
import socket
import subprocess
import time
import tomllib

import pytest

from support.certificates import make_ca, make_server_cert
from support.routers import (  # noqa: F401 (mesh is a fixture)
    KEEPALIVE_INTERVAL_MS,
    PORTS,
    STAGE_VALID_TIMEOUT_MS,
    mesh,
    router_env,
    run_cli,
    twistd_command,
)

INTERVAL_S = KEEPALIVE_INTERVAL_MS / 1000


def _link_ids(links: dict[str, dict]) -> set[str]:
    return {link["link"] for link in links.values()}


def _fresh_delivery(process, peers, old_ids, timeout=15.0):
    """
    Wait until C{process} has links in delivery to every one of C{peers}
    that are not among C{old_ids}: new connections, not stale ones.
    """

    def fresh():
        links = process.delivery_links()
        if all(peer in links and links[peer]["link"] not in old_ids for peer in peers):
            return links
        return None

    return process.wait_for(fresh, timeout, what=f"{process.name}: new links to {peers}")


def _assert_stays_in_delivery(process, peer, link_id):
    """
    C{process}'s link to C{peer} is still the same one and in delivery, and
    it never logged a close for that link.
    """
    link = process.delivery_links().get(peer)
    assert link is not None and link["link"] == link_id, process.links()
    assert process.events("link.closed", link=link_id) == []


def _closed_by_router(sock: socket.socket, timeout: float) -> None:
    """
    Read until the router closes C{sock}.  A silent or hostile peer is
    dropped abortively (a reset) rather than with a FIN; either way the
    stream ends and nothing was sent to it.
    """
    sock.settimeout(timeout)
    received = b""
    try:
        while chunk := sock.recv(4096):
            received += chunk
    except ConnectionResetError:
        pass
    assert received == b"", f"the router sent {received!r} to a peer that never said hello"


def test_three_routers_reach_delivery_and_adopt_listener_keepalive(mesh):
    """
    Every link of a triangle reaches delivery at both ends, and both ends
    use the listener's keepalive-interval: router-c listens with 700 ms
    itself, yet its connector links run at the 200 ms of the routers they
    reach.
    """
    b = mesh.router("router-b")
    a = mesh.router("router-a", connect=[b])
    c = mesh.router("router-c", keepalive_interval="700ms", connect=[b, a])
    a_proc, b_proc, c_proc = mesh.start(a, b, c)

    links = {
        "router-a": a_proc.wait_delivery("router-b", "router-c"),
        "router-b": b_proc.wait_delivery("router-a", "router-c"),
        "router-c": c_proc.wait_delivery("router-a", "router-b"),
    }
    for connector, listener in [("router-a", "router-b"), ("router-c", "router-a"),
                                ("router-c", "router-b")]:
        outbound = links[connector][listener]
        inbound = links[listener][connector]
        assert (outbound["direction"], inbound["direction"]) == ("connector", "listener")
        assert outbound["keepalive_interval_ms"] == KEEPALIVE_INTERVAL_MS
        assert inbound["keepalive_interval_ms"] == KEEPALIVE_INTERVAL_MS
    # The event log says the same.
    for peer in ("router-a", "router-b"):
        [entered] = c_proc.events("link.stage", stage="delivery", peer=peer)
        assert entered["direction"] == "connector"
        assert entered["keepalive_interval_ms"] == KEEPALIVE_INTERVAL_MS


def test_stopped_router_is_dropped_after_five_keepalive_intervals_and_reconnects(mesh):
    """
    SIGSTOP freezes router-b with its sockets open.  Its neighbours notice
    from the keepalive counter alone: they close with reason keepalive
    about five intervals after they last heard from it.  After SIGCONT it
    reconnects on both sides.
    """
    c = mesh.router("router-c")
    b = mesh.router("router-b", connect=[c])
    a = mesh.router("router-a", connect=[b])
    a_proc, b_proc, c_proc = mesh.start(a, b, c)
    old = _link_ids(b_proc.wait_delivery("router-a", "router-c"))
    old |= _link_ids(a_proc.wait_delivery("router-b")) | _link_ids(c_proc.wait_delivery("router-b"))

    b_proc.sigstop()
    stopped_at = time.time()
    for neighbour in (a_proc, c_proc):
        [closed] = neighbour.wait_event("link.closed", timeout=5, peer="router-b", stage="delivery")
        assert closed["reason"] == "keepalive", closed
        assert closed["stage"] == "delivery"
        assert closed["keepalive_interval_ms"] == KEEPALIVE_INTERVAL_MS
        assert closed["last_heard"] <= stopped_at + 0.1
        silence = closed["time"] - closed["last_heard"]
        # The counter (5 at start, +1 per keepalive received, -1 per sent)
        # hits 0 on the 4th to 6th keepalive sent after the last one heard,
        # depending on how the two sides' timers interleave.
        assert 4 * INTERVAL_S - 0.05 <= silence <= 6 * INTERVAL_S + 0.05, closed

    b_proc.sigcont()
    _fresh_delivery(b_proc, ["router-a", "router-c"], old)
    _fresh_delivery(a_proc, ["router-b"], old)
    _fresh_delivery(c_proc, ["router-b"], old)


def test_second_router_with_a_connected_name_is_rejected(mesh):
    """
    While router-b is linked to router-a, another process calling itself
    router-b is refused with name-in-use, again at each retry, and the real
    router-b's link is untouched.
    """
    a = mesh.router("router-a")
    b = mesh.router("router-b", listener=False, connect=[a])
    a_proc, b_proc = mesh.start(a, b)
    [real_link] = _link_ids(a_proc.wait_delivery("router-b"))
    b_proc.wait_delivery("router-a")

    impostor_spec = mesh.router("router-b", label="impostor-b", listener=False, connect=[a])
    [impostor] = mesh.start(impostor_spec)

    refusals = impostor.wait_event(
        "link.rejected", count=3, code="name-in-use", by="peer", peer="router-a"
    )
    # Several attempts, spread over time by the retry interval.
    assert refusals[2]["time"] - refusals[0]["time"] >= 0.3
    assert len({r["link"] for r in refusals}) == len(refusals)
    local = a_proc.wait_event(
        "link.rejected", count=3, code="name-in-use", by="local", peer="router-b"
    )
    assert real_link not in {r["link"] for r in local}
    # Both ends record those connections as closed because they were rejected.
    impostor_closed = impostor.wait_event("link.closed", count=3, peer="router-a")
    assert {c["reason"] for c in impostor_closed} == {"rejected"}, impostor_closed
    refused_ids = {r["link"] for r in local[:3]}
    a_closed = a_proc.wait_event("link.closed", count=3, peer="router-b")
    assert {c["reason"] for c in a_closed if c["link"] in refused_ids} == {"rejected"}, a_closed

    assert impostor.events("link.stage", stage="delivery") == []
    _assert_stays_in_delivery(a_proc, "router-b", real_link)
    # (A connect-stage close at start-up is possible: a listener refuses
    # connections until its store is open, and the connector retries.)
    assert [e for e in b_proc.events("link.closed") if e["stage"] == "delivery"] == []
    assert b_proc.events("link.rejected") == []


def test_wrong_password_is_rejected_on_both_sides(mesh):
    a = mesh.router("router-a")
    wrong = mesh.secret_file("wrong")
    x = mesh.router("router-x", listener=False, connect=[mesh.connector(a, password_file=wrong)])
    a_proc, x_proc = mesh.start(a, x)

    [refusal] = a_proc.wait_event("link.rejected", code="auth-failed", by="local")[:1]
    assert refusal["peer"] == "router-x"
    [refused] = x_proc.wait_event("link.rejected", code="auth-failed", by="peer")[:1]
    assert refused["peer"] == "router-a"
    [closed] = x_proc.wait_event("link.closed", link=refused["link"])
    assert closed["reason"] == "rejected"
    assert closed["stage"] == "authentication"
    [closed] = a_proc.wait_event("link.closed", link=refusal["link"])
    assert closed["reason"] == "rejected"
    assert a_proc.events("link.stage", stage="delivery") == []
    assert x_proc.events("link.stage", stage="delivery") == []


def test_silent_and_garbage_peers_are_dropped_without_disturbing_links(mesh):
    """
    A TCP peer that says nothing is dropped after stage-valid-timeout; one
    that sends bytes that are not a frame is dropped at once.  The router's
    real link stays in delivery throughout.
    """
    a = mesh.router("router-a")
    b = mesh.router("router-b", listener=False, connect=[a])
    a_proc, b_proc = mesh.start(a, b)
    [real_link] = _link_ids(a_proc.wait_delivery("router-b"))

    silent = socket.create_connection(("127.0.0.1", a.routing_port), timeout=5)
    connected_at = time.monotonic()
    garbage = socket.create_connection(("127.0.0.1", a.routing_port), timeout=5)
    with silent, garbage:
        garbage.sendall(b"GET /api/v1/links HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        _closed_by_router(garbage, timeout=5)
        [error] = a_proc.wait_event("link.closed", reason="protocol-error")
        assert error["stage"] == "connect"
        assert time.monotonic() - connected_at < STAGE_VALID_TIMEOUT_MS / 1000

        _closed_by_router(silent, timeout=10)
        waited = time.monotonic() - connected_at
        assert STAGE_VALID_TIMEOUT_MS / 1000 - 0.05 <= waited <= STAGE_VALID_TIMEOUT_MS / 1000 + 1.5
    [timeout] = a_proc.wait_event("link.closed", reason="stage-timeout")
    assert timeout["stage"] == "connect"
    assert timeout["peer"] is None

    _assert_stays_in_delivery(a_proc, "router-b", real_link)
    # (A connect-stage close at start-up is possible: a listener refuses
    # connections until its store is open, and the connector retries.)
    assert [e for e in b_proc.events("link.closed") if e["stage"] == "delivery"] == []


def test_sigterm_closes_links_with_reason_shutdown(mesh):
    c = mesh.router("router-c")
    b = mesh.router("router-b", connect=[c])
    a = mesh.router("router-a", connect=[b])
    a_proc, b_proc, c_proc = mesh.start(a, b, c)
    b_proc.wait_delivery("router-a", "router-c")
    a_proc.wait_delivery("router-b")
    c_proc.wait_delivery("router-b")

    assert b_proc.terminate() == 0

    events = b_proc.events()
    closes = {e["peer"]: e for e in events if e["event"] == "link.closed"}
    assert set(closes) == {"router-a", "router-c"}
    assert {e["reason"] for e in closes.values()} == {"shutdown"}
    assert {(e["peer"], e["direction"]) for e in closes.values()} == {
        ("router-a", "listener"), ("router-c", "connector")
    }
    assert events[-1]["event"] == "router.stopped"
    for neighbour in (a_proc, c_proc):
        [closed] = neighbour.wait_event("link.closed", peer="router-b", stage="delivery")
        assert closed["reason"] == "peer-closed", closed
        assert closed["stage"] == "delivery"
    log = b_proc.log_tail(200)
    assert "Server Shut Down." in log
    assert "Traceback" not in log and "Unhandled" not in log


def test_ctrl_c_stops_a_router_cleanly_with_status_0(mesh):
    """
    The README promises that SIGINT (Ctrl-C), like SIGTERM, closes every
    link with reason shutdown and exits 0, not by the signal.
    """
    b = mesh.router("router-b")
    a = mesh.router("router-a", connect=[b])
    a_proc, b_proc = mesh.start(a, b)
    a_proc.wait_delivery("router-b")

    a_proc.popen.send_signal(signal.SIGINT)
    assert a_proc.popen.wait(15) == 0

    events = a_proc.events()
    # An attempt refused while router-b was still starting may close in
    # connect first; the link that reached delivery is the one to judge.
    [closed] = [e for e in events if e["event"] == "link.closed" and e["stage"] == "delivery"]
    assert (closed["peer"], closed["reason"]) == ("router-b", "shutdown")
    assert events[-1]["event"] == "router.stopped"
    assert "Traceback" not in a_proc.log_tail(200)


@pytest.mark.parametrize(
    "breakage, key",
    [
        ("unknown-key", "routing.listener.keepalive-intervall"),
        ("missing-password-file", "routing.listener.password-file"),
    ],
)
def test_bad_config_stops_twistd(mesh, breakage, key):
    spec = mesh.router("router-a")
    if breakage == "unknown-key":
        spec.listener["keepalive-intervall"] = 200
    else:
        spec.listener["password-file"] = spec.directory / "no-such-secret"
    spec.write()

    result = subprocess.run(
        twistd_command(spec), cwd=spec.directory, env=router_env(),
        capture_output=True, text=True, timeout=60,
    )
    output = result.stdout + result.stderr
    assert result.returncode != 0, output
    assert str(spec.config_path) in output
    assert key in output
    if breakage == "missing-password-file":
        assert "no-such-secret" in output
    # No router started: no data-dir, no event log, nothing on its ports.
    assert not spec.data_dir.exists()
    for port in (spec.admin_port, spec.routing_port):
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", port), timeout=2).close()


def _run_twistd(spec) -> tuple[int, str]:
    """
    Run C{twistd -n meshroute} for C{spec} to its end: the exit status, and
    what it printed and logged.
    """
    result = subprocess.run(
        twistd_command(spec), cwd=spec.directory, env=router_env(),
        capture_output=True, text=True, timeout=60,
    )
    log = spec.log_path.read_text() if spec.log_path.exists() else ""
    return result.returncode, result.stdout + result.stderr + log


def test_a_port_in_use_stops_twistd_with_a_message_naming_file_and_key(mesh):
    spec = mesh.router("router-a")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", spec.routing_port))
        taken.listen()
        status, output = _run_twistd(spec)
    assert status != 0, output
    assert "Traceback" not in output, output
    [line] = [line for line in output.splitlines() if str(spec.config_path) in line]
    assert "routing.listener.endpoint" in line
    assert f"tcp:{spec.routing_port}:interface=127.0.0.1" in line
    assert "in use" in line


@pytest.mark.parametrize("data_dir", ["a-file", "a-file/below"])
def test_an_unusable_data_dir_stops_twistd_with_a_message_naming_file_and_key(mesh, data_dir):
    spec = mesh.router("router-a")
    (spec.directory / "a-file").write_text("not a directory\n")
    spec.router["data-dir"] = str(spec.directory / data_dir)
    spec.write()
    status, output = _run_twistd(spec)
    assert status != 0, output
    assert "Traceback" not in output, output
    [line] = [line for line in output.splitlines() if str(spec.config_path) in line]
    assert "router.data-dir" in line and data_dir in line


def test_check_config_prints_defaults_and_refuses_errors(mesh):
    a = mesh.router("router-a")
    spec = mesh.router(
        "router-b", connect=[{"router": "router-a", "endpoint": a.routing_endpoint,
                              "password-file": mesh.password_file}]
    )
    spec.listener = {"endpoint": spec.listener["endpoint"],
                     "password-file": spec.listener["password-file"]}
    spec.write()

    result = run_cli("check-config", str(spec.config_path))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    for default in ("keepalive-interval = 60000", "stage-valid-timeout = 15000",
                    "reject-disconnect-delay = 5000", "retry-interval = 2000",
                    "retry-interval-multiplier = 1.0", "max-retry-interval = 2000",
                    "reconnect-attempts = -1"):
        assert default in lines, result.stdout
    effective = tomllib.loads(result.stdout)
    assert effective["router"]["name"] == "router-b"
    assert effective["routing"]["connector"][0]["router"] == "router-a"
    assert mesh.password_file.read_text().strip() not in result.stdout

    spec.connectors[0]["retry-intervall"] = 100
    spec.write()
    result = run_cli("check-config", str(spec.config_path))
    assert result.returncode == 1
    assert str(spec.config_path) in result.stderr
    assert "routing.connector[0].retry-intervall" in result.stderr
    assert result.stdout == ""


def test_status_shows_links(mesh):
    a = mesh.router("router-a")
    b = mesh.router("router-b", listener=False, connect=[a])
    a_proc, b_proc = mesh.start(a, b)
    a_proc.wait_delivery("router-b")

    table = run_cli("status", "--admin", a.admin_url)
    assert table.returncode == 0, table.stderr
    assert table.stdout.startswith("router router-a ")
    [row] = [line.split() for line in table.stdout.splitlines() if "router-b" in line]
    assert row[:3] == ["router-b", "listener", "delivery"]
    assert row[3:5] == [str(KEEPALIVE_INTERVAL_MS), "ms"]

    raw = run_cli("status", "--admin", b.admin_url, "--json")
    assert raw.returncode == 0, raw.stderr
    status = json.loads(raw.stdout)
    assert status["router"]["name"] == "router-b"
    [link] = status["links"]
    assert (link["peer"], link["direction"], link["stage"]) == ("router-a", "connector", "delivery")

    nobody = run_cli("status", "--admin", f"http://127.0.0.1:{PORTS.allocate()}")
    assert nobody.returncode == 1
    assert "cannot read" in nobody.stderr


# -- TLS ------------------------------------------------------------------------


def test_tls_link_verifies_the_listener_certificate(mesh, tmp_path):
    """
    A connector that trusts the listener's CA reaches delivery over TLS;
    one that trusts another CA fails verification at every attempt, never
    gets past connect, and the listener carries on.
    """
    ca_key, ca_cert = make_ca(tmp_path / "tls" / "mesh-ca", "meshroute test CA")
    make_ca(tmp_path / "tls" / "other-ca", "some other CA")
    key_path, cert_path = make_server_cert(tmp_path / "tls", ca_key, ca_cert)

    a = mesh.router(
        "router-a",
        listener_endpoint=(
            f"ssl:{{port}}:interface=127.0.0.1:privateKey={key_path}:certKey={cert_path}"
        ),
    )

    def tls_to_a(ca_dir):
        return mesh.connector(
            a, endpoint=f"tls:localhost:{a.routing_port}:trustRoots={ca_dir}"
        )

    b = mesh.router("router-b", listener=False, connect=[tls_to_a(tmp_path / "tls" / "mesh-ca")])
    c = mesh.router("router-c", listener=False, connect=[tls_to_a(tmp_path / "tls" / "other-ca")])
    a_proc, b_proc, c_proc = mesh.start(a, b, c)

    [real_link] = _link_ids(a_proc.wait_delivery("router-b"))
    b_proc.wait_delivery("router-a")

    failures = c_proc.wait_event("link.closed", count=3, peer="router-a")
    assert {f["stage"] for f in failures} == {"connect"}, failures
    # The connector itself refused the certificate, and says so.
    assert all("certificate verify failed" in f["detail"] for f in failures), failures
    assert [e["stage"] for e in c_proc.events("link.stage")] == ["connect"] * len(
        c_proc.events("link.stage")
    )
    assert a_proc.events("link.stage", peer="router-c") == []
    assert a_proc.info()["name"] == "router-a"
    _assert_stays_in_delivery(a_proc, "router-b", real_link)
