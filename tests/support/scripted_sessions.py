"""
A client of the meshroute client API connected to a router the test
scripts frame by frame (L{fake_router.ScriptedEndpoint}, the C{endpoint}
fixture), kept as a L{Session}: the client's session tests and its
transaction tests drive one.
"""

import pytest

from meshroute.client import ClientOptions, connect_endpoint
from meshroute.wire import client_frames as f

from support.client_testing import result_of
from support.fake_router import ScriptedEndpoint


@pytest.fixture
def endpoint():
    return ScriptedEndpoint()


class Session:
    """
    A connected client, its endpoint and the router end in use, and the
    failure events it heard.
    """

    def __init__(self, clock, endpoint, **options) -> None:
        self.clock = clock
        self.endpoint = endpoint
        options.setdefault("client_id", "tester")
        d = connect_endpoint(clock, endpoint, ClientOptions(**options))
        self.router = endpoint.accept()
        self.first_open = self.router.open()
        self.client = result_of(d)
        self.events: list[str] = []
        self.client.add_failure_listener(self.events.append)

    def reconnect(self, after: float = 2.0):
        """
        Let the retry delay pass and accept the reconnection.

        @return: the client's Open on the new connection.
        """
        attempts = len(self.endpoint.attempts)
        self.clock.advance(after)
        assert len(self.endpoint.attempts) == attempts + 1
        self.router = self.endpoint.accept()
        (frame,) = self.router.frames()
        assert type(frame) is f.Open
        return frame

    def turn(self) -> None:
        self.clock.advance(0)

    def recreated(self, session_id: str) -> None:
        """
        Lose the connection, and answer the reconnection with a new
        session C{session_id}.
        """
        self.router.lose()
        self.reconnect()
        self.router.send(f.Opened(1, session_id, "router-a", 60000, False, 0))
