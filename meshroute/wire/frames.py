"""
The frames of the routing link, protocol version 2.

Version 2 added the store ids to L{Recovery}; a version-1 router is
refused (C{version}), see docs/protocol.md.

Each frame is a small frozen dataclass, gathered in L{LINK_FRAMES}; see
L{meshroute.wire.frameset} for how frames become msgpack arrays and how
decoding checks them.

docs/protocol.md narrates the stages in which each frame may be sent.
"""

from dataclasses import dataclass
from typing import ClassVar

from meshroute.errors import WireError
from meshroute.wire.frameset import FrameSet

#: The link protocol versions this build speaks, newest last.
SUPPORTED_VERSIONS = (2,)

#: Size of the random challenges exchanged during authentication.
CHALLENGE_SIZE = 32


@dataclass(frozen=True)
class Hello:
    """
    Connector → listener, first frame of the connect stage: who I am and
    which protocol versions I speak.
    """

    TYPE: ClassVar[int] = 1
    versions: list
    router: str

    def __post_init__(self) -> None:
        if not all(type(v) is int for v in self.versions):
            raise WireError("Hello.versions must be a list of integers")


@dataclass(frozen=True)
class Welcome:
    """
    Listener → connector, ends the connect stage: the chosen version, the
    listener's name, the keepalive interval both sides will use, and the
    challenge the connector must answer to authenticate.
    """

    TYPE: ClassVar[int] = 2
    version: int
    router: str
    keepalive_interval_ms: int
    challenge: bytes


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
    C{[origin, seq, [neighbour, ...]]} (see docs/routing.md).
    """

    TYPE: ClassVar[int] = 11
    advertisements: list

    def __post_init__(self) -> None:
        for item in self.advertisements:
            if not (
                type(item) is list
                and len(item) == 3
                and type(item[0]) is str
                and type(item[1]) is int
                and type(item[2]) is list
                and all(type(n) is str for n in item[2])
            ):
                raise WireError("Routes.advertisements must be [origin, seq, [names]] items")


LINK_FRAMES = FrameSet(
    "link",
    (Hello, Welcome, Reject, Authenticate, Authenticated, Recovery, Keepalive,
     Transfer, Ack, FastTransfer, Routes),
)
