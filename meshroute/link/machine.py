"""
The life of one connection between routers, as two Automat machines: one
for the side that accepted the connection (listener), one for the side
that opened it (connector).  docs/protocol.md narrates the same exchange
from the wire's point of view.

A routing link goes through the stages connect → authentication →
recovery → delivery (L{meshroute.link.stages}).  Every state before
delivery is named for the frame it awaits from the peer, and only there
does the stage timer (stage-valid-timeout) run.

    the listener

    connecting ── connection_made ──▶ awaiting_hello
    awaiting_hello ── got_hello, got_vote_hello, got_replica_hello ──▶ vetting_hello
    vetting_hello ── accepted ──▶ awaiting_authenticate            (sends Welcome)
    awaiting_authenticate ── got_authenticate ──▶ vetting_authenticate
    vetting_authenticate ── accepted ──▶ awaiting_recovery         (sends Authenticated, Recovery)
    awaiting_recovery ── got_recovery ──▶ delivering
    vetting_authenticate ── vote_accepted ──▶ voting               (sends Authenticated)
    vetting_authenticate ── replica_accepted ──▶ replicating       (sends Authenticated)
    vetting_hello, vetting_authenticate ── refused ──▶ rejecting   (sends Reject)
    rejecting ── reject_delay_elapsed ──▶ closing

    the connector

    connecting ── connection_made ──▶ awaiting_welcome             (sends Hello)
    awaiting_welcome ── got_welcome ──▶ vetting_welcome
    vetting_welcome ── accepted ──▶ awaiting_authenticated         (sends Authenticate)
    awaiting_authenticated ── got_authenticated ──▶ vetting_authenticated
    vetting_authenticated ── accepted ──▶ awaiting_recovery        (sends Recovery)
    awaiting_recovery ── got_recovery ──▶ delivering
    vetting_authenticated ── vote_accepted ──▶ asking
    vetting_authenticated ── replica_accepted ──▶ following
    vetting_welcome, vetting_authenticated ── refused ──▶ closing  (sends Reject)

    both (live: every state above but connecting, rejecting, closing)

    awaiting_*, vetting_* ── stage_timer_expired ──▶ closing
    awaiting_* ── got_reject ──▶ closing
    vetting_* ── store_failed ──▶ closing                          (the peer's epoch not saved)
    awaiting_*, vetting_*, delivering ── superseded ──▶ closing
    delivering, replicating, following ── keepalive_expired, store_failed ──▶ closing
    voting ── stage_timer_expired (idle), store_failed ──▶ closing
    asking ── stage_timer_expired (a request unanswered) ──▶ closing
    live ── protocol_error ──▶ closing
    live, rejecting ── shutdown ──▶ closing
    live, rejecting, closing ── connection_lost ──▶ closed

 - C{connecting}: awaits the connection, which is made as the machine
   starts.
 - C{awaiting_hello}, C{awaiting_welcome}, C{awaiting_authenticate},
   C{awaiting_authenticated}, C{awaiting_recovery}: await the peer's
   frame of that name, under the stage timer.
 - C{vetting_*}: within the handling of the frame being vetted, the
   handshake's verdict on it (L{meshroute.link.handshake}): C{accepted},
   C{refused}, or for a proof C{vote_accepted} and C{replica_accepted}.
   Automat runs such re-entrant inputs right after the current
   transition.  A proof that raises the epoch seen for the peer's name
   decides only once that epoch is durable (L{meshroute.link.epochs}):
   the state then waits, under the stage timer, holding what the peer
   sends meanwhile (L{meshroute.link.core.LinkCore.held_frames}), and a
   save that fails closes the connection (C{store-failed}).
 - C{delivering}: the link carries messages, through the engine's
   channel for this peer; the keepalive watches the peer.
 - C{voting}, C{asking}: a vote connection's voting stage, the witness's
   side and the HA instance's (L{meshroute.link.votes}).
 - C{replicating}, C{following}: a replication connection's stage, the
   active's side and the follower's; the keepalive runs as in delivery.
 - C{rejecting}: the listener refused the peer; awaits
   reject-disconnect-delay, so that the peer can read the C{Reject}.
 - C{closing}: the close is decided; awaits the transport's close.
   Anything that still arrives is moot.
 - C{closed}: the connection is gone.

A connection that opens with L{VoteHello} instead of L{Hello} is a vote
connection, not a routing link: the listener takes it through the same
connect and authentication stages (without claiming the peer's name: it
is not a link to it), then into the voting stage; the connector side of
a vote connection (an HA instance reaching a witness,
L{meshroute.ha.voters}) takes the same stages from its side.  A vote
connection also carries the start-up question (L{StartQuery}).

A connection that opens with L{ReplicaHello} is a replication connection
between the two instances of an HA pair: the same connect and
authentication stages (no name claimed), then the replication stage, in
which the listener (the active instance,
L{meshroute.link.context.RouterContext.replication}; any other instance
refuses C{not-active} once the proof is good) streams its store changes
and the connector (the follower, L{meshroute.ha.follower}) applies them.
Both sides run the link's keepalive there, and the stage's frames go to
the connection's channel (L{meshroute.ha.feed.ReplicaFeed} on the
listener, L{meshroute.ha.follower.FollowerStream} on the connector), as a
link's delivery frames go to the engine's.

A frame the current state has no transition for raises C{NoTransition}
before any behaviour runs; the protocol turns that into a
C{protocol-error} close, so an out-of-stage frame cannot change state
(a vote frame on a link, a link frame on a vote connection).  Delivery's
data frames (C{Transfer}, C{TransferBatch}, C{Ack}, C{FastTransfer},
C{FastTransferBatch}: L{meshroute.wire.frames}) have no transition in
delivery: entering delivery sets L{LinkCore.delivering}, leaving it
clears it, and while it is set the link hands them to the channel
itself, sparing the machine's dispatch on every message
(L{meshroute.link.link.Link.frame_received}); in every other state they
reach the machine as before.

The machines hold no state of their own: L{LinkCore} keeps the link's
data and does the I/O; L{meshroute.link.handshake} and
L{meshroute.link.votes} are what its behaviours check and answer.
"""

from automat import TypeMachineBuilder
from twisted.internet.defer import Deferred
from twisted.logger import Logger

from meshroute.link import handshake, reasons, votes
from meshroute.link.core import LinkCore
from meshroute.link.inputs import LinkInputs
from meshroute.link.stages import AUTHENTICATION, CONNECT, RECOVERY, REPLICA, VOTES
from meshroute.wire.frames import (
    Applied,
    Authenticate,
    Authenticated,
    Changes,
    Follow,
    Heartbeat,
    HeartbeatAnswer,
    Hello,
    InSync,
    Keepalive,
    Recovery,
    Reject,
    ReplicaHello,
    Routes,
    SnapshotChunk,
    SnapshotEnd,
    StartAnswer,
    StartQuery,
    VoteAnswer,
    VoteHello,
    VoteRequest,
    Welcome,
)
from meshroute.wire.transport import peer_address

log = Logger()


def _build_listener_machine():
    """
    The machine of the side that accepted the connection.
    """
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

    # Connect: the connector's Hello, our Welcome.

    @connecting.upon(LinkInputs.connection_made).to(awaiting_hello)
    def start(inputs: LinkInputs, core: LinkCore) -> None:
        core.begin_stage(inputs, CONNECT)

    @awaiting_hello.upon(LinkInputs.got_hello).to(vetting_hello)
    def check_hello(inputs: LinkInputs, core: LinkCore, frame: Hello) -> None:
        core.heard()
        _vet(inputs, handshake.vet_hello(core, frame))

    @awaiting_hello.upon(LinkInputs.got_vote_hello).to(vetting_hello)
    def check_vote_hello(inputs: LinkInputs, core: LinkCore, frame: VoteHello) -> None:
        core.purpose = VOTES
        core.heard()
        _vet(inputs, handshake.vet_hello(core, frame))

    @awaiting_hello.upon(LinkInputs.got_replica_hello).to(vetting_hello)
    def check_replica_hello(inputs: LinkInputs, core: LinkCore, frame: ReplicaHello) -> None:
        core.purpose = REPLICA
        core.heard()
        _vet(inputs, handshake.vet_hello(core, frame))

    @vetting_hello.upon(LinkInputs.accepted).to(awaiting_authenticate)
    def welcome(inputs: LinkInputs, core: LinkCore) -> None:
        core.send(handshake.welcome(core))
        core.begin_stage(inputs, AUTHENTICATION)

    # Authentication: the connector's proof, then ours.

    @awaiting_authenticate.upon(LinkInputs.got_authenticate).to(vetting_authenticate)
    def check_proof(inputs: LinkInputs, core: LinkCore, frame: Authenticate) -> None:
        core.heard()
        problem = handshake.check_fields(frame)
        if problem:
            inputs.protocol_error(problem)
            return
        _vet_proof(inputs, core, handshake.vet_authenticate(core, frame))

    @vetting_authenticate.upon(LinkInputs.accepted).to(awaiting_recovery)
    def authenticated(inputs: LinkInputs, core: LinkCore) -> None:
        core.send(handshake.listener_proof(core))
        core.begin_stage(inputs, RECOVERY)
        core.send_recovery()

    # Recovery: the peer's Recovery, then delivery.

    @awaiting_recovery.upon(LinkInputs.got_recovery).to(delivering)
    def recovered(inputs: LinkInputs, core: LinkCore, frame: Recovery) -> None:
        core.begin_delivery(inputs, frame)

    # A refusal: the peer may read why for reject-disconnect-delay.

    @vetting_hello.upon(LinkInputs.refused).to(rejecting)
    @vetting_authenticate.upon(LinkInputs.refused).to(rejecting)
    def reject(inputs: LinkInputs, core: LinkCore, code: str, detail: str) -> None:
        handshake.refuse(core, code, detail)
        core.wait_to_disconnect(inputs)

    @rejecting.upon(LinkInputs.reject_delay_elapsed).to(closing)
    def disconnect_rejected(inputs: LinkInputs, core: LinkCore) -> None:
        core.close(reasons.REJECTED)

    # A vote connection: the witness answers.

    @vetting_authenticate.upon(LinkInputs.vote_accepted).to(voting)
    def vote_authenticated(inputs: LinkInputs, core: LinkCore) -> None:
        core.send(handshake.listener_proof(core))
        votes.begin_voting(core, inputs)

    @voting.upon(LinkInputs.got_vote_request).loop()
    def vote(inputs: LinkInputs, core: LinkCore, frame: VoteRequest) -> None:
        votes.answer(core, inputs, core.context.witness.vote(core.peer, frame))

    @voting.upon(LinkInputs.got_heartbeat).loop()
    def heartbeat(inputs: LinkInputs, core: LinkCore, frame: Heartbeat) -> None:
        votes.answer(core, inputs, core.context.witness.heartbeat(core.peer, frame))

    @voting.upon(LinkInputs.got_start_query).loop()
    def start_query(inputs: LinkInputs, core: LinkCore, frame: StartQuery) -> None:
        votes.answer(core, inputs, core.context.witness.start(core.peer, frame))

    @voting.upon(LinkInputs.stage_timer_expired).to(closing)
    def idle(inputs: LinkInputs, core: LinkCore) -> None:
        core.close(reasons.IDLE, f"no vote request or heartbeat in {core.stage}")

    @voting.upon(LinkInputs.store_failed).to(closing)
    def not_durable(inputs: LinkInputs, core: LinkCore, detail: str) -> None:
        core.close(reasons.STORE_FAILED, detail)

    # A replication connection: the active feeds its follower.

    @vetting_authenticate.upon(LinkInputs.replica_accepted).to(replicating)
    def replica_authenticated(inputs: LinkInputs, core: LinkCore) -> None:
        core.send(handshake.listener_proof(core))
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
    """
    The machine of the side that opened the connection.
    """
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

    # Connect: our Hello, the listener's Welcome.

    @connecting.upon(LinkInputs.connection_made).to(awaiting_welcome)
    def start(inputs: LinkInputs, core: LinkCore) -> None:
        core.send(handshake.hello(core))
        core.begin_stage(inputs, CONNECT)

    @awaiting_welcome.upon(LinkInputs.got_welcome).to(vetting_welcome)
    def check_welcome(inputs: LinkInputs, core: LinkCore, frame: Welcome) -> None:
        core.heard()
        problem = handshake.check_fields(frame)
        if problem:
            inputs.protocol_error(problem)
        else:
            _vet(inputs, handshake.vet_welcome(core, frame))

    @vetting_welcome.upon(LinkInputs.accepted).to(awaiting_authenticated)
    def authenticate(inputs: LinkInputs, core: LinkCore) -> None:
        core.send(handshake.connector_proof(core))
        core.begin_stage(inputs, AUTHENTICATION)

    # Authentication: our proof, then the listener's.

    @awaiting_authenticated.upon(LinkInputs.got_authenticated).to(vetting_authenticated)
    def check_listener_proof(inputs: LinkInputs, core: LinkCore, frame: Authenticated) -> None:
        core.heard()
        _vet_proof(inputs, core, handshake.vet_authenticated(core, frame))

    @vetting_authenticated.upon(LinkInputs.accepted).to(awaiting_recovery)
    def recover(inputs: LinkInputs, core: LinkCore) -> None:
        core.begin_stage(inputs, RECOVERY)
        core.send_recovery()

    # Recovery: the peer's Recovery, then delivery.

    @awaiting_recovery.upon(LinkInputs.got_recovery).to(delivering)
    def recovered(inputs: LinkInputs, core: LinkCore, frame: Recovery) -> None:
        core.begin_delivery(inputs, frame)

    # A refusal: we close at once.

    @vetting_welcome.upon(LinkInputs.refused).to(closing)
    @vetting_authenticated.upon(LinkInputs.refused).to(closing)
    def give_up(inputs: LinkInputs, core: LinkCore, code: str, detail: str) -> None:
        handshake.refuse(core, code, detail)
        core.close(reasons.REJECTED, code)

    # A vote connection: an HA instance asks a witness.

    @vetting_authenticated.upon(LinkInputs.vote_accepted).to(asking)
    def ask_votes(inputs: LinkInputs, core: LinkCore) -> None:
        votes.begin_asking(core)

    @asking.upon(LinkInputs.send_vote_frame).loop()
    def send_vote_frame(inputs: LinkInputs, core: LinkCore,
                        frame: VoteRequest | Heartbeat | StartQuery) -> None:
        votes.ask(core, inputs, frame)

    @asking.upon(LinkInputs.got_vote_answer).loop()
    @asking.upon(LinkInputs.got_heartbeat_answer).loop()
    @asking.upon(LinkInputs.got_start_answer).loop()
    def got_answer(inputs: LinkInputs, core: LinkCore,
                   frame: VoteAnswer | HeartbeatAnswer | StartAnswer) -> None:
        votes.answered(core, inputs, frame)

    @asking.upon(LinkInputs.stage_timer_expired).to(closing)
    def silent_witness(inputs: LinkInputs, core: LinkCore) -> None:
        core.close(reasons.STAGE_TIMEOUT, f"{core.unanswered} unanswered in voting")

    # A replication connection: the follower applies the active's changes.

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
            handshake.peer_refused(core, frame)
            core.close(reasons.REJECTED, frame.code)

    @delivering.upon(LinkInputs.got_keepalive).loop()
    def keepalive_received(inputs: LinkInputs, core: LinkCore, frame: Keepalive) -> None:
        core.heard()
        core.keepalive.received()

    # The delivery stage's traffic belongs to the engine's channel; its
    # data frames go there without the machine (LinkCore.delivering).

    @delivering.upon(LinkInputs.got_routes).loop()
    def routes(inputs: LinkInputs, core: LinkCore, frame: Routes) -> None:
        core.heard()
        core.channel.routes(frame)

    @replicating.upon(LinkInputs.got_keepalive).loop()
    def replica_keepalive(inputs: LinkInputs, core: LinkCore, frame: Keepalive) -> None:
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


#: The inputs a frame feeds, which are moot once the close is decided.
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
    LinkInputs.got_interest,
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


def _vet(inputs: LinkInputs, verdict: tuple[str, str] | None) -> None:
    """
    Feed the machine the handshake's verdict on the frame being vetted.
    """
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


#: Machine factories: C{LISTENER_MACHINE(core)} returns the inputs object.
LISTENER_MACHINE = _build_listener_machine()
CONNECTOR_MACHINE = _build_connector_machine()
