"""
The frames of the routing link, protocol version 4.

Version 2 added the store ids to L{Recovery}; a version-1 router is
refused (C{version}), see docs/protocol.md.  Version 3 added the vote
exchange on the routing listener (L{VoteHello} and the HA vote frames,
with the start-up question L{StartQuery}), and the replication
connection between the two instances of an HA pair (L{ReplicaHello} and
the replication frames): a vote or replication connection needs version
3.  Version 3 also carries the epoch of an HA instance (docs/ha.md) in
L{Hello}, L{Welcome} and each advertisement of L{Routes}, always
optional on the wire and left off while 0 (a router without HA): such a
router's routing links are exactly version 2's, byte for byte, so it
links with a version-2 router at version 2.  Only an HA instance (epoch
above 0) sends a L{Hello} a version-2 router cannot read.  Version 4
added L{TransferBatch} and L{FastTransferBatch}: many messages in one
frame; a link agreed at version 2 or 3 carries one message per frame as
before.

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
SUPPORTED_VERSIONS = (2, 3, 4, 5, 6)

#: The first version whose links carry L{TransferBatch} and
#: L{FastTransferBatch}.
BATCH_VERSION = 4

#: The first version whose links carry L{Interest}: topic interest
#: (docs/topics.md).  A link at an older version hears none, and its peer
#: is never sent a publication for itself; it still forwards others'.
TOPICS_VERSION = 5

#: The first version whose routers take retained topic messages, system
#: messages to the queue C{$retained} (docs/topics.md, "Retained
#: messages"): no new frame, but a router of an older version would take
#: one for a queue of its own, so none is sent to it.
RETAINED_VERSION = 6

#: The most messages one L{TransferBatch} or L{FastTransferBatch} carries
#: (a receiver refuses more); as many as one store call hands a link.
BATCH_MAX_MESSAGES = 256

#: The most bytes of messages a sender puts in one batch frame, counted
#: as L{meshroute.wire.codec.size_bound} bounds each message's encoding:
#: so a batch frame is always far within the link's frame limit, and a
#: message larger than this travels in a frame of its own (a
#: L{Transfer} or L{FastTransfer}).  About one socket buffer (Twisted's
#: C{bufferSize}): a transport that pauses its producer holds at most one
#: batch more than it would hold of single messages.
BATCH_MAX_BYTES = 64 * 1024

#: The versions in which a vote connection exists (L{VoteHello}).
VOTE_VERSIONS = (3,)

#: The versions in which a replication connection exists (L{ReplicaHello}).
REPLICATION_VERSIONS = (3,)

#: The largest epoch, position or stamp a vote frame may carry: the
#: store keeps them as SQLite's signed 64-bit integers.
MAX_VOTE_NUMBER = 2**63 - 1

#: The first version whose L{Welcome} and L{Routes} carry epochs (a
#: L{Hello} may carry one before any version is agreed).
EPOCH_VERSION = 3

#: Size of the random challenges exchanged during authentication.
CHALLENGE_SIZE = 32


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


def _check_positions(frame, *names: str) -> None:
    """
    Epochs, positions and stamps are SQLite's signed 64-bit integers.
    """
    for name in names:
        if not 0 <= getattr(frame, name) <= MAX_VOTE_NUMBER:
            raise WireError(f"{type(frame).__name__}.{name} must be in 0..2**63-1")


def _check_group(frame) -> None:
    if not _GROUP_NAME.match(frame.group):
        raise WireError(f"{type(frame).__name__}.group is not a group name")


def _check_optional_group(frame) -> None:
    if frame.group != "" and not _GROUP_NAME.match(frame.group):
        raise WireError(f"{type(frame).__name__}.group is not a group name")


def _check_vote(frame, names: tuple[str, ...], numbers: tuple[str, ...]) -> None:
    """
    What a voter stores from a vote frame must be storable: a group name,
    bounded instance names, numbers that fit SQLite, a lease of at most
    L{MAX_LEASE_TIMEOUT_MS}.
    """
    kind = type(frame).__name__
    _check_group(frame)
    for name in names:
        if not 0 < len(getattr(frame, name)) <= MAX_INSTANCE_NAME:
            raise WireError(f"{kind}.{name} must be 1 to {MAX_INSTANCE_NAME} characters")
    _check_positions(frame, *numbers)
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
    C{code} is one of L{meshroute.link.reasons.REJECTION_CODES}.
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


def _check_batch(frame, messages: list) -> None:
    """
    A batch holds 1 to L{BATCH_MAX_MESSAGES} messages, each C{[msg_id,
    origin, dest_router, dest_queue, hops, accepted_at, headers, body]}
    typed as L{Transfer}'s fields (a tuple is such a list not yet through
    msgpack: a frame being sent).
    """
    kind = type(frame).__name__
    if not 0 < len(messages) <= BATCH_MAX_MESSAGES:
        raise WireError(f"{kind}.messages must hold 1 to {BATCH_MAX_MESSAGES} messages")
    for item in messages:
        if not (type(item) in (list, tuple) and len(item) == 8
                and type(item[0]) is str and type(item[1]) is str
                and type(item[2]) is str and type(item[3]) is str
                and type(item[4]) is int and type(item[5]) is float
                and type(item[6]) is dict and type(item[7]) is bytes
                and (not item[6]
                     or all(type(k) is str and type(v) is str for k, v in item[6].items()))):
            raise WireError(
                f"{kind}.messages must be [msg_id, origin, dest_router, dest_queue, hops, "
                "accepted_at, {headers}, body] items")


@dataclass(frozen=True)
class TransferBatch:
    """
    Either direction, delivery stage of a version-4 link: persistent
    messages, as L{Transfer}s with the consecutive sequence numbers
    C{first_seq}, C{first_seq + 1}, ...  (a sender with a gap in its
    sequence starts a new frame there).  Acknowledged by L{Ack} like
    the transfers it stands for.
    """

    TYPE: ClassVar[int] = 26
    first_seq: int
    messages: list

    def __post_init__(self) -> None:
        _check_batch(self, self.messages)
        if not 0 < self.first_seq <= MAX_VOTE_NUMBER - len(self.messages) + 1:
            raise WireError("TransferBatch sequence numbers must be in 1..2**63-1")

    @property
    def last_seq(self) -> int:
        return self.first_seq + len(self.messages) - 1


@dataclass(frozen=True)
class FastTransferBatch:
    """
    Either direction, delivery stage of a version-4 link: non-persistent
    messages, as L{FastTransfer}s, in order.
    """

    TYPE: ClassVar[int] = 27
    messages: list

    def __post_init__(self) -> None:
        _check_batch(self, self.messages)


@dataclass(frozen=True)
class Interest:
    """
    Either direction, delivery stage of a version-5 link: routers' topic
    interest, each C{[origin, version, [pattern, ...]]}: the aggregated
    patterns of C{origin}'s subscriptions, under a version C{origin}
    raises with each change (an empty list withdraws its interest; see
    docs/topics.md and L{meshroute.topics.interest}).
    """

    TYPE: ClassVar[int] = 28
    advertisements: list

    def __post_init__(self) -> None:
        for item in self.advertisements:
            if not (
                type(item) is list
                and len(item) == 3
                and type(item[0]) is str
                and type(item[1]) is int
                and 0 <= item[1] <= MAX_VOTE_NUMBER
                and type(item[2]) is list
                and all(type(p) is str for p in item[2])
            ):
                raise WireError(
                    "Interest.advertisements must be [origin, version, [patterns]] items")


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
# docs/ha.md say what each field means; meshroute.harules.quorum holds the
# rules the listener answers by.


@dataclass(frozen=True)
class VoteHello:
    """
    Connector → listener, first frame of a vote connection instead of
    L{Hello}: who I am, which versions I speak (at least 3), and that this
    connection is for HA votes and heartbeats, not a routing link.
    Authentication follows as for a link.  C{group}: the asking HA
    instance's group, which the pair's other instance checks (optional on
    the wire, "" for none; docs/protocol.md).
    """

    TYPE: ClassVar[int] = 12
    OPTIONAL_TAIL: ClassVar[int] = 1
    versions: list
    router: str
    group: str = ""

    def __post_init__(self) -> None:
        _check_versions(self)
        _check_optional_group(self)


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


@dataclass(frozen=True)
class StartQuery:
    """
    Connector → listener, vote connection: an instance of C{group} that
    starts asks who is active (Artemis' C{check-for-live-server}).
    """

    TYPE: ClassVar[int] = 17
    group: str

    def __post_init__(self) -> None:
        _check_group(self)


@dataclass(frozen=True)
class StartAnswer:
    """
    Listener → connector: the answer to one L{StartQuery}, what
    L{meshroute.harules.quorum.Voter.start_answer} says: the instance whose
    heartbeats the voter hears (C{active}, "" for none), the voter's
    durable record for the group (C{granted_to} "" for none), and, when
    the voter is the pair's other instance, its own data position
    C{own_position} as C{[epoch, position]} (C{[]} for a witness).
    """

    TYPE: ClassVar[int] = 18
    group: str
    voter: str
    active: str
    granted_epoch: int
    granted_to: str
    granted_at_epoch: int
    granted_at_position: int
    confirmed_epoch: int
    confirmed_position: int
    own_position: list

    def __post_init__(self) -> None:
        position = self.own_position
        if not (position == [] or (len(position) == 2 and all(
                type(n) is int and 0 <= n <= MAX_VOTE_NUMBER for n in position))):
            raise WireError("StartAnswer.own_position must be [] or [epoch, position]")


# The replication connection (version 3): the backup instance of an HA
# pair follows the active one's store changes.  docs/protocol.md
# ("Replication connections") narrates the exchange; meshroute.ha.feed and
# meshroute.ha.follower are its two sides.

#: The largest L{SnapshotChunk}.
MAX_SNAPSHOT_CHUNK = 256 * 1024
#: SQLite values a replicated statement's parameters may hold (sqlite3
#: stores a bool as an integer).
_SQL_VALUES = frozenset((type(None), bool, int, float, str, bytes))
#: ... and the type of the names of named ones.
_KEY_TYPES = frozenset((str,))


@dataclass(frozen=True)
class ReplicaHello:
    """
    Connector → listener, first frame of a replication connection instead
    of L{Hello}: who I am (the pair's router name, and C{group}, its HA
    group: optional on the wire, "" for none), which versions I speak (at
    least 3), and that I follow the active instance's store.
    Authentication follows as for a link.
    """

    TYPE: ClassVar[int] = 19
    OPTIONAL_TAIL: ClassVar[int] = 1
    versions: list
    router: str
    group: str = ""

    def __post_init__(self) -> None:
        _check_versions(self)
        _check_optional_group(self)


@dataclass(frozen=True)
class Follow:
    """
    Follower → active: the store id the follower's data belongs to, and
    the (epoch, position) of the last change it holds.
    """

    TYPE: ClassVar[int] = 20
    store_id: str
    epoch: int
    position: int

    def __post_init__(self) -> None:
        _check_positions(self, "epoch", "position")


@dataclass(frozen=True)
class SnapshotChunk:
    """
    Active → follower: the next piece of a snapshot of the active's store
    (the file's bytes in order, at most L{MAX_SNAPSHOT_CHUNK} each).
    """

    TYPE: ClassVar[int] = 21
    data: bytes

    def __post_init__(self) -> None:
        if not 0 < len(self.data) <= MAX_SNAPSHOT_CHUNK:
            raise WireError(f"SnapshotChunk.data must be 1 to {MAX_SNAPSHOT_CHUNK} bytes")


@dataclass(frozen=True)
class SnapshotEnd:
    """
    Active → follower: the snapshot is complete; it holds the store up to
    the change (C{epoch}, C{position}).
    """

    TYPE: ClassVar[int] = 22
    epoch: int
    position: int

    def __post_init__(self) -> None:
        _check_positions(self, "epoch", "position")


@dataclass(frozen=True)
class Changes:
    """
    Active → follower: committed store transactions in commit order, each
    C{[epoch, position, statements]} with each statement C{[sql, params,
    many]}: C{params} one parameter set (a list of SQL values, or a map of
    named ones), or with C{many} a list of such sets (one C{executemany});
    and the active's C{head}, the position of its newest committed change.
    (L{meshroute.store.changes.ChangeBatch.to_plain} makes a batch's form.)
    """

    TYPE: ClassVar[int] = 23
    batches: list
    head: int

    def __post_init__(self) -> None:
        _check_positions(self, "head")
        for batch in self.batches:
            if not (type(batch) is list and len(batch) == 3 and type(batch[2]) is list
                    and type(batch[0]) is int and 0 <= batch[0] <= MAX_VOTE_NUMBER
                    and type(batch[1]) is int and 1 <= batch[1] <= MAX_VOTE_NUMBER
                    and all(_is_statement(s) for s in batch[2])):
                raise WireError("Changes.batches must be [epoch, position, [statement, ...]] "
                                "items, each statement [sql, params, many]")


def _is_statement(statement) -> bool:
    """
    Whether C{statement} is C{[sql, params, many]} as
    L{meshroute.store.changes.ChangeBatch.to_plain} makes it.
    """
    if not (type(statement) is list and len(statement) == 3 and type(statement[0]) is str
            and type(statement[2]) is bool):
        return False
    params, many = statement[1], statement[2]
    if many:
        return type(params) is list and bool(params) and all(map(_is_row, params))
    return _is_row(params)


def _is_row(params) -> bool:
    """
    One parameter set: SQL values by position, or by name.  (A tuple is
    a list that has not been through msgpack yet: a frame being sent.)
    The types are checked by a set's C loop: the rows of a batch of
    messages are thousands of values, checked by the active as it sends
    them and by the backup as it reads them.
    """
    if type(params) is dict:
        return (_SQL_VALUES.issuperset(map(type, params.values()))
                and _KEY_TYPES.issuperset(map(type, params)))
    return type(params) in (list, tuple) and _SQL_VALUES.issuperset(map(type, params))



@dataclass(frozen=True)
class Applied:
    """
    Follower → active: every change up to C{position} is applied (and,
    with C{replica-sync = "full"}, fsynced).
    """

    TYPE: ClassVar[int] = 24
    position: int

    def __post_init__(self) -> None:
        _check_positions(self, "position")


@dataclass(frozen=True)
class InSync:
    """
    Follower → active, once per connection: the follower holds every
    change up to the active's head as last told (C{position}).
    """

    TYPE: ClassVar[int] = 25
    position: int

    def __post_init__(self) -> None:
        _check_positions(self, "position")


LINK_FRAMES = FrameSet(
    "link",
    (Hello, Welcome, Reject, Authenticate, Authenticated, Recovery, Keepalive,
     Transfer, Ack, FastTransfer, Routes,
     VoteHello, VoteRequest, VoteAnswer, Heartbeat, HeartbeatAnswer,
     StartQuery, StartAnswer,
     ReplicaHello, Follow, SnapshotChunk, SnapshotEnd, Changes, Applied, InSync,
     TransferBatch, FastTransferBatch, Interest),
)
