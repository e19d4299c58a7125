"""
The thin protocol of the native client listener (C{[clients.listener]}):
bytes in, frames out, machine inputs.

L{ClientProtocol} feeds a L{FrameDecoder} over L{FROM_CLIENT}; each
decoded frame becomes one input of the connection's machine
(L{meshroute.sessions.lifecycle}, with the native core of
L{meshroute.sessions.native_connection}), which hands commands to its session's
machine (L{meshroute.sessions.served}).  A frame beyond the header
bounds of the listener's C{limits} (L{meshroute.sessions.limits}) closes
its connection before it reaches the session.  The rest (the producer,
the buffers, undecodable bytes, frames out of turn) is every listener's
(L{meshroute.sessions.listener}).

L{ClientFactory} owns what outlives one connection: the sessions, the
bound of the bytes of partial frames its connections hold together, and
the one timer that closes connections silent for their TTL, slow to
finish a frame, or without a session for C{stage-valid-timeout}.
"""

import os
from collections.abc import Callable
from dataclasses import replace

from twisted.internet.interfaces import IReactorTime

from meshroute.errors import WireError
from meshroute.sessions.native_connection import NativeConnectionCore
from meshroute.sessions.ha_view import WITHOUT_HA, HAView
from meshroute.sessions.listener import ListenerFactory, ListenerProtocol
from meshroute.sessions.liveness import MAX_BUFFERED_FRAMES
from meshroute.sessions.registry import SessionRegistry
from meshroute.sessions.served import HOT_FRAMES, OPEN
from meshroute.sessions.settings import SessionSettings
from meshroute.wire import client_frames as f
from meshroute.wire.codec import FrameDecoder

#: Which connection machine input each frame type feeds; any other is the
#: session's business (C{got_frame}).
_INPUT_FOR_FRAME = {
    f.Open: "got_hello",
    f.Authenticate: "got_authenticate",
    f.AuthResponse: "got_auth_response",
}


class ClientProtocol(ListenerProtocol):
    """
    Native frames ↔ bytes for one client connection.
    """

    decode_error = WireError

    def __init__(self, factory: "ClientFactory") -> None:
        super().__init__(factory)
        self.decoder = FrameDecoder(frames=f.FROM_CLIENT, max_frame_size=factory.max_frame_size)

    def new_core(self) -> NativeConnectionCore:
        return NativeConnectionCore.of_listener(self.factory, self.transport)

    def frame_received(self, frame) -> None:
        core = self.core
        problem = core.settings.limits.headers_problem(frame)
        if problem is not None:
            self.machine.over_limit(problem)
            return
        # The data path: straight to the open session (HOT_FRAMES); an
        # attached connection is one with a session.
        session = core.session
        if session is not None and session.state == OPEN:
            hot = HOT_FRAMES.get(type(frame))
            if hot is not None:
                hot(session, frame)
                return
        self.tell(_INPUT_FOR_FRAME.get(type(frame), "got_frame"), frame)


class ClientFactory(ListenerFactory):
    """
    Builds the router side of each client connection of the
    C{[clients.listener]} endpoint, and keeps the sessions, which outlive
    connections.

    @param engine: the router's message engine: C{name}, C{queues} (a
        L{meshroute.router.queues.QueueManager}) and C{submit(address, body,
        headers, persistent, duplicate_id=...)}.
    @param clock: for every timer (default: the queue manager's clock).
    @param connection_ttl_override: overrides C{settings}'
        C{connection_ttl_override} when not -1.
    @param settings: the listener's L{SessionSettings} (defaults
        otherwise).
    @param events: where session events go (C{emit(event, **fields)});
        default: the engine's C{events}, else nowhere.
    @param max_buffered: bound of the bytes of partial frames held for all
        connections together (default L{MAX_BUFFERED_FRAMES} times
        C{max_frame_size}); at least C{max_frame_size}, so that one frame
        of the largest size always fits.
    @param ha_view: returns the router's L{HAView} now, asked at every
        C{Open}: an instance that is not active refuses it (C{not-active}),
        and version-3 clients are told the epoch and the pair's endpoints.
        Default: a router without HA (L{WITHOUT_HA}).
    @param security: the router's L{meshroute.security.policy.Security}:
        clients must authenticate (protocol version 5) as one of its
        users, and may send and consume as its permissions allow; a reload
        closes the connections of users it removes.  None: the listener
        is open, clients are anonymous.
    @param secret: what unknown users' decoy SCRAM credentials derive
        from (L{meshroute.security.scram.decoy_credentials}); default: a
        random secret of this process.
    @param verifies_certificates: the listener's TLS verifies client
        certificates against C{client-ca}, so a certificate's subject CN
        authenticates its user.
    @ivar sessions: the L{SessionRegistry} of the sessions (open,
        disconnected and closing).
    @ivar connections: the live connections' cores.
    """

    protocol = ClientProtocol

    def __init__(self, engine, clock: IReactorTime | None = None,
                 connection_ttl_override: int = -1,
                 max_frame_size: int = f.MAX_FRAME_SIZE, *,
                 settings: SessionSettings | None = None, events=None,
                 max_buffered: int | None = None,
                 ha_view: Callable[[], HAView] = lambda: WITHOUT_HA, security=None,
                 secret: bytes | None = None, verifies_certificates: bool = False) -> None:
        if max_buffered is None:
            max_buffered = MAX_BUFFERED_FRAMES * max_frame_size
        if max_buffered < max_frame_size:
            raise ValueError(f"max_buffered ({max_buffered}) must be at least max_frame_size "
                             f"({max_frame_size})")
        settings = settings if settings is not None else SessionSettings()
        if connection_ttl_override != -1:
            settings = replace(settings, connection_ttl_override=connection_ttl_override)
        sessions = SessionRegistry()
        # Expiry notices for this listener's sessions (a test's engine
        # may have none to give).
        notices = getattr(engine, "expiry_notices", None)
        if notices is not None:
            notices.append(sessions.expired_notice)
        super().__init__(
            engine, clock if clock is not None else engine.queues.clock, settings,
            sessions=sessions, events=events, max_buffered=max_buffered, ha_view=ha_view,
            security=security, secret=secret if secret is not None else os.urandom(32),
            verifies_certificates=verifies_certificates)
        self.max_frame_size = max_frame_size

    def describe(self) -> list[dict]:
        """
        C{GET /api/v1/sessions}.
        """
        return self.sessions.describe()
