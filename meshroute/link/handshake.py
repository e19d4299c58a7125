"""
The life of one routing link, as two Automat machines: one for the side
that accepted the connection (listener), one for the side that opened it
(connector).

Both go through the stages connect → authentication → recovery →
delivery.  Every state before delivery is named for the frame it awaits
from the peer, and only there does the stage timer (stage-valid-timeout)
run.

A connection that opens with L{VoteHello} instead of L{Hello} is a vote
connection, not a routing link: the listener takes it through the same
connect and authentication stages (without claiming the peer's name: it
is not a link to it), then into the voting stage, where it answers HA
vote requests and heartbeats through the router's
L{meshroute.router.witness.Witness}; there the stage timer is an idle timer,
restarted by each request (close reason C{idle}).  The connector side
of a vote connection (an HA instance reaching a witness,
L{meshroute.ha.voters}) takes the same stages from its side: L{VoteHello},
the proof, then voting, where the stage timer runs only while a request
is unanswered (a silent witness: close reason C{stage-timeout}, and the
connector dials again); its answers go to the connection's L{VoteSide}.
A vote connection also carries the start-up question (L{StartQuery}).

A connection that opens with L{ReplicaHello} is a replication connection
between the two instances of an HA pair: the same connect and
authentication stages (no name claimed), then the replication stage, in
which the listener (the active instance, L{RouterContext.replication};
any other instance refuses C{not-active} once the proof is good) streams
its store changes and the connector (the follower,
L{meshroute.ha.follower}) applies them.  Both sides run the link's
keepalive there, and the stage's frames go to the connection's channel
(L{meshroute.ha.feed.ReplicaFeed} on the listener,
L{meshroute.ha.follower.FollowerStream} on the connector), as a link's
delivery frames go to the engine's.

A frame the current state has no transition for raises C{NoTransition}
before any behaviour runs; the protocol turns that into a
C{protocol-error} close, so an out-of-stage frame cannot change state
(a vote frame on a link, a link frame on a vote connection).  Delivery's
data frames (L{Transfer}, L{TransferBatch}, L{Ack}, L{FastTransfer},
L{FastTransferBatch}) have no transition in delivery: entering delivery
sets L{LinkCore.delivering}, leaving it clears it, and while it is set
the link hands them to the channel itself, sparing the machine's
dispatch on every message; in every other state they reach the machine
as before.

Where a frame must be checked before we know where to go (a Hello that may
be refused, a proof that may be wrong), the machine moves to a C{vetting_*}
state whose behaviour decides and feeds back C{accepted} or C{refused};
Automat runs such re-entrant inputs right after the current transition.
A proof that raises the epoch seen for the peer's name decides only once
that epoch is durable (L{meshroute.link.epochs}): the C{vetting_*} state
then waits, under the stage timer, and a save that fails closes the
connection (C{store-failed}).

Epochs (docs/protocol.md): the instances of an HA pair share a router
name, and each says in L{Hello} (connector) or L{Welcome} (listener) the
epoch it serves in.  A peer from an epoch lower than the highest seen
for its name is refused (C{stale-epoch}); one from a higher epoch than
the link holding its name is not refused C{name-in-use}: once it has
proved the secret and its epoch is durable, it takes the name, and the
older link closes at once (C{superseded}), its delivery channel first,
so that the two never share the name's outbox.

The machines hold no state of their own: L{LinkCore} keeps the link's
data and does the I/O, and docs/protocol.md narrates the same exchange
from the wire's point of view.
"""

import re
from dataclasses import dataclass, field
from typing import Callable, Protocol

from automat import TypeMachineBuilder
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IDelayedCall, IReactorTime, ITransport
from twisted.logger import Logger

from meshroute import events
from meshroute.link import auth, reasons
from meshroute.link.keepalive import Keepalive
from meshroute.link.traffic import Traffic
from meshroute.wire.codec import encode
from meshroute.wire.frames import (
    CHALLENGE_SIZE,
    EPOCH_VERSION,
    REPLICATION_VERSIONS,
    SUPPORTED_VERSIONS,
    VOTE_VERSIONS,
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
    Keepalive as KeepaliveFrame,
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
from meshroute.wire.transport import peer_address

log = Logger()

CONNECT = "connect"
AUTHENTICATION = "authentication"
RECOVERY = "recovery"
DELIVERY = "delivery"
#: The stage of a vote connection after authentication.
VOTING = "voting"
#: The stage of a replication connection after authentication.
REPLICATION = "replication"

#: What a connection is for: a routing link, HA votes and heartbeats, or
#: an HA pair's replication.
ROUTING = "routing"
VOTES = "votes"
REPLICA = "replica"


def _versions(purpose: str) -> tuple[int, ...]:
    """
    The protocol versions a connection for C{purpose} may use.
    """
    return {ROUTING: SUPPORTED_VERSIONS, VOTES: VOTE_VERSIONS,
            REPLICA: REPLICATION_VERSIONS}[purpose]

ROUTER_NAME = re.compile(r"[A-Za-z0-9._-]{1,64}\Z")


class LinkInputs(Protocol):
    """
    Everything that can happen to a link.
    """

    def connection_made(self) -> None:
        "The TCP (or TLS) connection is up."

    def got_hello(self, frame: Hello) -> None:
        "The connector introduced itself."

    def got_vote_hello(self, frame: VoteHello) -> None:
        "The connector introduced itself, for a vote connection."

    def got_replica_hello(self, frame: ReplicaHello) -> None:
        "The connector introduced itself, for a replication connection."

    def got_vote_request(self, frame: VoteRequest) -> None:
        "A candidate asks this router's vote for an epoch."

    def got_start_query(self, frame: StartQuery) -> None:
        "An instance that starts asks this router's voter who is active."

    def got_start_answer(self, frame: StartAnswer) -> None:
        "A voter answered the start-up question (a listener never asks)."

    def got_heartbeat(self, frame: Heartbeat) -> None:
        "An active instance's heartbeat for this router's voter."

    def got_vote_answer(self, frame: VoteAnswer) -> None:
        "A voter answered a vote request (a listener never asks)."

    def got_heartbeat_answer(self, frame: HeartbeatAnswer) -> None:
        "A voter answered a heartbeat (a listener never sends one)."

    def got_follow(self, frame: Follow) -> None:
        "The follower says where its data stands (replication, listener)."

    def got_applied(self, frame: Applied) -> None:
        "The follower applied changes up to a position (replication, listener)."

    def got_in_sync(self, frame: InSync) -> None:
        "The follower reached the head it was told (replication, listener)."

    def got_snapshot_chunk(self, frame: SnapshotChunk) -> None:
        "A piece of the active's snapshot (replication, connector)."

    def got_snapshot_end(self, frame: SnapshotEnd) -> None:
        "The active's snapshot is complete (replication, connector)."

    def got_changes(self, frame: Changes) -> None:
        "The active's committed changes (replication, connector)."

    def send_vote_frame(self, frame: VoteRequest | Heartbeat | StartQuery) -> None:
        "This HA instance asks the witness (the connector side of a vote connection)."

    def got_welcome(self, frame: Welcome) -> None:
        "The listener answered the Hello."

    def got_authenticate(self, frame: Authenticate) -> None:
        "The connector sent its proof and its challenge."

    def got_authenticated(self, frame: Authenticated) -> None:
        "The listener accepted our proof and sent its own."

    def got_recovery(self, frame: Recovery) -> None:
        "The peer told us the last sequence it received from us."

    def got_keepalive(self, frame: KeepaliveFrame) -> None:
        "The peer is alive."

    def got_reject(self, frame: Reject) -> None:
        "The peer refused the handshake."

    # The delivery stage's data frames: in delivery the link hands them
    # to its channel directly (L{meshroute.link.protocol.Link.frame_received},
    # while L{LinkCore.delivering}); the machine sees them only in the
    # other stages, where they are out of stage or moot.

    def got_transfer(self, frame: Transfer) -> None:
        "A persistent message arrived."

    def got_transfer_batch(self, frame: TransferBatch) -> None:
        "Persistent messages arrived (version 4)."

    def got_ack(self, frame: Ack) -> None:
        "The peer durably holds our transfers up to a sequence."

    def got_fast_transfer(self, frame: FastTransfer) -> None:
        "A non-persistent message arrived."

    def got_fast_transfer_batch(self, frame: FastTransferBatch) -> None:
        "Non-persistent messages arrived (version 4)."

    def got_routes(self, frame: Routes) -> None:
        "Route advertisements arrived."

    def accepted(self) -> None:
        "The frame being vetted passed every check."

    def vote_accepted(self) -> None:
        "The proof of a vote connection's peer passed every check."

    def replica_accepted(self) -> None:
        "The proof of a replication connection's peer passed every check."

    def refused(self, code: str, detail: str) -> None:
        "The frame being vetted failed a check; C{code} says which."

    def stage_timer_expired(self) -> None:
        "stage-valid-timeout passed while we waited for the peer."

    def reject_delay_elapsed(self) -> None:
        "reject-disconnect-delay passed since we sent a Reject."

    def keepalive_expired(self) -> None:
        "The keepalive counter reached 0."

    def store_failed(self, detail: str) -> None:
        "The store failed an operation of the delivery (or voting) stage."

    def protocol_error(self, why: str) -> None:
        "The peer sent bytes that are not a valid frame in this stage."

    def shutdown(self) -> None:
        "This router is stopping."

    def superseded(self, epoch: int) -> None:
        "A link from a newer epoch (C{epoch}) of the peer's router name took its place."

    def connection_lost(self, truncated: bool, why: str) -> None:
        """
        The connection is gone; C{truncated} if a partial frame was pending,
        C{why} the transport's error when it was not a clean close (a reset,
        a failed TLS handshake), else empty.
        """


class VoteSide(Protocol):
    """
    Who a connector's vote connection reports to (its
    L{meshroute.ha.voters.WitnessConnection}).
    """

    def voting(self, link) -> None:
        """
        The witness accepted our proof: requests may be sent from now on,
        through C{link.ask} (a L{meshroute.link.protocol.Link}).
        """

    def answered(self, frame: VoteAnswer | HeartbeatAnswer | StartAnswer) -> None:
        "The witness answered a request, a heartbeat or the start-up question."

    def closed(self, core: "LinkCore") -> None:
        "The connection is gone (C{core.stage}, C{core.close_reason} say where and why)."


@dataclass(frozen=True)
class RouterContext:
    """
    What every link of one router shares.

    @ivar engine: the router's L{meshroute.interfaces.ILinkEngine}: it
        makes the recovery stage's L{Recovery} (last sequence received
        from the peer, and the store ids it belongs to) and takes over each
        link's delivery stage.
    @ivar witness: the router's L{meshroute.router.witness.Witness}, which
        answers vote connections; None: a L{VoteHello} is refused
        (C{version}), as by a router without vote connections.
    @ivar replication: on an HA instance's replication listener, its
        L{meshroute.ha.feed.ReplicationServer}, which serves replication
        connections; None: a L{ReplicaHello} is refused (C{version}).
        That listener's context has no C{engine}: a L{Hello} is refused
        (C{not-allowed}); and there the peer has the listener's own router
        name (the pair's other instance), and no other.
    @ivar epoch: the epoch this instance of the router serves in (the
        active instance of an HA pair); 0 for a router without HA.
    @ivar group: an HA instance's group (C{ha.group-name}), which its vote
        and replication connections carry; "" for a router without HA.
    @ivar pairing: on an HA instance's replication listener and on its
        connections to the pair's other instance, its
        L{meshroute.ha.pairing.Pairing}: the listener refuses a peer of
        another group (C{group-mismatch}), and it is told of that refusal
        from either side and of each pair connection authenticated; None
        elsewhere.
    @ivar peer_epochs: the L{meshroute.link.epochs.PeerEpochs} of the
        router; None (a context without a store, in tests of other
        concerns): no epoch is remembered, so only the link holding a name
        is compared with.
    """

    name: str
    clock: IReactorTime
    events: events.EventLog
    registry: object
    engine: object
    witness: object = None
    replication: object = None
    epoch: int = 0
    peer_epochs: object = None
    group: str = ""
    pairing: object = None


@dataclass(frozen=True)
class ListenerSettings:
    """
    The routing listener's side of the contract, in milliseconds.
    """

    secret: bytes
    keepalive_interval_ms: int
    stage_valid_timeout_ms: int
    reject_disconnect_delay_ms: int
    allowed_routers: frozenset | None = None


@dataclass(frozen=True)
class ConnectorSettings:
    """
    One routing connector's side of the contract, in milliseconds.
    """

    secret: bytes
    expected_peer: str
    stage_valid_timeout_ms: int


@dataclass
class LinkCore:
    """
    The data of one link and the I/O its behaviours perform.

    @ivar on_delivery: called when the link reaches delivery (connectors use
        it to reset their retry schedule).
    @ivar endpoint: the configured endpoint a connector's link was made
        through (one of the connector's list); None for a listener's link.
    @ivar peer_group: on a replication listener, the HA group the pair's
        other instance said it is in (checked once its proof is).
    @ivar held_frames: while a verdict on the peer's proof is being made
        (its epoch saved), the frames it sent since, in order; else None.
    @ivar delivering: the machine is in delivery (set on entering it,
        cleared on leaving it): the data frames go straight to the channel.
    @ivar traffic: what the link sent and received (L{Traffic}).
    """

    context: RouterContext
    direction: str
    settings: ListenerSettings | ConnectorSettings
    transport: ITransport
    link_id: str
    on_delivery: Callable[[], None] = lambda: None
    link: object = None
    endpoint: str | None = None
    peer: str | None = None
    stage: str = CONNECT
    since: float = 0.0
    last_heard: float | None = None
    keepalive_interval_ms: int | None = None
    keepalive: Keepalive | None = None
    close_reason: str | None = None
    close_detail: str = ""
    own_challenge: bytes = field(default_factory=auth.new_challenge)
    peer_challenge: bytes = b""
    peer_last_received: int | None = None
    version: int | None = None
    peer_epoch: int = 0
    peer_group: str = ""
    channel: object = None
    purpose: str = ROUTING
    vote_side: VoteSide | None = None
    replica_side: object = None
    unanswered: int = 0
    held_frames: list | None = None
    delivering: bool = False
    traffic: Traffic = field(default_factory=Traffic)
    _stage_timer: IDelayedCall | None = None
    _reject_timer: IDelayedCall | None = None

    # -- shared behaviour -------------------------------------------------

    def send(self, frame) -> None:
        data = encode(frame)
        self.traffic.sent(frame, len(data))
        self.transport.write(data)

    def heard(self) -> None:
        """
        Note the peer's latest sign of life (any valid frame).
        """
        self.last_heard = self.context.clock.seconds()

    def emit(self, event: str, **fields) -> None:
        self.context.events.emit(
            event, link=self.link_id, peer=self.peer, direction=self.direction, **fields
        )

    def begin_stage(self, inputs: LinkInputs, stage: str) -> None:
        """
        Enter a stage in which we wait for the peer, under the stage timer.
        """
        self._cancel_stage_timer()
        self.stage = stage
        self.since = self.context.clock.seconds()
        if stage == CONNECT and self.endpoint is not None:
            self.emit(events.LINK_STAGE, stage=stage, endpoint=self.endpoint)
        else:
            self.emit(events.LINK_STAGE, stage=stage)
        self.restart_stage_timer(inputs)

    def restart_stage_timer(self, inputs: LinkInputs) -> None:
        """
        Wait stage-valid-timeout (again) for the peer's next frame.
        """
        self._cancel_stage_timer()
        self._stage_timer = self.context.clock.callLater(
            self.settings.stage_valid_timeout_ms / 1000, inputs.stage_timer_expired
        )

    def begin_delivery(self, inputs: LinkInputs, frame: Recovery) -> None:
        """
        Both sides have exchanged recovery points: start keepalives.
        """
        self._cancel_stage_timer()
        self.heard()
        self.peer_last_received = frame.last_received
        self.stage = DELIVERY
        self.since = self.context.clock.seconds()
        self.emit(
            events.LINK_STAGE,
            stage=DELIVERY,
            keepalive_interval_ms=self.keepalive_interval_ms,
        )
        self._start_keepalive(inputs)
        self.channel = self.context.engine.link_up(
            self.peer, self.send, fail=inputs.store_failed, emit=self.emit,
            version=self.version)
        self.channel.recovered(frame)
        self.delivering = True
        log.info(
            "link {link} to {peer} ({direction}{through}) in delivery, keepalive {interval} ms",
            link=self.link_id,
            peer=self.peer,
            direction=self.direction,
            through="" if self.endpoint is None else f" through {self.endpoint}",
            endpoint=self.endpoint,
            interval=self.keepalive_interval_ms,
        )
        self.on_delivery()

    def _start_keepalive(self, inputs: LinkInputs) -> None:
        self.keepalive = Keepalive(
            self.context.clock,
            self.keepalive_interval_ms / 1000,
            send=lambda: self.send(KeepaliveFrame()),
            expired=inputs.keepalive_expired,
        )
        self.keepalive.start()

    def send_while_open(self, frame) -> None:
        """
        Send C{frame} unless the connection is closing (a channel's frame
        that comes after the close decision is moot).
        """
        if self.close_reason is None:
            self.send(frame)

    def begin_replication(self, inputs: LinkInputs) -> None:
        """
        A replication connection is authenticated (both sides): keepalives
        start, and the stage's frames go to the channel from now on: the
        active's feed (listener) or the follower's stream (connector).
        """
        self._cancel_stage_timer()
        self.heard()
        self.stage = REPLICATION
        self.since = self.context.clock.seconds()
        through = {} if self.endpoint is None else {"endpoint": self.endpoint}
        self.emit(events.LINK_STAGE, stage=REPLICATION,
                  keepalive_interval_ms=self.keepalive_interval_ms, **through)
        self._start_keepalive(inputs)
        self._paired()
        if self.replica_side is None:
            self.channel = self.context.replication.feed(self, inputs.store_failed)
        else:
            self.on_delivery()
            self.channel = self.replica_side.following(self, inputs.store_failed)
        log.info("replication connection {link} {direction} {peer} authenticated",
                 link=self.link_id, direction="from" if self.replica_side is None else "to",
                 peer=self.peer)

    def begin_voting(self, inputs: LinkInputs) -> None:
        """
        A vote connection's peer proved it belongs to the mesh: answer its
        requests and heartbeats from now on.
        """
        self.send(self.listener_proof())
        self.begin_stage(inputs, VOTING)
        self._paired()
        log.info("vote connection {link} from {peer} authenticated", link=self.link_id,
                 peer=self.peer)

    def begin_asking(self) -> None:
        """
        The connector's side of a vote connection is authenticated: no
        timer runs until the first request is sent.
        """
        self._cancel_stage_timer()
        self.stage = VOTING
        self.since = self.context.clock.seconds()
        self.emit(events.LINK_STAGE, stage=VOTING, endpoint=self.endpoint)
        log.info("vote connection {link} to {peer} through {endpoint} authenticated",
                 link=self.link_id, peer=self.peer, endpoint=self.endpoint)
        self.on_delivery()
        self._paired()
        self.vote_side.voting(self.link)

    def _paired(self) -> None:
        """
        A connection between the two instances of a pair is authenticated:
        they are of one group (the listener checked it).
        """
        if self.context.pairing is not None:
            self.context.pairing.matched()

    def ask(self, inputs: LinkInputs, frame: VoteRequest | Heartbeat | StartQuery) -> None:
        """
        Send a request or heartbeat to the witness; wait stage-valid-timeout
        for the oldest unanswered one.
        """
        self.send(frame)
        self.unanswered += 1
        if self.unanswered == 1:
            self.restart_stage_timer(inputs)

    def answered(self, inputs: LinkInputs,
                 frame: VoteAnswer | HeartbeatAnswer | StartAnswer) -> None:
        """
        The witness answered the oldest unanswered request (it answers in
        order): wait for the next one, if any.
        """
        self.heard()
        self.unanswered = max(0, self.unanswered - 1)
        if self.unanswered:
            self.restart_stage_timer(inputs)
        else:
            self._cancel_stage_timer()
        self.vote_side.answered(frame)

    def answer(self, inputs: LinkInputs, asking) -> None:
        """
        Send the witness's answer once it is durable; if it cannot be made
        durable, close the connection without an answer.

        @param asking: the witness's Deferred answer.
        """
        self.heard()
        self.restart_stage_timer(inputs)

        def answered(frame) -> None:
            if self.close_reason is None:
                self.send(frame)

        def failed(failure) -> None:
            if self.close_reason is None:
                inputs.store_failed(failure.getErrorMessage())

        asking.addCallbacks(answered, failed)

    def send_recovery(self) -> None:
        self.send(self.context.engine.recovery(self.peer))

    def refuse(self, code: str, detail: str) -> None:
        """
        Tell the peer why we refuse the handshake and record it.

        The refusal is why this link ends, even if the peer hangs up
        before we do (a refused connector usually does).
        """
        if self.close_reason is None:
            self.close_reason = reasons.REJECTED
            self.close_detail = code
        self._cancel_stage_timer()
        self.send(Reject(code, detail))
        self.emit(events.LINK_REJECTED, code=code, detail=detail, by="local")
        log.warn(
            "refused link {link} from {peer} ({direction}): {code} {detail}",
            link=self.link_id,
            peer=self.peer,
            direction=self.direction,
            code=code,
            detail=detail,
        )

    def wait_to_disconnect(self, inputs: LinkInputs) -> None:
        """
        Give a refused peer reject-disconnect-delay to read our Reject.
        """
        self._reject_timer = self.context.clock.callLater(
            self.settings.reject_disconnect_delay_ms / 1000, inputs.reject_delay_elapsed
        )

    def peer_refused(self, frame: Reject) -> None:
        self.emit(events.LINK_REJECTED, code=frame.code, detail=frame.detail, by="peer")
        if frame.code == reasons.GROUP_MISMATCH and self.context.pairing is not None:
            self.context.pairing.refused_by_peer(frame.detail)
        log.warn(
            "link {link} to {peer} ({direction}) refused by peer: {code} {detail}",
            link=self.link_id,
            peer=self.peer,
            direction=self.direction,
            code=frame.code,
            detail=frame.detail,
        )

    def superseded(self, epoch: int) -> None:
        """
        A link from epoch C{epoch} of our peer's name was admitted: close,
        and give way to it.
        """
        detail = f"{self.peer} serves in epoch {epoch} now, this link in epoch {self.peer_epoch}"
        log.info("link {link} to {peer} ({direction}) superseded: {detail}",
                 link=self.link_id, peer=self.peer, direction=self.direction, detail=detail)
        self.close(reasons.SUPERSEDED, detail)
        self.give_way()

    def give_way(self) -> None:
        """
        Give up the peer's name and the delivery channel at once, before
        the connection is gone, so that the link from a newer epoch alone
        uses them (the store's outbox for the name above all).
        """
        self.context.registry.release(self.peer, self.link)
        channel, self.channel = self.channel, None
        if channel is not None:
            channel.closed()

    def close(self, reason: str, detail: str = "") -> None:
        """
        Close the connection for C{reason}.

        Refusals and shutdowns flush what we wrote (the peer should read
        our Reject); every other close is abortive, because the peer is
        silent, broken or hostile and its socket may never drain.
        """
        self.delivering = False
        if self.close_reason is None:
            self.close_reason = reason
            self.close_detail = detail
        self._stop_timers()
        if reason in (reasons.REJECTED, reasons.SHUTDOWN):
            # A TLS transport holds a clean close until its producer (the
            # LinkProtocol) is unregistered.
            self.transport.unregisterProducer()
            self.transport.loseConnection()
        else:
            self.transport.abortConnection()

    def finish(self, truncated: bool, why: str) -> None:
        """
        The connection is gone: record why and release the peer's name.
        """
        self.delivering = False
        self._stop_timers()
        if self.channel is not None:
            self.channel.closed()
        if self.close_reason is None:
            self.close_reason = reasons.PROTOCOL_ERROR if truncated else reasons.PEER_CLOSED
            self.close_detail = "truncated frame" if truncated else why
        self.emit(
            events.LINK_CLOSED,
            reason=self.close_reason,
            detail=self.close_detail,
            stage=self.stage,
            last_heard=self.last_heard,
            keepalive_interval_ms=self.keepalive_interval_ms,
        )
        self.context.registry.remember_close(self.link, {
            "link": self.link_id, "direction": self.direction, "reason": self.close_reason,
            "detail": self.close_detail, "stage": self.stage,
            "closed_at": self.context.clock.seconds()})
        log.info(
            "link {link} to {peer} ({direction}) closed in {stage}: {reason} {detail}",
            link=self.link_id,
            peer=self.peer,
            direction=self.direction,
            stage=self.stage,
            reason=self.close_reason,
            detail=self.close_detail,
        )
        if self.vote_side is not None:
            self.vote_side.closed(self)

    def _cancel_stage_timer(self) -> None:
        if self._stage_timer is not None and self._stage_timer.active():
            self._stage_timer.cancel()
        self._stage_timer = None

    def _stop_timers(self) -> None:
        self._cancel_stage_timer()
        if self._reject_timer is not None and self._reject_timer.active():
            self._reject_timer.cancel()
        if self.keepalive is not None:
            self.keepalive.stop()

    # -- listener checks --------------------------------------------------

    def vet_hello(self, frame: Hello) -> tuple[str, str] | None:
        """
        Decide whether a connector may proceed to authentication.

        @return: C{(code, detail)} of the refusal, or None.
        """
        self.peer = frame.router
        own = self.context.name
        versions = _versions(self.purpose)
        if self.purpose == VOTES and self.context.witness is None:
            return reasons.VERSION, "this router takes no vote connections"
        if self.purpose == REPLICA and self.context.replication is None:
            return reasons.VERSION, "this router takes no replication connections"
        if self.purpose == ROUTING and self.context.engine is None:
            return reasons.NOT_ALLOWED, "this is an HA replication listener, not a routing one"
        common = set(frame.versions) & set(versions)
        if not common:
            return reasons.VERSION, f"we speak {list(versions)}"
        if not ROUTER_NAME.match(frame.router):
            self.peer = None
            return reasons.NOT_ALLOWED, "malformed router name"
        if self.context.replication is not None:
            # An HA instance's replication listener: only the pair's other
            # instance, which has the same router name, connects there.
            if frame.router != own:
                return reasons.NOT_ALLOWED, f"only {own}'s other instance connects here"
            # Its group is checked once its proof is (L{vet_authenticate}).
            self.peer_group = frame.group
        elif frame.router == own:
            return reasons.OWN_NAME, f"{own} cannot link to itself"
        allowed = self.settings.allowed_routers
        if allowed is not None and frame.router not in allowed:
            return reasons.NOT_ALLOWED, f"{frame.router} is not in allowed-routers"
        if self.purpose == ROUTING:
            self.peer_epoch = frame.epoch
            verdict = self._vet_epoch()
            if verdict is not None:
                return verdict
        self.keepalive_interval_ms = self.settings.keepalive_interval_ms
        self.version = max(common)
        return None

    def welcome(self) -> Welcome:
        return Welcome(
            self.version, self.context.name, self.keepalive_interval_ms, self.own_challenge,
            self.context.epoch if self.version >= EPOCH_VERSION else 0,
        )

    def vet_authenticate(self, frame: Authenticate) -> tuple[str, str] | Deferred | None:
        self.peer_challenge = frame.challenge
        expected = auth.proof(
            self.settings.secret,
            "connector",
            self.peer,
            self.context.name,
            frame.challenge,
            self.own_challenge,
        )
        if not auth.verify(expected, frame.proof):
            return reasons.AUTH_FAILED, "wrong proof: the shared secrets differ"
        pairing = self.context.pairing
        mismatch = None if pairing is None else pairing.check(self.peer_group)
        if mismatch is not None:
            return reasons.GROUP_MISMATCH, mismatch
        if self.purpose == REPLICA:
            return self.context.replication.refusal()
        return self._claim_peer()

    def listener_proof(self) -> Authenticated:
        return Authenticated(
            auth.proof(
                self.settings.secret,
                "listener",
                self.peer,
                self.context.name,
                self.peer_challenge,
                self.own_challenge,
            )
        )

    # -- connector checks -------------------------------------------------

    def hello(self) -> Hello | VoteHello | ReplicaHello:
        self.peer = self.settings.expected_peer
        hello = {ROUTING: Hello, VOTES: VoteHello, REPLICA: ReplicaHello}[self.purpose]
        if self.purpose == ROUTING:
            return Hello(list(SUPPORTED_VERSIONS), self.context.name, self.context.epoch)
        return hello(list(_versions(self.purpose)), self.context.name, self.context.group)

    def vet_welcome(self, frame: Welcome) -> tuple[str, str] | None:
        versions = _versions(self.purpose)
        if frame.version not in versions:
            return reasons.VERSION, f"we speak {list(versions)}"
        if frame.router != self.settings.expected_peer:
            return (
                reasons.UNEXPECTED_PEER,
                f"expected {self.settings.expected_peer}, reached {frame.router}",
            )
        if self.purpose == ROUTING:
            self.peer_epoch = frame.epoch
            verdict = self._vet_epoch()
            if verdict is not None:
                return verdict
        self.keepalive_interval_ms = frame.keepalive_interval_ms
        self.peer_challenge = frame.challenge
        self.version = frame.version
        return None

    def connector_proof(self) -> Authenticate:
        return Authenticate(
            auth.proof(
                self.settings.secret,
                "connector",
                self.context.name,
                self.peer,
                self.own_challenge,
                self.peer_challenge,
            ),
            self.own_challenge,
        )

    def vet_authenticated(self, frame: Authenticated) -> tuple[str, str] | Deferred | None:
        expected = auth.proof(
            self.settings.secret,
            "listener",
            self.context.name,
            self.peer,
            self.own_challenge,
            self.peer_challenge,
        )
        if not auth.verify(expected, frame.proof):
            return reasons.AUTH_FAILED, "listener's proof is wrong: the shared secrets differ"
        return self._claim_peer()

    def _claim_peer(self) -> tuple[str, str] | Deferred | None:
        """
        Make this the one link to the (now authenticated) peer, unless
        another link of its epoch or a newer one authenticated first, or
        its epoch is stale; once its epoch, if it is the highest seen, is
        durable (then the verdict is a Deferred).  A vote or replication
        connection claims nothing: it is not a link, and the peer's routing
        link (or a pair's other instance, which has the same name) may be
        up.
        """
        if self.purpose != ROUTING:
            return None
        peer_epochs = self.context.peer_epochs
        saving = None if peer_epochs is None else peer_epochs.raise_to(self.peer,
                                                                       self.peer_epoch)
        if saving is None:
            return self._take_name()
        # A link that closed while the epoch was saved takes no name.
        return saving.addCallback(
            lambda _: self._take_name() if self.close_reason is None else None)

    def _take_name(self) -> tuple[str, str] | None:
        """
        The epoch checks again (another link may have raised the epoch or
        taken the name meanwhile), then the name: a link holding it from an
        older epoch is superseded.
        """
        verdict = self._vet_epoch()
        if verdict is not None:
            return verdict
        registry = self.context.registry
        holder = registry.holder(self.peer)
        if holder is not None and holder is not self.link:
            holder.supersede(self.peer_epoch)
        registry.claim(self.peer, self.link)
        return None

    def _vet_epoch(self) -> tuple[str, str] | None:
        """
        Whether the peer's epoch may link: not below the highest seen for
        its name, and above the epoch of a link that holds the name.
        """
        peer, epoch = self.peer, self.peer_epoch
        highest = 0 if self.context.peer_epochs is None else self.context.peer_epochs.highest(peer)
        if epoch < highest:
            return (reasons.STALE_EPOCH,
                    f"{peer} serves in epoch {highest}, this instance in epoch {epoch}")
        holder = self.context.registry.holder(peer)
        if holder is not None and holder is not self.link and holder.core.peer_epoch >= epoch:
            return reasons.NAME_IN_USE, f"{peer} is already connected"
        return None


def _check_fields(frame) -> str | None:
    """
    Wire-level sanity the codec cannot know: challenge sizes and a
    positive keepalive interval.
    """
    challenge = getattr(frame, "challenge", None)
    if challenge is not None and len(challenge) != CHALLENGE_SIZE:
        return f"challenge must be {CHALLENGE_SIZE} bytes"
    if isinstance(frame, Welcome) and frame.keepalive_interval_ms < 1:
        return "keepalive interval must be positive"
    return None


def _vet(inputs: LinkInputs, verdict: tuple[str, str] | None) -> None:
    if verdict is None:
        inputs.accepted()
    else:
        inputs.refused(*verdict)


def _vet_proof(inputs: LinkInputs, core: LinkCore,
               verdict: tuple[str, str] | Deferred | None) -> None:
    """
    A proof passed or failed: a vote connection that passes goes to
    voting, a replication connection to replication, a link to recovery.
    A verdict still being made (a Deferred: the peer's epoch being saved)
    is fed to the machine when made, unless the link closed meanwhile (its
    stage timer, the peer, shutdown); if the save failed, the link closes
    C{store-failed}.
    """
    if isinstance(verdict, Deferred):
        # The peer may already be past its proof (a listener sends its
        # Recovery right after): what it sends meanwhile waits for the
        # verdict.
        core.held_frames = []

        def decided(result: tuple[str, str] | None) -> None:
            if core.close_reason is None:
                _vet(inputs, result)
            core.link.release_held_frames()

        def failed(failure) -> None:
            if core.close_reason is None:
                inputs.store_failed(failure.getErrorMessage())
            core.link.release_held_frames()

        verdict.addCallbacks(decided, failed)
    elif verdict is None and core.purpose == VOTES:
        inputs.vote_accepted()
    elif verdict is None and core.purpose == REPLICA:
        inputs.replica_accepted()
    else:
        _vet(inputs, verdict)


_FRAME_INPUTS = (
    LinkInputs.got_hello,
    LinkInputs.got_welcome,
    LinkInputs.got_authenticate,
    LinkInputs.got_authenticated,
    LinkInputs.got_recovery,
    LinkInputs.got_keepalive,
    LinkInputs.got_reject,
    LinkInputs.got_transfer,
    LinkInputs.got_transfer_batch,
    LinkInputs.got_ack,
    LinkInputs.got_fast_transfer,
    LinkInputs.got_fast_transfer_batch,
    LinkInputs.got_routes,
    LinkInputs.got_vote_hello,
    LinkInputs.got_vote_request,
    LinkInputs.got_heartbeat,
    LinkInputs.got_vote_answer,
    LinkInputs.got_heartbeat_answer,
    LinkInputs.got_replica_hello,
    LinkInputs.got_start_query,
    LinkInputs.got_start_answer,
    LinkInputs.got_follow,
    LinkInputs.got_applied,
    LinkInputs.got_in_sync,
    LinkInputs.got_snapshot_chunk,
    LinkInputs.got_snapshot_end,
    LinkInputs.got_changes,
)


def _add_common_transitions(awaiting, vetting, delivering, closing, closed, finishing,
                            voting, replicating):
    """
    The transitions both roles share: timeouts, refusals from the peer,
    errors, shutdown, and the end of the connection.

    @param finishing: states (besides the live ones) from which
        C{connection_lost} is also possible, e.g. the listener's
        C{rejecting}.
    @param voting: the voting states (the listener's C{voting}, the
        connector's C{asking}), live like the others.
    @param replicating: the replication state, live like the others,
        with the keepalive and the channel's failures of delivery.
    """
    live = [*awaiting, *vetting, delivering, *voting, replicating]

    for state in [*awaiting, *vetting]:

        @state.upon(LinkInputs.stage_timer_expired).to(closing)
        def stage_timeout(inputs: LinkInputs, core: LinkCore) -> None:
            core.close(reasons.STAGE_TIMEOUT, f"no reply in {core.stage}")

    for state in vetting:

        @state.upon(LinkInputs.store_failed).to(closing)
        def epoch_not_saved(inputs: LinkInputs, core: LinkCore, detail: str) -> None:
            core.close(reasons.STORE_FAILED, detail)

    for state in [*awaiting, *vetting, delivering]:

        @state.upon(LinkInputs.superseded).to(closing)
        def superseded(inputs: LinkInputs, core: LinkCore, epoch: int) -> None:
            core.superseded(epoch)

    for state in awaiting:

        @state.upon(LinkInputs.got_reject).to(closing)
        def peer_rejected(inputs: LinkInputs, core: LinkCore, frame: Reject) -> None:
            core.peer_refused(frame)
            core.close(reasons.REJECTED, frame.code)

    @delivering.upon(LinkInputs.got_keepalive).loop()
    def keepalive_received(inputs: LinkInputs, core: LinkCore, frame: KeepaliveFrame) -> None:
        core.heard()
        core.keepalive.received()

    # The delivery stage's traffic belongs to the engine's channel; its
    # data frames go there without the machine (LinkCore.delivering).

    @delivering.upon(LinkInputs.got_routes).loop()
    def routes(inputs: LinkInputs, core: LinkCore, frame: Routes) -> None:
        core.heard()
        core.channel.routes(frame)

    @replicating.upon(LinkInputs.got_keepalive).loop()
    def replica_keepalive(inputs: LinkInputs, core: LinkCore, frame: KeepaliveFrame) -> None:
        core.heard()
        core.keepalive.received()
        core.channel.keepalive()

    @delivering.upon(LinkInputs.keepalive_expired).to(closing)
    @replicating.upon(LinkInputs.keepalive_expired).to(closing)
    def keepalive_expired(inputs: LinkInputs, core: LinkCore) -> None:
        core.close(reasons.KEEPALIVE, "keepalive counter reached 0")

    @delivering.upon(LinkInputs.store_failed).to(closing)
    @replicating.upon(LinkInputs.store_failed).to(closing)
    def store_failed(inputs: LinkInputs, core: LinkCore, detail: str) -> None:
        core.close(reasons.STORE_FAILED, detail)

    for state in live:

        @state.upon(LinkInputs.protocol_error).to(closing)
        def protocol_error(inputs: LinkInputs, core: LinkCore, why: str) -> None:
            log.warn(
                "link {link} ({direction}, {stage}) from {address}: protocol error: {why}",
                link=core.link_id,
                direction=core.direction,
                stage=core.stage,
                address=peer_address(core.transport),
                why=why,
            )
            core.close(reasons.PROTOCOL_ERROR, why)

    for state in [*live, *finishing]:

        @state.upon(LinkInputs.shutdown).to(closing)
        def shutdown(inputs: LinkInputs, core: LinkCore) -> None:
            core.close(reasons.SHUTDOWN)

    for state in [*live, *finishing, closing]:

        @state.upon(LinkInputs.connection_lost).to(closed)
        def lost(inputs: LinkInputs, core: LinkCore, truncated: bool, why: str) -> None:
            core.finish(truncated, why)

    # Once we have decided to close, whatever else arrives is moot.
    for state in [closing, *finishing]:
        for frame_input in _FRAME_INPUTS:
            state.upon(frame_input).loop().returns(None)
        state.upon(LinkInputs.protocol_error).loop().returns(None)
    for moot in (LinkInputs.shutdown, LinkInputs.stage_timer_expired,
                 LinkInputs.keepalive_expired, LinkInputs.reject_delay_elapsed):
        closing.upon(moot).loop().returns(None)

    # A link closing for another reason holds the name until its
    # connection is gone: a newer epoch does not wait for that.
    @closing.upon(LinkInputs.superseded).loop()
    def give_way(inputs: LinkInputs, core: LinkCore, epoch: int) -> None:
        core.give_way()
    closing.upon(LinkInputs.store_failed).loop().returns(None)
    # A request sent while the connection closes is a request not answered.
    for state in [closing, closed]:
        state.upon(LinkInputs.send_vote_frame).loop().returns(None)


def _build_listener_machine():
    builder = TypeMachineBuilder(LinkInputs, LinkCore)
    connecting = builder.state("connecting")
    awaiting_hello = builder.state("awaiting_hello")
    vetting_hello = builder.state("vetting_hello")
    awaiting_authenticate = builder.state("awaiting_authenticate")
    vetting_authenticate = builder.state("vetting_authenticate")
    awaiting_recovery = builder.state("awaiting_recovery")
    delivering = builder.state("delivering")
    rejecting = builder.state("rejecting")
    closing = builder.state("closing")
    closed = builder.state("closed")
    voting = builder.state("voting")
    replicating = builder.state("replicating")

    @connecting.upon(LinkInputs.connection_made).to(awaiting_hello)
    def start(inputs: LinkInputs, core: LinkCore) -> None:
        core.begin_stage(inputs, CONNECT)

    @awaiting_hello.upon(LinkInputs.got_hello).to(vetting_hello)
    def check_hello(inputs: LinkInputs, core: LinkCore, frame: Hello) -> None:
        core.heard()
        _vet(inputs, core.vet_hello(frame))

    @awaiting_hello.upon(LinkInputs.got_vote_hello).to(vetting_hello)
    def check_vote_hello(inputs: LinkInputs, core: LinkCore, frame: VoteHello) -> None:
        core.purpose = VOTES
        core.heard()
        _vet(inputs, core.vet_hello(frame))

    @awaiting_hello.upon(LinkInputs.got_replica_hello).to(vetting_hello)
    def check_replica_hello(inputs: LinkInputs, core: LinkCore, frame: ReplicaHello) -> None:
        core.purpose = REPLICA
        core.heard()
        _vet(inputs, core.vet_hello(frame))

    @vetting_hello.upon(LinkInputs.accepted).to(awaiting_authenticate)
    def welcome(inputs: LinkInputs, core: LinkCore) -> None:
        core.send(core.welcome())
        core.begin_stage(inputs, AUTHENTICATION)

    @awaiting_authenticate.upon(LinkInputs.got_authenticate).to(vetting_authenticate)
    def check_proof(inputs: LinkInputs, core: LinkCore, frame: Authenticate) -> None:
        core.heard()
        problem = _check_fields(frame)
        if problem:
            inputs.protocol_error(problem)
            return
        _vet_proof(inputs, core, core.vet_authenticate(frame))

    @vetting_authenticate.upon(LinkInputs.accepted).to(awaiting_recovery)
    def authenticated(inputs: LinkInputs, core: LinkCore) -> None:
        core.send(core.listener_proof())
        core.begin_stage(inputs, RECOVERY)
        core.send_recovery()

    @vetting_authenticate.upon(LinkInputs.vote_accepted).to(voting)
    def vote_authenticated(inputs: LinkInputs, core: LinkCore) -> None:
        core.begin_voting(inputs)

    @voting.upon(LinkInputs.got_vote_request).loop()
    def vote(inputs: LinkInputs, core: LinkCore, frame: VoteRequest) -> None:
        core.answer(inputs, core.context.witness.vote(core.peer, frame))

    @voting.upon(LinkInputs.got_heartbeat).loop()
    def heartbeat(inputs: LinkInputs, core: LinkCore, frame: Heartbeat) -> None:
        core.answer(inputs, core.context.witness.heartbeat(core.peer, frame))

    @voting.upon(LinkInputs.got_start_query).loop()
    def start_query(inputs: LinkInputs, core: LinkCore, frame: StartQuery) -> None:
        core.answer(inputs, core.context.witness.start(core.peer, frame))

    @vetting_authenticate.upon(LinkInputs.replica_accepted).to(replicating)
    def replica_authenticated(inputs: LinkInputs, core: LinkCore) -> None:
        core.send(core.listener_proof())
        core.begin_replication(inputs)

    @replicating.upon(LinkInputs.got_follow).loop()
    def follow(inputs: LinkInputs, core: LinkCore, frame: Follow) -> None:
        core.heard()
        core.channel.follow(frame)

    @replicating.upon(LinkInputs.got_applied).loop()
    def applied(inputs: LinkInputs, core: LinkCore, frame: Applied) -> None:
        core.heard()
        core.channel.applied(frame)

    @replicating.upon(LinkInputs.got_in_sync).loop()
    def in_sync(inputs: LinkInputs, core: LinkCore, frame: InSync) -> None:
        core.heard()
        core.channel.in_sync(frame)

    @voting.upon(LinkInputs.stage_timer_expired).to(closing)
    def idle(inputs: LinkInputs, core: LinkCore) -> None:
        core.close(reasons.IDLE, f"no vote request or heartbeat in {core.stage}")

    @voting.upon(LinkInputs.store_failed).to(closing)
    def not_durable(inputs: LinkInputs, core: LinkCore, detail: str) -> None:
        core.close(reasons.STORE_FAILED, detail)

    @awaiting_recovery.upon(LinkInputs.got_recovery).to(delivering)
    def recovered(inputs: LinkInputs, core: LinkCore, frame: Recovery) -> None:
        core.begin_delivery(inputs, frame)

    @vetting_hello.upon(LinkInputs.refused).to(rejecting)
    @vetting_authenticate.upon(LinkInputs.refused).to(rejecting)
    def reject(inputs: LinkInputs, core: LinkCore, code: str, detail: str) -> None:
        core.refuse(code, detail)
        core.wait_to_disconnect(inputs)

    @rejecting.upon(LinkInputs.reject_delay_elapsed).to(closing)
    def disconnect_rejected(inputs: LinkInputs, core: LinkCore) -> None:
        core.close(reasons.REJECTED)

    _add_common_transitions(
        awaiting=[awaiting_hello, awaiting_authenticate, awaiting_recovery],
        vetting=[vetting_hello, vetting_authenticate],
        delivering=delivering,
        closing=closing,
        closed=closed,
        finishing=[rejecting],
        voting=[voting],
        replicating=replicating,
    )
    return builder.build()


def _build_connector_machine():
    builder = TypeMachineBuilder(LinkInputs, LinkCore)
    connecting = builder.state("connecting")
    awaiting_welcome = builder.state("awaiting_welcome")
    vetting_welcome = builder.state("vetting_welcome")
    awaiting_authenticated = builder.state("awaiting_authenticated")
    vetting_authenticated = builder.state("vetting_authenticated")
    awaiting_recovery = builder.state("awaiting_recovery")
    delivering = builder.state("delivering")
    closing = builder.state("closing")
    closed = builder.state("closed")
    asking = builder.state("asking")
    following = builder.state("following")

    @connecting.upon(LinkInputs.connection_made).to(awaiting_welcome)
    def start(inputs: LinkInputs, core: LinkCore) -> None:
        core.send(core.hello())
        core.begin_stage(inputs, CONNECT)

    @awaiting_welcome.upon(LinkInputs.got_welcome).to(vetting_welcome)
    def check_welcome(inputs: LinkInputs, core: LinkCore, frame: Welcome) -> None:
        core.heard()
        problem = _check_fields(frame)
        if problem:
            inputs.protocol_error(problem)
        else:
            _vet(inputs, core.vet_welcome(frame))

    @vetting_welcome.upon(LinkInputs.accepted).to(awaiting_authenticated)
    def authenticate(inputs: LinkInputs, core: LinkCore) -> None:
        core.send(core.connector_proof())
        core.begin_stage(inputs, AUTHENTICATION)

    @awaiting_authenticated.upon(LinkInputs.got_authenticated).to(vetting_authenticated)
    def check_listener_proof(inputs: LinkInputs, core: LinkCore, frame: Authenticated) -> None:
        core.heard()
        _vet_proof(inputs, core, core.vet_authenticated(frame))

    @vetting_authenticated.upon(LinkInputs.vote_accepted).to(asking)
    def ask_votes(inputs: LinkInputs, core: LinkCore) -> None:
        core.begin_asking()

    @asking.upon(LinkInputs.send_vote_frame).loop()
    def send_vote_frame(inputs: LinkInputs, core: LinkCore,
                        frame: VoteRequest | Heartbeat | StartQuery) -> None:
        core.ask(inputs, frame)

    @asking.upon(LinkInputs.got_vote_answer).loop()
    @asking.upon(LinkInputs.got_heartbeat_answer).loop()
    @asking.upon(LinkInputs.got_start_answer).loop()
    def got_answer(inputs: LinkInputs, core: LinkCore,
                   frame: VoteAnswer | HeartbeatAnswer | StartAnswer) -> None:
        core.answered(inputs, frame)

    @vetting_authenticated.upon(LinkInputs.replica_accepted).to(following)
    def follow_active(inputs: LinkInputs, core: LinkCore) -> None:
        core.begin_replication(inputs)

    @following.upon(LinkInputs.got_snapshot_chunk).loop()
    def snapshot_chunk(inputs: LinkInputs, core: LinkCore, frame: SnapshotChunk) -> None:
        core.heard()
        core.channel.snapshot_chunk(frame)

    @following.upon(LinkInputs.got_snapshot_end).loop()
    def snapshot_end(inputs: LinkInputs, core: LinkCore, frame: SnapshotEnd) -> None:
        core.heard()
        core.channel.snapshot_end(frame)

    @following.upon(LinkInputs.got_changes).loop()
    def changes(inputs: LinkInputs, core: LinkCore, frame: Changes) -> None:
        core.heard()
        core.channel.changes(frame)

    @asking.upon(LinkInputs.stage_timer_expired).to(closing)
    def silent_witness(inputs: LinkInputs, core: LinkCore) -> None:
        core.close(reasons.STAGE_TIMEOUT, f"{core.unanswered} unanswered in voting")

    @vetting_authenticated.upon(LinkInputs.accepted).to(awaiting_recovery)
    def recover(inputs: LinkInputs, core: LinkCore) -> None:
        core.begin_stage(inputs, RECOVERY)
        core.send_recovery()

    @awaiting_recovery.upon(LinkInputs.got_recovery).to(delivering)
    def recovered(inputs: LinkInputs, core: LinkCore, frame: Recovery) -> None:
        core.begin_delivery(inputs, frame)

    @vetting_welcome.upon(LinkInputs.refused).to(closing)
    @vetting_authenticated.upon(LinkInputs.refused).to(closing)
    def give_up(inputs: LinkInputs, core: LinkCore, code: str, detail: str) -> None:
        core.refuse(code, detail)
        core.close(reasons.REJECTED, code)

    _add_common_transitions(
        awaiting=[awaiting_welcome, awaiting_authenticated, awaiting_recovery],
        vetting=[vetting_welcome, vetting_authenticated],
        delivering=delivering,
        closing=closing,
        closed=closed,
        finishing=[],
        voting=[asking],
        replicating=following,
    )
    return builder.build()


#: Machine factories: C{LISTENER_MACHINE(core)} returns the inputs object.
LISTENER_MACHINE = _build_listener_machine()
CONNECTOR_MACHINE = _build_connector_machine()
