"""
The STOMP listener (C{[stomp.listener]}): the thin protocol of each STOMP
connection, bytes in, frames out, machine inputs, and the factory that
owns what outlives one connection.

L{StompProtocol} feeds a sans-IO L{StompParser}; each frame becomes one
input of the connection's machine (L{meshroute.sessions.lifecycle}, with
the STOMP core of L{meshroute.stomp.connection}), heart-beats only keep
the connection alive.  Bytes that are not STOMP, a frame beyond
C{max-frame-size} or with more than C{max-headers} headers (the parser's
L{StompProtocolError}) close that connection with an C{ERROR} naming the
problem, and nothing else is disturbed.  The rest (the producer, the
buffers, frames out of turn) is every listener's
(L{meshroute.sessions.listener}).

L{StompFactory} shares the native listener's session registry (so the
admin API's C{/api/v1/sessions} and C{max-sessions} count both) and runs
its own L{meshroute.sessions.watch.ConnectionWatch}: the one timer
closing connections silent for their TTL, slow to finish a frame, or
without a session for C{stage-valid-timeout}; C{max-connections} refuses
a connection as soon as it is made.  Over WebSocket
(L{meshroute.stomp.websocket}) the same protocol reads and writes
WebSocket messages instead of a TCP stream.
"""

from twisted.internet.interfaces import IReactorTime

from meshroute.sessions.listener import ListenerFactory, ListenerProtocol
from meshroute.sessions.settings import SessionSettings
from meshroute.stomp.connection import StompConnectionCore
from meshroute.stomp.frames import HEARTBEAT, StompLimits, StompParser, StompProtocolError
from meshroute.stomp.settings import DEFAULT_HEARTBEAT_MS, DEFAULT_PREFETCH_COUNT

#: Which machine input each client command feeds; any other is the
#: session's business (C{got_frame}).
_INPUT_FOR_COMMAND = {
    "CONNECT": "got_hello",
    "STOMP": "got_hello",
    "DISCONNECT": "got_goodbye",
}


class StompProtocol(ListenerProtocol):
    """
    STOMP frames ↔ bytes for one connection.
    """

    decode_error = StompProtocolError

    def __init__(self, factory: "StompFactory") -> None:
        super().__init__(factory)
        self.decoder = StompParser(factory.limits)

    def new_core(self) -> StompConnectionCore:
        factory = self.factory
        return StompConnectionCore.of_listener(
            factory, self.transport,
            prefetch_count=factory.prefetch_count, heartbeat_ms=factory.heartbeat_ms)

    def frame_received(self, frame) -> None:
        if frame is HEARTBEAT:
            return
        self.tell(_INPUT_FOR_COMMAND.get(frame.command, "got_frame"), frame)
        version = self.core.stomp_version
        if version:
            self.decoder.version = version


class StompFactory(ListenerFactory):
    """
    Builds the router side of each connection of the C{[stomp.listener]}
    endpoints (TCP or TLS, and WebSocket).

    @param settings: the sessions' L{SessionSettings}: the listener's
        limits and C{connection-ttl-override}.
    @param prefetch_count: a SUBSCRIBE's credit when it names none.
    @param heartbeat_ms: the router's heart-beat offer C{(cx, cy)}.
    @param options: every listener's (L{ListenerFactory}): the C{sessions}
        they join, C{ha_view} (a CONNECT to an instance that is not active
        is refused), C{security}, C{secret}, C{verifies_certificates} (a
        CONNECT without C{login} over a verified certificate is its
        subject CN's user), ...
    """

    protocol = StompProtocol

    def __init__(self, engine, clock: IReactorTime, settings: SessionSettings, *,
                 prefetch_count: int = DEFAULT_PREFETCH_COUNT,
                 heartbeat_ms: tuple[int, int] = DEFAULT_HEARTBEAT_MS, **options) -> None:
        super().__init__(engine, clock, settings, **options)
        self.prefetch_count = prefetch_count
        self.heartbeat_ms = heartbeat_ms
        self.limits = StompLimits.from_client_limits(settings.limits)
