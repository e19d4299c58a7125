"""
One routing link as the router holds it (L{Link}: its core and its
machine), and the thin Twisted protocol that feeds it (L{LinkProtocol}):
bytes in, frames out, machine inputs; and the factories that build it
for the routing listener and for each connector.

L{LinkProtocol.dataReceived} feeds a L{FrameDecoder}; each decoded frame
becomes one input of the link's machine, except delivery's data frames
(transfers and acknowledgements, one or many messages each), which a link
the machine has put in delivery hands its channel directly, as the
machine's own transition would (L{Link.frame_received}): they are most of
the traffic.  A decode error or an out-of-stage frame becomes the
C{protocol_error} input, which closes this one connection and nothing
else.

Backpressure: the protocol is the streaming producer of its transport.
When the transport's buffer fills (the peer reads slower than we write, or
not at all) the transport pauses it, and the delivery stage's channel stops
writing messages until the buffer drains; they wait where their bounds
apply (the store's backlog, the engine's non-persistent waiting queue).
Control frames (acknowledgements, keepalives, routes) are small and still
go out.  On a replication connection the channel is the active's feed,
which stops reading its store's changes the same way.
"""

import itertools
from collections.abc import Callable

from automat import NoTransition
from twisted.internet.error import ConnectionDone
from twisted.internet.interfaces import IPushProducer
from twisted.internet.protocol import Factory, Protocol
from zope.interface import implementer

from meshroute.errors import WireError
from meshroute.link.context import RouterContext
from meshroute.link.core import LinkCore
from meshroute.link.machine import CONNECTOR_MACHINE, LISTENER_MACHINE
from meshroute.link.settings import ConnectorSettings, ListenerSettings
from meshroute.link.stages import ROUTING, VOTES
from meshroute.link.traffic import Traffic, messages_in
from meshroute.wire.codec import (
    DEFAULT_MAX_FRAME_SIZE,
    MAX_REPLICATION_FRAME_SIZE,
    FrameDecoder,
)
from meshroute.wire.transport import send_immediately
from meshroute.wire.frames import (
    BATCH_VERSION,
    TOPICS_VERSION,
    Ack,
    Applied,
    Authenticate,
    Authenticated,
    Changes,
    FastTransfer,
    FastTransferBatch,
    Follow,
    Heartbeat,
    HeartbeatAnswer,
    Hello,
    InSync,
    Interest,
    Keepalive,
    Recovery,
    Reject,
    ReplicaHello,
    Routes,
    SnapshotChunk,
    SnapshotEnd,
    StartAnswer,
    StartQuery,
    Transfer,
    TransferBatch,
    VoteAnswer,
    VoteHello,
    VoteRequest,
    Welcome,
)

LISTENER = "listener"
CONNECTOR = "connector"

#: Which machine input each frame type feeds.
_INPUT_FOR_FRAME = {
    Hello: "got_hello",
    Welcome: "got_welcome",
    Authenticate: "got_authenticate",
    Authenticated: "got_authenticated",
    Recovery: "got_recovery",
    Keepalive: "got_keepalive",
    Reject: "got_reject",
    Transfer: "got_transfer",
    TransferBatch: "got_transfer_batch",
    Ack: "got_ack",
    FastTransfer: "got_fast_transfer",
    FastTransferBatch: "got_fast_transfer_batch",
    Routes: "got_routes",
    Interest: "got_interest",
    VoteHello: "got_vote_hello",
    VoteRequest: "got_vote_request",
    Heartbeat: "got_heartbeat",
    VoteAnswer: "got_vote_answer",
    HeartbeatAnswer: "got_heartbeat_answer",
    StartQuery: "got_start_query",
    StartAnswer: "got_start_answer",
    ReplicaHello: "got_replica_hello",
    Follow: "got_follow",
    Applied: "got_applied",
    InSync: "got_in_sync",
    SnapshotChunk: "got_snapshot_chunk",
    SnapshotEnd: "got_snapshot_end",
    Changes: "got_changes",
}

#: The delivery stage's data frames, which a link in delivery hands its
#: channel directly (sparing the machine's dispatch on every message):
#: the channel's method for each, and the first version that carries it.
_DATA_FRAMES = {
    Transfer: ("transferred", 2),
    TransferBatch: ("transferred_batch", BATCH_VERSION),
    Ack: ("acknowledged", 2),
    FastTransfer: ("fast_transferred", 2),
    FastTransferBatch: ("fast_transferred_batch", BATCH_VERSION),
    Interest: ("interest", TOPICS_VERSION),
}

_link_numbers = itertools.count(1)


class Link:
    """
    One routing link: its core (data and I/O) and its machine.

    This is what the registry holds and the admin API describes.
    """

    def __init__(self, core: LinkCore, machine) -> None:
        self.core = core
        self.machine = machine

    @property
    def peer(self) -> str | None:
        return self.core.peer

    @property
    def direction(self) -> str:
        """
        C{connector} or C{listener}: which side of the connection we are.
        """
        return self.core.direction

    @property
    def traffic(self) -> Traffic:
        return self.core.traffic

    @property
    def routing(self) -> bool:
        """
        Whether this connection is a routing link: not one that turned out
        to be a vote connection (L{meshroute.wire.frames.VoteHello}) or a
        replication connection (L{meshroute.wire.frames.ReplicaHello}).
        """
        return self.core.purpose == ROUTING

    def frame_received(self, frame) -> bool:
        """
        Feed one decoded frame to the machine, or in delivery a data frame
        to the channel, as the machine's delivery stage would: the machine
        decides when the link is in delivery (C{core.delivering}), and
        the channel what a frame does there.

        @return: False if the frame was out of stage (the link is closing).
        """
        core = self.core
        if core.delivering:
            data = _DATA_FRAMES.get(type(frame))
            if data is not None:
                method, version = data
                if core.version < version:
                    self.machine.protocol_error(
                        f"{type(frame).__name__} frame not expected at version {core.version}")
                    return False
                core.heard()
                core.traffic.messages_received += messages_in(frame)
                try:
                    getattr(core.channel, method)(frame)
                except WireError as e:
                    # Well formed, but its content is not what it may be.
                    self.machine.protocol_error(str(e))
                    return False
                return True
        held = core.held_frames
        if held is not None:
            held.append(frame)
            return True
        try:
            getattr(self.machine, _INPUT_FOR_FRAME[type(frame)])(frame)
        except NoTransition:
            self.machine.protocol_error(
                f"{type(frame).__name__} frame not expected in {core.stage}"
            )
            return False
        return True

    def release_held_frames(self) -> None:
        """
        The verdict on the peer's proof is made: feed the frames it held,
        in order (none if the link closed meanwhile).
        """
        held, self.core.held_frames = self.core.held_frames, None
        if self.core.close_reason is None:
            for frame in held or ():
                if not self.frame_received(frame):
                    return

    def ask(self, frame: VoteRequest | Heartbeat | StartQuery) -> None:
        """
        Send a vote request, heartbeat or start-up question (the connector
        side of a vote connection, in voting).
        """
        self.machine.send_vote_frame(frame)

    def supersede(self, epoch: int) -> None:
        """
        A link from epoch C{epoch} of this link's peer name took its place.
        """
        self.machine.superseded(epoch)

    def shutdown(self) -> None:
        self.machine.shutdown()

    def describe(self) -> dict:
        """
        The link as the admin API shows it: its messages in flight, sent
        and received are those of its delivery stage (None before it).
        """
        core = self.core
        channel = core.channel
        return {
            "link": core.link_id,
            "peer": core.peer,
            "direction": core.direction,
            "endpoint": core.endpoint,
            "stage": core.stage,
            "keepalive_interval_ms": core.keepalive_interval_ms,
            "keepalive_counter": core.keepalive.counter.value if core.keepalive else None,
            "since": core.since,
            "last_heard": core.last_heard,
            "peer_last_received": core.peer_last_received,
            "peer_epoch": core.peer_epoch,
            "in_flight": channel.in_flight if channel is not None else None,
            "sent": core.traffic.messages_sent if channel is not None else None,
            "received": core.traffic.messages_received if channel is not None else None,
        }


@implementer(IPushProducer)
class LinkProtocol(Protocol):
    """
    Bytes ↔ frames for one link; all decisions are the machine's.

    The transport's producer: it passes a pause or resume on to the
    link's delivery-stage channel.  Before delivery there is no channel,
    and the handshake's few small frames never fill a buffer.
    """

    def __init__(self, context: RouterContext, direction: str, settings, on_delivery=None,
                 endpoint: str | None = None, side=None):
        """
        @param side: for a connector's vote connection (L{VoteHello}
            instead of L{Hello}), the L{meshroute.link.context.VoteSide}
            its answers go to; for a connector's replication connection
            (L{ReplicaHello}), the follower that makes its channel
            (L{meshroute.ha.follower}).  Its C{purpose} says which.
        """
        self._context = context
        self._side = side
        self._direction = direction
        self._settings = settings
        self._on_delivery = on_delivery
        self._endpoint = endpoint
        self.link: Link | None = None

    def connectionMade(self) -> None:
        send_immediately(self.transport)
        self.transport.registerProducer(self, True)
        number = next(_link_numbers)
        core = LinkCore(
            context=self._context,
            direction=self._direction,
            settings=self._settings,
            transport=self.transport,
            link_id=f"{self._context.name}/{self._direction[0].upper()}{number}",
            endpoint=self._endpoint,
        )
        if self._on_delivery is not None:
            core.on_delivery = self._on_delivery
        # Only an authenticated active sends a follower large frames: a
        # group-committed transaction may exceed any message frame.
        limit = DEFAULT_MAX_FRAME_SIZE
        if self._side is not None:
            core.purpose = self._side.purpose
            if core.purpose == VOTES:
                core.vote_side = self._side
            else:
                core.replica_side = self._side
                limit = MAX_REPLICATION_FRAME_SIZE
        machines = LISTENER_MACHINE if self._direction == LISTENER else CONNECTOR_MACHINE
        self.link = Link(core, machines(core))
        core.link = self.link
        self._decoder = FrameDecoder(max_frame_size=limit)
        self._context.registry.opened(self.link)
        self.link.machine.connection_made()

    def dataReceived(self, data: bytes) -> None:
        self.link.core.traffic.bytes_received += len(data)
        try:
            frames = self._decoder.feed(data)
        except WireError as e:
            self.link.machine.protocol_error(str(e))
            return
        for frame in frames:
            if not self.link.frame_received(frame):
                return

    def pauseProducing(self) -> None:
        """
        The transport's buffer is full.
        """
        channel = self.link.core.channel
        if channel is not None:
            channel.pause()

    def resumeProducing(self) -> None:
        """
        The transport's buffer has drained.
        """
        channel = self.link.core.channel
        if channel is not None:
            channel.resume()

    def stopProducing(self) -> None:
        """
        The transport is going away; C{connectionLost} follows.
        """

    def connectionLost(self, reason=None) -> None:
        why = "" if reason is None or reason.check(ConnectionDone) else reason.getErrorMessage()
        self.link.machine.connection_lost(self._decoder.pending > 0, why)
        self._context.registry.closed(self.link)


class ListenerFactory(Factory):
    """
    Builds the listener side of each inbound routing connection.
    """

    def __init__(self, context: RouterContext, settings: ListenerSettings) -> None:
        self._context = context
        self._settings = settings

    def buildProtocol(self, addr) -> LinkProtocol:
        return LinkProtocol(self._context, LISTENER, self._settings)


class ConnectorFactory(Factory):
    """
    Builds the connector side of an outbound routing connection.

    @param on_delivery: called each time a link it built reaches delivery.
    @param endpoint: says which configured endpoint the connection being
        made goes through (None: the links record none).
    @param side: makes vote connections reporting to it (a
        L{meshroute.link.context.VoteSide}), or replication connections
        following through it, not links (on_delivery: when one reaches
        voting or replication).
    """

    def __init__(self, context: RouterContext, settings: ConnectorSettings, on_delivery,
                 endpoint: Callable[[], str] | None = None, side=None):
        self._context = context
        self._side = side
        self._settings = settings
        self._on_delivery = on_delivery
        self._endpoint = endpoint

    def buildProtocol(self, addr) -> LinkProtocol:
        return LinkProtocol(self._context, CONNECTOR, self._settings, self._on_delivery,
                            self._endpoint() if self._endpoint is not None else None,
                            self._side)
