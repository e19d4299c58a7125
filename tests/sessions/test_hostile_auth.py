"""
An unauthenticated client trying every frame, on a client listener with
users (C{[security]}), driven without sockets: in each stage before
authentication (before Open, offered mechanisms, challenged), every frame
a client may send, and arbitrary sequences of them.  It never gets a
session, nothing it sends is carried out, its connection is closed with a
reason (or still waits to authenticate, within stage-valid-timeout), and
an authenticated bystander keeps being served.
"""

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from twisted.internet.task import Clock

from meshroute.wire import client_frames as f
from meshroute.sessions.limits import ClientLimits
from meshroute.sessions.native_listener import ClientFactory
from meshroute.sessions.settings import SessionSettings
from meshroute.security.credentials import derive
from meshroute.security.policy import Permission, Security, SecurityPolicy
from meshroute.security.scram import MECHANISM, ScramClient
from meshroute.wire.codec import encode

from support.client_auth_testing import scram_open
from support.fake_router import ROUTER, FakeEngine
from support.router_connection import Connection

USERS = {"app": derive("app-pw", iterations=4096)}
PERMISSIONS = (Permission(("app",), send=("q",), consume=("q",)),)

#: One of every frame a client may send, authentication's included.
EVERY_FRAME = [
    f.Open([5], "x", "", 60000), f.Open([1, 2, 3, 4], "x", "", 60000),
    f.Send(1, "q", {}, b"stolen", True), f.Subscribe(1, 1, "q", 10), f.Unsubscribe(1, 1),
    f.Credit(1, 1, 10), f.Ack(1, [1]), f.Ping(1), f.Pong(1), f.Close(1), f.Received(0, 0),
    f.Begin(1), f.Commit(1), f.Rollback(1), f.SendBatch(1, [["q", {}, b"stolen", True, ""]]),
    f.AckThrough(1, 1, 1), f.Authenticate(MECHANISM, b"n,,n=app,r=abc"),
    f.Authenticate("EXTERNAL", b""), f.Authenticate("PLAIN", b"\0app\0app-pw"),
    f.AuthResponse(b"c=biws,r=abc,p=AAAA"),
    f.Prepare(1, 1, "g", "b"), f.CommitXid(1, 1, "g", "b", False), f.RollbackXid(1, 1, "g", "b"),
    f.Recover(1), f.SubscribeTopic(1, 1, "#", 10, "d", "c", True, True),
    f.Unsubscribe(1, 1, forget=True),
]
assert {type(frame) for frame in EVERY_FRAME} == set(f.FROM_CLIENT.classes)

#: Where in the exchange the client tries its frame.
STAGES = ("before-open", "mechanisms-offered", "challenged")


class Router:
    def __init__(self, path: str) -> None:
        self.clock = Clock()
        self.engine = FakeEngine(path, self.clock, auto=True)
        settings = SessionSettings(limits=ClientLimits(stage_valid_timeout_ms=2000))
        self.factory = ClientFactory(
            self.engine, self.clock, settings=settings,
            security=Security(SecurityPolicy(ROUTER, USERS, PERMISSIONS)), secret=b"secret")
        self.bystander = Connection(self.factory)
        answer = scram_open(self.bystander, "app", "app-pw")
        assert isinstance(answer[-1], f.Opened), answer
        self.bystander.send(f.Subscribe(1, 1, "q", 1000))
        assert self.bystander.received() == [f.Confirm(1, "")]
        self.command = 2

    def stage(self, stage: str) -> Connection:
        """
        A new connection brought to C{stage} of the exchange.
        """
        connection = Connection(self.factory)
        if stage != "before-open":
            connection.send(f.Open([5], "x", "", 60000))
            assert isinstance(connection.expect(), f.Mechanisms)
        if stage == "challenged":
            connection.send(f.Authenticate(MECHANISM, ScramClient("app", "wrong").first()))
            assert isinstance(connection.expect(), f.Challenge)
        return connection

    def judge(self, connection: Connection) -> None:
        """
        No session, nothing carried out, closed with a reason or waiting;
        the bystander served.
        """
        frames = connection.received()
        assert not any(isinstance(frame, (f.Opened, f.Authenticated, f.Confirm, f.Deliver))
                       for frame in frames), frames
        assert connection.protocol.core.session is None
        assert len(self.factory.sessions.sessions) == 1  # the bystander's
        if connection.closed:
            assert isinstance(frames[-1], f.Error) and frames[-1].command_id == 0, frames
        else:
            # Still waiting to authenticate: closed within stage-valid-timeout.
            self.clock.advance(2.5)
            assert connection.closed
            assert connection.received()[-1].code == f.LIMIT_REACHED
        connection.lose()
        n, self.command = self.command, self.command + 1
        self.bystander.send(f.Send(n, "q", {}, b"mine", True))
        self.clock.advance(0)  # the turn's DeliverBatch
        frames = self.bystander.received()
        assert [x for x in frames if isinstance(x, f.Confirm) and x.command_id == n], frames
        bodies = [item[4] for x in frames if isinstance(x, f.DeliverBatch)
                  for item in x.deliveries]
        assert bodies == [b"mine"], frames


@pytest.fixture
def router(tmp_path):
    router = Router(str(tmp_path / "store.sqlite"))
    yield router
    router.engine.close()


@pytest.mark.parametrize("stage", STAGES)
def test_every_frame_in_every_stage_before_authentication(router, stage):
    refused = {}
    for frame in EVERY_FRAME:
        connection = router.stage(stage)
        connection.send(frame)
        frames = connection.received()
        connection._unread = frames  # judged below
        router.judge(connection)
        errors = [x.code for x in frames if isinstance(x, f.Error)]
        refused[type(frame).__name__] = errors[-1] if errors else f.LIMIT_REACHED
    assert set(refused.values()) <= {f.BAD_COMMAND, f.NOT_AUTHENTICATED, f.LIMIT_REACHED,
                                     f.AUTHENTICATION_REQUIRED}


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.sampled_from(STAGES), st.lists(st.sampled_from(EVERY_FRAME), min_size=1, max_size=8))
def test_arbitrary_sequences_of_frames_never_authenticate(router, stage, frames):
    connection = router.stage(stage)
    connection.protocol.dataReceived(b"".join(encode(frame) for frame in frames))
    router.judge(connection)


@pytest.mark.parametrize("stage", STAGES)
def test_a_client_that_stops_authenticating_is_closed_after_stage_valid_timeout(router, stage):
    connection = router.stage(stage)
    router.clock.advance(1.9)
    assert not connection.closed
    router.judge(connection)  # advances past the timeout
