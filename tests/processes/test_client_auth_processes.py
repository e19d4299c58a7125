"""
Client authentication and permissions with real router processes: a user
without permission cannot send, consume or resume another user's
session; a wrong password and an unknown user are refused the same way;
a TLS client certificate maps to its user; SIGHUP removes a user and
closes its connections.  The tests speak the client protocol over
sockets (L{RawClient}) where they need frames, and use C{meshroute
send/receive} where an operator would.
"""

import os
import signal
import socket

from support.certificates import make_ca, make_client_cert, make_server_cert
from support.client_auth_testing import scram_open
from support.routers import mesh, run_cli, wait_until  # noqa: F401 (mesh is a fixture)

from meshroute.wire import client_frames as f
from meshroute.security.credentials import derive
from meshroute.security.users import write_users
from meshroute.wire.codec import FrameDecoder, encode

#: How long a read waits for the router's next frame.
READ_TIMEOUT_S = 15.0

PASSWORDS = {"alice": "alice-pw", "bob": "bob-pw"}
#: alice sends to and consumes from a-*, bob b-*; the certificate user
#: carol sends to a-in only.
PERMISSIONS = [
    {"users": ["alice"], "send": ["a-*"], "consume": ["a-*"]},
    {"users": ["bob"], "send": ["b-*"], "consume": ["b-*"]},
    {"users": ["carol"], "send": ["a-in"]},
]


def secured(mesh, name="router-a", client_endpoint=None, client_ca=None):
    """
    A router with a client listener and C{[security]}: alice and bob in
    its users file, L{PERMISSIONS}.
    """
    spec = mesh.router(name, listener=False, clients=True)
    users_file = spec.directory / "users"
    spec.directory.mkdir(parents=True, exist_ok=True)
    write_users(str(users_file), {user: derive(pw) for user, pw in PASSWORDS.items()})
    spec.extra["security"] = {"users-file": users_file}
    spec.arrays["security.permission"] = PERMISSIONS
    if client_endpoint is not None:
        spec.extra["clients.listener"]["endpoint"] = client_endpoint.replace(
            "{port}", str(spec.client_port))
    if client_ca is not None:
        spec.extra["clients.listener"]["client-ca"] = client_ca
    spec.write()
    return spec, users_file


def password_file(spec, user: str):
    path = spec.directory / f"{user}.password"
    path.write_text(PASSWORDS.get(user, "not-the-password") + "\n")
    return path


class RawClient:
    """
    One client connection over a socket, frame by frame.
    """

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=READ_TIMEOUT_S)
        self._decoder = FrameDecoder(frames=f.FROM_ROUTER)
        self._pending: list = []
        self.raw = b""
        self.seen: list = []

    def send(self, *frames) -> None:
        self.sock.sendall(b"".join(encode(frame) for frame in frames))

    def expect(self):
        """
        The router's next frame (waiting up to READ_TIMEOUT_S for it).
        """
        while not self._pending:
            data = self.sock.recv(65536)
            assert data, "the router closed the connection"
            self.raw += data
            self._pending = self._decoder.feed(data)
        frame = self._pending.pop(0)
        self.seen.append(frame)
        return frame

    def closed_by_router(self) -> bool:
        """
        Whether the router closes the connection (its end of file arrives
        within READ_TIMEOUT_S, with no more frames).
        """
        return not self._pending and self.sock.recv(65536) == b""

    def close(self) -> None:
        self.sock.close()


def test_users_send_and_consume_only_what_their_permissions_allow(mesh):
    spec, _ = secured(mesh)
    [router] = mesh.start(spec)
    alice = ["--connect", spec.client_endpoint, "--user", "alice",
             "--password-file", str(password_file(spec, "alice"))]

    ok = run_cli("send", *alice, "--to", "a-in", "--count", "2")
    assert ok.returncode == 0, ok.stderr
    refused = run_cli("send", *alice, "--to", "b-in")
    assert refused.returncode == 1
    assert ("send to b-in failed: message 1: not-allowed: user 'alice' may not send to "
            "'b-in'") in refused.stderr
    received = run_cli("receive", *alice, "--queue", "a-in", "--timeout", "20", "--count", "2")
    assert received.returncode == 0, received.stderr
    consume = run_cli("receive", *alice, "--queue", "b-in", "--timeout", "20", "--count", "1")
    assert consume.returncode != 0
    assert "not-allowed: user 'alice' may not consume from 'b-in'" in consume.stderr
    assert router.queue_depth("b-in") == 0

    denied = router.wait_event("security.denied", count=2, user="alice")
    assert [(d["action"], d["target"]) for d in denied] == [("send", "b-in"),
                                                          ("consume", "b-in")]
    assert all("alice-pw" not in str(d) for d in router.events())
    assert {e["mechanism"] for e in router.events("security.authenticated")} == {
        "SCRAM-SHA-256"}


def test_a_session_is_resumed_by_its_user_only(mesh):
    spec, _ = secured(mesh)
    mesh.start(spec)
    owner = RawClient(spec.client_port)
    _, opened = scram_open(owner, "alice", "alice-pw")
    session_id = opened.session_id
    owner.close()

    thief = RawClient(spec.client_port)
    assert scram_open(thief, "bob", "bob-pw", session_id=session_id) == [
        f.Error(0, f.NOT_ALLOWED, f"session {session_id} is another user's")]
    assert thief.closed_by_router()

    back = RawClient(spec.client_port)
    _, reopened = scram_open(back, "alice", "alice-pw", session_id=session_id)
    assert reopened.reattached and reopened.session_id == session_id


def test_a_wrong_password_and_an_unknown_user_are_refused_the_same_way(mesh):
    spec, _ = secured(mesh)
    [router] = mesh.start(spec)

    def refusal(user: str, password: str) -> tuple:
        client = RawClient(spec.client_port)
        answer = scram_open(client, user, password)
        assert client.closed_by_router()
        [challenge] = [frame for frame in client.seen if isinstance(frame, f.Challenge)]
        _, salt, iterations = challenge.data.split(b",")
        return answer, len(client.raw), salt, iterations

    wrong, wrong_size, wrong_salt, wrong_iterations = refusal("alice", "guess")
    unknown, unknown_size, unknown_salt, unknown_iterations = refusal("mallory", "guess")
    assert wrong == unknown == [f.Error(0, f.NOT_AUTHENTICATED, "authentication failed")]
    # Frame for frame the same shape: Mechanisms, a Challenge of the same
    # length (same salt size, same iteration count), the same Error.
    assert wrong_size == unknown_size
    assert len(wrong_salt) == len(unknown_salt) and wrong_iterations == unknown_iterations
    # The same names get the same salts every time, known or not.
    assert refusal("mallory", "again")[2] == unknown_salt
    assert refusal("alice", "again")[2] == wrong_salt

    # The command says the same for both.
    outputs = []
    for user in ("alice", "mallory"):
        result = run_cli("send", "--connect", spec.client_endpoint, "--to", "a-in",
                         "--user", user, "--password-file", str(password_file(spec, "x")))
        assert result.returncode == 1
        outputs.append(result.stderr)
    assert outputs[0] == outputs[1]
    assert "not-authenticated: authentication failed" in outputs[0]
    denied = router.wait_event("security.denied", count=6, action="connect")
    assert {d["user"] for d in denied} == {"alice", "mallory"}


def test_an_old_client_is_refused_when_users_are_configured(mesh):
    spec, _ = secured(mesh)
    mesh.start(spec)
    client = RawClient(spec.client_port)
    client.send(f.Open([1, 2, 3, 4], "old", "", 60000))
    error = client.expect()
    assert (error.command_id, error.code) == (0, f.AUTHENTICATION_REQUIRED)
    assert client.closed_by_router()


def test_a_tls_client_certificate_maps_to_its_user(mesh, tmp_path):
    tls = tmp_path / "tls"
    server_ca = make_ca(tls / "server-ca", "meshroute test server CA")
    key, cert = make_server_cert(tls, *server_ca)
    clients_ca = make_ca(tls / "clients-ca", "meshroute test clients CA")
    carol_key, carol_cert = make_client_cert(tls, *clients_ca, "carol")
    stranger_ca = make_ca(tls / "stranger-ca", "some other CA")
    stranger_key, stranger_cert = make_client_cert(tls / "stranger", *stranger_ca, "carol")

    spec, _ = secured(mesh, client_endpoint="ssl:{port}:interface=127.0.0.1:privateKey="
                      f"{key}:certKey={cert}", client_ca=str(tls / "clients-ca" / "ca.pem"))
    [router] = mesh.start(spec)

    def connect(cert_path, key_path) -> list[str]:
        return ["--connect", f"tls:localhost:{spec.client_port}:trustRoots={tls / 'server-ca'}"
                f":certificate={cert_path}:privateKey={key_path}"]

    sent = run_cli("send", *connect(carol_cert, carol_key), "--to", "a-in")
    assert sent.returncode == 0, sent.stderr
    [authenticated] = router.wait_event("security.authenticated", user="carol")
    assert authenticated["mechanism"] == "EXTERNAL"
    refused = run_cli("send", *connect(carol_cert, carol_key), "--to", "a-other")
    assert refused.returncode == 1
    assert "not-allowed: user 'carol' may not send to 'a-other'" in refused.stderr
    # A certificate of another CA (same CN) does not get past TLS.
    stranger = run_cli("send", *connect(stranger_cert, stranger_key), "--to", "a-in")
    assert stranger.returncode == 1
    assert len(router.events("security.authenticated", user="carol")) == 2
    # Password users still connect over the same TLS listener.
    alice = run_cli("send", "--connect", f"tls:localhost:{spec.client_port}:trustRoots="
                    f"{tls / 'server-ca'}", "--to", "a-in", "--user", "alice",
                    "--password-file", str(password_file(spec, "alice")))
    assert alice.returncode == 0, alice.stderr
    assert router.queue_depth("a-in") == 2


def test_sighup_removing_a_user_closes_its_connections_only(mesh):
    spec, users_file = secured(mesh)
    [router] = mesh.start(spec)
    alice, bob = RawClient(spec.client_port), RawClient(spec.client_port)
    scram_open(alice, "alice", "alice-pw")
    scram_open(bob, "bob", "bob-pw")

    removed = run_cli("user", "remove", "--file", str(users_file), "alice")
    assert removed.returncode == 0, removed.stderr
    os.kill(router.pid, signal.SIGHUP)

    assert alice.expect() == f.Error(0, f.USER_REMOVED,
                                     "user 'alice' was removed from the router's users")
    assert alice.closed_by_router()
    bob.send(f.Ping(7))
    assert bob.expect() == f.Pong(7)
    again = RawClient(spec.client_port)
    assert scram_open(again, "alice", "alice-pw") == [
        f.Error(0, f.NOT_AUTHENTICATED, "authentication failed")]
    wait_until(lambda: router.events("security.denied", user="alice", action="connect"),
               what="alice's refused login to be logged")
