"""
Everything that can happen to a link: the inputs of its machines
(L{meshroute.link.machine}).

An input is named for what happened: a frame arrived (C{got_*}), a check
of the frame being vetted decided (C{accepted}, C{refused}, ...), a timer
ran out, the store failed, the router stops, the connection is gone.
Which frame feeds which input is the protocol's table
(L{meshroute.link.link}); which state takes it is the machine's.
"""

from typing import Protocol

from meshroute.wire.frames import (
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

    def got_keepalive(self, frame: Keepalive) -> None:
        "The peer is alive."

    def got_reject(self, frame: Reject) -> None:
        "The peer refused the handshake."

    # The delivery stage's data frames: in delivery the link hands them
    # to its channel directly (L{meshroute.link.link.Link.frame_received},
    # while L{meshroute.link.core.LinkCore.delivering}); the machine sees
    # them only in the other stages, where they are out of stage or moot.

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

    def got_interest(self, frame: Interest) -> None:
        "Topic interest advertisements arrived (version 5)."

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
