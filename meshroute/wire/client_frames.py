"""
The frames of the native client protocol, versions 1 to 8.

Same framing as the routing link (L{meshroute.wire.codec}: a 4-byte length,
then a msgpack array of the type code and the fields), with its own
L{FrameSet}, L{CLIENT_FRAMES}.  docs/client-protocol.md narrates when each
frame may be sent and what the router answers.

Every client frame that changes the session's state (L{Send},
L{Subscribe}, L{Unsubscribe}, L{Credit}, L{Ack}, L{Close}) is a
I{command} and carries a C{command_id}: 1 for the first command of a
session, then each one more than the one before.  The router confirms a
command by id, and the ids are what session reattachment replays by
(the router reports the last id it received; the client re-sends the
rest).  L{Open}, L{Ping} and L{Pong} are not commands: they are about the
connection, not the session.

Version 2 adds transactions: L{Begin}, L{Commit} and L{Rollback}, also
commands, allowed only on a connection that negotiated version 2.

Version 3 tells the client where it is in a high-availability pair: its
L{Opened} is an L{OpenedWithTopology} (the pair's epoch and client
endpoints), and an instance that is not the active one refuses L{Open}
with L{NOT_ACTIVE}, which sends the client on to the next endpoint.

Version 4 carries many messages per frame: L{SendBatch} (the commands
C{first_command_id} to C{first_command_id + n - 1}, one per message, so
reattachment, C{Processed} and C{Received} keep counting per message),
L{Confirmed} (one answer for a consecutive run of them), L{DeliverBatch}
(one subscription's deliveries of one reactor turn) and L{AckThrough}
(every unacknowledged delivery of a subscription up to an id).  Every
version-1 frame keeps its meaning.

Version 5 authenticates the client between L{Open} and L{Opened} when
the router is configured with users (C{[security]}): the router offers
L{Mechanisms}; the client picks one in L{Authenticate}; for
C{SCRAM-SHA-256} the router answers L{Challenge} and the client
L{AuthResponse} (the messages of RFC 5802, L{meshroute.security.scram});
L{Authenticated} then names the user (with the router's proof) and
L{Opened} follows.  A router without users answers a version-5 L{Open}
with L{Opened} at once.  A secured router refuses clients of older
versions (L{AUTHENTICATION_REQUIRED}).

Version 6 adds message expiry: a L{Send} (and a L{SendBatch} item) may
carry a time to live, C{ttl_ms}, which the router turns into the
message's expiry when it accepts it, and C{notify_expiry}, which asks for
an L{Expired} notice if the message expires before it is delivered.
Both are left off the wire while they hold their defaults, so a version-6
client's Send without them is a version-1 Send.

Version 7 adds two-phase commit (the names of Python's DB-API
two-phase-commit extension, PEP 249): L{Prepare} makes the session's
transaction durable under a transaction id (an I{xid}: a format id, a
global transaction id and a branch qualifier), to be decided later, by
this session or any other; L{CommitXid} commits one (or, with
C{one_phase}, the session's current transaction, recording its xid as
committed), L{RollbackXid} rolls one back, and L{Recover} asks for the
prepared ones (answered by L{Recovered}).  They are defined in
L{meshroute.wire.two_phase_frames} and are this module's too.

Version 8 adds topics: L{SubscribeTopic} (defined in
L{meshroute.wire.topic_frames}) subscribes to the publications matching
a pattern, durably or not, and L{Unsubscribe} gains C{forget}, which
ends a durable subscription for good.  A publication is a L{Send} to
C{topic:NAME}, in any version.

Version 9 adds retained messages: L{SubscribeTopic} gains C{retained},
the retained messages a subscription is given as it is made
(docs/topics.md, "Retained messages"); a publication is retained with
the header C{x-retain: true}, in any version from 8.
"""

from dataclasses import dataclass
from typing import ClassVar

from meshroute.errors import WireError
from meshroute.wire.codec import (
    MAX_CLIENT_FRAME_SIZE,
    MAX_MESSAGE_FRAME_SIZE,
    body_size,
    size_bound,
)
from meshroute.wire.frameset import FrameSet

# Version 7's frames, a module of their own, are frames of this protocol.
from meshroute.wire.two_phase_frames import (  # noqa: F401 (re-exported)
    MAX_FORMAT_ID,
    MAX_XID_PART,
    CommitXid,
    Prepare,
    Recover,
    Recovered,
    RollbackXid,
    xid_problem,
)

# And version 8's.
from meshroute.wire.topic_frames import SubscribeTopic  # noqa: F401 (re-exported)

#: The client protocol versions this build speaks, newest last.
SUPPORTED_VERSIONS = (1, 2, 3, 4, 5, 6, 7, 8, 9)
#: The first version with transactions (L{Begin}, L{Commit}, L{Rollback}).
TRANSACTIONS_VERSION = 2
#: The first version whose Opened tells the pair's topology
#: (L{OpenedWithTopology}).
TOPOLOGY_VERSION = 3
#: The first version with frames of many messages (L{SendBatch},
#: L{Confirmed}, L{DeliverBatch}, L{AckThrough}).
BATCH_VERSION = 4
#: The first version that authenticates (L{Mechanisms}, L{Authenticate},
#: L{Challenge}, L{AuthResponse}, L{Authenticated}).
AUTH_VERSION = 5
#: The first version with message expiry (L{Send.ttl_ms}, L{Expired}).
EXPIRY_VERSION = 6
#: The first version with two-phase commit (L{Prepare}, L{CommitXid},
#: L{RollbackXid}, L{Recover}, L{Recovered}).
TPC_VERSION = 7
#: The first version with topic subscriptions (L{SubscribeTopic},
#: L{Unsubscribe.forget}).
TOPICS_VERSION = 8
#: The first version whose L{SubscribeTopic} asks for retained messages.
RETAINED_VERSION = 9


#: The SASL mechanism of a TLS client certificate the router verified
#: (offered in L{Mechanisms}; the certificate's subject CN is the user).
EXTERNAL = "EXTERNAL"

#: Largest frame a client may send (a Send: a message body must fit).
MAX_FRAME_SIZE = MAX_CLIENT_FRAME_SIZE
#: Largest frame a router sends a client: a Deliver of any message a legal
#: Send made, plus what it gained on its way (L{meshroute.wire.codec}).
MAX_ROUTER_FRAME_SIZE = MAX_MESSAGE_FRAME_SIZE

# Error codes of the Error frame.  With command_id 0 the error is about the
# connection, and the router closes it right after; with a command id it
# answers that command only, and the session goes on.

#: Bytes that are not a valid frame (connection-level).
PROTOCOL_ERROR = "protocol-error"
#: A valid frame that is not allowed now: before Open, after Close, a
#: second Open, a command id out of sequence (connection-level).
BAD_COMMAND = "bad-command"
#: No protocol version in common (connection-level).
UNSUPPORTED_VERSION = "unsupported-version"
#: This router instance is not the active one of its HA pair (the other
#: one is, or none is right now): try another endpoint (connection-level,
#: retryable, unlike the two above).
NOT_ACTIVE = "not-active"
#: The address or queue name is malformed.
BAD_ADDRESS = "bad-address"
#: No router of that name is known in the mesh.
UNKNOWN_ROUTER = "unknown-router"
#: Too many messages already wait for the destination router.
BACKLOG_FULL = "backlog-full"
#: The router's disk has less free space than its [store] min-free-disk.
DISK_FULL = "disk-full"
#: A well-formed command with an impossible argument (a subscription id
#: already in use, a credit below 1).
INVALID_ARGUMENT = "invalid-argument"
#: The router failed to carry out the command; it is logged there.
INTERNAL_ERROR = "internal-error"
#: The transaction was rolled back instead of committed: the answer of a
#: Send it held, and of a Commit of a transaction that was marked
#: rollback-only (one of its Sends was refused).
ROLLED_BACK = "rolled-back"
#: A Send would make its transaction hold more than the router allows
#: (L{meshroute.sessions.transaction.MAX_TRANSACTION_SENDS} messages or
#: L{meshroute.sessions.transaction.MAX_TRANSACTION_BYTES} bytes of
#: messages, headers included).
TRANSACTION_TOO_LARGE = "transaction-too-large"
#: The client passed one of its listener's bounds
#: (L{meshroute.sessions.limits}): connection-level for a connection,
#: session, header or handshake-time bound, a command's answer for a
#: subscription or credit bound.  The detail names the key.
LIMIT_REACHED = "limit-reached"
#: The router requires authentication, which the client's protocol
#: version cannot do (connection-level).
AUTHENTICATION_REQUIRED = "authentication-required"
#: Unknown user, wrong password, or a certificate naming no user: one
#: code, one detail, so that the answer does not tell which
#: (connection-level).
NOT_AUTHENTICATED = "not-authenticated"
#: The user may not send to that address, consume from that queue, or
#: resume that session (per command; for a resume, connection-level).
NOT_ALLOWED = "not-allowed"
#: The user was removed from the router's users file, or (a certificate
#: user) from every permission, by a reload (connection-level).
USER_REMOVED = "user-removed"
#: The router holds no prepared transaction of that xid, and committed
#: none within its duplicate-id window (XA's XAER_NOTA): a transaction
#: never prepared, or rolled back (version 7).
UNKNOWN_XID = "unknown-xid"
#: A Prepare, or a one-phase CommitXid, names an xid the router holds
#: prepared or committed within its duplicate-id window (XA's
#: XAER_DUPID): nothing of the transaction was done (version 7).
DUPLICATE_XID = "duplicate-xid"
#: The outcome asked for was carried out for part of the transaction
#: only: some messages it acknowledged were no longer held where it left
#: them (XA's XA_HEURMIX); the router logged it and wrote a
#: C{transaction.heuristic} event (version 7).
HEURISTIC_MIXED = "heuristic-mixed"
#: A RollbackXid names a transaction the router committed (XA's
#: XA_HEURCOM): nothing was rolled back (version 7).
HEURISTIC_COMMIT = "heuristic-commit"
#: A durable topic subscription that is not shared has its consumer
#: already (a SubscribeTopic), or one that is still has consumers when
#: an Unsubscribe asks to forget it (version 8).
SUBSCRIPTION_IN_USE = "subscription-in-use"
#: A mesh-wide SubscribeTopic whose interest did not reach every
#: reachable router in time (30 s): the subscription was not made
#: (version 8).
TIMEOUT = "timeout"


def _check_int_list(name: str, values: list) -> None:
    if not all(type(v) is int for v in values):
        raise WireError(f"{name} must be a list of integers")


@dataclass(frozen=True)
class Open:
    """
    Client → router, first frame: the versions the client speaks, who it is
    (free text for logs and the admin API; may be empty), the session it
    wants to resume (empty: a new one) and the connection TTL it asks for
    in milliseconds (-1: never).  When resuming: the highest command id up
    to which it holds every answer, and the highest delivery id up to which
    it received every delivery (0 and 0 for a new session).
    """

    TYPE: ClassVar[int] = 1
    versions: list
    client_id: str
    session_id: str
    ttl_ms: int
    answered_up_to: int = 0
    delivered_up_to: int = 0

    def __post_init__(self) -> None:
        _check_int_list("Open.versions", self.versions)


@dataclass(frozen=True)
class Opened:
    """
    Router → client, answers L{Open}: the chosen version, the session id,
    the router's name, the TTL in force, whether an existing session was
    resumed, and the last command id the router received in it (0 for a
    new session): the client re-sends every command after that one.
    """

    TYPE: ClassVar[int] = 2
    version: int
    session_id: str
    router: str
    ttl_ms: int
    reattached: bool
    last_command_id: int

    def __post_init__(self) -> None:
        if self.version >= TOPOLOGY_VERSION:
            raise WireError(f"an Opened of version {self.version} must tell the topology "
                            "(OpenedWithTopology)")


@dataclass(frozen=True)
class OpenedWithTopology(Opened):
    """
    Router → client, answers L{Open} from version 3 on: L{Opened} and the
    router's place in a high-availability pair.  C{epoch} is the epoch the
    instance serves in (0 for a router without HA), C{endpoints} the client
    endpoints of the pair's instances, as the operator configured them
    (empty for a router without HA).  A client adds the endpoints to those
    it tries, and refuses an instance whose epoch is lower than one it has
    seen.
    """

    epoch: int
    endpoints: list

    def __post_init__(self) -> None:
        if self.version < TOPOLOGY_VERSION:
            raise WireError(f"an Opened of version {self.version} cannot tell the topology")
        if not all(type(e) is str for e in self.endpoints):
            raise WireError("OpenedWithTopology.endpoints must be a list of strings")


@dataclass(frozen=True)
class Send:
    """
    Client → router, command: send one message to C{address}
    (C{queue@router}, or a bare C{queue} on this router).  A non-empty
    C{duplicate_id} makes the send idempotent within the router's
    duplicate-id window.  From version 6, a C{ttl_ms} above 0 is the
    message's time to live from its acceptance (0: it never expires), and
    C{notify_expiry} asks for an L{Expired} notice if it expires.
    """

    TYPE: ClassVar[int] = 3
    OPTIONAL_TAIL: ClassVar[int] = 2
    command_id: int
    address: str
    headers: dict
    body: bytes
    persistent: bool
    duplicate_id: str = ""
    ttl_ms: int = 0
    notify_expiry: bool = False

    def __post_init__(self) -> None:
        if self.ttl_ms < 0:
            raise WireError("Send.ttl_ms must not be negative")


def oversized_send(address: str, headers: dict, body: bytes, persistent: bool,
                   duplicate_id: str) -> str | None:
    """
    Why a L{Send} of these fields would exceed L{MAX_FRAME_SIZE} (the
    router closes the connection on such a frame as a protocol error), or
    None when it fits.  Counted with the largest command id, so it holds
    for any command of the session.  Only a message near the limit is
    encoded to be measured: below it, a bound on the encoding decides.
    """
    texts = len(address) + len(duplicate_id) + sum(len(k) + len(v) for k, v in headers.items())
    if size_bound(body, texts, 2 * len(headers) + 8) <= MAX_FRAME_SIZE:
        return None
    size = body_size(Send(2**63 - 1, address, headers, body, persistent, duplicate_id))
    if size <= MAX_FRAME_SIZE:
        return None
    return (f"a message with a {len(body)}-byte body is a {size}-byte Send frame; routers "
            f"take client frames of at most {MAX_FRAME_SIZE} bytes (MAX_FRAME_SIZE), body, "
            "address and headers together")


@dataclass(frozen=True)
class Confirm:
    """
    Router → client: the command succeeded.  For a L{Send}, once the
    message is durably accepted (persistent) or accepted (non-persistent),
    with its mesh-wide message id; for other commands C{msg_id} is empty.
    """

    TYPE: ClassVar[int] = 4
    command_id: int
    msg_id: str


@dataclass(frozen=True)
class Error:
    """
    Router → client: command C{command_id} failed with C{code}; or, with
    C{command_id} 0, the connection is being closed for C{code}.
    """

    TYPE: ClassVar[int] = 5
    command_id: int
    code: str
    detail: str


@dataclass(frozen=True)
class Subscribe:
    """
    Client → router, command: consume from local queue C{queue}.  The
    client names the subscription (an id of its choice, unique among its
    live subscriptions in this session) and grants an initial credit.
    """

    TYPE: ClassVar[int] = 6
    command_id: int
    subscription: int
    queue: str
    credit: int


@dataclass(frozen=True)
class Unsubscribe:
    """
    Client → router, command: stop a subscription.  Its unacknowledged
    deliveries go back to the queue, flagged redelivered.  From version
    8, C{forget} also ends a durable topic subscription for good (its
    messages are deleted with it); left off the wire while false.
    """

    TYPE: ClassVar[int] = 7
    OPTIONAL_TAIL: ClassVar[int] = 1
    command_id: int
    subscription: int
    forget: bool = False


@dataclass(frozen=True)
class Credit:
    """
    Client → router, command: the subscription may receive C{n} more
    deliveries.  Not confirmed.
    """

    TYPE: ClassVar[int] = 8
    command_id: int
    subscription: int
    n: int


@dataclass(frozen=True)
class Deliver:
    """
    Router → client: one message for a subscription.  C{delivery_id} is
    what the client acknowledges.
    """

    TYPE: ClassVar[int] = 9
    delivery_id: int
    subscription: int
    msg_id: str
    origin: str
    headers: dict
    body: bytes
    redelivered: bool


@dataclass(frozen=True)
class Ack:
    """
    Client → router, command: these deliveries are done with.  Not
    confirmed; unknown ids are ignored.
    """

    TYPE: ClassVar[int] = 10
    command_id: int
    delivery_ids: list

    def __post_init__(self) -> None:
        _check_int_list("Ack.delivery_ids", self.delivery_ids)


@dataclass(frozen=True)
class Ping:
    """
    Either direction: are you there?  Answered by L{Pong} with the same
    C{n}.
    """

    TYPE: ClassVar[int] = 11
    n: int


@dataclass(frozen=True)
class Pong:
    """
    Either direction: the answer to L{Ping}.
    """

    TYPE: ClassVar[int] = 12
    n: int


@dataclass(frozen=True)
class Close:
    """
    Client → router, command, last: end the session.  The router finishes
    the commands in progress, cancels the subscriptions, answers
    L{Closed} and closes the connection.
    """

    TYPE: ClassVar[int] = 13
    command_id: int


@dataclass(frozen=True)
class Closed:
    """
    Router → client: every command up to and including L{Close} is done
    (sends confirmed or refused, acknowledgements durable); the session is
    gone.
    """

    TYPE: ClassVar[int] = 14


@dataclass(frozen=True)
class Processed:
    """
    Router → client: every command up to C{command_id} has been carried out
    (cumulative; at most once per reactor turn).
    """

    TYPE: ClassVar[int] = 15
    command_id: int


@dataclass(frozen=True)
class Received:
    """
    Client → router, not a command: the client holds the answers of every
    command up to C{answered_up_to} and every delivery of this session up
    to C{delivered_up_to}; the router may forget them.
    """

    TYPE: ClassVar[int] = 16
    answered_up_to: int
    delivered_up_to: int


@dataclass(frozen=True)
class Begin:
    """
    Client → router, command (version 2): start a transaction.  The
    session's L{Send}s and L{Ack}s from here to the L{Commit} or
    L{Rollback} are held by the router and carried out together, or not
    at all.  Not answered.
    """

    TYPE: ClassVar[int] = 17
    command_id: int


@dataclass(frozen=True)
class Commit:
    """
    Client → router, command (version 2): carry out every Send and Ack of
    the transaction in one store transaction.  Answered (after the Sends'
    own answers) with L{Confirm} once durable, or L{Error} when nothing of
    it was carried out.
    """

    TYPE: ClassVar[int] = 18
    command_id: int


@dataclass(frozen=True)
class Rollback:
    """
    Client → router, command (version 2): discard the transaction's Sends
    and give its acknowledged deliveries back to their queues, flagged
    redelivered.  Answered with L{Confirm}.
    """

    TYPE: ClassVar[int] = 19
    command_id: int


def _check_send_item(item) -> None:
    if not (type(item) is list and len(item) in (5, 7) and type(item[0]) is str
            and type(item[1]) is dict and type(item[2]) is bytes and type(item[3]) is bool
            and type(item[4]) is str
            and (len(item) == 5 or (type(item[5]) is int and item[5] >= 0
                                    and type(item[6]) is bool))):
        raise WireError("SendBatch.messages must be [address: str, headers: map, body: bin, "
                        "persistent: bool, duplicate_id: str] arrays, or (version 6) with "
                        "[ttl_ms: int >= 0, notify_expiry: bool] after them")
    if item[1] and not all(type(k) is str and type(v) is str for k, v in item[1].items()):
        raise WireError("SendBatch message headers must map strings to strings")


@dataclass(frozen=True)
class SendBatch:
    """
    Client → router, commands (version 4): send C{messages}, each
    C{[address, headers, body, persistent, duplicate_id]} as a L{Send}'s
    fields (from version 6, optionally followed by C{ttl_ms,
    notify_expiry}).  The n messages are the n commands C{first_command_id} to
    C{first_command_id + n - 1}, carried out in order as n Sends would
    be, and answered by L{Confirmed} (and an L{Error} for each refused
    one).  At least one message; at most L{MAX_FRAME_SIZE} bytes.
    """

    TYPE: ClassVar[int] = 20
    first_command_id: int
    messages: list

    def __post_init__(self) -> None:
        if not self.messages:
            raise WireError("SendBatch.messages must not be empty")
        for item in self.messages:
            _check_send_item(item)

    @property
    def command_id(self) -> int:
        "The id of its last command (what the session has received once it is taken)."
        return self.first_command_id + len(self.messages) - 1


@dataclass(frozen=True)
class Confirmed:
    """
    Router → client (version 4): the consecutive commands
    C{first_command_id} to C{first_command_id + len(msg_ids) - 1}, Sends,
    succeeded; C{msg_ids} are their messages' ids, in order.
    """

    TYPE: ClassVar[int] = 21
    first_command_id: int
    msg_ids: list

    def __post_init__(self) -> None:
        if not self.msg_ids or not all(type(m) is str for m in self.msg_ids):
            raise WireError("Confirmed.msg_ids must be a non-empty list of strings")


def _check_delivery_item(item) -> None:
    if not (type(item) is list and len(item) == 6 and type(item[0]) is int
            and type(item[1]) is str and type(item[2]) is str and type(item[3]) is dict
            and type(item[4]) is bytes and type(item[5]) is bool):
        raise WireError("DeliverBatch.deliveries must be [delivery_id: int, msg_id: str, "
                        "origin: str, headers: map, body: bin, redelivered: bool] arrays")
    if item[3] and not all(type(k) is str and type(v) is str for k, v in item[3].items()):
        raise WireError("DeliverBatch delivery headers must map strings to strings")


@dataclass(frozen=True)
class DeliverBatch:
    """
    Router → client (version 4): deliveries for one subscription, each
    C{[delivery_id, msg_id, origin, headers, body, redelivered]} as a
    L{Deliver}'s fields, in delivery id order: what the subscription took
    in one reactor turn.
    """

    TYPE: ClassVar[int] = 22
    subscription: int
    deliveries: list

    def __post_init__(self) -> None:
        if not self.deliveries:
            raise WireError("DeliverBatch.deliveries must not be empty")
        for item in self.deliveries:
            _check_delivery_item(item)


@dataclass(frozen=True)
class AckThrough:
    """
    Client → router, command (version 4): every delivery of
    C{subscription} not yet acknowledged, up to and including
    C{delivery_id}, is done with (a cumulative L{Ack}).  Not confirmed.
    """

    TYPE: ClassVar[int] = 23
    command_id: int
    subscription: int
    delivery_id: int


@dataclass(frozen=True)
class Mechanisms:
    """
    Router → client (version 5), answers L{Open} when the router
    authenticates its clients: the mechanisms the client may use now,
    preferred first (C{EXTERNAL} only on a TLS connection whose client
    certificate the router verified).
    """

    TYPE: ClassVar[int] = 24
    mechanisms: list

    def __post_init__(self) -> None:
        if not all(type(m) is str for m in self.mechanisms):
            raise WireError("Mechanisms.mechanisms must be a list of strings")


@dataclass(frozen=True)
class Authenticate:
    """
    Client → router (version 5), answers L{Mechanisms}: the mechanism
    chosen and its first message (SCRAM's client-first; empty for
    C{EXTERNAL}).
    """

    TYPE: ClassVar[int] = 25
    mechanism: str
    data: bytes


@dataclass(frozen=True)
class Challenge:
    """
    Router → client (version 5): the mechanism's next message (SCRAM's
    server-first: the salt, the iteration count, the nonce).
    """

    TYPE: ClassVar[int] = 26
    data: bytes


@dataclass(frozen=True)
class AuthResponse:
    """
    Client → router (version 5), answers L{Challenge} (SCRAM's
    client-final, with the proof).
    """

    TYPE: ClassVar[int] = 27
    data: bytes


@dataclass(frozen=True)
class Authenticated:
    """
    Router → client (version 5): the client is C{user}; C{data} is the
    mechanism's last message (SCRAM's server-final, the router's own
    proof, which the client checks; empty for C{EXTERNAL}).  L{Opened}
    follows.
    """

    TYPE: ClassVar[int] = 28
    user: str
    data: bytes


@dataclass(frozen=True)
class Expired:
    """
    Router → client (version 6): message C{msg_id}, which this session
    sent to C{address} asking to be told (C{notify_expiry}), expired at
    router C{router} before it was delivered.  A best-effort notice, not
    an answer: it is not re-sent after a resume the session did not
    survive (docs/client-protocol.md, "Message expiry").
    """

    TYPE: ClassVar[int] = 29
    msg_id: str
    address: str
    router: str


CLIENT_FRAMES = FrameSet(
    "client",
    (Open, Opened, OpenedWithTopology, Send, Confirm, Error, Subscribe, Unsubscribe, Credit,
     Deliver, Ack, Ping, Pong, Close, Closed, Processed, Received, Begin, Commit, Rollback,
     SendBatch, Confirmed, DeliverBatch, AckThrough, Mechanisms, Authenticate, Challenge,
     AuthResponse, Authenticated, Expired, Prepare, CommitXid, RollbackXid, Recover, Recovered,
     SubscribeTopic),
)


#: The frames only a connection of L{BATCH_VERSION} or later may carry.
BATCH_FRAMES = (SendBatch, Confirmed, DeliverBatch, AckThrough)

#: What a router's decoder accepts: the frames a client may send.  A
#: router-to-client frame arriving at the router is a protocol error.
FROM_CLIENT = FrameSet(
    "client-to-router",
    (Open, Send, Subscribe, Unsubscribe, Credit, Ack, Ping, Pong, Close, Received,
     Begin, Commit, Rollback, SendBatch, AckThrough, Authenticate, AuthResponse,
     Prepare, CommitXid, RollbackXid, Recover, SubscribeTopic),
)

#: What a client's decoder accepts: the frames a router may send.
FROM_ROUTER = FrameSet(
    "router-to-client",
    (Opened, OpenedWithTopology, Confirm, Error, Deliver, Ping, Pong, Closed, Processed,
     Confirmed, DeliverBatch, Mechanisms, Challenge, Authenticated, Expired, Recovered),
)
