"""
The router's side of client authentication and permissions (protocol
version 5), frame by frame without sockets: SCRAM and EXTERNAL, older
versions refused, one refusal for an unknown user and a wrong password,
sessions resumed by their user only, permission checks per Send,
SendBatch message and Subscribe, and a reload closing removed users'
connections.
"""

import pytest
from twisted.internet.ssl import Certificate
from twisted.internet.testing import StringTransport

from meshroute import events
from meshroute.client import ClientOptions, SendError, SessionError, connect_endpoint
from meshroute.wire import client_frames as f
from meshroute.sessions.native_listener import ClientFactory
from meshroute.security.credentials import derive
from meshroute.security.policy import Permission, Security, SecurityPolicy
from meshroute.security.scram import ScramServer
from support.certificates import make_ca, make_client_cert
from support.client_auth_testing import scram_open
from support.client_testing import failure_of, kept_clients, result_of  # noqa: F401
from support.fake_router import ROUTER, FakeEngine, Harness, ScriptedEndpoint
from support.router_connection import Connection

USERS = {"orders-app": derive("orders-pw", iterations=4096),
         "billing": derive("billing-pw", iterations=4096)}
PERMISSIONS = (
    Permission(("orders-app",), send=("orders@*", "audit"), consume=("orders", "orders-*")),
    Permission(("billing",), send=("invoices",), consume=("invoices",)),
    Permission(("cert-*",), send=("orders",), consume=()),
)


def policy(users=USERS, permissions=PERMISSIONS) -> SecurityPolicy:
    return SecurityPolicy(ROUTER, users, permissions)


@pytest.fixture
def engine(tmp_path, clock):
    engine = FakeEngine(str(tmp_path / "store.sqlite"), clock, auto=True)
    yield engine
    engine.close()


@pytest.fixture
def security():
    return Security(policy())


@pytest.fixture
def factory(engine, clock, security):
    return ClientFactory(engine, clock, security=security, secret=b"router secret")


class CertificateTransport(StringTransport):
    """
    A TLS transport whose client certificate (subject CN C{common_name},
    signed by a throwaway CA) the listener verified.
    """

    def __init__(self, tmp_path, common_name: str) -> None:
        super().__init__()
        ca_key, ca_cert = make_ca(tmp_path / common_name, "clients CA")
        _, cert_path = make_client_cert(tmp_path / common_name, ca_key, ca_cert, common_name)
        self._certificate = Certificate.loadPEM(cert_path.read_bytes()).original

    def getPeerCertificate(self):
        return self._certificate


class Client(Connection):
    def __init__(self, factory, transport=None) -> None:
        super().__init__(factory, transport)
        self.next_id = 1

    def command(self) -> int:
        self.next_id += 1
        return self.next_id - 1

    def scram(self, user: str, password: str, session_id: str = "") -> list:
        return scram_open(self, user, password, session_id)

    def login(self, user="orders-app", password="orders-pw", session_id="") -> f.Opened:
        authenticated, opened = self.scram(user, password, session_id)
        assert authenticated.user == user
        return opened


def test_scram_authenticates_then_opens(factory, engine):
    client = Client(factory)
    opened = client.login()
    assert isinstance(opened, f.OpenedWithTopology) and opened.version == 5
    assert factory.sessions.describe()[0]["user"] == "orders-app"
    assert engine.events.named(events.SECURITY_AUTHENTICATED) == [
        {"user": "orders-app", "mechanism": "SCRAM-SHA-256"}]


def test_older_versions_are_refused_when_users_are_configured(factory):
    client = Client(factory)
    client.send(f.Open([1, 2, 3, 4], "c", "", 60000))
    (error,) = client.received()
    assert (error.command_id, error.code) == (0, f.AUTHENTICATION_REQUIRED)
    assert "version 5" in error.detail
    assert client.closed


def test_without_security_a_version_5_client_opens_anonymously(engine, clock):
    client = Client(ClientFactory(engine, clock))
    client.send(f.Open([5], "c", "", 60000))
    (opened,) = client.received()
    assert isinstance(opened, f.Opened) and opened.version == 5


def test_wrong_password_and_unknown_user_are_refused_identically(factory, engine):
    wrong, unknown = Client(factory), Client(factory)
    refusals = [wrong.scram("orders-app", "guess"), unknown.scram("nobody", "guess")]
    assert refusals[0] == refusals[1] == [
        f.Error(0, f.NOT_AUTHENTICATED, "authentication failed")]
    assert wrong.closed and unknown.closed
    denials = engine.events.named(events.SECURITY_DENIED)
    assert [(d["user"], d["action"]) for d in denials] == [
        ("orders-app", "connect"), ("nobody", "connect")]
    assert not any("guess" in str(d) for d in denials)


def test_authentication_frames_out_of_order_are_bad_commands(factory):
    early = Client(factory)
    early.send(f.Authenticate("SCRAM-SHA-256", b"n,,n=a,r=b"))
    assert early.received()[-1].code == f.BAD_COMMAND
    skipped = Client(factory)
    skipped.send(f.Open([5], "c", "", 60000))
    skipped.received()
    skipped.send(f.AuthResponse(b"c=biws,r=x,p=AAAA"))
    assert skipped.received()[-1].code == f.BAD_COMMAND
    unattached = Client(factory)
    unattached.send(f.Open([5], "c", "", 60000), f.Send(1, "orders", {}, b"x", True))
    assert unattached.received()[-1].code == f.BAD_COMMAND


def test_malformed_scram_and_unoffered_mechanisms_are_not_authenticated(factory):
    for mechanism, data in (("SCRAM-SHA-256", b"\xff garbage"), ("PLAIN", b"\0a\0b"),
                            ("EXTERNAL", b"")):
        client = Client(factory)
        client.send(f.Open([5], "c", "", 60000))
        assert client.received() == [f.Mechanisms(["SCRAM-SHA-256"])]
        client.send(f.Authenticate(mechanism, data))
        assert client.received() == [f.Error(0, f.NOT_AUTHENTICATED, "authentication failed")]


def test_a_verified_certificate_authenticates_its_common_name(engine, clock, security,
                                                             tmp_path):
    factory = ClientFactory(engine, clock, security=security, verifies_certificates=True)
    client = Client(factory, CertificateTransport(tmp_path, "cert-orders"))
    client.send(f.Open([5], "c", "", 60000))
    assert client.received() == [f.Mechanisms(["EXTERNAL", "SCRAM-SHA-256"])]
    client.send(f.Authenticate("EXTERNAL", b""))
    authenticated, opened = client.received()
    assert authenticated == f.Authenticated("cert-orders", b"")
    client.send(f.Send(client.command(), "orders", {}, b"x", True),
                f.Send(client.command(), "invoices", {}, b"x", True))
    answers = client.received()
    assert [type(a) for a in answers if not isinstance(a, f.Processed)] == [f.Confirm, f.Error]


def test_a_certificate_is_not_trusted_unless_the_listener_verifies_it(factory, tmp_path):
    client = Client(factory, CertificateTransport(tmp_path, "cert-orders"))
    client.send(f.Open([5], "c", "", 60000))
    assert client.received() == [f.Mechanisms(["SCRAM-SHA-256"])]


def answers(client) -> dict:
    return {frame.command_id: frame for frame in client.received()
            if isinstance(frame, (f.Confirm, f.Error))}


def test_sends_are_checked_against_the_user_s_permissions(factory, engine):
    client = Client(factory)
    client.login()
    allowed = [client.command() for _ in range(3)]
    client.send(f.Send(allowed[0], "orders", {}, b"x", True),
                f.Send(allowed[1], f"orders@{ROUTER}", {}, b"x", True),
                f.Send(allowed[2], "audit", {}, b"x", True))
    refused = client.command()
    client.send(f.Send(refused, "invoices", {}, b"x", True))
    got = answers(client)
    assert all(isinstance(got[c], f.Confirm) for c in allowed)
    assert got[refused] == f.Error(refused, f.NOT_ALLOWED,
                                   "user 'orders-app' may not send to 'invoices'")
    assert not client.closed
    (denial,) = engine.events.named(events.SECURITY_DENIED)
    assert denial == {"user": "orders-app", "action": "send", "target": "invoices",
                      "reason": "no permission sends there"}


def test_a_refused_message_of_a_batch_refuses_that_message_only(factory, engine):
    client = Client(factory)
    client.login()
    first = client.command()
    for _ in range(3):
        client.command()
    client.send(f.SendBatch(first, [["orders", {}, b"a", True, ""],
                                    ["invoices", {}, b"b", True, ""],
                                    ["secret@elsewhere", {}, b"c", False, ""],
                                    ["orders-x@r", {}, b"d", False, ""]]))
    frames = [fr for fr in client.received() if not isinstance(fr, f.Processed)]
    assert [type(fr) for fr in frames] == [f.Confirmed, f.Error, f.Error, f.Error]
    assert frames[0].first_command_id == first and len(frames[0].msg_ids) == 1
    assert [fr.code for fr in frames[1:]] == [f.NOT_ALLOWED, f.NOT_ALLOWED, f.NOT_ALLOWED]
    assert len(engine.events.named(events.SECURITY_DENIED)) == 3
    assert not client.closed


def test_a_refused_send_in_a_transaction_rolls_it_back(factory):
    client = Client(factory)
    client.login()
    begin, ok, refused, commit = (client.command() for _ in range(4))
    client.send(f.Begin(begin), f.Send(ok, "orders", {}, b"x", True),
                f.Send(refused, "invoices", {}, b"x", True), f.Commit(commit))
    got = answers(client)
    assert got[refused].code == f.NOT_ALLOWED
    assert got[ok].code == f.ROLLED_BACK and got[commit].code == f.ROLLED_BACK


def test_subscribe_is_checked_against_the_user_s_permissions(factory, engine):
    client = Client(factory)
    client.login()
    allowed, refused = client.command(), client.command()
    client.send(f.Subscribe(allowed, 1, "orders-eu", 10),
                f.Subscribe(refused, 2, "invoices", 10))
    got = answers(client)
    assert isinstance(got[allowed], f.Confirm)
    assert got[refused].code == f.NOT_ALLOWED
    (denial,) = engine.events.named(events.SECURITY_DENIED)
    assert (denial["action"], denial["target"]) == ("consume", "invoices")


def test_only_the_user_that_opened_a_session_resumes_it(factory, engine):
    owner = Client(factory)
    session_id = owner.login().session_id
    owner.protocol.connectionLost(None)
    thief = Client(factory)
    refusal = thief.scram("billing", "billing-pw", session_id=session_id)
    assert refusal[-1] == f.Error(0, f.NOT_ALLOWED, f"session {session_id} is another user's")
    assert thief.closed
    (denial,) = engine.events.named(events.SECURITY_DENIED)
    assert (denial["user"], denial["action"], denial["target"]) == (
        "billing", "resume", session_id)
    back = Client(factory)
    opened = back.login(session_id=session_id)
    assert opened.reattached and opened.session_id == session_id


def test_a_reload_closes_the_connections_of_removed_users_only(engine, clock, security,
                                                              tmp_path):
    factory = ClientFactory(engine, clock, security=security, verifies_certificates=True)
    orders, billing = Client(factory), Client(factory)
    orders.login()
    billing.login("billing", "billing-pw")
    certified = Client(factory, CertificateTransport(tmp_path, "cert-a"))
    certified.send(f.Open([5], "c", "", 60000), f.Authenticate("EXTERNAL", b""))
    certified.received()
    security.replace(policy(users={"billing": USERS["billing"]}))
    assert orders.received() == [
        f.Error(0, f.USER_REMOVED, "user 'orders-app' was removed from the router's users")]
    assert orders.closed and not billing.closed and not certified.closed
    security.replace(policy(users={"billing": USERS["billing"]}, permissions=PERMISSIONS[:2]))
    assert certified.received()[-1].code == f.USER_REMOVED
    assert not billing.closed


def test_a_reload_applies_new_permissions_to_open_sessions(factory, security):
    client = Client(factory)
    client.login()
    first = client.command()
    client.send(f.Send(first, "invoices", {}, b"x", True))
    assert answers(client)[first].code == f.NOT_ALLOWED
    security.replace(policy(permissions=(Permission(("orders-app",), send=("invoices",)),)))
    second = client.command()
    client.send(f.Send(second, "invoices", {}, b"x", True))
    assert isinstance(answers(client)[second], f.Confirm)


# -- the client library ------------------------------------------------------------


@pytest.fixture
def harness(engine, clock, security):
    return Harness(engine, clock, security=security, secret=b"router secret")


def test_the_client_authenticates_with_a_password(harness):
    client = harness.connect("shop", user="orders-app", password="orders-pw")
    assert client.router == ROUTER
    (session,) = harness.factory.sessions.describe()
    assert session["user"] == "orders-app"
    d = client.send("orders", b"hello")
    harness.flush()
    assert result_of(d)


def test_a_refused_send_fails_with_not_allowed(harness):
    client = harness.connect("shop", user="orders-app", password="orders-pw")
    d = client.send("invoices", b"x")
    harness.flush()
    error = failure_of(d)
    assert isinstance(error, SendError) and error.code == f.NOT_ALLOWED
    # The session goes on.
    ok = client.send("orders", b"y")
    harness.flush()
    assert result_of(ok)


def test_a_refused_subscribe_fails_with_not_allowed(harness):
    client = harness.connect("shop", user="orders-app", password="orders-pw")
    d = client.subscribe("invoices", lambda delivery: None)
    harness.flush()
    assert failure_of(d).code == f.NOT_ALLOWED


def test_a_wrong_password_fails_connect_as_not_authenticated(harness, clock):
    d = connect_endpoint(clock, harness.endpoint, client_id="c", user="orders-app",
                         password="wrong")
    harness.flush()
    error = failure_of(d)
    assert isinstance(error, SessionError) and error.code == f.NOT_AUTHENTICATED


def test_a_client_without_credentials_is_refused_by_a_router_with_users(harness, clock):
    d = connect_endpoint(clock, harness.endpoint, client_id="c")
    harness.flush()
    error = failure_of(d)
    assert error.code == f.NOT_AUTHENTICATED and "requires authentication" in str(error)


def test_the_client_refuses_a_router_that_cannot_prove_the_credentials(clock):
    """
    Mutual authentication: a router that accepts any proof but does not
    hold the user's ServerKey is not trusted.
    """
    endpoint = ScriptedEndpoint()
    d = connect_endpoint(clock, endpoint, client_id="c", user="orders-app",
                         password="orders-pw")
    router = endpoint.accept()
    (open_,) = router.frames()
    assert f.AUTH_VERSION in open_.versions
    router.send(f.Mechanisms(["SCRAM-SHA-256"]))
    (authenticate,) = router.frames()
    impostor = ScramServer({"orders-app": derive("another", iterations=4096)}.get, b"s")
    router.send(f.Challenge(impostor.first(authenticate.data)))
    (response,) = router.frames()
    assert b"orders-pw" not in response.data
    router.send(f.Authenticated("orders-app", b"v=" + b"A" * 43 + b"="))
    assert router.aborted
    assert failure_of(d).code == f.PROTOCOL_ERROR


def test_user_and_password_go_together():
    with pytest.raises(ValueError, match="user and password go together"):
        ClientOptions(user="a")
    assert "secret" not in repr(ClientOptions(user="a", password="secret"))
