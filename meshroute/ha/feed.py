"""
The active instance's side of the replication connection: what it sends
the backup that follows its store, and what it learns from it.

An HA instance's replication listener (L{meshroute.ha.listener}) hands
each authenticated replication connection (L{frames.ReplicaHello}) to its
L{ReplicationServer}, which serves it only while the instance is active
(L{ReplicationServer.serve}); otherwise the connection is refused
C{not-active}.  Each connection gets a L{ReplicaFeed}, an Automat machine
over the follower's stages:

    awaiting_follow  ─ follow ────────────▶ choosing
    choosing         ─ log_covers ────────▶ streaming
    choosing         ─ snapshot_needed ───▶ taking_snapshot
    taking_snapshot  ─ snapshot_taken ────▶ sending_snapshot
    taking_snapshot  ─ snapshot_failed ───▶ ended
    sending_snapshot ─ snapshot_sent ─────▶ choosing
    streaming        ─ snapshot_needed ───▶ taking_snapshot
    every state      ─ closed ────────────▶ ended

The follower says where its data stands (L{frames.Follow}: its store id
and its last batch).  When it holds the active's store and the retained
log (L{meshroute.ha.source.ReplicationSource.since}) covers it, the feed
sends it the batches since then; otherwise a snapshot of the store
(L{frames.SnapshotChunk}s, then L{frames.SnapshotEnd}), and then the
batches since the snapshot from the log, the same way.  Once caught up
to the log's end it tells the follower the head (a L{frames.Changes},
empty if there was nothing to send) and streams each new batch as it is
committed.  A transaction too large for one frame
(L{MAX_REPLICATION_FRAME_SIZE}) reaches the follower in a snapshot.

Flow control: the feed is what the connection's producer pauses.  While
the transport's buffer is full it sends nothing more (it stops reading
the snapshot file, and unsubscribes from the source); on resume it
catches up from the log, which holds what it missed (or, if the log
moved on meanwhile, sends a snapshot).

What it learns: each L{frames.Applied} goes to the gate
(L{meshroute.ha.gate.ReplicationGate.acknowledged}, which confirms the
batches up to it) and counts as hearing the backup
(C{peer_heard}, the role's replication-timeout); so does a keepalive
while the backup has acknowledged everything sent (a backup with nothing
to apply is alive, one that sits on unacknowledged batches is not
heard).  L{frames.InSync} (once per connection) is the role's
C{peer_caught_up}.
"""

from collections.abc import Callable
import os
from dataclasses import dataclass
from typing import Protocol

from automat import TypeMachineBuilder
from twisted.logger import Logger
from twisted.python.failure import Failure

from meshroute.ha.source import NoRoomForSnapshot
from meshroute.harules.quorum import LogPosition
from meshroute.link import reasons
from meshroute.said_once import SaidOnce
from meshroute.wire.codec import CHANGES_FRAME_SIZE, MAX_REPLICATION_FRAME_SIZE
from meshroute.wire.frames import (
    MAX_SNAPSHOT_CHUNK,
    Applied,
    Changes,
    Follow,
    InSync,
    SnapshotChunk,
    SnapshotEnd,
)

log = Logger()

#: Room in a Changes frame for its own header and the head.
_FRAME_OVERHEAD = 32


class FeedInputs(Protocol):
    """
    What happens to one follower's feed.
    """

    def follow(self, frame: Follow) -> None:
        "The follower said where its data stands."

    def log_covers(self) -> None:
        "The retained log holds every batch the follower lacks."

    def snapshot_needed(self) -> None:
        "The follower needs a snapshot: another store, diverged, or too far behind."

    def snapshot_taken(self, snapshot) -> None:
        "The source's snapshot is ready (a L{meshroute.ha.source.Snapshot})."

    def snapshot_failed(self, failure: Failure) -> None:
        "The source could not take a snapshot."

    def snapshot_sent(self) -> None:
        "The last chunk and the SnapshotEnd are written."

    def committed(self, batch) -> None:
        "The store committed a batch (the source's subscription)."

    def applied(self, frame: Applied) -> None:
        "The follower applied the changes up to a position."

    def in_sync(self, frame: InSync) -> None:
        "The follower reached the head it was told."

    def resumed(self) -> None:
        "The transport's buffer drained."

    def closed(self) -> None:
        "The connection is gone."


@dataclass
class FeedCore:
    """
    The data of one feed and the I/O its behaviours perform.

    @ivar sent: the last batch the follower holds or was sent.
    @ivar acknowledged: the newest position the follower applied.
    @ivar paused: the transport's buffer is full; set and cleared by the
        producer directly (a pause arrives in the middle of a write).
    """

    server: "ReplicationServer"
    source: object
    gate: object
    send: Callable[[object], None]
    fail: Callable[[str], None]
    peer: str
    sent: LogPosition = LogPosition(0, 0)
    acknowledged: int = 0
    paused: bool = False
    in_sync: bool = False
    subscriber: Callable | None = None
    snapshot: object = None
    snapshot_file: object = None
    told_head: bool = False

    def choose(self, inputs: FeedInputs) -> None:
        """
        Catch the follower up from the log if it can, else ask for a
        snapshot.
        """
        if self.source.since(self.sent.epoch, self.sent.position) is None:
            log.info("replication to {peer}: the retained log does not cover ({epoch}, "
                     "{position}): sending a snapshot", peer=self.peer, epoch=self.sent.epoch,
                     position=self.sent.position)
            inputs.snapshot_needed()
        else:
            self.told_head = False
            inputs.log_covers()

    def pump(self, inputs: FeedInputs) -> None:
        """
        Send the batches after C{sent} from the log until done or paused;
        once done, tell the head (if not told since the follow) and
        subscribe to the live stream, unless still subscribed (the
        transport paused and resumed between two batches).
        """
        if self.paused:
            return
        batches = self.source.since(self.sent.epoch, self.sent.position)
        if batches is None:
            inputs.snapshot_needed()
        elif self.send_batches(inputs, batches):
            if not self.told_head:
                self._send_changes([])
            if self.subscriber is None:
                self.subscriber = inputs.committed
                self.source.subscribe(self.subscriber)

    def stream(self, inputs: FeedInputs, batch) -> None:
        """
        Send a batch just committed, unless the transport is full: then
        stop reading the source (the log keeps what follows, for the
        resume).  The subscription starts at the log's end and follows
        every append, so the batch is always the next one.
        """
        if self.paused:
            self.unsubscribe()
        elif not self.send_batches(inputs, [batch]):
            self.unsubscribe()

    def send_batches(self, inputs: FeedInputs, batches) -> bool:
        """
        Send C{batches} in Changes frames of about L{CHANGES_FRAME_SIZE}.

        @return: whether all went out: False when the transport paused us
            (the rest wait in the log), or one is too large for a frame
            (a snapshot follows).
        """
        frame, size = [], 0
        for batch in batches:
            plain = batch.to_plain()
            batch_size = batch.packed_size
            if batch_size > MAX_REPLICATION_FRAME_SIZE - _FRAME_OVERHEAD:
                log.info("replication to {peer}: batch {position} is {size} bytes, too large "
                         "for a frame: sending a snapshot", peer=self.peer,
                         position=batch.position, size=batch_size)
                if frame:
                    self._send_changes(frame)
                inputs.snapshot_needed()
                return False
            if frame and size + batch_size > CHANGES_FRAME_SIZE:
                self._send_changes(frame)
                frame, size = [], 0
                if self.paused:
                    return False
            frame.append(plain)
            size += batch_size
        if frame:
            self._send_changes(frame)
        return not self.paused

    def _send_changes(self, plains: list) -> None:
        if plains:
            self.sent = LogPosition(plains[-1][0], plains[-1][1])
        self.send(Changes(plains, self.source.head.position))
        self.told_head = True

    def unsubscribe(self) -> None:
        if self.subscriber is not None:
            self.source.unsubscribe(self.subscriber)
            self.subscriber = None

    def take_snapshot(self, inputs: FeedInputs) -> None:
        self.unsubscribe()
        self.source.snapshot().addCallbacks(inputs.snapshot_taken, inputs.snapshot_failed)

    def snapshot_failed(self, failure: Failure) -> None:
        """
        The connection closes.  A snapshot that does not fit is said once
        (L{ReplicationServer.no_room}): the backup asks again each
        heartbeat-interval until one does.
        """
        why = failure.getErrorMessage()
        if failure.check(NoRoomForSnapshot):
            self.server.no_room(self.peer, why)
        else:
            log.error("replication to {peer}: cannot take a snapshot: {why}", peer=self.peer,
                      why=why)
        self.fail(f"snapshot failed: {why}")

    def open_snapshot(self, inputs: FeedInputs, snapshot) -> None:
        self.server.room_again()
        log.info("replication to {peer}: sending the snapshot at ({epoch}, {position})",
                 peer=self.peer, epoch=snapshot.epoch, position=snapshot.position)
        self.snapshot = snapshot
        self.snapshot_file = open(snapshot.path, "rb")
        self.send_chunks(inputs)

    def send_chunks(self, inputs: FeedInputs) -> None:
        """
        Send the snapshot's next chunks until it ends or the transport
        pauses us.
        """
        while not self.paused:
            data = self.snapshot_file.read(MAX_SNAPSHOT_CHUNK)
            if not data:
                snapshot = self.snapshot
                self.drop_snapshot()
                self.send(SnapshotEnd(snapshot.epoch, snapshot.position))
                self.sent = LogPosition(snapshot.epoch, snapshot.position)
                inputs.snapshot_sent()
                return
            self.send(SnapshotChunk(data))

    def drop_snapshot(self) -> None:
        """
        Close and delete the snapshot file (the feed owns it).
        """
        if self.snapshot_file is not None:
            self.snapshot_file.close()
            self.snapshot_file = None
        if self.snapshot is not None:
            os.unlink(self.snapshot.path)
            self.snapshot = None

    def applied(self, frame: Applied) -> None:
        """
        Acknowledged: the gate may confirm up to C{frame.position}.
        """
        self.acknowledged = max(self.acknowledged, frame.position)
        self.gate.acknowledged(frame.position)
        self.server.peer_heard()

    def keepalive(self) -> None:
        """
        The follower is alive: heard, unless it sits on batches it has
        not acknowledged.
        """
        if self.acknowledged >= self.sent.position:
            self.server.peer_heard()

    def caught_up(self, frame: InSync) -> None:
        """
        Tell the role once per connection (a follower says it once).
        """
        if not self.in_sync:
            self.in_sync = True
            log.info("replication to {peer}: in sync at {position}", peer=self.peer,
                     position=frame.position)
            self.server.peer_caught_up()


def _build_feed_machine():
    builder = TypeMachineBuilder(FeedInputs, FeedCore)
    awaiting_follow = builder.state("awaiting_follow")
    choosing = builder.state("choosing")
    streaming = builder.state("streaming")
    taking_snapshot = builder.state("taking_snapshot")
    sending_snapshot = builder.state("sending_snapshot")
    ended = builder.state("ended")

    @awaiting_follow.upon(FeedInputs.follow).to(choosing)
    def follow(inputs: FeedInputs, core: FeedCore, frame: Follow) -> None:
        core.sent = LogPosition(frame.epoch, frame.position)
        core.acknowledged = frame.position
        if frame.store_id != core.source.store_id:
            log.info("replication to {peer}: its store {theirs} is not ours ({ours}): "
                     "sending a snapshot", peer=core.peer, theirs=frame.store_id or "(none)",
                     ours=core.source.store_id)
            inputs.snapshot_needed()
        else:
            core.choose(inputs)

    @choosing.upon(FeedInputs.log_covers).to(streaming)
    def catch_up(inputs: FeedInputs, core: FeedCore) -> None:
        core.pump(inputs)

    @choosing.upon(FeedInputs.snapshot_needed).to(taking_snapshot)
    @streaming.upon(FeedInputs.snapshot_needed).to(taking_snapshot)
    def take_snapshot(inputs: FeedInputs, core: FeedCore) -> None:
        core.take_snapshot(inputs)

    @streaming.upon(FeedInputs.committed).loop()
    def committed(inputs: FeedInputs, core: FeedCore, batch) -> None:
        core.stream(inputs, batch)

    following = (choosing, streaming, taking_snapshot, sending_snapshot)
    for state in following:

        @state.upon(FeedInputs.applied).loop()
        def applied(inputs: FeedInputs, core: FeedCore, frame: Applied) -> None:
            core.applied(frame)

        @state.upon(FeedInputs.in_sync).loop()
        def in_sync(inputs: FeedInputs, core: FeedCore, frame: InSync) -> None:
            core.caught_up(frame)

    @streaming.upon(FeedInputs.resumed).loop()
    def resume_stream(inputs: FeedInputs, core: FeedCore) -> None:
        core.pump(inputs)

    @taking_snapshot.upon(FeedInputs.snapshot_taken).to(sending_snapshot)
    def snapshot_taken(inputs: FeedInputs, core: FeedCore, snapshot) -> None:
        core.open_snapshot(inputs, snapshot)

    @taking_snapshot.upon(FeedInputs.snapshot_failed).to(ended)
    def snapshot_failed(inputs: FeedInputs, core: FeedCore, failure: Failure) -> None:
        core.snapshot_failed(failure)

    @sending_snapshot.upon(FeedInputs.resumed).loop()
    def resume_snapshot(inputs: FeedInputs, core: FeedCore) -> None:
        core.send_chunks(inputs)

    @sending_snapshot.upon(FeedInputs.snapshot_sent).to(choosing)
    def snapshot_sent(inputs: FeedInputs, core: FeedCore) -> None:
        core.choose(inputs)

    # The source calls its subscribers from a copy of their list: a batch
    # may still come just after the feed unsubscribed (in the append that
    # made it take a snapshot).  It is in the log; and the source's append
    # must never fail for a feed.
    for state in (choosing, taking_snapshot, sending_snapshot):
        state.upon(FeedInputs.committed).loop().returns(None)

    # A resume that finds nothing to resume: not yet following, or
    # waiting for the snapshot.
    for state in (awaiting_follow, taking_snapshot, ended):
        state.upon(FeedInputs.resumed).loop().returns(None)

    # A snapshot that comes after the connection is gone is deleted unsent.
    @ended.upon(FeedInputs.snapshot_taken).loop()
    def snapshot_too_late(inputs: FeedInputs, core: FeedCore, snapshot) -> None:
        os.unlink(snapshot.path)

    for moot in (FeedInputs.snapshot_failed, FeedInputs.committed, FeedInputs.applied,
                 FeedInputs.in_sync):
        ended.upon(moot).loop().returns(None)

    for state in (awaiting_follow, *following):

        @state.upon(FeedInputs.closed).to(ended)
        def closed(inputs: FeedInputs, core: FeedCore) -> None:
            core.unsubscribe()
            core.drop_snapshot()

    ended.upon(FeedInputs.closed).loop().returns(None)
    return builder.build()


_FEED_MACHINE = _build_feed_machine()


class ReplicaFeed:
    """
    One follower's replication connection, on the active: the channel of
    its link in the replication stage
    (L{meshroute.link.core.LinkCore.channel}).  The link machine
    passes it the follower's frames; the link's producer pauses and
    resumes it.
    """

    def __init__(self, core: FeedCore, link) -> None:
        self._core = core
        self._machine = _FEED_MACHINE(core)
        self.link = link

    def follow(self, frame: Follow) -> None:
        self._machine.follow(frame)

    def applied(self, frame: Applied) -> None:
        """
        Out of stage before the follower's Follow (C{NoTransition}: a
        protocol error), as L{in_sync}.
        """
        self._machine.applied(frame)

    def in_sync(self, frame: InSync) -> None:
        self._machine.in_sync(frame)

    def keepalive(self) -> None:
        self._core.keepalive()

    def pause(self) -> None:
        self._core.paused = True

    def resume(self) -> None:
        self._core.paused = False
        self._machine.resumed()

    def closed(self) -> None:
        self._machine.closed()
        self._core.server.forget(self)


class ReplicationServer:
    """
    What an HA instance's replication listener serves replication
    connections with (L{meshroute.link.context.RouterContext.replication}):
    the active's store changes, only while it is active.

    @param peer_caught_up: called when a follower says it is in sync (the
        role's C{peer_caught_up}).
    @param peer_heard: called when a follower acknowledges, or is alive
        with nothing unacknowledged (the role's C{peer_heard}).
    """

    def __init__(self, peer_caught_up: Callable[[], None],
                 peer_heard: Callable[[], None]) -> None:
        self.peer_caught_up = peer_caught_up
        self.peer_heard = peer_heard
        self._source = None
        self._gate = None
        self._feeds: set[ReplicaFeed] = set()
        #: A snapshot did not fit since one last did.
        self._no_room = SaidOnce(log)

    @property
    def active(self) -> bool:
        return self._source is not None

    def serve(self, source, gate) -> None:
        """
        The instance is active: serve followers from C{source} (a
        L{meshroute.ha.source.ReplicationSource}) and feed their
        acknowledgements to C{gate} (a
        L{meshroute.ha.gate.ReplicationGate}).
        """
        self._source, self._gate = source, gate

    def stop(self) -> None:
        """
        The instance stopped serving: close every replication connection
        (reason C{shutdown}); new ones are refused C{not-active}.
        """
        self._source = self._gate = None
        for feed in list(self._feeds):
            feed.link.shutdown()

    def refusal(self) -> tuple[str, str] | None:
        """
        Why an authenticated replication connection is refused, if it is.
        """
        if self._source is None:
            return reasons.NOT_ACTIVE, "this instance is not the active one"
        return None

    def feed(self, core, fail: Callable[[str], None]) -> ReplicaFeed:
        """
        The channel of link C{core}, now in the replication stage.
        """
        feed = ReplicaFeed(FeedCore(self, self._source, self._gate, core.send_while_open, fail,
                                    core.peer), core.link)
        self._feeds.add(feed)
        return feed

    def no_room(self, peer: str, why: str) -> None:
        """
        A follower's snapshot does not fit on the disk: said once until
        one does, not at each of the follower's attempts.
        """
        self._no_room.trouble("replication to {peer}: no snapshot taken: {why}; the backup is "
                              "not followed (the active runs alone) until there is room",
                              peer=peer, why=why)

    def room_again(self) -> None:
        """
        A snapshot was taken.
        """
        self._no_room.over("replication: a snapshot fits on the disk again")

    def forget(self, feed: ReplicaFeed) -> None:
        self._feeds.discard(feed)
