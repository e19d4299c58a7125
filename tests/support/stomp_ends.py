"""
A STOMP client's end of a router's STOMP connection without sockets
(L{StompEnd}, over a C{StringTransport}), the factory it connects to, and
the real engine over the real store run inline (L{auto_engine}): what the
tests of L{meshroute.stomp} drive connections with.
"""

from dataclasses import replace

import pytest
from twisted.internet.testing import StringTransport

from meshroute.sessions.settings import SessionSettings
from meshroute.stomp.frames import HEARTBEAT, SERVER_COMMANDS, StompLimits, StompParser
from meshroute.stomp.listener import StompFactory

from support.router_engine import engine_on, engine_store

SETTINGS = SessionSettings(connection_ttl_check_interval_ms=500)


@pytest.fixture
def auto_engine(tmp_path, clock):
    """
    The real message engine over the real store run inline: sends to
    local queues are accepted at once.
    """
    store = engine_store(tmp_path, clock)
    yield engine_on(store, clock)
    store.close()


@pytest.fixture
def started(auto_engine):
    """
    The real engine, started: its fan-out takes publications.
    """
    auto_engine.start()
    yield auto_engine
    auto_engine.stop()


def put(engine, queue: str, *bodies: bytes) -> None:
    """
    Send persistent messages to a local queue.
    """
    for body in bodies:
        engine.submit(queue, body, {}, True)


def make_factory(engine, clock, **options) -> StompFactory:
    settings = replace(SETTINGS, **options.pop("settings", {}))
    return StompFactory(engine, clock, settings, **options)


class StompEnd:
    """
    A STOMP client's end of one connection, driven frame by frame.
    """

    def __init__(self, factory) -> None:
        self.protocol = factory.buildProtocol(None)
        self.transport = StringTransport()
        self.protocol.makeConnection(self.transport)
        self._parser = StompParser(StompLimits(1 << 24, 1000, 1 << 20), SERVER_COMMANDS)
        self.heartbeats = 0

    def send(self, data: bytes) -> None:
        self.protocol.dataReceived(data)

    def frame(self, command: str, *headers: tuple[str, str], body: bytes = b"") -> None:
        self.send(frame_bytes(command, *headers, body=body))

    def received(self) -> list:
        data = self.transport.value()
        self.transport.clear()
        frames = []
        for frame in self._parser.feed(data):
            if frame is HEARTBEAT:
                self.heartbeats += 1
            else:
                frames.append(frame)
        return frames

    def connect(self, *headers, version: str | None = "1.2"):
        """
        CONNECT offering C{version} (an C{accept-version}; None: none, as a
        STOMP 1.0 client), and read what follows as the version settled.
        """
        offer = (("accept-version", version),) if version is not None else ()
        self.frame("CONNECT", *offer, ("host", "/"), *headers)
        (connected,) = self.received()
        assert connected.command == "CONNECTED", connected
        self._parser.version = connected.header("version")
        return connected

    @property
    def closed(self) -> bool:
        return self.transport.disconnecting or self.transport.disconnected

    def lose(self) -> None:
        self.protocol.connectionLost(None)


def frame_bytes(command: str, *headers: tuple[str, str], body: bytes = b"") -> bytes:
    "A STOMP frame as a client writes it (headers as they are: no escaping)."
    lines = [command] + [f"{k}:{v}" for k, v in headers]
    return ("\n".join(lines) + "\n\n").encode() + body + b"\0"


def commands(frames) -> list[str]:
    return [frame.command for frame in frames]


def subscribe(client, queue: str, ack: str = "auto", sub: str = "s1", **more):
    headers = [("id", sub), ("destination", f"/queue/{queue}"), ("ack", ack),
               ("receipt", f"sub-{sub}")]
    headers.extend((k.replace("_", "-"), v) for k, v in more.items())
    client.frame("SUBSCRIBE", *headers)
