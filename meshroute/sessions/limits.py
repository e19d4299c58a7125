"""
What one client may take of a router: the bounds of C{[clients.listener]}
and the judgements that hold clients to them.

A router serves many clients from one process, so no client may grow
what the router holds without bound: connections, sessions (a
disconnected one is held for C{keep-alive}), subscriptions, deliveries
handed out and not acknowledged, the headers of a message, and the time a
connection may stay without a session.  Each bound here is a plain
number; the functions say whether an action stays within it, and, when
it does not, a reason naming the key, which the router sends the client
(Error code C{limit-reached}) and logs.  Hitting a bound costs the client
that hit it (its connection, or one command), never the router.

Which action each bound refuses, and how:

 - C{max-connections}: a connection beyond it is closed at once with
   C{Error(0, "limit-reached")}.
 - C{max-sessions}: an C{Open} that would start a new session beyond it
   (resuming one is always allowed) is refused the same way.
 - C{max-subscriptions}: a C{Subscribe} beyond it is answered with
   C{Error(command_id, "limit-reached")}; the session goes on.
 - C{max-unacknowledged}: the credit a session's subscriptions have
   outstanding plus the deliveries it holds unacknowledged may not pass
   it; a C{Subscribe} or C{Credit} that would is answered with
   C{Error(command_id, "limit-reached")}.
 - C{max-headers}, C{max-header-size}: a C{Send} or C{SendBatch} with a
   message beyond them closes the connection (C{Error(0,
   "limit-reached")}), as a frame over the size bound does
   (C{protocol-error}): the client broke a rule it can check before
   sending.
 - C{stage-valid-timeout}: a connection that has no session that long
   after it was made (it said nothing, or never finished opening) is
   closed with C{Error(0, "limit-reached")}, like a routing link that does
   not finish its handshake.

The frame size bound (C{max-frame-size}) is the decoder's
(L{meshroute.wire.codec.FrameDecoder}, or a STOMP listener's
L{meshroute.stomp.frames.StompParser}): it refuses a frame above it
before buffering more of it.
"""

from dataclasses import dataclass

from meshroute.wire import client_frames as f

#: The defaults, documented in the README's C{[clients.listener]}
#: reference: generous for any well-behaved application, small enough
#: that one client cannot take the router's memory.
DEFAULT_MAX_CONNECTIONS = 1024
DEFAULT_MAX_SESSIONS = 4096
DEFAULT_MAX_SUBSCRIPTIONS = 256
DEFAULT_MAX_UNACKNOWLEDGED = 10_000
DEFAULT_MAX_HEADERS = 64
DEFAULT_MAX_HEADER_SIZE = 64 * 1024
#: The routing link's own default C{stage-valid-timeout}.
DEFAULT_STAGE_VALID_TIMEOUT_MS = 15_000

@dataclass(frozen=True)
class ClientLimits:
    """
    The bounds of one client listener (C{[clients.listener]} keys of the
    same names).

    @ivar max_connections: connections open at once.
    @ivar max_sessions: sessions held at once: open, disconnected and
        awaiting a resume, or closing.
    @ivar max_subscriptions: live subscriptions of one session.
    @ivar max_unacknowledged: outstanding credit plus unacknowledged
        deliveries of one session.
    @ivar max_headers: headers of one message.
    @ivar max_header_size: characters of one message's header names and
        values together.
    @ivar stage_valid_timeout_ms: how long a connection may stay without a
        session.
    @ivar max_frame_size: bytes of one frame a client sends.
    """

    max_connections: int = DEFAULT_MAX_CONNECTIONS
    max_sessions: int = DEFAULT_MAX_SESSIONS
    max_subscriptions: int = DEFAULT_MAX_SUBSCRIPTIONS
    max_unacknowledged: int = DEFAULT_MAX_UNACKNOWLEDGED
    max_headers: int = DEFAULT_MAX_HEADERS
    max_header_size: int = DEFAULT_MAX_HEADER_SIZE
    stage_valid_timeout_ms: int = DEFAULT_STAGE_VALID_TIMEOUT_MS
    max_frame_size: int = f.MAX_FRAME_SIZE

    def connection_refusal(self, others: int) -> str | None:
        """
        Why a new connection may not stay while C{others} are open, or None.
        """
        if others < self.max_connections:
            return None
        return (f"this listener already has {others} client connections "
                f"(max-connections is {self.max_connections})")

    def session_refusal(self, held: int) -> str | None:
        """
        Why a new session may not start while C{held} are held, or None.
        """
        if held < self.max_sessions:
            return None
        return (f"this listener already holds {held} sessions, disconnected ones included "
                f"(max-sessions is {self.max_sessions})")

    def subscription_refusal(self, live: int) -> str | None:
        """
        Why a session with C{live} subscriptions may not add one, or None.
        """
        if live < self.max_subscriptions:
            return None
        return (f"this session already has {live} subscriptions "
                f"(max-subscriptions is {self.max_subscriptions})")

    def credit_refusal(self, unacknowledged: int, outstanding: int, asked: int) -> str | None:
        """
        Why a session holding C{unacknowledged} deliveries, whose
        subscriptions have C{outstanding} credit, may not be granted
        C{asked} more, or None.
        """
        if unacknowledged + outstanding + asked <= self.max_unacknowledged:
            return None
        return (f"credit {asked} on top of {outstanding} outstanding and {unacknowledged} "
                f"unacknowledged deliveries passes max-unacknowledged "
                f"({self.max_unacknowledged}); acknowledge first")

    def headers_problem(self, frame) -> str | None:
        """
        Why C{frame}, if it carries messages, has one whose headers pass
        the bounds, or None.
        """
        if type(frame) is f.Send:
            return self._headers_problem(frame.headers)
        if type(frame) is f.SendBatch:
            for message in frame.messages:
                problem = self._headers_problem(message[1])
                if problem is not None:
                    return problem
        return None

    def _headers_problem(self, headers: dict) -> str | None:
        if not headers:
            return None
        if len(headers) > self.max_headers:
            return (f"a message has {len(headers)} headers "
                    f"(max-headers is {self.max_headers})")
        size = sum(len(k) + len(v) for k, v in headers.items())
        if size > self.max_header_size:
            return (f"a message's headers have {size} characters "
                    f"(max-header-size is {self.max_header_size})")
        return None


def client_limits(listener) -> ClientLimits:
    """
    The limits a C{[clients.listener]} configuration
    (L{meshroute.sessions.settings.ClientListenerConfig}) sets: its keys
    of the same names.
    """
    names = ClientLimits.__dataclass_fields__
    return ClientLimits(**{name: getattr(listener, name) for name in names})
