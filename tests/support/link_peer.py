"""
One end of a routing link at a time (L{LinkProtocol} over a
L{StringTransport}, a L{Clock}, a real L{LinkRegistry}): the router under
test (the C{router} fixture) and the peer the test plays, for the link
tests and the HA tests that speak on a routing link.
"""

import struct
from dataclasses import dataclass
import msgpack
import pytest
from twisted.internet.error import ConnectionDone
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport
from twisted.python.failure import Failure
from meshroute import events
from meshroute.link import auth, stages
from meshroute.link.context import RouterContext
from meshroute.link.settings import ConnectorSettings, ListenerSettings
from support.fakes import RecordingEngine
from meshroute.link.link import ConnectorFactory, ListenerFactory, LinkProtocol
from meshroute.link.registry import LinkRegistry
from meshroute.link.traffic import Traffic
from meshroute.wire.codec import FrameDecoder, encode
from meshroute.wire.frames import (
    CHALLENGE_SIZE,
    Authenticate,
    Authenticated,
    Hello,
    Recovery,
    Welcome,
)


#: The router under test and the router the test pretends to be.
LOCAL = "router-a"
REMOTE = "router-b"
SECRET = b"correct horse battery staple"

STAGE_TIMEOUT_MS = 15_000
REJECT_DELAY_MS = 2_000
KEEPALIVE_MS = 1_000

#: A small step of time, exactly representable so that clock sums stay exact.
EPSILON = 1 / 1024

STAGE_TIMEOUT = STAGE_TIMEOUT_MS / 1000
REJECT_DELAY = REJECT_DELAY_MS / 1000
KEEPALIVE = KEEPALIVE_MS / 1000

#: A message as transfer frames carry it.
ITEM = ["router-b:ab:1", REMOTE, LOCAL, "q", 1, 2.5, {}, b"body"]


# -- the local router and the peer the test plays ------------------------


@dataclass
class Router:
    """
    The shared context of the router under test, and its parts.
    """

    context: RouterContext
    clock: Clock
    registry: LinkRegistry
    engine: RecordingEngine
    data_dir: str

    def listener(self, **overrides) -> "ConnectorPeer":
        """
        Accept one inbound connection; the test plays the connector.
        """
        settings = ListenerSettings(
            **{
                "secret": SECRET,
                "keepalive_interval_ms": KEEPALIVE_MS,
                "stage_valid_timeout_ms": STAGE_TIMEOUT_MS,
                "reject_disconnect_delay_ms": REJECT_DELAY_MS,
                **overrides,
            }
        )
        protocol = ListenerFactory(self.context, settings).buildProtocol(None)
        return ConnectorPeer(self, protocol, settings.secret)

    def connector(self, **overrides) -> "ListenerPeer":
        """
        Open one outbound connection; the test plays the listener.
        """
        settings = ConnectorSettings(
            **{
                "secret": SECRET,
                "expected_peer": REMOTE,
                "stage_valid_timeout_ms": STAGE_TIMEOUT_MS,
                **overrides,
            }
        )
        deliveries = []
        factory = ConnectorFactory(self.context, settings, lambda: deliveries.append(1))
        protocol = factory.buildProtocol(None)
        peer = ListenerPeer(self, protocol, settings.secret)
        peer.deliveries = deliveries
        return peer

    def events(self, event: str | None = None) -> list[dict]:
        self.context.events.flush()
        return [
            r for r in events.read_events(self.data_dir)
            if event is None or r["event"] == event
        ]

    def holds(self, name: str) -> bool:
        """
        Whether some live link holds C{name} in the registry.  The probe
        claim succeeds only when the name is free, and is then released.
        """
        probe = _Probe(name)
        if self.registry.claim(name, probe):
            self.registry.closed(probe)
            return False
        return True


class _Probe:
    """
    A stand-in link for L{Router.holds}.
    """

    def __init__(self, peer: str) -> None:
        self.peer = peer
        self.core = self  # a link of a router without HA
        self.peer_epoch = 0
        self.direction = "listener"
        self.traffic = Traffic()


@pytest.fixture
def router(tmp_path) -> Router:
    clock = Clock()
    registry = LinkRegistry()
    engine = RecordingEngine()
    log = events.EventLog(str(tmp_path), LOCAL, clock)
    context = RouterContext(
        name=LOCAL, clock=clock, events=log, registry=registry, engine=engine
    )
    yield Router(context, clock, registry, engine, str(tmp_path))
    log.close()


class PeerSide:
    """
    The remote end of one link, played by the test.
    """

    def __init__(self, router: Router, protocol: LinkProtocol, secret: bytes) -> None:
        self.router = router
        self.clock = router.clock
        self.protocol = protocol
        self.secret = secret
        self.transport = StringTransport()
        self._decoder = FrameDecoder()
        protocol.makeConnection(self.transport)

    # The link under test.

    @property
    def link(self):
        return self.protocol.link

    @property
    def core(self):
        return self.protocol.link.core

    # Bytes and frames in both directions.

    def send(self, *frames) -> None:
        """
        Deliver C{frames} to the link in one chunk.
        """
        self.protocol.dataReceived(b"".join(encode(f) for f in frames))

    def send_raw(self, items: list) -> None:
        """
        Deliver one frame body built by hand (for ill-typed fields).
        """
        body = msgpack.packb(items, use_bin_type=True)
        self.protocol.dataReceived(struct.pack(">I", len(body)) + body)

    def written(self) -> list:
        """
        The frames the link wrote since the last call.
        """
        frames = self._decoder.feed(self.transport.value())
        self.transport.clear()
        assert self._decoder.pending == 0, "the link wrote a partial frame"
        return frames

    def expect(self, *types) -> list:
        """
        The frames written since the last call, which must be of C{types}.
        """
        frames = self.written()
        assert [type(f) for f in frames] == list(types)
        return frames

    # Time.

    def advance(self, seconds: float, step: float | None = None) -> None:
        """
        Move the clock by C{seconds}, in increments of C{step} if given.
        """
        if step is None:
            self.clock.advance(seconds)
            return
        remaining = seconds
        while remaining > 0:
            self.clock.advance(min(step, remaining))
            remaining -= step

    # How the link ended.

    @property
    def how_closed(self) -> str:
        """
        "open", "lose" (loseConnection) or "abort" (abortConnection).
        """
        if self.transport.disconnected:
            return "abort"
        if self.transport.disconnecting:
            return "lose"
        return "open"

    def complete_close(self) -> None:
        """
        The transport finished closing (or the peer went away).
        """
        self.protocol.connectionLost(Failure(ConnectionDone()))

    def events(self, event: str) -> list[dict]:
        return [r for r in self.router.events(event) if r["link"] == self.core.link_id]

    def closed_record(self) -> dict:
        """
        The single link.closed record of this link.
        """
        (record,) = self.events(events.LINK_CLOSED)
        return record

    def assert_closed(self, reason: str, how: str) -> dict:
        """
        The link asked the transport to close C{how} and, once the close
        completes, logs C{reason}.
        """
        assert self.how_closed == how
        assert self.events(events.LINK_CLOSED) == []
        self.complete_close()
        record = self.closed_record()
        assert record["reason"] == reason
        return record

    def stages(self) -> list[str]:
        return [r["stage"] for r in self.events(events.LINK_STAGE)]


class ConnectorPeer(PeerSide):
    """
    The test is a connector talking to the listener under test.
    """

    name = REMOTE
    challenge = bytes(range(CHALLENGE_SIZE))
    welcome: Welcome | None = None

    def hello(self, versions=(2,), router: str | None = None) -> None:
        self.send(Hello(list(versions), self.name if router is None else router))

    def hello_welcomed(self) -> Welcome:
        self.hello()
        (self.welcome,) = self.expect(Welcome)
        return self.welcome

    def proof(self, secret: bytes | None = None) -> bytes:
        return auth.proof(
            self.secret if secret is None else secret,
            "connector",
            self.name,
            LOCAL,
            self.challenge,
            self.welcome.challenge,
        )

    def expected_listener_proof(self) -> bytes:
        return auth.proof(
            self.secret, "listener", self.name, LOCAL, self.challenge, self.welcome.challenge
        )

    def authenticate(self, secret: bytes | None = None) -> None:
        self.send(Authenticate(self.proof(secret), self.challenge))

    def to_recovery(self) -> Recovery:
        self.hello_welcomed()
        self.authenticate()
        authenticated, recovery = self.expect(Authenticated, Recovery)
        assert authenticated.proof == self.expected_listener_proof()
        return recovery

    def to_delivery(self, last_received: int = 0) -> None:
        self.to_recovery()
        self.send(Recovery(last_received))
        assert self.core.stage == stages.DELIVERY


class ListenerPeer(PeerSide):
    """
    The test is a listener answering the connector under test.
    """

    name = REMOTE
    challenge = bytes(range(100, 100 + CHALLENGE_SIZE))
    deliveries: list
    authenticate_frame: Authenticate | None = None

    def welcome(self, router: str | None = None, keepalive_ms: int = KEEPALIVE_MS,
                version: int = 2, challenge: bytes | None = None) -> None:
        self.send(
            Welcome(
                version,
                self.name if router is None else router,
                keepalive_ms,
                self.challenge if challenge is None else challenge,
            )
        )

    def welcome_answered(self, keepalive_ms: int = KEEPALIVE_MS) -> Authenticate:
        self.welcome(keepalive_ms=keepalive_ms)
        (self.authenticate_frame,) = self.expect(Authenticate)
        return self.authenticate_frame

    def expected_connector_proof(self) -> bytes:
        return auth.proof(
            self.secret, "connector", LOCAL, self.name,
            self.authenticate_frame.challenge, self.challenge,
        )

    def proof(self, secret: bytes | None = None) -> bytes:
        return auth.proof(
            self.secret if secret is None else secret,
            "listener",
            LOCAL,
            self.name,
            self.authenticate_frame.challenge,
            self.challenge,
        )

    def authenticated(self, secret: bytes | None = None) -> None:
        self.send(Authenticated(self.proof(secret)))

    def to_recovery(self, keepalive_ms: int = KEEPALIVE_MS) -> Recovery:
        self.expect(Hello)
        self.welcome_answered(keepalive_ms)
        self.authenticated()
        (recovery,) = self.expect(Recovery)
        return recovery

    def to_delivery(self, keepalive_ms: int = KEEPALIVE_MS, last_received: int = 0) -> None:
        self.to_recovery(keepalive_ms)
        self.send(Recovery(last_received))
        assert self.core.stage == stages.DELIVERY


def peer_for(router: Router, direction: str) -> PeerSide:
    return router.listener() if direction == "listener" else router.connector()
