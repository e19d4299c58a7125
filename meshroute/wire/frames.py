"""
The frames of the routing link, protocol version 3.

Version 2 added the store ids to L{Recovery}; a version-1 router is
refused (C{version}), see docs/protocol.md.  Version 3 added the vote
exchange on the routing listener (L{VoteHello} and the HA vote frames):
a vote connection needs version 3.  Version 3 also carries the epoch of
an HA instance (docs/ha.md) in L{Hello}, L{Welcome} and each
advertisement of L{Routes}, always optional on the wire and left off
while 0 (a router without HA): such a router's routing links are
exactly version 2's, byte for byte, so it links with a version-2 router
at version 2.  Only an HA instance (epoch above 0) sends a L{Hello} a
version-2 router cannot read.

Each frame is a small frozen dataclass, gathered in L{LINK_FRAMES}; see
L{meshroute.wire.frameset} for how frames become msgpack arrays and how
decoding checks them.

docs/protocol.md narrates the stages in which each frame may be sent.
"""

import re
from dataclasses import dataclass
from typing import ClassVar

from meshroute.errors import WireError
from meshroute.wire.frameset import FrameSet

#: The link protocol versions this build speaks, newest last.
SUPPORTED_VERSIONS = (2, 3)

#: The versions in which a vote connection exists (L{VoteHello}).
VOTE_VERSIONS = (3,)

#: The first version whose L{Welcome} and L{Routes} carry epochs (a
#: L{Hello} may carry one before any version is agreed).
EPOCH_VERSION = 3

#: Size of the random challenges exchanged during authentication.
CHALLENGE_SIZE = 32


#: The largest epoch, position or stamp a vote frame may carry: the
#: store keeps them as SQLite's signed 64-bit integers.
MAX_VOTE_NUMBER = 2**63 - 1


def _check_epoch(frame, epoch: int) -> None:
    if not 0 <= epoch <= MAX_VOTE_NUMBER:
        raise WireError(f"{type(frame).__name__}.epoch must be in 0..2**63-1")


@dataclass(frozen=True)
class Hello:
    """
    Connector → listener, first frame of the connect stage: who I am,
    which protocol versions I speak, and (version 3) the epoch this
    instance of the router serves in (0: a router without HA; left off
    the wire then, as version 2 sends it).
    """

    TYPE: ClassVar[int] = 1
    OPTIONAL_TAIL: ClassVar[int] = 1
    versions: list
    router: str
    epoch: int = 0

    def __post_init__(self) -> None:
        _check_versions(self)
        _check_epoch(self, self.epoch)


def _check_versions(frame) -> None:
    if not all(type(v) is int for v in frame.versions):
        raise WireError(f"{type(frame).__name__}.versions must be a list of integers")


#: An HA group's name, as C{ha.group-name} allows it.
_GROUP_NAME = re.compile(r"[A-Za-z0-9._-]{1,64}\Z")
#: The longest instance name a vote frame may carry.
MAX_INSTANCE_NAME = 128
#: The longest lease-timeout a vote frame may carry (1 hour, as the other
#: timers' maximum): a witness keeps the longest lease it was told for a
#: group, and would otherwise refuse that group's other instance for as
#: long as any one request claimed.
MAX_LEASE_TIMEOUT_MS = 3_600_000


def _check_vote(frame, names: tuple[str, ...], numbers: tuple[str, ...]) -> None:
    """
    What a voter stores from a vote frame must be storable: a group name,
    bounded instance names, numbers that fit SQLite, a lease of at most
    L{MAX_LEASE_TIMEOUT_MS}.
    """
    kind = type(frame).__name__
    if not _GROUP_NAME.match(frame.group):
        raise WireError(f"{kind}.group is not a group name")
    for name in names:
        if not 0 < len(getattr(frame, name)) <= MAX_INSTANCE_NAME:
            raise WireError(f"{kind}.{name} must be 1 to {MAX_INSTANCE_NAME} characters")
    for name in numbers:
        if not 0 <= getattr(frame, name) <= MAX_VOTE_NUMBER:
            raise WireError(f"{kind}.{name} must be in 0..2**63-1")
    if not 1 <= frame.lease_timeout_ms <= MAX_LEASE_TIMEOUT_MS:
        raise WireError(f"{kind}.lease_timeout_ms must be in 1..{MAX_LEASE_TIMEOUT_MS}")


@dataclass(frozen=True)
class Welcome:
    """
    Listener → connector, ends the connect stage: the chosen version, the
    listener's name, the keepalive interval both sides will use, the
    challenge the connector must answer to authenticate, and (version 3)
    the listener's epoch (left off the wire while 0, and always at
    version 2).
    """

    TYPE: ClassVar[int] = 2
    OPTIONAL_TAIL: ClassVar[int] = 1
    version: int
    router: str
    keepalive_interval_ms: int
    challenge: bytes
    epoch: int = 0

    def __post_init__(self) -> None:
        _check_epoch(self, self.epoch)


@dataclass(frozen=True)
class Reject:
    """
    Either side, any stage before delivery: the handshake is refused.
    C{code} is one of L{meshroute.link.rejection.REASONS}.
    """

    TYPE: ClassVar[int] = 3
    code: str
    detail: str


@dataclass(frozen=True)
class Authenticate:
    """
    Connector → listener: proof that the connector knows the shared secret
    (an HMAC over both challenges and both names), and the connector's own
    challenge for the listener.
    """

    TYPE: ClassVar[int] = 4
    proof: bytes
    challenge: bytes


@dataclass(frozen=True)
class Authenticated:
    """
    Listener → connector: the connector's proof was good; here is the
    listener's proof, so that authentication is mutual.
    """

    TYPE: ClassVar[int] = 5
    proof: bytes


@dataclass(frozen=True)
class Recovery:
    """
    Both directions, the recovery stage: the last message sequence number
    this side has durably received from the peer on this link, this side's
    store id, and the peer's store id that C{last_received} belongs to
    ("" when this side holds nothing from the peer's current store, or
    never heard of one).

    Sequence numbers belong to one store: a router whose store id changed
    (restarted with an empty data dir) numbers from 1 again, so its peer
    forgets what it received from the previous store, and a
    C{last_received} about another store of ours acknowledges nothing.
    """

    TYPE: ClassVar[int] = 6
    last_received: int
    store_id: str = ""
    peer_store_id: str = ""


@dataclass(frozen=True)
class Keepalive:
    """
    Both directions, delivery stage: I am alive.
    """

    TYPE: ClassVar[int] = 7


@dataclass(frozen=True)
class Transfer:
    """
    Either direction, delivery stage: one persistent message, with this
    link direction's sequence number.  The receiver acknowledges it (with
    L{Ack}) only once it is durable.
    """

    TYPE: ClassVar[int] = 8
    seq: int
    msg_id: str
    origin: str
    dest_router: str
    dest_queue: str
    hops: int
    accepted_at: float
    headers: dict
    body: bytes


@dataclass(frozen=True)
class Ack:
    """
    Either direction, delivery stage: every L{Transfer} up to C{seq} is
    durable here; the sender may forget them.
    """

    TYPE: ClassVar[int] = 9
    seq: int


@dataclass(frozen=True)
class FastTransfer:
    """
    Either direction, delivery stage: one non-persistent message.  No
    sequence, no acknowledgement, no replay: it may be lost with a link or
    a router, and so is never duplicated.
    """

    TYPE: ClassVar[int] = 10
    msg_id: str
    origin: str
    dest_router: str
    dest_queue: str
    hops: int
    accepted_at: float
    headers: dict
    body: bytes


@dataclass(frozen=True)
class Routes:
    """
    Either direction, delivery stage: link-state advertisements, each
    C{[origin, seq, [neighbour, ...]]}, or (version 3, when the origin's
    epoch is not 0) C{[origin, seq, [neighbour, ...], epoch]} (see
    docs/routing.md).
    """

    TYPE: ClassVar[int] = 11
    advertisements: list

    def __post_init__(self) -> None:
        for item in self.advertisements:
            if not (
                type(item) is list
                and len(item) in (3, 4)
                and type(item[0]) is str
                and type(item[1]) is int
                and type(item[2]) is list
                and all(type(n) is str for n in item[2])
                and (len(item) == 3
                     or (type(item[3]) is int and 0 <= item[3] <= MAX_VOTE_NUMBER))
            ):
                raise WireError(
                    "Routes.advertisements must be [origin, seq, [names]] or "
                    "[origin, seq, [names], epoch] items")


# The vote exchange (version 3): a connection to a routing listener that
# is not a routing link.  docs/protocol.md ("Vote connections") and
# docs/ha.md say what each field means; meshroute.ha.quorum holds the
# rules the listener answers by.


@dataclass(frozen=True)
class VoteHello:
    """
    Connector → listener, first frame of a vote connection instead of
    L{Hello}: who I am, which versions I speak (at least 3), and that this
    connection is for HA votes and heartbeats, not a routing link.
    Authentication follows as for a link.
    """

    TYPE: ClassVar[int] = 12
    versions: list
    router: str

    def __post_init__(self) -> None:
        _check_versions(self)


@dataclass(frozen=True)
class VoteRequest:
    """
    Connector → listener, vote connection: C{candidate} asks (through
    C{requester}) for C{epoch} of HA group C{group}, holding data up to
    (C{position_epoch}, C{position}); C{alone}: it will run without an
    in-sync peer.  C{lease_timeout_ms} is the group's lease-timeout.
    """

    TYPE: ClassVar[int] = 13
    group: str
    candidate: str
    requester: str
    epoch: int
    position_epoch: int
    position: int
    alone: bool
    lease_timeout_ms: int

    def __post_init__(self) -> None:
        _check_vote(self, ("candidate", "requester"),
                    ("epoch", "position_epoch", "position", "lease_timeout_ms"))


@dataclass(frozen=True)
class VoteAnswer:
    """
    Listener → connector: the answer to one L{VoteRequest}, sent only once
    the voter's record is durable.  C{reason} is "" for a grant, else
    C{stale-epoch}, C{active-alive} or C{not-in-sync};
    C{granted_epoch} is the newest epoch the voter has granted.
    """

    TYPE: ClassVar[int] = 14
    group: str
    voter: str
    epoch: int
    granted: bool
    reason: str
    granted_epoch: int


@dataclass(frozen=True)
class Heartbeat:
    """
    Connector → listener, vote connection: the active C{instance} of
    C{group} serves in C{epoch}, holds (C{position_epoch}, C{position})
    and has confirmed up to (C{confirmed_epoch}, C{confirmed_position});
    C{sent_at} is its clock, echoed back.
    """

    TYPE: ClassVar[int] = 15
    group: str
    instance: str
    epoch: int
    position_epoch: int
    position: int
    confirmed_epoch: int
    confirmed_position: int
    sent_at: float
    lease_timeout_ms: int

    def __post_init__(self) -> None:
        _check_vote(self, ("instance",), ("epoch", "position_epoch", "position",
                                          "confirmed_epoch", "confirmed_position",
                                          "lease_timeout_ms"))


@dataclass(frozen=True)
class HeartbeatAnswer:
    """
    Listener → connector: the answer to one L{Heartbeat} (C{sent_at}
    echoed): C{accepted}, or refused because the voter has granted a
    newer epoch (C{granted_epoch}); sent once the record is durable.
    """

    TYPE: ClassVar[int] = 16
    group: str
    voter: str
    accepted: bool
    sent_at: float
    granted_epoch: int


LINK_FRAMES = FrameSet(
    "link",
    (Hello, Welcome, Reject, Authenticate, Authenticated, Recovery, Keepalive,
     Transfer, Ack, FastTransfer, Routes,
     VoteHello, VoteRequest, VoteAnswer, Heartbeat, HeartbeatAnswer),
)
