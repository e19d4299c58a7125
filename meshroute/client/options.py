"""
What a client is told when it connects: L{ClientOptions}.

The names follow Artemis' client configuration (DESIGN.md, "Client
sessions"): durations in milliseconds, C{-1} for "never" or "forever".
"""

from dataclasses import dataclass, field

from meshroute.wire import client_frames as f

#: The failure listener event of a session that survived a failure: it was
#: reattached (transparently) or recreated on a new connection.
FAILOVER = "FAILOVER"
#: The failure listener event of a session given up on:
#: C{reconnect-attempts} were exhausted.
DISCONNECT = "DISCONNECT"

#: The TTL a client asks for unless told otherwise (Artemis' default).
DEFAULT_TTL_MS = 60_000


def _at_least(name: str, value: int, lowest: int, *, never: bool = False) -> None:
    if type(value) is not int:
        raise TypeError(f"{name} must be an integer, not {type(value).__name__}")
    if never and value == -1:
        return
    if value < lowest:
        allowed = f"-1 or at least {lowest}" if never else f"at least {lowest}"
        raise ValueError(f"{name} must be {allowed}, not {value}")


@dataclass(frozen=True)
class ClientOptions:
    """
    How a L{meshroute.client.Client} connects, keeps its connection alive
    and recovers from failures.

    @ivar client_id: how the router names this client in logs and the admin
        API (None: C{meshroute-PID}).
    @ivar ttl_ms: the connection TTL asked for: the router closes the
        connection when it received nothing for that long (-1: never).
        The client pings at a third of the TTL in force when it has sent
        nothing else.
    @ivar client_failure_check_period_ms: a connection that brought nothing
        at all for that long is failed (-1: never).  The client also pings
        when it received nothing for two thirds of it, so that a live but
        idle router always answers in time.
    @ivar confirmation_window_size: bytes of sent commands kept for replay
        until done (answered, or covered by the router's C{Processed});
        when full, further calls wait.  -1: no buffer, so a failed
        connection can never be reattached, only recreated.
    @ivar retry_interval_ms: the wait before the first reconnection
        attempt after a failure, except a connection closed under the
        client (EOF or reset) that served for at least this long: then
        the first attempt is made at once, and this wait comes before the
        second (L{meshroute.client.router_connection}).  With several
        endpoints each wait comes before a round: one attempt at each
        endpoint in turn, at once (L{meshroute.link.rotation}).
    @ivar retry_interval_multiplier: each further wait is this many times
        the previous one ...
    @ivar max_retry_interval_ms: ... and never longer than this.
    @ivar reconnect_attempts: reconnection attempts (rounds over the
        endpoints, starting at the one after the endpoint that failed) in
        a row before giving up (DISCONNECT); 0: none, not even at another
        endpoint; -1: forever.
    @ivar initial_connect_attempts: attempts (rounds over the endpoints)
        to make the first connection (at least 1: each endpoint once;
        -1: forever), with the same waits between rounds.
    @ivar open_timeout_ms: how long to wait for the router's answer to Open
        once connected; a timeout is a failed attempt.
    @ivar max_frame_size: the largest frame accepted from the router.
    @ivar ack_delay_ms: how long acknowledgements may wait to be sent with
        the ones after them, when nothing else is written (a paced
        consumer's: one frame, and one wake-up of the router, for several
        messages).  They go at once with any other frame, and when a
        subscription is owed half its prefetch in credit; a transacted
        client's never wait.  A message acknowledged less than this
        before the client's process dies is delivered again (flagged
        redelivered), as one acknowledged just before it always may be.
        0: at the end of each reactor turn.
    @ivar transacted: a transacted session (JMS): every send and
        acknowledgement belongs to the current transaction, which
        C{commit()} or C{rollback()} ends.  Needs a router speaking
        protocol version 2.
    @ivar user: the user to authenticate as with C{password} (SCRAM-SHA-256,
        protocol version 5), when the router has users; None: no
        password (a router with users then accepts only a TLS client
        certificate, given in the endpoint string).
    @ivar password: C{user}'s password; it never crosses the wire, and
        is not part of the options' C{repr}.
    """

    client_id: str | None = None
    ttl_ms: int = DEFAULT_TTL_MS
    client_failure_check_period_ms: int = 30_000
    confirmation_window_size: int = -1
    retry_interval_ms: int = 2000
    retry_interval_multiplier: float = 1.0
    max_retry_interval_ms: int = 2000
    reconnect_attempts: int = 0
    initial_connect_attempts: int = 1
    open_timeout_ms: int = 30_000
    max_frame_size: int = f.MAX_ROUTER_FRAME_SIZE
    ack_delay_ms: int = 5
    transacted: bool = False
    user: str | None = None
    password: str | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.client_id is not None and type(self.client_id) is not str:
            raise TypeError("client_id must be a string")
        _at_least("ttl_ms", self.ttl_ms, 1, never=True)
        _at_least("client_failure_check_period_ms", self.client_failure_check_period_ms, 1,
                  never=True)
        _at_least("confirmation_window_size", self.confirmation_window_size, 0, never=True)
        _at_least("retry_interval_ms", self.retry_interval_ms, 0)
        _at_least("max_retry_interval_ms", self.max_retry_interval_ms, 0)
        _at_least("reconnect_attempts", self.reconnect_attempts, 0, never=True)
        _at_least("initial_connect_attempts", self.initial_connect_attempts, 1, never=True)
        _at_least("open_timeout_ms", self.open_timeout_ms, 1)
        _at_least("max_frame_size", self.max_frame_size, 1)
        _at_least("ack_delay_ms", self.ack_delay_ms, 0)
        if type(self.transacted) is not bool:
            raise TypeError("transacted must be a boolean")
        for name in ("user", "password"):
            if getattr(self, name) is not None and type(getattr(self, name)) is not str:
                raise TypeError(f"{name} must be a string")
        if (self.user is None) != (self.password is None):
            raise ValueError("user and password go together")
        if isinstance(self.retry_interval_multiplier, bool) or not isinstance(
                self.retry_interval_multiplier, (int, float)):
            raise TypeError("retry_interval_multiplier must be a number")
        if not self.retry_interval_multiplier > 0:
            raise ValueError("retry_interval_multiplier must be positive")
        if self.max_retry_interval_ms < self.retry_interval_ms:
            raise ValueError(
                f"max_retry_interval_ms ({self.max_retry_interval_ms}) is less than "
                f"retry_interval_ms ({self.retry_interval_ms})"
            )
